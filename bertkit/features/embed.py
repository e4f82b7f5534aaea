"""Pooled encoder features: `[CLS]`/mean/max over one layer, several layers, or all of them.

`encode_features` is the in-memory core (rows in, an array out, rows in the input order) and `extract_features`
its library entry point; `extract_pooled` gives several poolings from one forward pass (`bertkit probe`).
`embed_to_store` runs `encode_features` shard by shard into a resumable store (see `bertkit.features.store`), also across
several processes (accelerate's `PartialState`: rank, world size, barriers).

Speed: rows are tokenized once per shard with the fast tokenizer, sorted by length and batched with dynamic
padding (a padded-token budget for `--batch-size auto`), run under `torch.inference_mode()` and, for
`--precision bf16/fp16`, autocast (the loop is `infer.run_batches`). Output rows are put back in the input order.
For the architectures `fastforward` allowlists, only the layers the features need are run, and with `--pool cls`
the highest requested layer is computed for the [CLS] position alone (keys and values still come from every
token); the first batch checks that this gives the full model's features, else the full model is used (see
`PRUNE_LAYERS`). Other architectures always run the model's own forward.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertkit.config.commands import COMBINES, POOLS, EmbedConfig, layers_problem, parse_layers
from bertkit.data.dataset import Encoded, LabelMap, TextDataset
from bertkit.encoding import longtext
from bertkit.errors import UserError, raise_if_problems
from bertkit.models import fastforward, infer
from bertkit.models import loading as modeling

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- what to pool


@dataclass(frozen=True)
class FeatureSpec:
    """Which hidden states to pool, how, and how to combine them."""

    pool: str = "cls"
    layers: tuple[int, ...] | None = (-1,)
    """Indices into hidden_states (0 = embeddings ... L = last layer; negatives from the end); None = all."""
    combine: str = "concat"
    normalize: bool = False

    @classmethod
    def from_options(cls, pool: str, layers: str | int, combine: str, normalize: bool) -> FeatureSpec:
        """The spec for these option values (the library path: the same rules as the CLI's, from config.py)."""
        problems = layers_problem(str(layers))
        problems += [f"--pool must be one of {', '.join(POOLS)}; got {pool!r}."] if pool not in POOLS else []
        problems += [f"--combine must be one of {', '.join(COMBINES)}; got {combine!r}."] if combine not in COMBINES else []
        raise_if_problems(problems)
        parsed = parse_layers(layers)
        return cls(pool, None if parsed is None else tuple(parsed), combine, normalize)

    def resolve(self, n_layers: int) -> list[int]:
        """Positive hidden-state indices for a model with `n_layers` encoder layers (n_layers + 1 states)."""
        if self.layers is None:
            return list(range(n_layers + 1))
        resolved = []
        for index in self.layers:
            positive = index + n_layers + 1 if index < 0 else index
            if not 0 <= positive <= n_layers:
                raise UserError(
                    f"--layers {index} is out of range: the model has {n_layers} layers, so valid indices are "
                    f"0 (embeddings) to {n_layers}, or -1 to -{n_layers + 1}. Pass --layers with indices in that range."
                )
            resolved.append(positive)
        check_distinct_layers(self.layers, resolved, n_layers)
        return resolved

    def row_shape(self, n_layers: int, hidden: int) -> tuple[int, ...]:
        """Shape of one row's features: (dim,), or (layers, dim) for `all` with concat."""
        k = len(self.resolve(n_layers))
        if self.combine != "concat" or k == 1:
            return (hidden,)
        if self.layers is None:
            return (k, hidden)
        return (k * hidden,)

    def layer_names(self, n_layers: int) -> list[str]:
        return ["embeddings" if i == 0 else f"layer {i}" for i in self.resolve(n_layers)]


def check_distinct_layers(asked: Sequence[int], resolved: Sequence[int], n_layers: int) -> None:
    """--layers must name each hidden state once after resolving negatives (-1 and 6 are one state of 6 layers)."""
    seen: dict[int, int] = {}
    for index, state in zip(asked, resolved, strict=True):
        if state in seen:
            raise UserError(
                f"--layers {','.join(map(str, asked))} names hidden state {state} twice ({seen[state]} and {index}: "
                f"negative indices count from the last layer, and this model has {n_layers} layers, so -1 is "
                f"{n_layers}). Pass each layer once, e.g. --layers {','.join(map(str, dict.fromkeys(resolved)))}."
            )
        seen[state] = index


def encoder_shape(encoder: Any) -> tuple[int, int]:
    """(number of encoder layers, hidden size) from the model config (BERT and DistilBERT names)."""
    config = encoder.config
    return int(config.num_hidden_layers), int(config.hidden_size)



# ---------------------------------------------------------------- pooling


def pool_tokens(hidden: torch.Tensor, mask: torch.Tensor, pool: str) -> torch.Tensor:
    """(batch, seq, dim) -> (batch, dim) in fp32; mean and max look only at positions where mask == 1."""
    if pool == "cls":
        return hidden[:, 0].float()
    hidden = hidden.float()
    keep = mask.unsqueeze(-1).bool()
    if pool == "mean":
        summed = hidden.masked_fill(~keep, 0.0).sum(dim=1)
        return summed / keep.sum(dim=1).clamp(min=1)
    return hidden.masked_fill(~keep, float("-inf")).max(dim=1).values


PRUNE_LAYERS = True
"""Compute only what the requested features need, for the architectures `fastforward` allowlists: layers above
the highest requested one are skipped and, with `--pool cls`, that top layer runs for the [CLS] position only.
Set False to always run the full model."""

_PRUNE_CHECKED: weakref.WeakKeyDictionary[Any, dict[tuple[FeatureSpec, tuple[int, ...]], bool]] = (
    weakref.WeakKeyDictionary())
"""encoder -> {(spec, hidden-state indices): whether its pruned features equal its own} (checked once each)."""


def prune_applies(encoder: Any, batch: dict[str, torch.Tensor], spec: FeatureSpec, indices: list[int],
                  n_layers: int) -> bool:
    """Whether the pruned path runs for this encoder and spec: PRUNE_LAYERS on, the architecture allowlisted
    (`fastforward.unsupported_reason`), and - checked on the first batch, once per encoder and spec - its
    features equal to the full model's; a disagreement is logged and the full model is used."""
    if not PRUNE_LAYERS or fastforward.unsupported_reason(encoder) is not None:
        return False
    checked = _PRUNE_CHECKED.setdefault(encoder, {})
    key = (spec, tuple(indices))
    if key not in checked:
        checked[key] = fastforward.agreement(
            fast=lambda: forward_features(encoder, batch, spec, indices, n_layers, prune=True),
            own=lambda: forward_features(encoder, batch, spec, indices, n_layers, prune=False),
            model=encoder, what="embed's pruned layers")
    return checked[key]


def forward_features(encoder: Any, batch: dict[str, torch.Tensor], spec: FeatureSpec, indices: list[int],
                     n_layers: int, prune: bool = False) -> torch.Tensor:
    """One batch through the encoder -> pooled, combined (and optionally normalised) fp32 features.

    Without `prune`, the model's own forward and its `output_hidden_states`. With `prune` (allowlisted models
    only, see `prune_applies`), the encoder runs up to the highest requested layer, or one below it for `cls`,
    whose [CLS] output `fastforward.cls_output` then computes alone."""
    top = max(indices)
    fast_cls = prune and spec.pool == "cls" and top >= 1
    run = (top - 1 if fast_cls else top) if prune else n_layers
    need_hidden = not prune or any(i < run for i in indices)  # a pruned run of 0 layers records no hidden states
    with fastforward.first_layers(encoder, run) if prune else contextlib.nullcontext():
        output = encoder(**batch, output_hidden_states=need_hidden, return_dict=True)
    mask = batch["attention_mask"]
    pooled = []
    for i in indices:
        below = run if fast_cls and i == top else i  # the [CLS]-only top layer reads the output of `run` layers
        state = output.last_hidden_state if prune and below == run else output.hidden_states[below]
        if fast_cls and i == top:
            block = fastforward.layer_block(fastforward.encoder_layers(encoder)[top - 1])
            pooled.append(fastforward.cls_output(block, state, mask).float())
        else:
            pooled.append(pool_tokens(state, mask, spec.pool))
    return combine_pooled(pooled, spec)


def combine_pooled(pooled: list[torch.Tensor], spec: FeatureSpec) -> torch.Tensor:
    """Per-layer (batch, dim) features -> one row per input: concatenated, stacked (`all`), averaged or summed,
    then L2-normalised if asked."""
    if len(pooled) == 1:
        features = pooled[0]
    elif spec.combine == "mean":
        features = torch.stack(pooled, dim=1).mean(dim=1)
    elif spec.combine == "sum":
        features = torch.stack(pooled, dim=1).sum(dim=1)
    elif spec.layers is None:
        features = torch.stack(pooled, dim=1)
    else:
        features = torch.cat(pooled, dim=-1)
    if spec.normalize:
        features = torch.nn.functional.normalize(features, p=2.0, dim=-1)
    return features


# ---------------------------------------------------------------- extraction


@dataclass
class EncodeStats:
    rows: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    n_truncated: int = 0
    seconds: float = 0.0
    windows: int = 0
    """Model inputs run: one per row, or more for texts read in overlapping windows (`--long-text chunk`)."""


@dataclass(frozen=True)
class LongText:
    """How texts longer than --max-length are read (see `bertkit.encoding.longtext`): cut (`truncation` says which tokens
    stay) or, with `mode="chunk"`, overlapping windows sharing `stride` tokens, whose features are averaged."""

    truncation: str = "head"
    mode: str = "cut"
    stride: int | None = None

    @classmethod
    def of(cls, cfg: Any) -> LongText:
        """The settings of a config with --truncation (and --long-text/--stride where the command has them)."""
        return cls(getattr(cfg, "truncation", "head"), getattr(cfg, "long_text", "cut"), getattr(cfg, "stride", None))


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


def encode_features(encoder: Any, tokenizer: Any, dataset: TextDataset, spec: FeatureSpec, *, max_length: int,
                    batch_size: int | None, device: torch.device, dtype: torch.dtype, bar: Any = None,
                    long_text: LongText | None = None) -> tuple[np.ndarray, EncodeStats]:
    """Features for every row of `dataset` (input order) and what it took (`infer.run_batches` does the loop).

    Over-long texts are cut as `long_text.truncation` says, or read as windows whose features are averaged per
    text (`long_text.mode == "chunk"`); a `bar` then counts windows (see `count_windows`)."""
    start = time.perf_counter()
    n_layers, hidden = encoder_shape(encoder)
    indices = spec.resolve(n_layers)
    long_text = long_text or LongText()
    windows = longtext.encode_for(tokenizer, dataset, max_length, truncation=long_text.truncation,
                                  long_text=long_text.mode, stride=long_text.stride)
    encoded: Encoded = windows.encoded
    count_windows(bar, windows)
    batches = infer.plan_batches(encoded.lengths, batch_size, infer.auto_token_budget(encoder, device))
    padded, prune = 0, None

    def features_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        nonlocal padded, prune
        padded += int(batch["input_ids"].numel())
        if prune is None:
            prune = prune_applies(encoder, batch, spec, indices, n_layers)
        return forward_features(encoder, batch, spec, indices, n_layers, prune)

    outputs = infer.run_batches(features_of, encoded, batches, model=encoder, pad_id=infer.pad_id_of(tokenizer),
                                device=device, dtype=dtype, bar=bar)
    per_window = infer.in_input_order(batches, outputs, spec.row_shape(n_layers, hidden))
    features = pooled_over_windows(windows, per_window, spec.normalize)
    stats = EncodeStats(len(dataset), int(encoded.lengths.sum()), padded, encoded.n_truncated,
                        time.perf_counter() - start, len(windows.owner))
    return features, stats


def extract_features(encoder: Any, tokenizer: Any, dataset: TextDataset, *, pool: str = "cls", layers: str = "-1",
                     combine: str = "concat", max_length: int = 128, batch_size: int | str = 64,
                     dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                     normalize: bool = False, progress: bool = False, truncation: str = "head",
                     long_text: str = "cut", stride: int | None = None) -> np.ndarray:
    """Pooled features of every row, in the dataset's order: (n, dim), or (n, layers, dim) for layers="all".

    `batch_size` is rows per batch or "auto" (a padded-token budget from the model size). Texts longer than
    `max_length` are cut (`truncation`: head, tail, head+tail), or with `long_text="chunk"` read in overlapping
    windows sharing `stride` tokens whose features are averaged (one row per text either way).
    """
    spec = FeatureSpec.from_options(pool, layers, combine, normalize)
    device = torch.device(device) if device is not None else next(encoder.parameters()).device
    rows = None if str(batch_size) == "auto" else int(batch_size)
    with infer.closing(infer.progress_bar(len(dataset), "embed", progress, unit_of(long_text))) as bar:
        features, _ = encode_features(encoder, tokenizer, dataset, spec, max_length=max_length, batch_size=rows,
                                      device=device, dtype=dtype, bar=bar,
                                      long_text=LongText(truncation, long_text, stride))
    return features


def unit_of(long_text: str) -> str:
    """What a progress bar counts: rows, or windows when texts are read in windows."""
    return "windows" if long_text == "chunk" else "rows"


def extract_pooled(encoder: Any, tokenizer: Any, dataset: TextDataset, *, pools: Sequence[str], layers: Sequence[int],
                   max_length: int, batch_size: int | None, dtype: torch.dtype, normalize: bool = False,
                   progress: bool = False, long_text: LongText | None = None) -> dict[str, np.ndarray]:
    """{pool: (n, len(layers), d)} from ONE forward pass per batch (`layers` are hidden-state indices,
    0 = embeddings). Pooling is `pool_tokens`, so each slice equals `extract_features` with that pool and layer:
    comparing cls and mean costs one extraction, not two (`bertkit probe`). Over-long texts as `long_text` says
    (windows are averaged per text, as in `encode_features`)."""
    device = next(encoder.parameters()).device
    long_text = long_text or LongText()
    windows = longtext.encode_for(tokenizer, dataset, max_length, truncation=long_text.truncation,
                                  long_text=long_text.mode, stride=long_text.stride)
    batches = infer.plan_batches(windows.encoded.lengths, batch_size, infer.auto_token_budget(encoder, device))

    def pooled_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(batch, pools, layers, d)"""
        hidden = encoder(**batch, output_hidden_states=True, return_dict=True).hidden_states
        stacked = torch.stack([torch.stack([pool_tokens(hidden[i], batch["attention_mask"], pool) for i in layers], 1)
                               for pool in pools], 1)
        return torch.nn.functional.normalize(stacked, p=2.0, dim=-1) if normalize else stacked

    with infer.closing(infer.progress_bar(len(dataset), "features", progress, unit_of(long_text.mode))) as bar:
        count_windows(bar, windows)
        outputs = infer.run_batches(pooled_of, windows.encoded, batches, model=encoder,
                                    pad_id=infer.pad_id_of(tokenizer), device=device, dtype=dtype, bar=bar)
    hidden_size = encoder_shape(encoder)[1]
    per_window = infer.in_input_order(batches, outputs, (len(pools), len(layers), hidden_size))
    stacked = pooled_over_windows(windows, per_window, normalize)
    return {pool: np.ascontiguousarray(stacked[:, p]) for p, pool in enumerate(pools)}


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
    from bertkit.data.dataset import _load_named, load_dataset_split

    def load(source: str, first: bool) -> TextDataset:
        loader = (lambda need: load_dataset_split(cfg, source, need_labels=need)) if first else (
            lambda need: _load_named(cfg, source, need))
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


def store_identity(cfg: EmbedConfig, split: str, ds: TextDataset, revision: str, dtype: torch.dtype) -> dict[str, Any]:
    """The settings that change a store's content; a re-run must match them to resume or to count as done.

    The data is identified by its fingerprint (content hash), not its path, so `./x.tsv` and `/abs/x.tsv` match.
    """
    return {
        "model": cfg.model, "revision": revision, "pool": cfg.pool, "layers": str(cfg.layers),
        "combine": cfg.combine, "max_length": cfg.max_length, "normalize": cfg.normalize,
        "dtype": modeling.dtype_name(dtype), "store_dtype": cfg.store_dtype, "split": split,
        "data_fingerprint": ds.fingerprint, "rows": len(ds), "limit": cfg.limit,
        "text_column": cfg.text_column, "text_pair_column": cfg.text_pair_column,
        "label_column": cfg.label_column, "shard_size": cfg.shard_size,
        "truncation": cfg.truncation, "long_text": cfg.long_text, "stride": cfg.stride,
    }


def embed_to_store(cfg: EmbedConfig, progress: bool = True) -> dict[str, Any]:
    """Run `bertkit embed`: every split to its store under cfg.out; returns a summary (see `SplitResult`)."""
    from pathlib import Path

    from bertkit.features import store
    from bertkit.io import ownership, rundir

    device = modeling.choose_device(cfg.device)
    with process_state(device) as dist:
        if device.type == "cuda" and dist.num_processes > 1:
            device = dist.device  # this process's GPU
        dtype = modeling.choose_dtype(cfg.precision, device)
        root = Path(cfg.out or "").expanduser()
        rundir.inspect_run_dir(root, "embed", overwrite=cfg.overwrite,  # read-only: refusals end every rank here
                               inputs=ownership.input_paths(cfg))
        named, label_map = load_embed_data(cfg)
        split_layout = len(named) > 1
        tokenizer = modeling.load_tokenizer(cfg.model, cfg.trust_remote_code)
        model_config = modeling.load_config(cfg.model, cfg.trust_remote_code)
        modeling.check_max_length(cfg.max_length, tokenizer, model_config, cfg.model,
                                  pair=cfg.text_pair_column is not None)
        encoder = modeling.load_encoder(cfg.model, cfg.trust_remote_code).to(device)
        spec = FeatureSpec.from_options(cfg.pool, cfg.layers, cfg.combine, cfg.normalize)
        n_layers, hidden = encoder_shape(encoder)
        spec.resolve(n_layers)
        revision = modeling.model_revision(cfg.model)
        common = _manifest_common(cfg, tokenizer, encoder, spec, revision, dtype, label_map)
        identities = {split: store_identity(cfg, split, ds, revision, dtype) for split, ds in named}
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
        return _summary(cfg, root, results, dtype, device, dist)


def _manifest_common(cfg: EmbedConfig, tokenizer: Any, encoder: Any, spec: FeatureSpec, revision: str,
                     dtype: torch.dtype, label_map: LabelMap | None) -> dict[str, Any]:
    """What every split's manifest records about the model and the features."""
    from bertkit import __version__
    from bertkit.io.trail import package_versions

    n_layers, hidden = encoder_shape(encoder)
    return {
        "bertkit_version": __version__, "model": cfg.model, "revision": revision,
        "tokenizer": getattr(tokenizer, "name_or_path", cfg.model), "tokenizer_class": type(tokenizer).__name__,
        "architecture": type(encoder).__name__, "n_layers": n_layers, "hidden_size": hidden,
        "pool": cfg.pool, "layers": str(cfg.layers), "combine": cfg.combine, "layer_indices": spec.resolve(n_layers),
        "layer_names": spec.layer_names(n_layers), "max_length": cfg.max_length, "normalize": cfg.normalize,
        "truncation": cfg.truncation, "long_text": cfg.long_text, "stride": cfg.stride,
        "dtype": modeling.dtype_name(dtype), "label_map": label_map.to_json() if label_map else None,
        "versions": {k: v for k, v in package_versions().items() if k in ("bertkit", "torch", "transformers")},
    }


def _claim_store_dir(cfg: EmbedConfig, dist: Any, root: Any, identities: dict[str, dict[str, Any]],
                     split_layout: bool) -> Any:
    """Rank 0 claims --out (everything is validated by now); every rank gets the directory to write into."""
    from bertkit.features import store
    from bertkit.io import rundir

    run = rundir.claim_run_dir(root, "embed", overwrite=cfg.overwrite, compare=lambda path: store.run_differences(
        path, identities, split_layout)) if dist.is_main_process else None
    dist.wait_for_everyone()
    return run or rundir.RunDir(root, "embed", cfg.overwrite, path=rundir.write_path(root, cfg.overwrite))


def _embed_split(cfg: EmbedConfig, dist: Any, writer: Any, split: str, ds: TextDataset, encoder: Any,
                 tokenizer: Any, spec: FeatureSpec, device: torch.device, dtype: torch.dtype,
                 label_map: LabelMap | None, common: dict[str, Any], progress: bool) -> SplitResult:
    """Encode the missing shards of one split (this rank's share) and, on rank 0, finalize the store."""
    from bertkit.features import store

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
                                              unit_of(cfg.long_text))) as bar:
            for k in mine:
                start, end = writer.ranges[k]
                features, stats = encode_features(encoder, tokenizer, ds.subset(range(start, end)), spec,
                                                  max_length=cfg.max_length, batch_size=cfg.rows_per_batch,
                                                  device=device, dtype=dtype, bar=bar, long_text=LongText.of(cfg))
                writer.write_shard(k, features, {"tokens": stats.tokens, "padded_tokens": stats.padded_tokens,
                                                 "n_truncated": stats.n_truncated, "windows": stats.windows})
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
    final = store.open(writer.path)
    result.tokens_total = int(final.manifest.get("tokens", 0))
    result.n_truncated = int(final.manifest.get("n_truncated", 0))
    result.windows = int(final.manifest.get("windows") or len(ds))
    result.size_bytes = store.store_size_bytes(writer.path)
    result.seconds = time.perf_counter() - started
    return result


def _summary(cfg: EmbedConfig, root: Any, results: list[SplitResult], dtype: torch.dtype, device: torch.device,
             dist: Any) -> dict[str, Any]:
    rows = sum(r.rows_encoded for r in results)
    tokens = sum(r.tokens_encoded for r in results)
    seconds = sum(r.seconds for r in results)
    return {
        "out": str(root), "model": cfg.model, "device": str(device), "dtype": modeling.dtype_name(dtype),
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
