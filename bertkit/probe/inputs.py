"""What a probe is fitted on: features per split and pooling with their labels, either read from a
`bertkit embed` store (`load_store_inputs`, --features) or extracted from text in one forward pass per batch
for every pooling (`load_text_inputs`, --data), with extracted features cached in the run directory
(`cached_features`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling, check_distinct_layers, check_layers_exist, parse_layers
from bertkit.io.digests import HashingWriter, record_problem
from bertkit.models.compute import Compute
from bertkit.models.preflight import check_model_limits
from bertkit.options import all_fields, value

log = logging.getLogger(__name__)


@dataclass
class ProbeInputs:
    """Features per split and pooling, `(n, k, d)` with a layer axis of k probed layers, and their labels."""

    train: dict[str, np.ndarray]
    dev: dict[str, np.ndarray]
    y_train: np.ndarray
    y_dev: np.ndarray
    label_map: Any
    layer_indices: list[int | None]
    """Hidden-state index of each position on the layer axis (None: a combination of layers from a store)."""
    layer_names: list[str]
    feature_meta: dict[str, Any]
    """model, revision, max_length, normalize, combine, layers spec of the store: what a saved probe needs."""
    test: dict[str, np.ndarray] | None = None
    y_test: np.ndarray | None = None
    datasets: dict[str, Any] = field(default_factory=dict)
    """The text of each split (for the TF-IDF and random-encoder baselines), when it is available."""
    notes: list[str] = field(default_factory=list)
    source: str = "extracted"


def _check_store_encoder(model: str, manifest: dict[str, Any], path: Any) -> None:
    """--model given with a store: it must be the encoder the store was made by (its revision, and where the store
    records it, the whole sha256 of its weights: the revision reads only the ends of the file)."""
    from bertkit.models import loading

    if loading.model_revision(model) != manifest.get("revision"):
        raise UserError(
            f"The feature store {path} was made by model {manifest.get('model')!r} "
            f"(revision {manifest.get('revision')}), not by --model {model} ({loading.model_revision(model)}). "
            f"Drop --model to probe the store as it is, or re-embed with `bertkit embed --model {model}`.")
    recorded = (manifest.get("identity") or {}).get("encoder_sha256")
    if recorded and loading.weights_digest(model) not in (None, recorded):
        raise UserError(
            f"The feature store {path} was made by model {manifest.get('model')!r} with other weights than --model "
            f"{model} has now (the sha256 of its weights differs from the store's record). Drop --model to probe "
            f"the store as it is, or re-embed with `bertkit embed --model {model}`.")


def load_store_inputs(cfg: Any, reading: Reading) -> ProbeInputs:
    """Features, labels and layer names from a `bertkit embed` store (--features); `reading`: the command's options,
    which may not ask for other long-text settings than the store's."""
    from bertkit.features import store
    from bertkit.models import loading

    path = Path(cfg.features).expanduser()
    if not path.exists():
        raise UserError(f"--features {path} does not exist. Pass the --out directory of a `bertkit embed` run.")
    try:
        splits = store.open_splits(path)
    except (ValueError, OSError) as exc:  # a truncated or unreadable features.npy / labels.npy
        raise UserError(
            f"The feature store {path} is damaged: its arrays cannot be read ({exc}). Rebuild it with the same "
            f"`bertkit embed` command plus --overwrite."
        ) from None
    train = splits["train"]
    manifest = train.manifest
    if train.labels is None or train.label_map is None:
        raise UserError(
            f"The feature store {train.path} has no labels, so a probe cannot be trained on it. Re-run `bertkit embed` "
            f"with --label-column (the column holding the labels), or use `bertkit probe --data ... --label-column ...`."
        )
    if cfg.model is not None:
        loading.check_model_folder(cfg.model)
    if cfg.model is not None:
        _check_store_encoder(cfg.model, manifest, train.path)
    notes: list[str] = []
    _warn_store_settings(cfg, manifest, train.path)
    _check_store_long_text(reading, manifest, train.path)
    pools = _store_pools(cfg, manifest)
    positions, indices, names = _store_layers(cfg, train)
    if len(manifest.get("layer_indices") or []) == 1:
        notes.append(f"The store holds one layer ({names[0]}), so the per-layer curve is a single point. To compare "
                     f"layers (the Alammar table), embed with `bertkit embed ... --layers all` and probe that store.")
    X_train = _store_layers_view(train.features, positions)
    y_train, y_dev = np.asarray(train.labels), None
    if "dev" in splits:
        dev = splits["dev"]
        X_dev, y_dev = _store_layers_view(dev.features, positions), _store_labels(dev, train.label_map, "dev")
    else:
        from bertkit.data.splits import stratified_split

        tr, dv = stratified_split(list(y_train), cfg.inputs.dev_fraction, cfg.inputs.seed)
        X_train, X_dev, y_train, y_dev = X_train[tr], X_train[dv], y_train[tr], y_train[dv]
        notes.append(f"The store has no dev split: held out {len(dv)} of {len(tr) + len(dv)} rows as dev "
                     f"(stratified, --dev-fraction {cfg.inputs.dev_fraction}, seed {cfg.inputs.seed}).")
    inputs = ProbeInputs({pools[0]: np.asarray(X_train, np.float32)}, {pools[0]: np.asarray(X_dev, np.float32)},
                         y_train, y_dev, train.label_map, indices, names, _store_meta(manifest), notes=notes, source="store")
    if "test" in splits and splits["test"].labels is not None:
        inputs.test = {pools[0]: np.asarray(_store_layers_view(splits["test"].features, positions), np.float32)}
        inputs.y_test = _store_labels(splits["test"], train.label_map, "test")
    if "dev" in splits:
        inputs.datasets = _store_texts({k: v for k, v in splits.items()}, notes)
    return inputs


def _store_pools(cfg: Any, manifest: dict[str, Any]) -> list[str]:
    have = manifest.get("pool", "cls")
    if cfg.pool is not None and cfg.pools != [have]:
        raise UserError(
            f"--pool {cfg.pool} asks for pooling the store does not have: it holds {have!r} features only. "
            f"Drop --pool, or embed again with `bertkit embed --pool ...` (or probe with --data to extract on the fly)."
        )
    return [have]


def _layer_axis(features: np.ndarray) -> np.ndarray:
    """Store features as (n, k, d): a single-layer store gets a layer axis of 1."""
    return features if features.ndim == 3 else features[:, None, :]


def _store_layers_view(features: np.ndarray, positions: list[int]) -> np.ndarray:
    """The store's (memory-mapped) features at these positions of the layer axis, `(n, k, d)`: a view of the mapping
    when the positions are consecutive (every layer, or one: no copy; a float32 store is fitted on its pages as they
    are, a float16 store is converted to float32 once), else a copy of the chosen layers."""
    features = _layer_axis(features)
    first, last = positions[0], positions[-1]
    if positions == list(range(first, last + 1)):
        return features[:, first:last + 1]
    return features[:, positions]


def _store_layers(cfg: Any, train: Any) -> tuple[list[int], list[int | None], list[str]]:
    """(positions on the store's layer axis, their hidden-state indices, names) selected by --layers."""

    manifest = train.manifest
    stored = list(manifest.get("layer_indices") or [])
    names = list(manifest.get("layer_names") or [])
    if train.features.ndim == 2:
        if cfg.layers is not None:
            _check_vector_store_layers(cfg.layers, manifest, stored)
        if len(stored) > 1:  # several layers combined into one vector
            label = f"layers {manifest.get('layers')} ({manifest.get('combine')})"
            return [0], [None], [label]
        return [0], [stored[0] if stored else None], [names[0] if names else str(manifest.get("layers"))]
    n_layers = int(manifest.get("n_layers", len(stored) - 1))
    wanted = parse_layers(cfg.layers) if cfg.layers is not None else None
    if wanted is None:
        return list(range(len(stored))), stored, names
    resolved = [w + n_layers + 1 if w < 0 else w for w in wanted]
    check_distinct_layers(wanted, resolved, n_layers)
    missing = [w for w, r in zip(wanted, resolved, strict=True) if r not in stored]
    if missing:
        raise UserError(
            f"--layers {cfg.layers}: the store has no layer {', '.join(map(str, missing))}; it holds hidden states "
            f"{', '.join(map(str, stored))} (0 = embeddings). Pick from those, or re-embed with --layers all."
        )
    positions = [stored.index(r) for r in resolved]
    return positions, resolved, [names[p] for p in positions]


def _check_vector_store_layers(layers: str, manifest: dict[str, Any], stored: list[int]) -> None:
    """A store with one vector per row (one layer, or layers combined) answers --layers only with what it holds."""

    wanted = parse_layers(layers)
    n_layers = int(manifest.get("n_layers", max(stored, default=0)))
    if wanted is None:
        same = manifest.get("layers") == "all"
    else:
        resolved = [w + n_layers + 1 if w < 0 else w for w in wanted]
        check_distinct_layers(wanted, resolved, n_layers)
        same = resolved == stored
    if not same:
        raise UserError(
            f"--layers {layers}: the store holds one feature vector per row, made from hidden state(s) "
            f"{', '.join(map(str, stored))} (--layers {manifest.get('layers')}, --combine {manifest.get('combine')}); "
            f"it cannot be split into other layers. Drop --layers, or re-embed with `bertkit embed --layers all`."
        )


def _store_labels(split_store: Any, label_map: Any, name: str) -> np.ndarray:
    """A dev/test store's label ids in the train store's mapping (unseen labels are an error)."""
    if split_store.labels is None or split_store.label_map is None:
        raise UserError(f"The {name} store {split_store.path} has no labels; re-run `bertkit embed` with --label-column.")
    if split_store.label_map == label_map:
        return np.asarray(split_store.labels)
    raw = split_store.label_map.decode(split_store.labels)
    return label_map.encode(raw, f"The {name} store {split_store.path}")


def _store_meta(manifest: dict[str, Any]) -> dict[str, Any]:
    keys = ("model", "revision", "max_length", "architecture", "dtype")
    pooled = {k: v for k, v in Pooling.from_json(manifest).to_json().items() if k != "pool"}  # the cells' pool: each its own
    meta = {**{k: manifest.get(k) for k in keys}, **pooled}
    recorded = Compute.recorded_in(manifest)  # the features' precision (stores made before `compute`: their dtype)
    if recorded is not None:
        meta["compute"] = recorded.to_json()
    meta["trust_remote_code"] = False
    # stores made before embed recorded how it read long texts were head-cut
    meta.update(Reading.from_record(manifest).long_text_json())
    return meta


STORE_FIXED = {"precision": "dtype", "max_length": "max_length", "normalize": "normalize"}
"""probe options that shape extracted features, and the store manifest key that fixed them when it was embedded."""


def _warn_store_settings(cfg: Any, manifest: dict[str, Any], path: Any) -> None:
    """--precision, --max-length and --normalize make features; a store's were made already, so given with
    --features (other than the default) they change nothing: one warning each, naming what the store used."""

    defaults = {f.name: f.default for f in all_fields(type(cfg)) if f.name in STORE_FIXED}
    for option, key in STORE_FIXED.items():
        given = value(cfg, option)
        if given != defaults[option]:
            flag = f"--{option.replace('_', '-')}" + ("" if isinstance(given, bool) else f" {given}")
            log.warning("%s does not apply with --features and is ignored: the store %s was embedded with %s %s, "
                        "and its features are probed as they are. Drop it, or re-embed with `bertkit embed %s`.",
                        flag, path, key, manifest.get(key), flag)


def _check_store_long_text(reading: Reading, manifest: dict[str, Any], path: Any) -> None:
    """With --features the store's reading of long texts is used; a --truncation/--long-text/--stride that asks
    for another one (a value other than the default) is refused rather than silently ignored."""
    stored, default = Reading.from_record(manifest).long_text_json(), Reading().long_text_json()
    clashes = [f"--{k.replace('_', '-')} {v} (the store: {stored[k]})"
               for k, v in reading.long_text_json().items() if v != default[k] and v != stored[k]]
    if clashes:
        raise UserError(
            f"The feature store {path} was embedded with other long-text settings than "
            f"{', '.join(clashes)}; a probe on a store reads its features as they are. Drop those flags, or re-embed "
            f"with them (`bertkit embed ... --overwrite`), or probe with --data to extract on the fly."
        )


def _store_texts(splits: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Re-read each split's text from the file the store was made from (for the text baselines), if unchanged."""
    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split

    texts = {}
    for name, split_store in splits.items():
        m = split_store.manifest
        source = m.get("data")
        if not source or not Path(str(source)).is_file():
            notes.append(f"TF-IDF and random-encoder baselines skipped: the store's {name} data {source} is not readable here.")
            return {}
        opts = DataOptions(data=source, text_column=m.get("text_column"), text_pair_column=m.get("text_pair_column"),
                           label_column=m.get("label_column"), limit=m.get("limit"))
        ds = load_dataset_split(opts, source, need_labels=False)
        if ds.fingerprint != m.get("data_fingerprint") or len(ds) != len(split_store):
            notes.append(f"TF-IDF and random-encoder baselines skipped: {source} changed since it was embedded.")
            return {}
        texts[name] = ds
    return texts


def _check_dev_targets_vary(splits: Any) -> None:
    """Dev Pearson picks a regression probe's best layer: undefined (so refused) when every dev target is the same."""
    dev = splits.dev
    if splits.label_map.task == "regression" and dev is not None and len(set(dev.labels or [])) == 1:
        raise UserError(f"Every dev target in {dev.source} is {dev.labels[0]:g}: dev Pearson, which picks the probe's "
                        f"best layer, is undefined for a constant target. Pass --dev with targets that vary (or more "
                        f"data, for a larger --dev-fraction hold-out).")


def load_text_inputs(cfg: Any, cache_dir: Path | Callable[[], Path] | None, compute: Compute, reading: Reading,
                     progress: bool = False,
                     on_labels: Callable[[Any, np.ndarray], None] | None = None) -> ProbeInputs:
    """Read --data/--dev/--test and extract features for every --pool and --layers (not given: `default_cells`) in
    one pass per split,
    cached as `cache_dir/<split>-<pool>-<layers>.npy` (reused by a re-run with the same model and data), in
    `compute`'s precision (the command's one resolution of --precision; the encoder stays on the CPU).

    A callable `cache_dir` is called once the data and the model are validated (it may claim the run directory).
    `on_labels` gets the label map (the problem shape) and the training labels as ids as soon as the data is read,
    before any model work."""
    from bertkit.data.splits import load_splits
    from bertkit.features import extract, pooling
    from bertkit.models import loading, quantize

    model = cfg.model or loading.OFFLINE_NAME
    loading.check_model_folder(model)  # as saved, with its tokenizer: before the data is read
    check_model_limits(model, max_length=reading.max_length)  # what its files say it accepts: before the data is cached
    check_layers_exist(cfg.layers, model)
    splits = load_splits(cfg.inputs, need_labels=True, need_dev=True)
    lm = splits.label_map
    y_train = lm.encode(splits.train.labels or [], "train")
    if on_labels is not None:
        on_labels(lm, y_train)
    _check_dev_targets_vary(splits)
    tokenizer = loading.load_tokenizer(model, cfg.trust_remote_code)
    loading.check_max_length(reading.max_length, tokenizer, loading.load_config(model, cfg.trust_remote_code), model,
                              pair=cfg.inputs.text_pair_column is not None)
    encoder = loading.load_encoder(model, cfg.trust_remote_code)
    cache_dir = cache_dir() if callable(cache_dir) else cache_dir
    shape = pooling.encoder_shape(encoder)
    n_layers = shape[0]
    named = {"train": splits.train, "dev": splits.dev, **({"test": splits.test} if splits.test is not None else {})}
    pools, layers, default_note = default_cells(cfg, model, shape, sum(len(ds) for ds in named.values()))
    # the layers every cell pools, concatenated; each cell pools its own way (probe.json records the best cell's)
    spec = Pooling.from_json({"layers": layers, "normalize": cfg.normalize})
    indices = spec.resolve(n_layers)
    dtype = compute.dtype
    if compute.precision == loading.INT8:
        encoder = quantize.quantized_int8(encoder, inplace=True)  # loaded for the feature pass only
    pooled = {k: v for k, v in spec.to_json().items() if k != "pool"}
    meta = {"model": model, "revision": loading.model_revision(model), "encoder_sha256": loading.weights_digest(model),
            "max_length": reading.max_length, **pooled,
            "architecture": type(encoder).__name__, "dtype": compute.precision, "compute": compute.to_json(),
            "trust_remote_code": cfg.trust_remote_code, **reading.long_text_json()}
    features = {
        name: cached_features(cache_dir, name, ds, meta, pools, indices,
                              lambda ds=ds: extract.extract_pooled(
                                  encoder, tokenizer, ds, pools=pools, layers=indices, reading=reading,
                                  batch_size=cfg.batch_size, dtype=dtype, normalize=cfg.normalize, progress=progress))
        for name, ds in named.items()
    }
    assert splits.dev is not None and lm is not None
    inputs = ProbeInputs(features["train"], features["dev"], y_train,
                         lm.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}"), lm, list(indices),
                         spec.layer_names(n_layers), meta, datasets=named,
                         notes=list(splits.notes) + ([default_note] if default_note else []))
    if splits.test is not None and splits.test.labels is not None:
        inputs.test, inputs.y_test = features["test"], lm.encode(splits.test.labels, f"The test data {splits.test.source}")
    return inputs


DEFAULT_LAYERS = "all"
"""--layers when it is not given with --data: every hidden state (one feature pass; a probe fit per layer)."""


def default_cells(cfg: Any, model: str, shape: tuple[int, int], rows: int) -> tuple[list[str], str, str | None]:
    """(poolings, --layers spec, the note saying what was chosen and why) for features extracted from --data. An
    explicit --pool/--layers is kept as given; without --pool: `cls` plus the pooling the model was trained with
    (a sentence-transformers folder's Pooling module); without --layers: every hidden state. The note (None when
    both were given) names the choice and the memory the features take."""
    from bertkit.models.trained_pooling import trained_pooling

    n_layers, hidden = shape
    chosen = []
    pools = cfg.pools
    if cfg.pool is None:
        trained = trained_pooling(model)
        pools = ["cls"] + ([trained[0]] if trained is not None and trained[0] != "cls" else [])
        why = (f"the model's sentence-transformers pooling, {trained[1]}" if trained is not None else
               "the model folder records no sentence-transformers pooling")
        chosen.append(f"{' and '.join(pools)} ({why})")
    layers = cfg.layers if cfg.layers is not None else DEFAULT_LAYERS
    states = n_layers + 1 if layers == DEFAULT_LAYERS else len(parse_layers(layers) or [])
    if cfg.layers is None:
        chosen.append(f"all {states} hidden states (embeddings + {n_layers} layers)")
    if not chosen:
        return pools, layers, None
    size = rows * len(pools) * states * hidden * 4
    return pools, layers, (
        f"default: {' over '.join(chosen)} - {len(pools) * states} probe{'s' * (len(pools) * states > 1)} on one feature pass; the features take "
        f"{_size(size)} in memory ({rows:,} rows x {states} states x {hidden} float32 per pooling). --pool and "
        f"--layers choose others (e.g. --layers -1 for large data).")


def _size(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 2**10:.0f} KiB"


def cached_features(
    cache_dir: Path | None, split: str, dataset: Any, meta: dict[str, Any], pools: Sequence[str],
    indices: Sequence[int], compute: Callable[[], dict[str, np.ndarray]], prefix: str = "",
) -> dict[str, np.ndarray]:
    """{pool: features} from `cache_dir` when a previous run stored them for the same model, data and settings and
    each .npy is as its .json records it (size, sha256); otherwise `compute()` them and store one .npy per pool (+ a
    .json: the key and the array's digest, taken as it is written) atomically. A cached array that fails its check
    is computed again, with a warning."""
    from bertkit.io.atomic import atomic_path, write_json_atomic

    layers = "all" if meta.get("layers") == "all" else "_".join(map(str, indices))
    key = {k: meta.get(k) for k in ("model", "revision", "max_length", "normalize", "dtype")}
    key.update(Reading.from_record(meta).long_text_json())
    key.update(data=dataset.fingerprint, rows=len(dataset), source=dataset.source, layers=list(indices))
    files = {p: cache_dir / f"{prefix}{split}-{p}-{layers}.npy" for p in pools} if cache_dir else {}
    cached = _cached_arrays(files, key)
    if cached is not None:
        log.info("reusing cached %s%s features from %s", prefix, split, cache_dir)
        return cached
    result = compute()
    for pool, path in files.items():
        with atomic_path(path) as tmp:
            with tmp.open("wb") as handle:
                hashing = HashingWriter(handle)
                np.save(hashing, result[pool])
        write_json_atomic(path.with_suffix(".json"), {**key, "digest": hashing.record()})
    return result


def _cached_arrays(files: dict[str, Path], key: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """{pool: array} when every file was cached for `key` and is as recorded; None (computed again) otherwise."""

    if not files or not all(f.is_file() and f.with_suffix(".json").is_file() for f in files.values()):
        return None
    records = {}
    for pool, file in files.items():
        try:
            record = json.loads(file.with_suffix(".json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict) or {k: v for k, v in record.items() if k != "digest"} != key:
            return None  # made for other settings: computed again
        if "digest" not in record:
            return None  # cached by a bertkit that recorded no digest: computed again (it is a cache)
        records[pool] = record["digest"]
    problems = [f"{file.name}: {why}" for pool, file in files.items()
                if (why := record_problem(file, records[pool])) is not None]
    if problems:
        log.warning("The cached features %s failed verification; computing them again.", "; ".join(problems))
        return None
    return {pool: np.load(file) for pool, file in files.items()}
