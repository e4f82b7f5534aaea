"""The one home of pooling: a batch's hidden states to one vector per sentence (`pool_tokens`: [CLS], mean or max)
or per word (`pool_word_vectors`: its first, last, first and last, or mean piece), and one batch through the encoder
to its pooled features (`forward_features`), as `Pooling` says
(`bertkit.features.settings`: [CLS]/mean/max over one layer, several layers, or all of them, combined and
optionally L2-normalised).

For the architectures `fastforward` allowlists, only the layers the features need are run, and with `--pool cls`
the highest requested layer is computed for the [CLS] position alone (keys and values still come from every
token); the first batch checks that this gives the full model's features, else the full model is used (see
`PRUNE_LAYERS`). Other architectures always run the model's own forward.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import torch

from bertkit.features.settings import Pooling, combine_layers
from bertkit.models import fastforward


def encoder_shape(encoder: Any) -> tuple[int, int]:
    """(number of encoder layers, hidden size) from the model config (BERT and DistilBERT names)."""
    config = encoder.config
    return int(config.num_hidden_layers), int(config.hidden_size)


# ---------------------------------------------------------------- pooling


def pool_tokens(hidden: torch.Tensor, mask: torch.Tensor | None, pool: str) -> torch.Tensor:
    """(batch, seq, dim) -> (batch, dim) in fp32; mean and max look only at positions where mask == 1 (a batch
    without a mask has no padding: every position)."""
    if pool == "cls":
        return hidden[:, 0].float()
    hidden = hidden.float()
    if mask is None:
        return hidden.mean(dim=1) if pool == "mean" else hidden.max(dim=1).values
    keep = mask.unsqueeze(-1).bool()
    if pool == "mean":
        summed = hidden.masked_fill(~keep, 0.0).sum(dim=1)
        return summed / keep.sum(dim=1).clamp(min=1)
    return hidden.masked_fill(~keep, float("-inf")).max(dim=1).values


def pool_word_vectors(hidden: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor,
                      word_pool: str) -> torch.Tensor:
    """(batch, seq, dim) hidden states -> (words, dim) fp32 vectors (first_last: (words, 2 * dim)), word i read
    from batch row `rows[i]`, pieces `starts[i]:ends[i]`: a word's pooling, as `pool_tokens` is a sentence's."""
    hidden = hidden.float()
    if word_pool == "first":
        return hidden[rows, starts]
    if word_pool == "last":
        return hidden[rows, ends - 1]
    if word_pool == "first_last":
        return torch.cat([hidden[rows, starts], hidden[rows, ends - 1]], dim=-1)
    # mean: prefix sums over positions, so each word's sum is one subtraction whatever its length
    sums = torch.nn.functional.pad(hidden.cumsum(dim=1), (0, 0, 1, 0))
    counts = (ends - starts).unsqueeze(-1).to(hidden.dtype)
    return (sums[rows, ends] - sums[rows, starts]) / counts


PRUNE_LAYERS = True
"""Compute only what the requested features need, for the architectures `fastforward` allowlists: layers above
the highest requested one are skipped and, with `--pool cls`, that top layer runs for the [CLS] position only.
Set False to always run the full model."""

_PRUNE_CHECKED: weakref.WeakKeyDictionary[Any, dict[tuple[Pooling, tuple[int, ...]], bool]] = (
    weakref.WeakKeyDictionary())
"""encoder -> {(spec, hidden-state indices): whether its pruned features equal its own} (checked once each)."""


def prune_applies(encoder: Any, batch: dict[str, torch.Tensor], spec: Pooling, indices: list[int],
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


def forward_features(encoder: Any, batch: dict[str, torch.Tensor], spec: Pooling, indices: list[int],
                     n_layers: int, prune: bool = False) -> torch.Tensor:
    """One batch through the encoder -> pooled, combined (and optionally normalised) fp32 features.

    Without `prune`, the model's own forward and its `output_hidden_states`. With `prune` (allowlisted models
    only, see `prune_applies`), the encoder runs up to the highest requested layer, or one below it for `cls`,
    whose [CLS] output `fastforward.cls_output` then computes alone; on a GPU those layers are bertkit's own
    (`fastforward.hidden_states`: no host read, so a CUDA graph can replay them)."""
    top = max(indices)
    fast_cls = prune and spec.pool == "cls" and top >= 1
    run = (top - 1 if fast_cls else top) if prune else n_layers
    states = _hidden_states(encoder, batch, run, [run if fast_cls and i == top else i for i in indices], prune)
    mask = batch.get("attention_mask")
    pooled = []
    for i in indices:
        if fast_cls and i == top:  # the [CLS]-only top layer reads the output of `run` layers
            block = fastforward.blocks_of(encoder)[top - 1]
            pooled.append(fastforward.cls_output(block, states[run], mask).float())
        else:
            pooled.append(pool_tokens(states[i], mask, spec.pool))
    return combine_pooled(pooled, spec)


def _hidden_states(encoder: Any, batch: dict[str, torch.Tensor], run: int, wanted: list[int],
                   prune: bool) -> dict[int, torch.Tensor]:
    """The hidden states at `wanted` indices (0 = embeddings) of a run of `run` layers (all of them unpruned)."""
    if prune and fastforward.own_layers_for(batch["input_ids"].device):
        return fastforward.hidden_states(encoder, batch, run, training=False, keep=wanted)
    need_hidden = not prune or any(i < run for i in wanted)  # a pruned run of 0 layers records no hidden states
    with fastforward.first_layers(encoder, run) if prune else contextlib.nullcontext():
        output = encoder(**batch, output_hidden_states=need_hidden, return_dict=True)
    return {i: output.last_hidden_state if prune and i == run else output.hidden_states[i] for i in wanted}


def combine_pooled(pooled: list[torch.Tensor], spec: Pooling) -> torch.Tensor:
    """Per-layer (batch, dim) features -> one row per input: combined as every feature is (`combine_layers`:
    concatenated, averaged or summed), or stacked on a layer axis (`--layers all` concatenated: a store keeps every
    layer apart), then L2-normalised if asked."""
    if len(pooled) > 1 and spec.combine == "concat" and spec.layers is None:
        features = torch.stack(pooled, dim=1)
    else:
        features = combine_layers(pooled, spec.combine)
    if spec.normalize:
        features = torch.nn.functional.normalize(features, p=2.0, dim=-1)
    return features
