"""The [CLS]-only last layer: for allowlisted BERT and DistilBERT models, the same result for less work.

A sequence classifier (and `embed --pool cls`) reads one vector of the last layer it runs: the output at
position 0 ([CLS]). The `transformers` forward computes that layer for every token anyway. Here the model's own
code runs its embeddings and every layer but the last (see `first_layers`); the last layer then computes keys
and values for all tokens (position 0 attends to them) but its query, attention output and feed-forward block
for position 0 only. That is the same arithmetic for the logits - and so for the gradients - with about
(12 - 2) / 12 of one layer's matrix products skipped. In training on a CPU, that layer's dropout masks come from
`torch.rand` (one uniform per element) instead of `bernoulli_`, which is cheaper there; the masks follow the same
distribution (keep with 1 - p, scale by 1 / (1 - p)) and the global RNG, so seeding and checkpointed RNG states
still make runs reproducible.

Which models may take this path is decided in ONE place, `unsupported_reason`: an allowlist of architectures
(`ALLOWLIST`) whose layer layout this module knows, plus configuration checks. `SequenceClassifier` (finetune,
predict, evaluate, distill) and `embed` (layer pruning and the [CLS]-only top layer) both ask it, and both check
themselves once against the model's own forward (`agreement`), falling back to it with a logged warning if the
two disagree. The wrapped model is untouched: its weights are the parameters being trained and it is what
`save_pretrained` writes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from bertkit.models.inputs import accepted_inputs
from bertkit.models.quantize import int8_in_float

log = logging.getLogger(__name__)

ALLOWLIST = {
    "BertModel": "bert", "BertForSequenceClassification": "bert",
    "DistilBertModel": "distilbert", "DistilBertForSequenceClassification": "distilbert",
}
"""Architecture (class name, from `transformers` itself) -> family: the models whose layers `layer_block` reads
and whose encoder output is the last layer's output (no final LayerNorm, unlike MegatronBERT)."""
SUPPORTED = tuple(ALLOWLIST)
CLASSIFIERS = ("BertForSequenceClassification", "DistilBertForSequenceClassification")
GPU_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
"""SDPA kernels bertkit's own layers use on a GPU: not cuDNN's, which builds an execution plan for every new
(batch, length) shape - about a second per shape measured on an H200 with torch 2.11 - and BERT batches come in many
lengths."""
LEAN_GPU_LAYERS = True
"""On a GPU: one matrix product for queries, keys and values, and under bf16 autocast a bf16 residual stream
(LayerNorm reads and writes bf16, statistics in fp32). Autocast alone keeps it fp32: four casts per layer and twice
the bytes in each elementwise op and its backward. False: layers as autocast runs them (the benchmark's "before")."""
COMPILE_INFERENCE_LAYERS = False
"""Inference on a GPU (`hidden_states` without a `layer`) runs each layer through `compiled_layer()`: off by default
(the compile costs tens of seconds a process, more than most embedding runs save); benchmarks/gpu.py measures it."""
TOLERANCE = 1e-4
"""Largest difference between the fast path and the model's own forward, relative to the largest output (or 1)."""


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


def unsupported_reason(model: Any) -> str | None:
    """Why the fast path cannot run this model (None when it can): the one allowlist for every command."""
    kind = type(model)
    if kind.__name__ not in ALLOWLIST or not kind.__module__.startswith("transformers.models."):
        return f"{kind.__name__} is not one of {', '.join(SUPPORTED)}"
    config = model.config
    if ALLOWLIST[kind.__name__] == "bert":
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            return "BERT configured as a decoder"
        if getattr(config, "position_embedding_type", "absolute") != "absolute":
            return f"position_embedding_type={config.position_embedding_type}"
        if kind.__name__ == "BertForSequenceClassification" and model.bert.pooler is None:
            return "BERT without a pooler"
    if any(layer_block(layer) is None for layer in encoder_layers(model)):
        return "a layer of an unknown type"
    return None


def base_model(model: Any) -> Any:
    """The encoder inside an allowlisted model (BertModel / DistilBertModel; a base model is its own)."""
    for name in ("bert", "distilbert"):
        inner = getattr(model, name, None)
        if isinstance(inner, nn.Module):
            return inner
    return model


def layer_owner(model: Any) -> Any:
    """The module holding the allowlisted model's `layer` ModuleList (BERT: .encoder, DistilBERT: .transformer)."""
    base = base_model(model)
    return base.encoder if ALLOWLIST[type(model).__name__] == "bert" else base.transformer


def encoder_layers(model: Any) -> list[Any]:
    return list(layer_owner(model).layer)


@contextlib.contextmanager
def first_layers(model: Any, keep: int | None) -> Iterator[None]:
    """Run an allowlisted model with only its first `keep` layers (None: all of them): its own embeddings, masks
    and layers, its output then being layer `keep`'s. BERT's pooler is skipped meanwhile (it would read that
    lower layer)."""
    owner = layer_owner(model) if keep is not None else None
    if owner is None or keep == len(owner.layer):
        yield
        return
    _install_output_hooks(model)
    base, full = base_model(model), owner.layer
    pooler = getattr(base, "pooler", None)
    owner.layer = nn.ModuleList(list(full)[:keep])
    if pooler is not None:
        base.pooler = None
    try:
        yield
    finally:
        owner.layer = full
        if pooler is not None:
            base.pooler = pooler


def _install_output_hooks(model: Any) -> None:
    """transformers 5 records `output_hidden_states` through hooks it installs on the layers present the first
    time they are asked for; installed while some layers are swapped out, they would never record those layers.
    So they go on the whole model first."""
    try:
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:  # a transformers that returns hidden states without hooks
        return
    maybe_install_capturing_hooks(model)


def last_layer_cls(model: Any, block: Block, batch: dict[str, torch.Tensor], training: bool,
                   own_layers: bool = False, layer: LayerFn | None = None) -> torch.Tensor:
    """The last layer's output at position 0, (batch, hidden): the lower layers (the model's own forward, or with
    `own_layers` this module's `hidden_states`, each layer run by `layer`), then the last layer (`block`) for
    position 0 only (keys and values from every token)."""
    below = len(layer_owner(model).layer) - 1
    if own_layers:
        hidden = hidden_states(model, batch, below, training, layer=layer)[below]
    else:
        with first_layers(model, below):
            hidden = base_model(model)(**batch).last_hidden_state
    return cls_output(block, hidden, batch.get("attention_mask"), training)


def own_layers_for(device: torch.device) -> bool:
    """Whether the layers run through `hidden_states` (this module's code) rather than the model's own forward: on
    a GPU, where the model's forward costs a host synchronisation per call (its mask check) and a CUDA graph cannot
    hold one. On the CPU the model's own forward stays, as measured there."""
    return device.type == "cuda"


def blocks_of(model: Any) -> list[Block]:
    """Every layer's parts, bottom first (read afresh: quantizing or pruning a model swaps its modules)."""
    return [layer_block(layer) for layer in encoder_layers(model)]


def hidden_states(model: Any, batch: dict[str, torch.Tensor], upto: int, training: bool,
                  keep: Iterable[int] = (), layer: LayerFn | None = None) -> dict[int, torch.Tensor]:
    """The allowlisted model's hidden states by index (0: embeddings output, i: layer i's output) for `upto` and
    every index in `keep`, computed by the model's own embeddings and then `layer` per layer (None: `block_forward`,
    or in inference on a GPU with `COMPILE_INFERENCE_LAYERS` its compiled form).

    A batch without "attention_mask" (or with None) has no padding: attention then runs unmasked, which lets SDPA
    pick its flash kernel. Nothing here reads a tensor back to the host, so a CUDA graph can capture it."""
    base = base_model(model)
    ids, types = batch["input_ids"], batch.get("token_type_ids")
    hidden = base.embeddings(input_ids=ids, token_type_ids=types) if types is not None else base.embeddings(ids)
    mask = batch.get("attention_mask")
    keep_key = None if mask is None else mask[:, None, None, :].bool()
    wanted = set(keep) | {upto}
    states = {0: hidden} if 0 in wanted else {}
    if layer is None:
        compiled = COMPILE_INFERENCE_LAYERS and not training and ids.device.type == "cuda"
        layer = compiled_layer() if compiled else block_forward
    for i, block in enumerate(blocks_of(model)[:upto], start=1):
        hidden = layer(block, hidden, keep_key, training)
        if i in wanted:
            states[i] = hidden
    return states


def relative_difference(fast: torch.Tensor, own: torch.Tensor) -> float:
    """max |fast - own|, relative to the largest |own| (or 1, whichever is larger)."""
    fast, own = fast.detach().float(), own.detach().float()
    return float((fast - own).abs().max() / own.abs().max().clamp(min=1.0)) if own.numel() else 0.0


def agreement(fast: Callable[[], torch.Tensor], own: Callable[[], torch.Tensor], model: Any, what: str) -> bool:
    """Whether `fast()` equals `own()` (the model's own computation) within `TOLERANCE`, both run once in eval
    mode without autocast (the model's mode is restored after). A disagreement is logged as a warning naming
    `what`; the caller then uses the model's own forward.

    A dynamically quantized int8 model (`quantize.quantized_int8`) is checked in fp32 arithmetic on its int8 weights
    (`quantize.int8_in_float`), at `TOLERANCE`. Run in int8, its linear layers quantize each input tensor with a
    scale from that tensor's own range, so the [CLS]-only last layer (inputs [B, 1, H]) and the model's own
    ([B, T, H]) round differently: two int8 approximations of one fp32 function, neither more right. Measured on
    the check batch they differ by 0.016 (MiniLM-L6, real weights) and 0.007 (BERT-base/DistilBERT-base shapes,
    random init), each being 0.01-0.10 from the fp32 model: the fast path is no further from fp32 than the model's
    own int8 forward. No tolerance separates that rounding from a layout mistake on every model (with small logits,
    a doubled [CLS] vector moves them by less than 0.1), so the check compares the arithmetic, not the rounding.
    For the same reason bf16/fp16 weights are checked widened to fp32 (`float_weights`): two bf16 computations of
    BERT-base part by about 2% of the largest output through 12 layers, rounding alone."""
    device = next(model.parameters()).device
    training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.autocast(device.type, enabled=False), int8_in_float(model), float_weights(model):
            reference = own()  # first: whatever the model sets up on its first call, it sets up whole
            difference = relative_difference(fast(), reference)
    finally:
        model.train(training)
    if difference <= TOLERANCE:
        return True
    log.warning("The fast path for %s (%s) differs from the model's own forward by %.3g (relative); using the "
                "model's own forward.", what, type(model).__name__, difference)
    return False


@contextlib.contextmanager
def float_weights(model: Any) -> Iterator[None]:
    """A model with bf16/fp16 weights computes in fp32 meanwhile (widening is exact, so is the narrowing back)."""
    dtype = next(model.parameters()).dtype
    if dtype not in (torch.bfloat16, torch.float16):
        yield
        return
    model.float()
    try:
        yield
    finally:
        model.to(dtype)


def check_batch(model: Any) -> dict[str, torch.Tensor]:
    """A fixed two-row batch (one row padded) of the inputs `model` takes: what the wrap-time self-check runs.
    Made without the global RNG, so checking leaves seeded runs as they were."""
    config, device = model.config, next(model.parameters()).device
    ids = (torch.arange(24, device=device).view(2, 12) * 7 + 5) % config.vocab_size
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = getattr(config, "pad_token_id", None) or 0
    batch = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in accepted_inputs(model):
        second = min(1, int(getattr(config, "type_vocab_size", 2)) - 1)
        batch["token_type_ids"] = (torch.arange(12, device=device) >= 6).long().expand(2, 12) * mask * second
    return batch


class SequenceClassifier(nn.Module):
    """A `transformers` sequence classifier whose forward returns logits, by the fast path where it applies
    (allowlisted, and equal to the model's own logits on a check batch at wrap time)."""

    def __init__(self, model: Any, fast: bool = True) -> None:
        super().__init__()
        self.model = model
        self.train(model.training)
        self.kind = type(model).__name__
        self.unsupported = unsupported_reason(model)
        """Why the fast path does not run this model (None when it does)."""
        if self.unsupported is None and self.kind not in CLASSIFIERS:
            self.unsupported = f"{self.kind} is not a sequence classifier"
        self.fast = fast and self.unsupported is None
        self.layer: LayerFn | None = None
        """What runs each layer below the top on the own-layers path (None: `block_forward`)."""
        self.top = layer_block(encoder_layers(model)[-1]) if self.fast else None
        if self.fast:
            self.fast = self._agrees(check_batch(model))
            self.unsupported = None if self.fast else "its logits differed from the model's own on the check batch"

    def compile_layers(self) -> bool:
        """From now on the layers below the top run through `compiled_layer()` wherever this module runs its own
        layers (`own_layers_for`: a GPU); False, and nothing changes, where the fast path does not run."""
        if not self.fast:
            return False
        self.layer = compiled_layer()
        return True

    def _agrees(self, batch: dict[str, torch.Tensor]) -> bool:
        """The fast path equals the model's own logits on the check batch, with the model's lower layers and with
        this module's own (`own_layers_for`), and unmasked on the batch's unpadded first row."""
        unpadded = {k: v[:1] for k, v in batch.items() if k != "attention_mask"}
        return all(agreement(fast, own, self.model, "the [CLS]-only last layer") for fast, own in (
            (lambda: self.fast_logits(**batch, own_layers=False), lambda: self.own_logits(**batch)),
            (lambda: self.fast_logits(**batch, own_layers=True), lambda: self.own_logits(**batch)),
            (lambda: self.fast_logits(**unpadded, own_layers=True), lambda: self.own_logits(**unpadded))))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits; `attention_mask` None means no row is padded (the fast path then attends unmasked)."""
        if self.fast:
            return self.fast_logits(input_ids, attention_mask, token_type_ids)
        return self.own_logits(input_ids, attention_mask, token_type_ids)

    def own_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        if attention_mask is not None:
            extra["attention_mask"] = attention_mask
        return self.model(input_ids=input_ids, **extra).logits

    def fast_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    token_type_ids: torch.Tensor | None = None, own_layers: bool | None = None) -> torch.Tensor:
        assert self.top is not None
        training = self.model.training  # the wrapped model's mode decides, as in its own forward
        batch = {"input_ids": input_ids}
        if attention_mask is not None:
            batch["attention_mask"] = attention_mask
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        own = own_layers_for(input_ids.device) if own_layers is None else own_layers
        cls = last_layer_cls(self.model, self.top, batch, training, own_layers=own, layer=self.layer)
        if self.kind == "BertForSequenceClassification":
            pooled = self.model.bert.pooler.activation(self.model.bert.pooler.dense(cls))
        else:
            pooled = torch.relu(self.model.pre_classifier(cls))
        return self.model.classifier(dropout(pooled, self.model.dropout.p, training))


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
