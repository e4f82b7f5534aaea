"""The saved word probe: `probe.safetensors` (scaler statistics, coefficients, intercept, class ids; no pickle) and
`probe.json` (format `bertkit-word-probe/3`: the encoder and its revision, the `Reading`, the `Pooling`, the `Compute`
its training words were read in, the tags, the `TagScheme`, the row it came from, the size and sha256 of
probe.safetensors, the family (`words`) and the sha256 of the record itself, `record_sha256`). Written and read here
only; both files are checked before anything uses them, so a flipped byte in either is named as damage, never blamed
on an option. Older layouts (/1: the word settings before they were `Reading` and `Pooling`; /2: no family) are read
by `migrated_word_probe_record`, the one place that knows them. The arithmetic is the sentence probe's
(`SavedProbe.predict_proba`): one owner for how a saved logistic regression turns vectors into probabilities."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling
from bertkit.features.words import word_pooling_from_json
from bertkit.io.digests import bytes_record, is_record, record_problem
from bertkit.io.record_format import (
    FAMILY,
    SEAL,
    RecordKind,
    RecordProblem,
    checked_version,
    read_record_file,
    sealed,
    upgrade,
)
from bertkit.models.compute import Compute
from bertkit.models.preflight import saved_model_limits
from bertkit.probe.saved import PROBE_META, PROBE_WEIGHTS, SavedProbe, _probe_arrays_problem

WORD_PROBE_RECORD = RecordKind("bertkit-word-probe", current=3, sealed_since=1, family_since=3)
"""Layout 1: reading {word_pool, max_length, stride}, layers {layers, combine}, no compute. Layout 2: `reading` a
`Reading`, `pooling` a `Pooling`. Layout 3: the family. Every layout is sealed."""
WORD_PROBE_FORMAT = WORD_PROBE_RECORD.format
READABLE_FORMATS = tuple(f"{WORD_PROBE_RECORD.name}/{v}" for v in range(1, WORD_PROBE_RECORD.current + 1))
ARRAYS = ("scaler_mean", "scaler_scale", "coef", "intercept", "classes")
SELF_DIGEST = SEAL
"""probe.json's own sha256 (of the record without this key): a flipped byte in the record is seen as damage."""


@dataclass(frozen=True)
class WordProbeWeights:
    """A fitted word probe as plain arrays (what probe.safetensors holds): `classes[k]` indexes `tags`."""

    scaler_mean: np.ndarray
    scaler_scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    classes: np.ndarray
    tags: tuple[str, ...]

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in ARRAYS}


@dataclass(frozen=True)
class WordProbeFit:
    """The best row's probe and what it reads: its weights, the row's label and pooling, C and its dev score."""

    weights: WordProbeWeights
    label: str
    pooling: Pooling
    C: float
    dev_score: float
    metric: str


def word_probe_weights(pipeline: Any) -> WordProbeWeights:
    """The arrays of a fitted scaler + logistic regression pipeline (`probe.words.fit_word_probe`)."""
    scaler, lr = pipeline.named_steps["scaler"], pipeline.named_steps["lr"]
    scale = scaler.scale_ if scaler.scale_ is not None else np.ones_like(scaler.mean_)
    tags = tuple(str(t) for t in lr.classes_)
    # C-contiguous float64 copies: safetensors writes raw buffers, and lbfgs leaves coef_ as a transposed view
    return WordProbeWeights(np.ascontiguousarray(scaler.mean_, np.float64), np.ascontiguousarray(scale, np.float64),
                            np.ascontiguousarray(lr.coef_, np.float64), np.ascontiguousarray(lr.intercept_, np.float64),
                            np.arange(len(tags), dtype=np.int64), tags)


@dataclass(frozen=True)
class WordProbeSource:
    """What the saved probe reads: the encoder (name, revision, remote code), the reading, the tag scheme, the
    compute its training words were read in (None: recorded before bertkit recorded it, fp32 on the CPU) and the
    sha256 of all the encoder's weights (`loading.weights_digest`; None: not recorded, a hub encoder), which
    `probe.saved.check_probe_encoder` compares before the probe predicts."""

    model: str
    revision: str | None
    reading: Reading
    scheme: TagScheme
    trust_remote_code: bool = False
    compute: Compute | None = None
    encoder_sha256: str | None = None


@dataclass(frozen=True)
class SavedWordProbe:
    """A word probe read back and verified: the weights, the best row it came from, and what it reads."""

    fit: WordProbeFit
    source: WordProbeSource
    path: Path

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(words, tags) probabilities, columns in `tags` order."""
        from bertkit.data.labels import LabelMap

        w = self.fit.weights
        probe = SavedProbe(w.scaler_mean, w.scaler_scale, w.coef, w.intercept, w.classes, LabelMap(w.tags), {})
        return probe.predict_proba(X)

    @property
    def tags(self) -> tuple[str, ...]:
        return self.fit.weights.tags


def save_word_probe(directory: Path, fit: WordProbeFit, source: WordProbeSource, family: str = "words") -> Path:
    """probe.safetensors then probe.json (its digests last, so a record always names bytes on disk; sealed, of
    `family`), atomically."""
    from safetensors.numpy import save

    from bertkit.io.atomic import atomic_path, write_json_atomic

    directory.mkdir(parents=True, exist_ok=True)
    weights = save(fit.weights.arrays(), metadata={"format": WORD_PROBE_FORMAT})
    with atomic_path(directory / PROBE_WEIGHTS) as tmp:
        tmp.write_bytes(weights)
    record = {"format": WORD_PROBE_FORMAT, "task": "tags", "model": source.model, "revision": source.revision,
              "trust_remote_code": source.trust_remote_code, "reading": source.reading.to_json(),
              "pooling": fit.pooling.to_json(), **({"compute": source.compute.to_json()} if source.compute else {}),
              **({"encoder_sha256": source.encoder_sha256} if source.encoder_sha256 else {}),
              "tags": list(fit.weights.tags), "scheme": source.scheme.to_json(),
              "row": fit.label, "C": fit.C, "dev": {"metric": fit.metric, "score": fit.dev_score},
              "n_features": int(fit.weights.coef.shape[1]), "files": {PROBE_WEIGHTS: bytes_record(weights)}}
    write_json_atomic(directory / PROBE_META, sealed(record, WORD_PROBE_RECORD, family))
    return directory


def probe_root(path: str | Path) -> Path:
    """The probe's folder: `path` itself, or its `probe/` (a run directory)."""
    root = Path(path).expanduser()
    return root / "probe" if not (root / PROBE_META).is_file() and (root / "probe" / PROBE_META).is_file() else root


def is_word_probe(path: str | Path) -> bool:
    """Whether `path` holds a word probe (its probe.json says so; a damaged JSON is judged by its format text)."""
    file = probe_root(path) / PROBE_META
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(name in text for name in READABLE_FORMATS)


def _damaged(file: Path, reason: str) -> UserError:
    return UserError(f"The saved word probe file {file} is damaged ({reason}). Valid: the files `bertkit probe` wrote, "
                     f"as they were. Re-run `bertkit probe --data TRAIN --dev DEV --out DIR` and pass --probe DIR.")


def load_word_probe(path: str | Path) -> SavedWordProbe:
    """A word probe from its folder (or a run directory holding `probe/`), every file checked first."""
    root = probe_root(path)
    if not (root / PROBE_META).is_file() or not (root / PROBE_WEIGHTS).is_file():
        raise UserError(f"{path} is not a saved probe (no {PROBE_META} + {PROBE_WEIGHTS}). Valid: the run directory "
                        f"of `bertkit probe --out DIR` (or its probe/ folder). Pass --probe DIR.")
    record = _read_record(root / PROBE_META)
    problem = record_problem(root / PROBE_WEIGHTS, record["files"][PROBE_WEIGHTS])
    if problem:
        raise _damaged(root / PROBE_WEIGHTS, f"{problem}; {PROBE_META} records it as saved")
    weights = _read_weights(root / PROBE_WEIGHTS, tuple(record["tags"]))
    reading = Reading.from_json(record.get("reading"))
    problems = Reading.record_problems(record.get("reading"))
    if reading is None or problems or not reading.reads_words:
        raise _damaged(root / PROBE_META, "; ".join(problems) or "its reading records no word pooling")
    fit = WordProbeFit(weights, str(record["row"]), word_pooling_from_json(record["pooling"]), float(record["C"]),
                       float(record["dev"]["score"]), str(record["dev"]["metric"]))
    source = WordProbeSource(str(record["model"]), record.get("revision"), reading,
                             TagScheme.from_json(record["scheme"]), bool(record.get("trust_remote_code", False)),
                             Compute.from_json(record.get("compute")), record.get("encoder_sha256"))
    return SavedWordProbe(fit, source, root)


def migrated_word_probe_record(record: dict[str, Any]) -> dict[str, Any]:
    """probe.json in the current layout, from any layout this bertkit reads (a `RecordProblem` for one it cannot
    trust: its seal does not match, a newer bertkit made it). The only place the older layouts are understood."""
    return upgrade(record, WORD_PROBE_RECORD, checked_version(record, WORD_PROBE_RECORD, unversioned=None),
                   {1: _word_probe_layout_2, 2: _word_probe_layout_3})


def _word_probe_layout_2(record: dict[str, Any]) -> dict[str, Any]:
    """Layout 1 -> 2: its reading {word_pool, max_length, stride} read sentences in windows cut at the head; its
    `layers` {layers, combine} are the pooling, `all` being every encoder layer of its model (the depth its
    config.json states)."""
    reading = record.get("reading")
    if isinstance(reading, dict):
        reading = {**reading, "long_text": "chunk", "truncation": "head"}
    limits = saved_model_limits(str(record.get("model")))
    try:
        pooling = word_pooling_from_json(record.get("layers") or {}, limits.layers if limits else None).to_json()
    except UserError as exc:
        raise RecordProblem(f"its layers {record.get('layers')!r} are not a word pooling ({exc})") from None
    return {**{k: v for k, v in record.items() if k != "layers"}, "reading": reading, "pooling": pooling}


def _word_probe_layout_3(record: dict[str, Any]) -> dict[str, Any]:
    """Layout 2 -> 3: the family (a word probe's: words)."""
    return {**record, FAMILY: "words"}


def _read_record(file: Path) -> dict[str, Any]:
    """probe.json, parsed, matching its own digest, in the current layout, with its files record present."""
    record = read_record_file(file, migrated_word_probe_record, lambda why: _damaged(file, why))
    files = record.get("files")
    if not isinstance(files, dict) or not is_record(files.get(PROBE_WEIGHTS)):
        raise _damaged(file, f"its files record has no size and sha256 for {PROBE_WEIGHTS}")
    return record


def _read_weights(file: Path, tags: tuple[str, ...]) -> WordProbeWeights:
    """probe.safetensors: every array present, shapes consistent, class ids within the recorded tags."""
    from safetensors.numpy import load_file

    try:
        arrays = load_file(str(file))
    except Exception as exc:  # SafetensorError (truncated header or data), OSError, ValueError
        raise _damaged(file, (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]) from None
    missing = [k for k in ARRAYS if k not in arrays]
    problem = f"missing arrays {', '.join(missing)}" if missing else _probe_arrays_problem(arrays)
    if problem is None and arrays["classes"].tolist() != list(range(len(tags))):
        problem = f"class ids {arrays['classes'].tolist()} do not number the {len(tags)} recorded tags"
    if problem:
        raise _damaged(file, problem)
    return WordProbeWeights(*(arrays[k] for k in ARRAYS), tags)


def fitted_word_probe(row: Any, pipeline: Any, C: float) -> WordProbeFit:
    """The best table row's probe (`row`: a `WordProbeRow`) as it was fitted and scored (`pipeline`: the scaler +
    logistic regression `probe.words.fit_word_row` returned): the weights saved are those the table scored, with no
    second fit and no second copy of the row's vectors."""
    return WordProbeFit(word_probe_weights(pipeline), row.label, row.pooling, C, float(row.scores.main),
                        row.scores.main_name)
