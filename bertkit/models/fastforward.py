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
from typing import Any

import torch
from torch import nn

from bertkit.models.inputs import accepted_inputs
from bertkit.models.layers import (
    Block,
    LayerFn,
    block_forward,
    cls_output,
    compiled_layer,
    dropout,
    layer_block,
)
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
COMPILE_INFERENCE_LAYERS = False
"""Inference on a GPU (`hidden_states` without a `layer`) runs each layer through `compiled_layer()`: off by default
(the compile costs tens of seconds a process, more than most embedding runs save); benchmarks/gpu.py measures it."""
TOLERANCE = 1e-4
"""Largest difference between the fast path and the model's own forward, relative to the largest output (or 1)."""


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


def given_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 token_type_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """A model's keyword inputs, the None ones left out (no mask: nothing padded; no types: all zero)."""
    batch = {"input_ids": input_ids}
    if attention_mask is not None:
        batch["attention_mask"] = attention_mask
    if token_type_ids is not None:
        batch["token_type_ids"] = token_type_ids
    return batch


def model_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The model's own forward's logits (the inputs it was given only: None ones are left out)."""
    return model(**given_inputs(input_ids, attention_mask, token_type_ids)).logits


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
        return model_logits(self.model, input_ids, attention_mask, token_type_ids)

    def fast_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    token_type_ids: torch.Tensor | None = None, own_layers: bool | None = None) -> torch.Tensor:
        assert self.top is not None
        training = self.model.training  # the wrapped model's mode decides, as in its own forward
        batch = given_inputs(input_ids, attention_mask, token_type_ids)
        own = own_layers_for(input_ids.device) if own_layers is None else own_layers
        cls = last_layer_cls(self.model, self.top, batch, training, own_layers=own, layer=self.layer)
        if self.kind == "BertForSequenceClassification":
            pooled = self.model.bert.pooler.activation(self.model.bert.pooler.dense(cls))
        else:
            pooled = torch.relu(self.model.pre_classifier(cls))
        return self.model.classifier(dropout(pooled, self.model.dropout.p, training))
