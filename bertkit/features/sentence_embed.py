"""The sentences family's `bertkit embed`: pooled encoder features of every row into a sharded, resumable store
(`bertkit.features.store`), shard by shard (`encode_features`), also across several processes (accelerate's
`PartialState`: rank, world size, barriers). Shards are tokenized ahead on a worker thread and written behind it.
`EmbedReport` is what an embed run did, whichever family's rows it stored (tagged data: `features.word_embed`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from bertkit import __version__
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling, check_layers_exist
from bertkit.features.word_embed import WordEmbedRun
from bertkit.models.compute import Compute, process_state
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs, check_model_limits
from bertkit.options import all_fields, replaced, value

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- to a store


@dataclass
class SplitResult:
    """What `run` did for one split."""

    split: str
    path: str
    status: str
    """'complete' (store was already complete), 'resumed', or 'new'."""
    rows: int
    shape: list[int]
    rows_encoded: int = 0
    tokens_encoded: int = 0
    seconds: float = 0.0
    tokens_total: int = 0
    n_truncated: int = 0
    shards_total: int = 0
    shards_skipped: int = 0
    size_bytes: int = 0
    windows: int = 0
    """Model inputs the store was made from: its rows, or more with --long-text chunk."""


@dataclass
class EmbedReport:
    """What `bertkit embed` did: per split (`splits`), and in all (rows, tokens, throughput, size)."""

    out: str
    model: str
    device: str
    dtype: str
    """The precision the features were computed in (fp32, bf16, fp16, int8; onnx/onnx-int8 for an export)."""
    processes: int
    main_process: bool
    complete_already: bool
    rows: int
    rows_encoded: int
    tokens_encoded: int
    seconds: float
    rows_per_s: float | None
    tokens_per_s: float | None
    n_truncated: int
    max_length: int
    long_text: str
    windows: int
    size_bytes: int
    splits: list[SplitResult] = field(default_factory=list)
    words: WordEmbedRun | None = field(default=None, metadata={"omit_empty": True})
    """Tagged data: the word stores (a vector per word) and how they were made; `rows` are sentences then."""

    @classmethod
    def of_words(cls, words: WordEmbedRun) -> EmbedReport:
        done = sum(s.sentences_encoded for s in words.splits)
        return cls(words.out, words.model, words.device, words.precision, 1, True, words.complete_already,
                   words.sentences, done, 0, words.seconds, words.sentences_per_s, None, 0, words.reading.max_length,
                   "words", 0, words.size_bytes, words=words)

    @classmethod
    def of(cls, report: EmbedReport) -> EmbedReport:
        """This class (a command's result) holding `report`'s values."""
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})


def load_embed_data(cfg: Any) -> tuple[list[tuple[str, Any]], Any]:
    """The splits to embed (train from --data, plus --dev/--test when given) and the label map from train.

    Labels are optional: they are stored when --label-column is given or the data has a `label(s)` column.
    """
    from bertkit.data.labels import LabelMap
    from bertkit.data.splits import load_dataset_split, load_named_split

    def load(source: str, first: bool) -> Any:
        loader = (lambda need: load_dataset_split(cfg.inputs, source, need_labels=need, task=cfg.task)) if first else (
            lambda need: load_named_split(cfg.inputs, source, need, cfg.task))
        try:
            return loader(True)
        except UserError as exc:
            if cfg.inputs.label_column is None and str(exc).startswith("No label column"):
                return loader(False)
            raise

    assert cfg.inputs.data is not None
    named = [("train", load(cfg.inputs.data, True))]
    named += [(name, load(src, False)) for name, src in (("dev", cfg.inputs.dev), ("test", cfg.inputs.test)) if src]
    train = named[0][1]
    label_map = LabelMap.build(train.labels) if train.labels is not None else None
    if label_map is not None:
        for name, ds in named[1:]:
            if ds.labels is not None:
                label_map.encode(ds.labels, f"The {name} data {ds.source}")
    return named, label_map


def store_identity(cfg: Any, reading: Reading, split: str, ds: Any, revision: str,
                   precision: str) -> dict[str, Any]:
    """The settings that change a store's content; a re-run must match them to resume or to count as done.
    `precision`: the one the features are computed in (`loading.precision_name`: fp32, bf16, fp16 or int8), so
    a resume never mixes shards of two precisions.

    The data is identified by its fingerprint (content hash), not its path, so `./x.tsv` and `/abs/x.tsv` match.
    """
    from bertkit.models import loading
    pooling = Pooling.from_config(cfg.pooling)
    return {  # the encoder's whole weights too: its revision reads only the ends of the file
        "model": cfg.model, "revision": revision, "encoder_sha256": loading.weights_digest(cfg.model or ""),
        **pooling.to_json(), "max_length": reading.max_length,
        "dtype": precision, "store_dtype": cfg.output.store_dtype, "split": split,
        "data_fingerprint": ds.fingerprint, "rows": len(ds), "limit": cfg.inputs.limit,
        "text_column": cfg.inputs.text_column, "text_pair_column": cfg.inputs.text_pair_column,
        "label_column": cfg.inputs.label_column, "shard_size": cfg.output.shard_size, **reading.long_text_json(),
    }


def embed_rows(cfg: Any, compute_for: Callable[[str, str], Compute], progress: bool = True) -> EmbedReport:
    """Every split's rows to its store under --out; what was done (see `SplitResult`). `compute_for(device,
    precision)`: the command's one resolution of --device and --precision (an ONNX export runs in its own)."""
    from bertkit.io import ownership, rundir

    root = Path(cfg.output.out or "").expanduser()
    rundir.inspect_run_dir(root, "embed", overwrite=cfg.output.overwrite, inputs=ownership.input_paths(cfg))  # read-only
    check_inputs(cfg, need_labels=False, models=(cfg.model,))  # then the inputs, before torch is imported
    check_model_limits(cfg.model,
                       max_length=cfg.reading.max_length)  # and what the model accepts, before the data is cached
    check_layers_exist(cfg.pooling.layers, cfg.model)

    from bertkit.models import loading, onnx

    export = onnx.is_export(cfg.model)
    # an ONNX export: its baked-in feature options, on the CPU, in its own precision; a saved model (or export) is
    # read with the --max-length and long-text settings it records
    cfg = read_as_saved(export_embed_config(cfg) if export else cfg)
    compute = onnx.export_compute(cfg.model) if export else compute_for(cfg.device, cfg.precision)  # once
    with process_state(compute.torch_device) as dist:
        if compute.device.startswith("cuda") and dist.num_processes > 1:
            compute = compute.on(dist.device)  # this process's GPU
        device, dtype = compute.torch_device, compute.dtype
        rundir.inspect_run_dir(root, "embed", overwrite=cfg.output.overwrite,  # again: refusals end every rank here
                               inputs=ownership.input_paths(cfg))
        loading.check_model_folder(cfg.model)  # as saved, with its tokenizer: before the data is read
        named, label_map = load_embed_data(cfg)
        model = _load_encoder(cfg, device, dtype, export)
        results = _embed_splits(cfg, dist, root, named, label_map, model, device, dtype, progress)
        return _summary(cfg, root, results, model.precision, device, dist)


@dataclass
class _Encoder:
    """The encoder a run embeds with, its tokenizer, and what its stores record about it."""

    model: Any
    tokenizer: Any
    spec: Any
    precision: str
    """fp32, bf16, fp16, int8; onnx or onnx-int8 for an export (the graph's own precision)."""
    revision: str
    backend: str | None
    """An export's backend (part of a store's identity: a resume never mixes ONNX and PyTorch rows)."""
    reading: Reading
    """How texts become its inputs: the run's one `Reading` (options over the model's record)."""

    @property
    def shape(self) -> tuple[int, int]:
        from bertkit.features.pooling import encoder_shape

        return encoder_shape(self.model)


def _load_encoder(cfg: Any, device: Any, dtype: Any, export: bool) -> _Encoder:
    """--model's tokenizer and encoder, checked against --max-length and --layers, in the run's precision."""
    from bertkit.models import loading, onnx, quantize

    tokenizer = loading.load_tokenizer(cfg.model, cfg.trust_remote_code)
    model_config = loading.load_config(cfg.model, cfg.trust_remote_code)
    reading = Reading.from_options(cfg.reading)  # `cfg` is read as the model records already
    loading.check_max_length(reading.max_length, tokenizer, model_config, cfg.model,
                             pair=cfg.inputs.text_pair_column is not None)
    if export:
        encoder = onnx.load_export(cfg.model, "features", "embed")
        precision, backend = encoder.backend, encoder.backend
    else:
        encoder = loading.cast_for_inference(loading.load_encoder(cfg.model, cfg.trust_remote_code), device, dtype)
        if cfg.precision == loading.INT8:
            encoder = quantize.quantized_int8(encoder, inplace=True)  # loaded for this run only
        precision, backend = loading.precision_name(encoder, dtype), None
    spec = Pooling.from_config(cfg.pooling)
    loaded = _Encoder(encoder, tokenizer, spec, precision, loading.model_revision(cfg.model), backend, reading)
    spec.resolve(loaded.shape[0])
    return loaded


def _embed_splits(cfg: Any, dist: Any, root: Path, named: list[tuple[str, Any]], label_map: Any,
                  model: _Encoder, device: Any, dtype: Any, progress: bool) -> list[SplitResult]:
    """Claim --out, embed every split into its store (OUT, or OUT/<split> with --dev/--test), commit."""
    from bertkit.features import store

    split_layout = len(named) > 1
    n_layers, hidden = model.shape
    common = {**_manifest_common(cfg, model, label_map), "compute": Compute(str(device), model.precision).to_json()}
    backend = {"backend": model.backend} if model.backend else {}
    identities = {split: {**store_identity(cfg, model.reading, split, ds, model.revision, model.precision), **backend}
                  for split, ds in named}
    run_dir = _claim_store_dir(cfg, dist, root, identities, split_layout)
    results = []
    for split, ds in named:
        writer = store.StoreWriter(run_dir.path / split if split_layout else run_dir.path, identities[split], len(ds),
                                   cfg.output.shard_size, model.spec.row_shape(n_layers, hidden), cfg.output.store_dtype)
        results.append(_embed_split(cfg, dist, writer, split, ds, model, device, dtype, label_map, common, progress))
    if split_layout and dist.is_main_process:
        store.write_splits_index(run_dir.path, [name for name, _ in named])
    dist.wait_for_everyone()
    if dist.is_main_process:
        run_dir.commit()  # with --overwrite: the new stores replace the previous ones only now
    dist.wait_for_everyone()
    for result in results:  # where the stores are now (not the staging folder they were built in)
        result.path = str(root / result.split if split_layout else root)
    return results


def export_embed_config(cfg: Any) -> Any:
    """embed's config for an ONNX export folder: --pool/--layers/--combine/--normalize left at their defaults take
    the export's baked-in values; one given otherwise must equal it. --precision and --device: auto, fp32, cpu."""
    from bertkit.models import onnx

    onnx.check_precision(cfg.precision, cfg.model or "")
    if cfg.device not in ("auto", "cpu"):
        raise UserError(f"--device {cfg.device}: the ONNX export {cfg.model} runs on the CPU (onnxruntime's CPU "
                        "provider). Drop --device (or pass --device cpu), or embed with the PyTorch model folder.")
    baked = onnx.read_feature_options(cfg.model or "")
    defaults = {f.name: f.default for f in all_fields(type(cfg)) if f.name in baked}
    conflicts = [f"--{name} {value(cfg, name)} (the export has {baked[name]})" for name in baked
                 if value(cfg, name) != defaults[name] and str(value(cfg, name)) != str(baked[name])]
    if conflicts:
        given = " ".join(f"--{k} {v}" for k, v in baked.items() if k != "normalize")
        raise UserError(f"The ONNX export {cfg.model} computes its features with {given}"
                        f"{' --normalize' if baked['normalize'] else ''}, baked into the graph, but this run asks for "
                        f"{'; '.join(conflicts)}. Drop those options (the export's are used), or export again with "
                        f"`bertkit export --kind features` and the options you want.")
    return replaced(cfg, **{k: v for k, v in baked.items() if k in defaults})


def _manifest_common(cfg: Any, model: _Encoder, label_map: Any) -> dict[str, Any]:
    """What every split's manifest records about the model and the features."""
    from bertkit.io.trail import package_versions

    n_layers, hidden = model.shape
    return {
        "bertkit_version": __version__, "model": cfg.model, "revision": model.revision,
        "tokenizer": getattr(model.tokenizer, "name_or_path", cfg.model),
        "tokenizer_class": type(model.tokenizer).__name__, "architecture": type(model.model).__name__,
        "n_layers": n_layers, "hidden_size": hidden, **model.spec.to_json(), "layer_indices": model.spec.resolve(n_layers),
        "layer_names": model.spec.layer_names(n_layers), "max_length": model.reading.max_length,
        **model.reading.long_text_json(), "dtype": model.precision,
        "label_map": label_map.to_json() if label_map else None,
        "versions": {k: v for k, v in package_versions().items() if k in ("bertkit", "torch", "transformers")},
        **({"backend": model.backend} if model.backend else {}),
    }


def _claim_store_dir(cfg: Any, dist: Any, root: Any, identities: dict[str, dict[str, Any]],
                     split_layout: bool) -> Any:
    """Rank 0 claims --out (everything is validated by now); every rank gets the directory to write into."""
    from bertkit.features import store
    from bertkit.io import rundir

    run = rundir.claim_run_dir(root, "embed", overwrite=cfg.output.overwrite, compare=lambda path: store.run_differences(
        path, identities, split_layout)) if dist.is_main_process else None
    dist.wait_for_everyone()
    return run or rundir.RunDir(root, "embed", cfg.output.overwrite, path=rundir.write_path(root, cfg.output.overwrite))


def _embed_split(cfg: Any, dist: Any, writer: Any, split: str, ds: Any, model: _Encoder, device: Any,
                 dtype: Any, label_map: Any, common: dict[str, Any], progress: bool) -> SplitResult:
    """Encode the missing shards of one split (this rank's share) and, on rank 0, finalize the store."""
    from bertkit.features import store
    from bertkit.features.extract import unit_of
    from bertkit.models import infer

    started = time.perf_counter()
    status = writer.prepare(create=True) if dist.is_main_process else None
    dist.wait_for_everyone()
    status = status or writer.status()
    result = SplitResult(split, str(writer.path), status, len(ds), [len(ds), *writer.row_shape],
                         shards_total=len(writer.ranges))
    if status != "complete":
        pending_all = writer.pending_shards()
        result.shards_skipped = len(writer.ranges) - len(pending_all)
        mine = [k for k in pending_all if k % dist.num_processes == dist.process_index]
        todo_rows = sum(writer.ranges[k][1] - writer.ranges[k][0] for k in mine)
        # with --long-text chunk the bar counts windows; its total grows as each shard's texts are tokenized
        with infer.closing(infer.progress_bar(todo_rows, f"embed {split}", progress and dist.is_main_process,
                                              unit_of(model.reading))) as bar:
            _encode_shards(cfg, writer, ds, mine, model, device, dtype, bar)
        dist.wait_for_everyone()
        result.rows_encoded = sum(writer.ranges[k][1] - writer.ranges[k][0] for k in pending_all)
        if dist.is_main_process:  # only rank 0 reads the shards: finalize removes them
            metas = writer.shard_metas()
            result.tokens_encoded = sum(metas[k]["tokens"] for k in pending_all)
            labels = label_map.encode(ds.labels, f"{split} data") if (label_map and ds.labels is not None) else None
            manifest = {**common, "split": split, "data": ds.source, "data_fingerprint": ds.fingerprint,
                        "rows": len(ds), "limit": cfg.inputs.limit, "text_column": cfg.inputs.text_column,
                        "text_pair_column": cfg.inputs.text_pair_column, "label_column": cfg.inputs.label_column,
                        "tokens": sum(m["tokens"] for m in metas),
                        "n_truncated": sum(m["n_truncated"] for m in metas),
                        "windows": sum(m.get("windows", 0) for m in metas),
                        "shard_size": cfg.output.shard_size, "n_shards": len(writer.ranges)}
            writer.finalize(manifest, labels)
        if status == "partial":
            result.status = "resumed"
        dist.wait_for_everyone()
    final = store.open(writer.path, verify=status == "complete")  # a store finished just now was hashed as written
    result.tokens_total = int(final.manifest.get("tokens", 0))
    result.n_truncated = int(final.manifest.get("n_truncated", 0))
    result.windows = int(final.manifest.get("windows") or len(ds))
    result.size_bytes = store.store_size_bytes(writer.path)
    result.seconds = time.perf_counter() - started
    return result


def _encode_shards(cfg: Any, writer: Any, ds: Any, shards: list[int], model: _Encoder, device: Any,
                   dtype: Any, bar: Any) -> None:
    from bertkit.features.extract import encode_shards

    encode_shards(writer, ds, shards, model.model, model.tokenizer, model.spec, reading=model.reading,
                  batch_size=cfg.rows_per_batch, device=device, dtype=dtype, bar=bar)


def _summary(cfg: Any, root: Any, results: list[SplitResult], precision: str, device: Any,
             dist: Any) -> EmbedReport:
    rows = sum(r.rows_encoded for r in results)
    tokens = sum(r.tokens_encoded for r in results)
    seconds = sum(r.seconds for r in results)
    return EmbedReport(
        out=str(root), model=cfg.model, device=str(device), dtype=precision, processes=dist.num_processes,
        main_process=dist.is_main_process, complete_already=all(r.status == "complete" for r in results),
        rows=sum(r.rows for r in results), rows_encoded=rows, tokens_encoded=tokens, seconds=round(seconds, 3),
        rows_per_s=round(rows / seconds, 1) if seconds and rows else None,
        tokens_per_s=round(tokens / seconds, 1) if seconds and rows else None,
        n_truncated=sum(r.n_truncated for r in results), max_length=cfg.reading.max_length, long_text=cfg.reading.long_text,
        windows=sum(r.windows for r in results), size_bytes=sum(r.size_bytes for r in results), splits=results)
