"""Pooled encoder features of a whole dataset, in memory: `encode_features` is the core (rows in, an array out,
rows in the input order) and `extract_features` its library entry point; `extract_pooled` gives several poolings
from one forward pass (`bertkit probe`).

Speed: rows are tokenized once with the fast tokenizer, sorted by length and batched with dynamic padding (a
padded-token budget for `--batch-size auto`), run under `torch.inference_mode()` and, for `--precision bf16/fp16`,
autocast (the loop is `infer.run_batches`; the pooling and pruning are `bertkit.features.pooling`). Output rows are
put back in the input order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertkit.data.dataset import TextDataset
from bertkit.encoding import encode
from bertkit.encoding.batches import ahead
from bertkit.encoding.encode import Encoded, RowsCut
from bertkit.encoding.reading import Reading
from bertkit.features.pooling import encoder_shape, forward_features, pool_tokens, prune_applies
from bertkit.features.settings import Pooling
from bertkit.models import infer, onnx

# ---------------------------------------------------------------- extraction


@dataclass(frozen=True)
class EncodeStats:
    """What encoding one dataset took: its rows and their tokens (real and as padded in batches), the rows cut at
    max length, the seconds and the model inputs run."""

    rows: int
    tokens: int
    padded_tokens: int
    n_truncated: int
    seconds: float
    windows: int
    """Model inputs run: one per row, or more for texts read in overlapping windows (`--long-text chunk`)."""


def pooled_over_windows(windows: Any, per_window: np.ndarray, normalize: bool) -> np.ndarray:
    """One feature row per text from one per window (input order): the mean of its windows, L2-normalised again
    when the features are (a mean of unit vectors is shorter than 1). A cut run (one window per text) is
    returned as it is."""
    if len(windows.owner) == windows.n_rows:
        return per_window
    pooled = windows.pool(per_window, "mean")
    if normalize:
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
    return np.ascontiguousarray(pooled, dtype=np.float32)


def count_windows(bar: Any, windows: Any) -> None:
    """A bar made with one step per row counts windows from here on: its total grows by the extra windows."""
    extra = len(windows.owner) - windows.n_rows
    if bar is not None and extra > 0:
        bar.total = (bar.total or 0) + extra
        bar.refresh()


def encode_features(encoder: Any, tokenizer: Any, dataset: TextDataset, spec: Pooling, *, reading: Reading,
                    batch_size: int | None, device: torch.device, dtype: torch.dtype, bar: Any = None,
                    windows: Any = None) -> tuple[np.ndarray, EncodeStats]:
    """Features for every row of `dataset` (input order) and what it took (`infer.run_batches` does the loop).

    Texts are read as `reading` says: over-long ones cut (its `truncation`), or read as windows whose features are
    averaged per text (`reading.chunked`, see `bertkit.encoding.longtext`); a `bar` then counts windows (see `count_windows`).
    `windows`: the dataset already tokenized so (`encode.encode_for`), e.g. on a worker thread ahead of the model."""
    return start_features(encoder, tokenizer, dataset, spec, reading=reading, batch_size=batch_size,
                          device=device, dtype=dtype, bar=bar, windows=windows)()


def start_features(encoder: Any, tokenizer: Any, dataset: TextDataset, spec: Pooling, *, reading: Reading,
                   batch_size: int | None, device: torch.device, dtype: torch.dtype, bar: Any = None,
                   windows: Any = None) -> Callable[[], tuple[np.ndarray, EncodeStats]]:
    """`encode_features` with its batches queued (`infer.start_batches`): calling the result waits for them and
    gives the features and stats. On a GPU the caller queues the next shard in between."""
    start = time.perf_counter()
    n_layers, hidden = encoder_shape(encoder)
    indices = spec.resolve(n_layers)
    windows = windows if windows is not None else encode.encode_for(tokenizer, dataset, reading)
    encoded: Encoded = windows.encoded
    count_windows(bar, windows)
    batches = infer.plan_batches(encoded.lengths, batch_size, infer.auto_token_budget(encoder, device))
    prune = None

    def features_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        nonlocal prune
        if isinstance(encoder, onnx.OnnxModel):  # an export folder: the pooled features come out of the graph
            return encoder(batch)
        if prune is None:
            prune = prune_applies(encoder, batch, spec, indices, n_layers)
        return forward_features(encoder, batch, spec, indices, n_layers, prune)

    outputs = infer.start_batches(features_of, encoded, batches, model=encoder, pad_id=infer.pad_id_of(tokenizer),
                                  device=device, dtype=dtype, bar=bar, unmasked=True, capturable=lambda: bool(prune))

    def finish() -> tuple[np.ndarray, EncodeStats]:
        per_window = infer.in_input_order(batches, outputs(), spec.row_shape(n_layers, hidden))
        features = pooled_over_windows(windows, per_window, spec.normalize)
        stats = EncodeStats(len(dataset), int(encoded.lengths.sum()), infer.padded_tokens(encoded, batches, device),
                            encoded.n_truncated, time.perf_counter() - start, len(windows.owner))
        return features, stats

    return finish


def encode_shards(writer: Any, dataset: TextDataset, shards: Sequence[int], encoder: Any, tokenizer: Any,
                  spec: Pooling, *, reading: Reading, batch_size: int | None, device: torch.device,
                  dtype: torch.dtype, bar: Any = None) -> None:
    """Encode and write `shards` of a store (`writer`: `bertkit.features.store.StoreWriter`) as a pipeline: shard
    k+1 is tokenized on a worker thread and shard k-1 written on another while shard k runs on the model, so
    neither the tokenizer nor the disk holds the device up. On a GPU shard k's batches are queued before shard
    k-1's outputs are waited for, so the device does not idle between shards."""
    def tokenized(k: int) -> tuple[Any, Any]:
        part = dataset.subset(range(*writer.ranges[k]))
        return part, encode.encode_for(tokenizer, part, reading)

    def write(k: int, finish: Callable[[], tuple[np.ndarray, EncodeStats]], written: Any) -> Any:
        features, stats = finish()
        if written is not None:
            written.result()  # in shard order: a failed write stops the run here
        return disk.submit(writer.write_shard, k, features, {
            "tokens": stats.tokens, "padded_tokens": stats.padded_tokens, "n_truncated": stats.n_truncated,
            "windows": stats.windows})

    ahead_of_writes = 1 if device.type == "cuda" else 0  # on a CPU a shard's work is done when it is started
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-store") as disk:
        written, queued = None, []
        for k, (part, windows) in ahead(shards, tokenized, depth=2):
            queued.append((k, start_features(encoder, tokenizer, part, spec, reading=reading,
                                             batch_size=batch_size, device=device, dtype=dtype, bar=bar,
                                             windows=windows)))
            while len(queued) > ahead_of_writes:
                written = write(*queued.pop(0), written)
        for k, finish in queued:
            written = write(k, finish, written)
        if written is not None:
            written.result()


def extract_features(encoder: Any, tokenizer: Any, dataset: TextDataset, *, pool: str = "cls", layers: str = "-1",
                     combine: str = "concat", reading: Reading = Reading(), batch_size: int | str = 64,
                     dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                     normalize: bool = False, progress: bool = False,
                     counted: RowsCut | None = None) -> np.ndarray:
    """Pooled features of every row, in the dataset's order: (n, dim), or (n, layers, dim) for layers="all".

    `batch_size` is rows per batch or "auto" (a padded-token budget from the model size). Texts longer than
    `reading.max_length` are cut (`reading.truncation`: head, tail, head+tail), or with `reading.long_text` chunk
    read in overlapping windows sharing `reading.stride` tokens whose features are averaged (one row per text
    either way).
    """
    spec = Pooling.from_options(pool, layers, combine, normalize)
    device = torch.device(device) if device is not None else next(encoder.parameters()).device
    rows = None if str(batch_size) == "auto" else int(batch_size)
    with infer.closing(infer.progress_bar(len(dataset), "embed", progress, unit_of(reading))) as bar:
        features, stats = encode_features(encoder, tokenizer, dataset, spec, reading=reading, batch_size=rows,
                                          device=device, dtype=dtype, bar=bar)
    if counted is not None:  # `counted`: rows read and cut at max_length, added up over calls
        counted.add(stats.rows, stats.n_truncated)
    return features


def unit_of(reading: Reading) -> str:
    """What a progress bar counts: rows, or windows when texts are read in windows."""
    return "windows" if reading.chunked else "rows"


def extract_pooled(encoder: Any, tokenizer: Any, dataset: TextDataset, *, pools: Sequence[str], layers: Sequence[int],
                   reading: Reading, batch_size: int | None, dtype: torch.dtype, normalize: bool = False,
                   progress: bool = False,
                   desc: str = "features") -> dict[str, np.ndarray]:
    """{pool: (n, len(layers), d)} from ONE forward pass per batch (`layers` are hidden-state indices,
    0 = embeddings). Pooling is `pool_tokens`, so each slice equals `extract_features` with that pool and layer:
    comparing cls and mean costs one extraction, not two (`bertkit probe`). Texts read as `reading` says
    (windows are averaged per text, as in `encode_features`); `desc` labels the progress bar."""
    device = next(encoder.parameters()).device
    windows = encode.encode_for(tokenizer, dataset, reading)
    batches = infer.plan_batches(windows.encoded.lengths, batch_size, infer.auto_token_budget(encoder, device))

    def pooled_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(batch, pools, layers, d)"""
        hidden = encoder(**batch, output_hidden_states=True, return_dict=True).hidden_states
        stacked = torch.stack([torch.stack([pool_tokens(hidden[i], batch.get("attention_mask"), pool) for i in layers], 1)
                               for pool in pools], 1)
        return torch.nn.functional.normalize(stacked, p=2.0, dim=-1) if normalize else stacked

    with infer.closing(infer.progress_bar(len(dataset), desc, progress, unit_of(reading))) as bar:
        count_windows(bar, windows)
        outputs = infer.run_batches(pooled_of, windows.encoded, batches, model=encoder,
                                    pad_id=infer.pad_id_of(tokenizer), device=device, dtype=dtype, bar=bar,
                                    unmasked=True)
    hidden_size = encoder_shape(encoder)[1]
    per_window = infer.in_input_order(batches, outputs, (len(pools), len(layers), hidden_size))
    stacked = pooled_over_windows(windows, per_window, normalize)
    return {pool: np.ascontiguousarray(stacked[:, p]) for p, pool in enumerate(pools)}
