"""`bertkit embed`: `embed_to_store` runs `encode_features` (`bertkit.features.extract`) shard by shard into a
resumable store (see `bertkit.features.store`), also across several processes (accelerate's `PartialState`: rank,
world size, barriers). Rows are tokenized once per shard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit import __version__
from bertkit.config.commands import EmbedConfig
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap
from bertkit.encoding.batches import ahead
from bertkit.encoding.encode import encode_for
from bertkit.encoding.longtext import LongText
from bertkit.errors import UserError
from bertkit.features import store
from bertkit.features.extract import encode_features, unit_of
from bertkit.features.pooling import FeatureSpec, encoder_shape
from bertkit.io import ownership, rundir
from bertkit.io.trail import package_versions
from bertkit.models import infer, onnx, quantize
from bertkit.models import loading as modeling

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- processes


@contextlib.contextmanager
def process_state(device: torch.device) -> Iterator[Any]:
    """accelerate's `PartialState` for this run: rank, world size and barriers under torchrun/accelerate launch
    (one process otherwise). A process group it starts (gloo on the CPU) is destroyed when the run ends."""
    from datetime import timedelta

    import torch.distributed as tdist
    from accelerate import PartialState

    had_group = tdist.is_available() and tdist.is_initialized()
    # a long timeout: a rank may encode its shards for hours while the others wait at the next barrier
    state = PartialState(cpu=device.type == "cpu", timeout=timedelta(hours=24))
    try:
        yield state
    finally:
        if state.num_processes > 1 and not had_group:
            state.destroy_process_group()
            PartialState._reset_state()


# ---------------------------------------------------------------- to a store


@dataclass
class SplitResult:
    """What `embed_to_store` did for one split."""

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


def load_embed_data(cfg: EmbedConfig) -> tuple[list[tuple[str, TextDataset]], LabelMap | None]:
    """The splits to embed (train from --data, plus --dev/--test when given) and the label map from train.

    Labels are optional: they are stored when --label-column is given or the data has a `label(s)` column.
    """
    from bertkit.data.splits import load_dataset_split, load_named_split

    def load(source: str, first: bool) -> TextDataset:
        loader = (lambda need: load_dataset_split(cfg, source, need_labels=need)) if first else (
            lambda need: load_named_split(cfg, source, need))
        try:
            return loader(True)
        except UserError as exc:
            if cfg.label_column is None and str(exc).startswith("No label column"):
                return loader(False)
            raise

    assert cfg.data is not None
    named = [("train", load(cfg.data, True))]
    named += [(name, load(src, False)) for name, src in (("dev", cfg.dev), ("test", cfg.test)) if src]
    train = named[0][1]
    label_map = LabelMap.build(train.labels) if train.labels is not None else None
    if label_map is not None:
        for name, ds in named[1:]:
            if ds.labels is not None:
                label_map.encode(ds.labels, f"The {name} data {ds.source}")
    return named, label_map


def store_identity(cfg: EmbedConfig, split: str, ds: TextDataset, revision: str, precision: str) -> dict[str, Any]:
    """The settings that change a store's content; a re-run must match them to resume or to count as done.
    `precision`: the one the features are computed in (`modeling.precision_name`: fp32, bf16, fp16 or int8), so
    a resume never mixes shards of two precisions.

    The data is identified by its fingerprint (content hash), not its path, so `./x.tsv` and `/abs/x.tsv` match.
    """
    return {
        "model": cfg.model, "revision": revision, "pool": cfg.pool, "layers": str(cfg.layers),
        "combine": cfg.combine, "max_length": cfg.max_length, "normalize": cfg.normalize,
        "dtype": precision, "store_dtype": cfg.store_dtype, "split": split,
        "data_fingerprint": ds.fingerprint, "rows": len(ds), "limit": cfg.limit,
        "text_column": cfg.text_column, "text_pair_column": cfg.text_pair_column,
        "label_column": cfg.label_column, "shard_size": cfg.shard_size, **LongText.from_config(cfg).to_json(),
    }


def embed_to_store(cfg: EmbedConfig, progress: bool = True) -> dict[str, Any]:
    """Run `bertkit embed`: every split to its store under cfg.out; returns a summary (see `SplitResult`)."""
    export = onnx.is_export(cfg.model)
    if export:  # an ONNX export folder: its baked-in feature options, on the CPU, in its own precision
        cfg = export_embed_config(cfg)
    device = torch.device("cpu") if export else modeling.inference_device(cfg.device, cfg.precision)
    with process_state(device) as dist:
        if device.type == "cuda" and dist.num_processes > 1:
            device = dist.device  # this process's GPU
        dtype = torch.float32 if export else modeling.choose_dtype(cfg.precision, device)
        root = Path(cfg.out or "").expanduser()
        rundir.inspect_run_dir(root, "embed", overwrite=cfg.overwrite,  # read-only: refusals end every rank here
                               inputs=ownership.input_paths(cfg))
        modeling.check_model_folder(cfg.model)  # as saved, with its tokenizer: before the data is read
        named, label_map = load_embed_data(cfg)
        split_layout = len(named) > 1
        tokenizer = modeling.load_tokenizer(cfg.model, cfg.trust_remote_code)
        model_config = modeling.load_config(cfg.model, cfg.trust_remote_code)
        modeling.check_max_length(cfg.max_length, tokenizer, model_config, cfg.model,
                                  pair=cfg.text_pair_column is not None)
        if export:
            encoder = onnx.load_export(cfg.model, "features", "embed")
            precision = encoder.backend  # onnx or onnx-int8: the graph's own precision, recorded and shown
        else:
            encoder = modeling.cast_for_inference(modeling.load_encoder(cfg.model, cfg.trust_remote_code), device, dtype)
            if cfg.precision == modeling.INT8:
                encoder = quantize.quantized_int8(encoder, inplace=True)  # loaded for this run only
            precision = modeling.precision_name(encoder, dtype)
        spec = FeatureSpec.from_options(cfg.pool, cfg.layers, cfg.combine, cfg.normalize)
        n_layers, hidden = encoder_shape(encoder)
        spec.resolve(n_layers)
        revision = modeling.model_revision(cfg.model)
        common = _manifest_common(cfg, tokenizer, encoder, spec, revision, precision, label_map)
        identities = {split: store_identity(cfg, split, ds, revision, precision) for split, ds in named}
        if export:  # the backend is part of what a store holds: a resume never mixes ONNX and PyTorch rows
            common["backend"] = encoder.backend
            for identity in identities.values():
                identity["backend"] = encoder.backend
        run = _claim_store_dir(cfg, dist, root, identities, split_layout)
        results = []
        for split, ds in named:
            writer = store.StoreWriter(run.path / split if split_layout else run.path, identities[split], len(ds),
                                       cfg.shard_size, spec.row_shape(n_layers, hidden), cfg.store_dtype)
            results.append(_embed_split(cfg, dist, writer, split, ds, encoder, tokenizer, spec, device, dtype,
                                        label_map, common, progress))
        if split_layout and dist.is_main_process:
            store.write_splits_index(run.path, [name for name, _ in named])
        dist.wait_for_everyone()
        if dist.is_main_process:
            run.commit()  # with --overwrite: the new stores replace the previous ones only now
        dist.wait_for_everyone()
        for result in results:  # where the stores are now (not the staging folder they were built in)
            result.path = str(root / result.split if split_layout else root)
        return _summary(cfg, root, results, precision, device, dist)


def export_embed_config(cfg: EmbedConfig) -> EmbedConfig:
    """embed's config for an ONNX export folder: --pool/--layers/--combine/--normalize left at their defaults take
    the export's baked-in values; one given otherwise must equal it. --precision and --device: auto, fp32, cpu."""
    onnx.check_precision(cfg.precision, cfg.model or "")
    if cfg.device not in ("auto", "cpu"):
        raise UserError(f"--device {cfg.device}: the ONNX export {cfg.model} runs on the CPU (onnxruntime's CPU "
                        "provider). Drop --device (or pass --device cpu), or embed with the PyTorch model folder.")
    baked = onnx.read_feature_options(cfg.model or "")
    defaults = {f.name: f.default for f in dataclasses.fields(EmbedConfig) if f.name in baked}
    conflicts = [f"--{name} {getattr(cfg, name)} (the export has {baked[name]})" for name in baked
                 if getattr(cfg, name) != defaults[name] and str(getattr(cfg, name)) != str(baked[name])]
    if conflicts:
        given = " ".join(f"--{k} {v}" for k, v in baked.items() if k != "normalize")
        raise UserError(f"The ONNX export {cfg.model} computes its features with {given}"
                        f"{' --normalize' if baked['normalize'] else ''}, baked into the graph, but this run asks for "
                        f"{'; '.join(conflicts)}. Drop those options (the export's are used), or export again with "
                        f"`bertkit export --kind features` and the options you want.")
    return dataclasses.replace(cfg, **{k: v for k, v in baked.items() if k in defaults})


def _manifest_common(cfg: EmbedConfig, tokenizer: Any, encoder: Any, spec: FeatureSpec, revision: str,
                     precision: str, label_map: LabelMap | None) -> dict[str, Any]:
    """What every split's manifest records about the model and the features."""
    n_layers, hidden = encoder_shape(encoder)
    return {
        "bertkit_version": __version__, "model": cfg.model, "revision": revision,
        "tokenizer": getattr(tokenizer, "name_or_path", cfg.model), "tokenizer_class": type(tokenizer).__name__,
        "architecture": type(encoder).__name__, "n_layers": n_layers, "hidden_size": hidden,
        "pool": cfg.pool, "layers": str(cfg.layers), "combine": cfg.combine, "layer_indices": spec.resolve(n_layers),
        "layer_names": spec.layer_names(n_layers), "max_length": cfg.max_length, "normalize": cfg.normalize,
        **LongText.from_config(cfg).to_json(),
        "dtype": precision, "label_map": label_map.to_json() if label_map else None,
        "versions": {k: v for k, v in package_versions().items() if k in ("bertkit", "torch", "transformers")},
    }


def _claim_store_dir(cfg: EmbedConfig, dist: Any, root: Any, identities: dict[str, dict[str, Any]],
                     split_layout: bool) -> Any:
    """Rank 0 claims --out (everything is validated by now); every rank gets the directory to write into."""
    run = rundir.claim_run_dir(root, "embed", overwrite=cfg.overwrite, compare=lambda path: store.run_differences(
        path, identities, split_layout)) if dist.is_main_process else None
    dist.wait_for_everyone()
    return run or rundir.RunDir(root, "embed", cfg.overwrite, path=rundir.write_path(root, cfg.overwrite))


def _embed_split(cfg: EmbedConfig, dist: Any, writer: Any, split: str, ds: TextDataset, encoder: Any,
                 tokenizer: Any, spec: FeatureSpec, device: torch.device, dtype: torch.dtype,
                 label_map: LabelMap | None, common: dict[str, Any], progress: bool) -> SplitResult:
    """Encode the missing shards of one split (this rank's share) and, on rank 0, finalize the store."""
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
                                              unit_of(LongText.from_config(cfg)))) as bar:
            _encode_shards(cfg, writer, ds, mine, encoder, tokenizer, spec, device, dtype, bar)
        dist.wait_for_everyone()
        result.rows_encoded = sum(writer.ranges[k][1] - writer.ranges[k][0] for k in pending_all)
        if dist.is_main_process:  # only rank 0 reads the shards: finalize removes them
            metas = writer.shard_metas()
            result.tokens_encoded = sum(metas[k]["tokens"] for k in pending_all)
            labels = label_map.encode(ds.labels, f"{split} data") if (label_map and ds.labels is not None) else None
            manifest = {**common, "split": split, "data": ds.source, "data_fingerprint": ds.fingerprint,
                        "rows": len(ds), "limit": cfg.limit, "text_column": cfg.text_column,
                        "text_pair_column": cfg.text_pair_column, "label_column": cfg.label_column,
                        "tokens": sum(m["tokens"] for m in metas),
                        "n_truncated": sum(m["n_truncated"] for m in metas),
                        "windows": sum(m.get("windows", 0) for m in metas),
                        "shard_size": cfg.shard_size, "n_shards": len(writer.ranges)}
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


def _encode_shards(cfg: EmbedConfig, writer: Any, ds: TextDataset, shards: list[int], encoder: Any, tokenizer: Any,
                   spec: FeatureSpec, device: torch.device, dtype: torch.dtype, bar: Any) -> None:
    """Encode and write `shards` as a pipeline: shard k+1 is tokenized on a worker thread and shard k-1 written on
    another while shard k runs on the model, so neither the tokenizer nor the disk holds the device up."""
    long_text = LongText.from_config(cfg)

    def tokenized(k: int) -> tuple[TextDataset, Any]:
        part = ds.subset(range(*writer.ranges[k]))
        return part, encode_for(tokenizer, part, cfg.max_length, long_text)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-store") as disk:
        written = None
        for k, (part, windows) in ahead(shards, tokenized, depth=2):
            features, stats = encode_features(encoder, tokenizer, part, spec, max_length=cfg.max_length,
                                              batch_size=cfg.rows_per_batch, device=device, dtype=dtype, bar=bar,
                                              long_text=long_text, windows=windows)
            if written is not None:
                written.result()  # in shard order: a failed write stops the run here
            written = disk.submit(writer.write_shard, k, features, {
                "tokens": stats.tokens, "padded_tokens": stats.padded_tokens, "n_truncated": stats.n_truncated,
                "windows": stats.windows})
        if written is not None:
            written.result()


def _summary(cfg: EmbedConfig, root: Any, results: list[SplitResult], precision: str, device: torch.device,
             dist: Any) -> dict[str, Any]:
    rows = sum(r.rows_encoded for r in results)
    tokens = sum(r.tokens_encoded for r in results)
    seconds = sum(r.seconds for r in results)
    return {
        "out": str(root), "model": cfg.model, "device": str(device), "dtype": precision,
        "processes": dist.num_processes, "main_process": dist.is_main_process,
        "complete_already": all(r.status == "complete" for r in results),
        "rows": sum(r.rows for r in results), "rows_encoded": rows, "tokens_encoded": tokens,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 1) if seconds and rows else None,
        "tokens_per_s": round(tokens / seconds, 1) if seconds and rows else None,
        "n_truncated": sum(r.n_truncated for r in results), "max_length": cfg.max_length,
        "long_text": cfg.long_text, "windows": sum(r.windows for r in results),
        "size_bytes": sum(r.size_bytes for r in results),
        "splits": [vars(r) for r in results],
    }
