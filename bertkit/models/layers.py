"""One transformer layer's arithmetic, the same for BERT and DistilBERT (`layer_block` reads a layer's parts into a
`Block`): `block_forward` runs it whole, or for position 0 alone ([CLS]: `cls_output`), eagerly or compiled
(`compiled_layer`). On a GPU the layers run lean (`LEAN_GPU_LAYERS`) and attention takes SDPA's kernels in the order
`GPU_ATTENTION` gives; on a CPU they run as measured there (dropout masks from `torch.rand`, attention dropout on
explicit scores). `bertkit.models.fastforward` decides which models and paths use them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

GPU_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
"""SDPA kernels bertkit's own layers use on a GPU: not cuDNN's, which builds an execution plan for every new
(batch, length) shape - about a second per shape measured on an H200 with torch 2.11 - and BERT batches come in many
lengths."""
LEAN_GPU_LAYERS = True
"""On a GPU: one matrix product for queries, keys and values, and under bf16 autocast a bf16 residual stream
(LayerNorm reads and writes bf16, statistics in fp32). Autocast alone keeps it fp32: four casts per layer and twice
the bytes in each elementwise op and its backward. False: layers as autocast runs them (the benchmark's "before")."""


@dataclass(frozen=True)
class Block:
    """One transformer layer's parts, named the same for BERT and DistilBERT."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    attention_dropout: float
    attention_out: nn.Linear
    attention_out_dropout: float
    attention_norm: nn.LayerNorm
    ffn_in: nn.Linear
    activation: Callable[[torch.Tensor], torch.Tensor]
    ffn_out: nn.Linear
    ffn_dropout: float
    ffn_norm: nn.LayerNorm
    heads: int


LayerFn = Callable[[Block, torch.Tensor, "torch.Tensor | None", bool], torch.Tensor]
"""One layer's forward: (its parts, the layer below's output, the kept keys or None, training) -> its output."""


def cls_output(block: Block, hidden: torch.Tensor, attention_mask: torch.Tensor | None,
               training: bool = False) -> torch.Tensor:
    """One layer's output at position 0 only, shape (batch, hidden), from the layer below's output `hidden`
    (`attention_mask` None: no padding)."""
    # (batch, 1, 1, keys): padding is never attended to
    keep_key = None if attention_mask is None else attention_mask[:, None, None, :].bool()
    return block_forward(block, hidden, keep_key, training, cls_only=True)[:, 0]


def block_forward(
    block: Block, hidden: torch.Tensor, keep_key: torch.Tensor | None, training: bool, cls_only: bool = False,
    lean: bool | None = None,
) -> torch.Tensor:
    """One transformer layer. With `cls_only`, keys and values still come from every token but the query,
    attention output and feed-forward run for position 0 alone: the result is (batch, 1, hidden). `lean` (None:
    `lean_layers` decides): one product for the projections and, under bf16 autocast, a bf16 residual stream."""
    lean = lean_layers(hidden) if lean is None else lean
    stream = _bf16_autocast(hidden) if lean else None
    if stream is not None:
        hidden = hidden.to(stream)
    queries, keys, values = _projections(block, hidden, cls_only, fused=lean)
    if cls_only:
        hidden = hidden[:, :1]
    p = block.attention_dropout if training else 0.0
    context = _merge_heads(attention(queries, keys, values, keep_key, p))
    attended = dropout(block.attention_out(context), block.attention_out_dropout, training)
    hidden = _norm(block.attention_norm, attended + hidden, stream)
    fed = dropout(block.ffn_out(block.activation(block.ffn_in(hidden))), block.ffn_dropout, training)
    return _norm(block.ffn_norm, fed + hidden, stream)


_COMPILED: dict[str, LayerFn] = {}
RECOMPILE_LIMIT = 32
"""Compiles torch may make of one function: each layer input dtype (the embeddings' fp32, then the bf16 stream) x
masked or not x training or not x static then dynamic length; torch's default (8) would silently run the rest
eagerly."""


def compiled_layer() -> LayerFn:
    """`block_forward` compiled by torch.compile (Inductor), made once per process: on a GPU, bias + GELU, dropout +
    residual + LayerNorm and their backward (LayerNorm's weight gradients, the bias-gradient reductions) become a
    few fused kernels instead of dozens. One compiled function serves every layer (the layers' parameters are its
    inputs, not constants: torch inlines built-in modules), first at the static shape it meets, then once more with
    a dynamic length (torch's automatic dynamic shapes): a run with many length buckets compiles a few times, not
    once a bucket. Nothing in it reads a value back, so a CUDA graph captures it after a warm-up call per shape."""
    if "layer" not in _COMPILED:
        import torch._dynamo.config as dynamo_config

        for name in ("recompile_limit", "cache_size_limit"):  # the name changed across torch releases
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
        _COMPILED["layer"] = torch.compile(block_forward)
    return _COMPILED["layer"]


def lean_layers(hidden: torch.Tensor) -> bool:
    """Whether `block_forward` runs lean by default: on a GPU (`LEAN_GPU_LAYERS`); a CPU keeps what it measured."""
    return LEAN_GPU_LAYERS and hidden.device.type == "cuda"


def _bf16_autocast(hidden: torch.Tensor) -> torch.dtype | None:
    """bf16 when autocast runs bf16 on `hidden`'s device, else None (fp16's range is too narrow for the stream)."""
    kind = hidden.device.type
    if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.bfloat16:
        return torch.bfloat16
    return None


def _norm(norm: nn.LayerNorm, x: torch.Tensor, stream: torch.dtype | None) -> torch.Tensor:
    """LayerNorm; with `stream`, read and written in that dtype outside autocast (which would widen it to fp32)."""
    if stream is None:
        return norm(x)
    with torch.autocast(x.device.type, enabled=False):
        return F.layer_norm(x.to(stream), norm.normalized_shape, norm.weight.to(stream), norm.bias.to(stream),
                            norm.eps)


def _projections(block: Block, hidden: torch.Tensor, cls_only: bool,
                 fused: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries (position 0 alone with `cls_only`), keys and values in heads; `fused`: those reading the same rows
    as one matrix product (their weights concatenated: a small copy per call)."""
    heads = block.heads
    first = hidden[:, :1] if cls_only else hidden
    if not fused:
        return (_split_heads(block.query(first), heads), _split_heads(block.key(hidden), heads),
                _split_heads(block.value(hidden), heads))
    together = [block.key, block.value] if cls_only else [block.query, block.key, block.value]
    if not all(type(m) is nn.Linear and m.bias is not None for m in together):  # e.g. int8 layers: one by one
        return _projections(block, hidden, cls_only, fused=False)
    parts = F.linear(hidden, torch.cat([m.weight for m in together]), torch.cat([m.bias for m in together]))
    split = [_split_heads(part, heads) for part in parts.chunk(len(together), dim=-1)]
    if cls_only:
        return _split_heads(block.query(first), heads), split[0], split[1]
    return split[0], split[1], split[2]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep_key: torch.Tensor | None,
              p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) over the kept keys) v, with dropout `p` on the attention weights (`keep_key` None:
    every key is kept)."""
    if q.device.type == "cuda":
        with sdpa_kernel(GPU_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep_key, dropout_p=p)
    if p == 0.0 or q.device.type != "cpu":  # SDPA's fused kernels; its dropout is fast off the CPU
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep_key, dropout_p=p)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if keep_key is not None:
        scores = scores.masked_fill(~keep_key, torch.finfo(scores.dtype).min)
    return torch.matmul(dropout(torch.softmax(scores, dim=-1), p, True), v)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout; on a CPU the mask comes from `torch.rand` (cheaper there than `F.dropout`'s `bernoulli_`)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    # one float mask (0 or 1/(1-p)) made in place: one multiply forward, one backward
    mask = torch.rand(x.shape, device=x.device).ge_(p).mul_(1.0 / (1.0 - p))
    return x * mask.to(x.dtype)


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, length, size = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * size)


def layer_block(layer: Any) -> Block | None:
    """The parts of a BERT (`BertLayer`) or DistilBERT (`TransformerBlock`) layer; None for any other layer."""
    attention = getattr(layer, "attention", None)
    if hasattr(attention, "self") and hasattr(layer, "intermediate"):  # BertLayer
        sa = attention.self
        if getattr(sa, "is_decoder", False):
            return None
        return Block(query=sa.query, key=sa.key, value=sa.value, attention_dropout=sa.dropout.p,
                     attention_out=attention.output.dense, attention_out_dropout=attention.output.dropout.p,
                     attention_norm=attention.output.LayerNorm, ffn_in=layer.intermediate.dense,
                     activation=layer.intermediate.intermediate_act_fn, ffn_out=layer.output.dense,
                     ffn_dropout=layer.output.dropout.p, ffn_norm=layer.output.LayerNorm, heads=sa.num_attention_heads)
    if hasattr(attention, "q_lin") and hasattr(layer, "ffn"):  # DistilBERT: no dropout after the attention output
        return Block(query=attention.q_lin, key=attention.k_lin, value=attention.v_lin,
                     attention_dropout=attention.dropout.p, attention_out=attention.out_lin, attention_out_dropout=0.0,
                     attention_norm=layer.sa_layer_norm, ffn_in=layer.ffn.lin1, activation=layer.ffn.activation,
                     ffn_out=layer.ffn.lin2, ffn_dropout=layer.ffn.dropout.p, ffn_norm=layer.output_layer_norm,
                     heads=attention.n_heads)
    return None
