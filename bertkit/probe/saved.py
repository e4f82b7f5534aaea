"""The saved-probe format: `probe.safetensors` (scaler statistics, coefficients, intercept, class ids; no
pickle) and `probe.json` (format `bertkit-probe/2`: label map and the feature recipe: model, revision, the sha256 of
its weights, pooling, layers, max length, normalization; the family, `sentences`, and the sha256 of the record itself,
`record_sha256`: an edited probe.json is refused; layout 1 is read by `migrated_probe_record`). Regression and tag probes keep the same arrays (one coefficient row per output: the ridge, or one
logistic regression per tag) and record their shape in the label map (`task`) and, for tags, the decision
`threshold`. Saving, loading with every file checked (a damaged one is named as such), and prediction on new
text by re-extracting the probe's features (`predict --probe`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.encoding.longtext import LONG_TEXT_MODES, TRUNCATIONS
from bertkit.encoding.reading import Reading, read_as_recorded
from bertkit.errors import UserError
from bertkit.features.settings import POOLS, Pooling, layers_problem
from bertkit.io.digests import bytes_record, is_record, record_problem
from bertkit.io.record_format import FAMILY, RecordKind, checked_version, read_record_file, sealed, upgrade
from bertkit.models.compute import Compute
from bertkit.probe.fit import ProbeFit
from bertkit.probe.shapes import shaped_arrays

log = logging.getLogger(__name__)

PROBE_WEIGHTS = "probe.safetensors"
PROBE_META = "probe.json"
PROBE_RECORD = RecordKind("bertkit-probe", current=2, sealed_since=2, family_since=2)
"""Layout 1 (`bertkit-probe/1`, or no format): no family, no seal, maybe no max_length (saved before bertkit recorded it), no
long-text keys or no combine/normalize (older still). Layout 2: all of them, the family and the seal."""
PROBE_FORMAT = PROBE_RECORD.format


@dataclass
class SavedProbe:
    """A probe as plain arrays: scaler statistics, coefficients, intercept, plus how to make its features."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    classes: np.ndarray
    label_map: Any
    meta: dict[str, Any]
    path: Path | None = None

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=np.float64) - self.mean) / self.scale
        return Z @ self.coef.T + self.intercept

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Probabilities, one column per label id of the label map (as LogisticRegression computes them)."""
        scores = self.decision_function(X)
        if self.coef.shape[0] == 1:  # binary: one weight vector for the second class
            p1 = 1.0 / (1.0 + np.exp(-scores[:, 0]))
            proba = np.stack([1.0 - p1, p1], axis=1)
        else:
            scores = scores - scores.max(axis=1, keepdims=True)
            proba = np.exp(scores)
            proba /= proba.sum(axis=1, keepdims=True)
        full = np.zeros((len(proba), len(self.label_map)), dtype=np.float64)
        full[:, self.classes] = proba
        return full

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Label ids; for the other shapes the predicted numbers, or the 0/1 tag matrix at the saved threshold."""
        if self.task == "regression":
            return self.outputs(X)[:, 0]
        if self.task == "multi_label":
            return (self.outputs(X) >= np.asarray(self.threshold)).astype(np.int64)
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)

    @property
    def task(self) -> str:
        return str(self.label_map.task)

    @property
    def threshold(self) -> float | list[float]:
        """A tag probe's decision threshold (0.5 where none was saved)."""
        return self.meta.get("threshold", 0.5)

    def outputs(self, X: np.ndarray) -> np.ndarray:
        """What `predict --probe` shows, as `predict --model` does for a model of the same shape: class
        probabilities, tag probabilities (one sigmoid per tag) or the predicted number (one column)."""
        if self.task == "regression":
            return self.decision_function(X)
        if self.task == "multi_label":
            from bertkit.scoring.shapes import sigmoid

            return sigmoid(self.decision_function(X))
        return self.predict_proba(X)


def probe_arrays(fit: ProbeFit) -> dict[str, np.ndarray]:
    """The fitted probe's parameters as named float arrays (what probe.safetensors holds)."""
    scaler, lr = fit.scaler, fit.classifier
    scale = scaler.scale_ if scaler.scale_ is not None else np.ones_like(scaler.mean_)
    if fit.task != "single_label":  # ridge or one-vs-rest: one row per output, "classes" numbering the outputs
        coef, intercept = shaped_arrays(fit)
        classes = np.arange(len(coef))
    else:
        coef, intercept, classes = lr.coef_, lr.intercept_, lr.classes_
    # C-contiguous copies: safetensors writes the raw buffer, and lbfgs leaves `coef_` as a transposed view.
    return {
        "scaler_mean": np.ascontiguousarray(scaler.mean_, dtype=np.float64),
        "scaler_scale": np.ascontiguousarray(scale, dtype=np.float64),
        "coef": np.ascontiguousarray(coef, dtype=np.float64),
        "intercept": np.ascontiguousarray(intercept, dtype=np.float64),
        "classes": np.ascontiguousarray(classes, dtype=np.int64),
    }


def save_probe(directory: str | Path, fit: ProbeFit, label_map: Any, meta: dict[str, Any],
               family: str = "sentences") -> Path:
    """Write `probe.safetensors` (arrays) and `probe.json` (label map + feature recipe, sealed, of `family`) into
    `directory`."""
    from safetensors.numpy import save

    from bertkit.io.atomic import atomic_path, write_json_atomic

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = probe_arrays(fit)
    weights = save(arrays, metadata={"format": PROBE_FORMAT})  # bytes in memory: a probe is a few arrays
    with atomic_path(directory / PROBE_WEIGHTS) as tmp:
        tmp.write_bytes(weights)
    record = {"format": PROBE_FORMAT, "label_map": label_map.to_json(), "C": fit.C,
              "n_features": int(arrays["coef"].shape[1]), **meta, "files": {PROBE_WEIGHTS: bytes_record(weights)}}
    if fit.task == "multi_label":
        record["threshold"] = 0.5 if fit.threshold is None else fit.threshold
    write_json_atomic(directory / PROBE_META, sealed(record, PROBE_RECORD, family))
    return directory


def load_probe(path: str | Path) -> SavedProbe:
    """A saved probe from its directory (`OUT/probe`), or from a run directory that contains `probe/`.

    Both files are checked before anything uses them, so a damaged one is named as such (never blamed on an
    option the user did not pass)."""
    root = Path(path).expanduser()
    if not (root / PROBE_META).is_file() and (root / "probe" / PROBE_META).is_file():
        root = root / "probe"
    if not (root / PROBE_META).is_file() or not (root / PROBE_WEIGHTS).is_file():
        raise UserError(
            f"{path} is not a saved probe (no {PROBE_META} + {PROBE_WEIGHTS}). Pass --probe with the run directory "
            f"of a `bertkit probe --out DIR` run (or its probe/ folder)."
        )
    meta = _read_probe_meta(root)
    reading = {key: meta[key] for key in Reading.KEYS if key in meta and meta[key] is not None}
    if reading and Reading.record_problems(reading):  # never blamed on a --truncation the user did not give
        raise _damaged_probe(root / PROBE_META, "; ".join(Reading.record_problems(reading)))
    _verify_probe_weights(root, meta)
    arrays = _read_probe_arrays(root, meta["label_map"].get("task", "single_label"))
    n_labels, classes = len(meta["label_map"]["labels"]), arrays["classes"].tolist()
    if min(classes) < 0 or max(classes) >= n_labels:
        raise _damaged_probe(root / PROBE_META, f"its label_map has {n_labels} label(s) but {PROBE_WEIGHTS} "
                                                f"predicts class ids {classes}")
    from bertkit.data.labels import LabelMap

    return SavedProbe(arrays["scaler_mean"], arrays["scaler_scale"], arrays["coef"], arrays["intercept"],
                      arrays["classes"], LabelMap.from_json(meta["label_map"]), meta, root)


PROBE_META_KEYS = ("label_map", "model", "pool", "layers")
PROBE_ARRAYS = ("scaler_mean", "scaler_scale", "coef", "intercept", "classes")


def read_as_fitted(cfg: Any) -> Any:
    """`cfg` with its reading options resolved against the record of its --probe (probe.json): texts are read as the
    probe's features were extracted, unless an option given says otherwise (with a note)."""
    recorded = Reading.from_json(load_probe(cfg.probe).meta)
    if recorded is None and getattr(getattr(cfg, "reading", cfg), "max_length", None) is None:
        log.warning("The probe %s was saved before bertkit recorded how it reads texts: read with --max-length %d "
                    "(pass --max-length to match its training)", cfg.probe, Reading.from_options(cfg).max_length)
    return read_as_recorded(cfg, recorded, f"The probe {cfg.probe}")


def migrated_probe_record(meta: dict[str, Any]) -> dict[str, Any]:
    """probe.json in the current layout, from any layout this bertkit reads (a `RecordProblem` for one it cannot
    trust: edited since it was sealed, made by a newer bertkit). The only place layout 1 is understood: its family is
    sentences (a sentence probe's), a max_length it lacks is null (read with the options, `read_as_fitted` says so),
    long-text keys it lacks are those of then (head-cut), and a pooling without combine/normalize the defaults."""
    return upgrade(meta, PROBE_RECORD, checked_version(meta, PROBE_RECORD), {1: _probe_layout_2})


def _probe_layout_2(meta: dict[str, Any]) -> dict[str, Any]:
    """Layout 1 -> 2."""
    defaults = {**{k: v for k, v in Pooling().to_json().items() if k in ("combine", "normalize")},
                **Reading().long_text_json()}
    filled = {key: meta.get(key, default) for key, default in defaults.items()}
    return {**meta, **filled, "max_length": meta.get("max_length"), FAMILY: "sentences"}


def _damaged_probe(file: Path, reason: str) -> UserError:
    return UserError(f"The saved probe file {file} is damaged ({reason}). Re-run `bertkit probe --out DIR` to write "
                     f"the probe again, then pass --probe DIR.")


def _verify_probe_weights(root: Path, meta: dict[str, Any]) -> None:
    """probe.safetensors against the size and sha256 probe.json recorded when the probe was saved; a probe.json
    without them is damaged (bertkit records them with every probe it saves)."""

    record = (meta.get("files") or {}).get(PROBE_WEIGHTS) if isinstance(meta.get("files"), dict) else None
    if not is_record(record):
        raise _damaged_probe(root / PROBE_META, f"its files record has no size and sha256 for {PROBE_WEIGHTS}")
    problem = record_problem(root / PROBE_WEIGHTS, record)
    if problem:
        raise _damaged_probe(root / PROBE_WEIGHTS, f"{problem}; {PROBE_META} records it as saved")


def _read_probe_meta(root: Path) -> dict[str, Any]:
    """probe.json, with every key prediction needs present and valid."""

    file = root / PROBE_META
    meta = read_record_file(file, migrated_probe_record, lambda why: _damaged_probe(file, why))
    missing = [k for k in PROBE_META_KEYS if k not in meta]
    if missing:
        raise _damaged_probe(file, f"missing {', '.join(missing)}")
    problems = [] if meta["pool"] in POOLS else [f"pool {meta['pool']!r} is not one of {', '.join(POOLS)}"]
    problems += [f"layers {meta['layers']!r} is not a layer list" for _ in layers_problem(str(meta["layers"]))]
    if meta.get("max_length") is not None and (not isinstance(meta["max_length"], int) or meta["max_length"] <= 0):
        problems.append(f"max_length {meta['max_length']!r} is not a positive integer")
    if not Reading.from_record(meta).known():
        problems.append(f"truncation {meta.get('truncation')!r} / long_text {meta.get('long_text')!r} are not "
                        f"{'/'.join(TRUNCATIONS)} / {'/'.join(LONG_TEXT_MODES)}")
    if not isinstance(meta["label_map"], dict) or not isinstance(meta["label_map"].get("labels"), list):
        problems.append("label_map has no list of labels")
    else:
        problems += _shape_problems(meta)
    if problems:
        raise _damaged_probe(file, "; ".join(problems))
    return meta


def _shape_problems(meta: dict[str, Any]) -> list[str]:
    """A regression or tag probe's record: a known task, one output for regression, a threshold in (0, 1) (or one
    per tag) for tags."""
    from bertkit.data.labels import TASKS

    task, n_labels = meta["label_map"].get("task", "single_label"), len(meta["label_map"]["labels"])
    if task not in TASKS:
        return [f"label_map task {task!r} is not one of {', '.join(TASKS)}"]
    if task == "regression" and n_labels != 1:
        return [f"a regression probe has one output, but label_map names {n_labels}"]
    if task != "multi_label":
        return []
    threshold = meta.get("threshold", 0.5)
    values = threshold if isinstance(threshold, list) else [threshold]
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1 for v in values)
    if not ok or (isinstance(threshold, list) and len(threshold) != n_labels):
        return [f"threshold {threshold!r} is not a probability in (0, 1) (or one per tag)"]
    return []


def _read_probe_arrays(root: Path, task: str = "single_label") -> dict[str, np.ndarray]:
    """probe.safetensors: every array present, with consistent shapes."""
    from safetensors.numpy import load_file

    file = root / PROBE_WEIGHTS
    try:
        arrays = load_file(str(file))
    except Exception as exc:  # SafetensorError (truncated header or data), OSError, ValueError
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise _damaged_probe(file, reason) from None
    missing = [k for k in PROBE_ARRAYS if k not in arrays]
    problem = f"missing arrays {', '.join(missing)}" if missing else _probe_arrays_problem(arrays, task)
    if problem:
        raise _damaged_probe(file, problem)
    return arrays


def _probe_arrays_problem(arrays: dict[str, np.ndarray], task: str = "single_label") -> str | None:
    """Why the probe's arrays cannot be a fitted logistic regression (None: they can). Shapes that broadcast anyway
    or NaN/zero scales would otherwise give silently wrong probabilities, bad class ids a traceback."""
    coef, intercept, classes = arrays["coef"], arrays["intercept"], arrays["classes"]
    if coef.ndim != 2:
        return f"coef has shape {coef.shape}, not (classes, features)"
    k, dim = coef.shape
    if arrays["scaler_mean"].shape != (dim,) or arrays["scaler_scale"].shape != (dim,) or intercept.shape != (k,):
        return "the scaler, coefficient and intercept shapes do not match"
    expected = 2 if k == 1 and task == "single_label" else k  # binary: one weight row for two classes
    if classes.shape != (expected,) or classes.dtype.kind not in "iu" or len(set(classes.tolist())) != expected:
        return f"classes {classes.tolist()} are not {expected} distinct class ids for {k} coefficient row(s)"
    numbers = [arrays[name] for name in ("scaler_mean", "scaler_scale", "coef", "intercept")]
    if not all(np.isfinite(a).all() for a in numbers) or not (arrays["scaler_scale"] > 0).all():
        return "it holds NaN/inf values or non-positive scales"
    return None


def predict_with_probe(
    saved: SavedProbe, dataset: Any, *, batch_size: int = 64, max_length: int | None = None,
    precision: str = "auto", progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Label ids and probabilities for `dataset` (a data.TextDataset; a regression probe: the numbers twice, a tag
    probe: the 0/1 tag matrix and the tag probabilities): re-extracts features as the probe was trained (model,
    pooling, layer, normalization, truncation or windows of long texts; max length unless `max_length` is given;
    precision as recorded unless `precision` names one: `probe_compute`), then applies the saved probe."""
    compute, notes = probe_compute(saved, precision)
    for note in notes:
        log.warning("%s", note)
    read = probe_reader(saved, compute, pair=dataset.pairs is not None, batch_size=batch_size,
                        max_length=max_length, progress=progress)
    return read(dataset)


def probe_compute(saved: SavedProbe, precision: str = "auto") -> tuple[Compute, list[str]]:
    """The `Compute` to extract a saved probe's features in (its encoder runs on the CPU) and notes: --precision auto
    reads them in the precision the probe records, where the CPU runs it natively (`Compute.over_record`)."""
    return Compute.over_record("cpu", precision, Compute.recorded_in(saved.meta), f"The probe {saved.path}")


def probe_reader(
    saved: SavedProbe, compute: Compute, *, pair: bool = False, batch_size: int = 64, max_length: int | None = None,
    progress: bool = False, counted: Any = None,
) -> Callable[[Any], tuple[np.ndarray, np.ndarray]]:
    """`predict_with_probe` with the encoder loaded once: a function of a dataset (rows with second texts when
    `pair`) giving its (label ids, outputs), called window by window on a large input (`bertkit predict`).
    `compute`: the `Compute` (`probe_compute`) the features are extracted in."""
    from bertkit.features import extract
    from bertkit.models import loading, quantize

    meta = saved.meta
    check_probe_encoder(saved.path, str(meta["model"]), meta.get("revision"), meta.get("encoder_sha256"))
    tokenizer = loading.load_tokenizer(meta["model"], meta.get("trust_remote_code", False))
    encoder = loading.load_encoder(meta["model"], meta.get("trust_remote_code", False)).to(compute.torch_device)
    if compute.precision == loading.INT8:
        encoder = quantize.quantized_int8(encoder, inplace=True)  # loaded for the feature pass only
    # probes saved before the long-text settings were recorded read texts head-cut (`Reading.from_record`)
    reading = Reading.from_record(meta)
    reading = dataclasses.replace(reading, max_length=max_length) if max_length else reading
    loading.check_max_length(reading.max_length, tokenizer, encoder.config, meta["model"], pair=pair)
    pooling = Pooling.from_json(meta)  # as the probe's features were pooled
    _check_recorded_layers(saved, pooling, encoder.config)

    def read(dataset: Any) -> tuple[np.ndarray, np.ndarray]:
        features = extract.extract_features(
            encoder, tokenizer, dataset, pool=pooling.pool, layers=pooling.layers_option, combine=pooling.combine,
            reading=reading, batch_size=batch_size, dtype=compute.dtype, normalize=pooling.normalize,
            progress=progress, counted=counted,
        )
        return _apply_probe(saved, np.asarray(features, dtype=np.float32).reshape(len(dataset), -1))

    return read


def _check_recorded_layers(saved: SavedProbe, pooling: Pooling, config: Any) -> None:
    """The layers probe.json records exist in its encoder (`config`): a damaged or foreign record is named as such,
    never blamed on a --layers the user did not give."""
    depth = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", None)
    if not isinstance(depth, int):
        return
    try:
        pooling.resolve(depth)
    except UserError:
        raise _damaged_probe(Path(saved.path or ".") / PROBE_META, f"it records layers {pooling.layers_option}, but "
                             f"its encoder {saved.meta['model']} has {depth} layers") from None


def check_probe_encoder(probe: Path | None, model: str, revision: str | None, sha256: str | None) -> None:
    """A UserError unless the encoder `model` a saved probe (`probe`: its folder) records is the one it was fitted
    on: the same revision (the ends of its weights) and, where the probe records it, the same sha256 of all of them.
    Features of other weights would feed the probe numbers it never saw (a store in the same case is refused too)."""
    from bertkit.models import loading

    found = loading.model_revision(model)
    digest = loading.weights_digest(model) if sha256 else None
    if (not revision or found == revision) and digest in (None, sha256):
        return
    what = "; ".join([f"its revision is {found}, the probe records {revision}"] * bool(revision and found != revision)
                     + [f"the sha256 of its weights is {digest}, the probe records {sha256}"] * bool(
                         digest and digest != sha256))
    raise UserError(f"The encoder {model} of the probe {probe} has changed since the probe was fitted ({what}): its "
                    f"features are not the ones the probe learned from. Restore the encoder folder the probe was "
                    f"fitted on, or fit the probe again on this one (`bertkit probe --model {model} ... --out DIR`).")


def _apply_probe(saved: SavedProbe, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(label ids or decisions, outputs) of the saved probe on features (rows, d) extracted as it was trained."""
    meta = saved.meta
    if features.shape[1] != saved.coef.shape[1]:
        raise UserError(
            f"The probe in {saved.path} expects {saved.coef.shape[1]} features but model {meta['model']} gives "
            f"{features.shape[1]}. The model folder changed; re-run `bertkit probe` with it."
        )
    if saved.task != "single_label":  # numbers (one column) or tag probabilities, and their decisions
        return saved.predict(features), saved.outputs(features)
    proba = saved.predict_proba(features)
    return proba.argmax(axis=1).astype(np.int64), proba
