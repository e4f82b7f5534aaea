"""Tagging models (token classification: one tag per word): `TokenClassifier`, the module fine-tuning trains and
inference runs (per-piece logits; in training on a CPU by bertkit's own layers), and a saved tagger read back (`load_tagger`: the
folder verified, its model and tokenizer, its tags, the tag scheme and the reading of words it was trained with) and
run on sentences given as words (`window_logits`: every piece's logits in the tagger's windows, with
`bertkit.encoding.words.align_words`' map of each word to the window where it has the most context; how a word's
tag is read from its pieces is `bertkit.scoring.word_tags`'). The record itself is `bertkit.models.metadata`'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.batches import restore_order, sorted_batches
from bertkit.encoding.encode import Encoded
from bertkit.encoding.reading import Reading
from bertkit.encoding.words import align_words
from bertkit.errors import UserError
from bertkit.models import fastforward, infer, loading, metadata, quantize
from bertkit.models.compute import Compute
from bertkit.models.layers import dropout

TOKEN_CLASSIFIERS = ("BertForTokenClassification", "DistilBertForTokenClassification")
"""The token classifiers whose layers bertkit runs itself (`TokenClassifier.fast_logits`): their encoder is one of
`fastforward.ALLOWLIST`'s, their head `dropout` then `classifier` on every piece."""
NOT_FAST = ("a tagger runs its own layers on a CPU only: on a GPU it runs the model's own forward, which reads a mask "
            "value back every call (no CUDA graphs)")
"""Why a tagger's steps are not replayed as CUDA graphs: training logs it where that applies."""


def tagger_unsupported_reason(model: Any) -> str | None:
    """Why `TokenClassifier` cannot run `model`'s layers itself (None when it can): a token classifier of
    `TOKEN_CLASSIFIERS` whose encoder `fastforward.unsupported_reason` accepts."""
    kind = type(model)
    if kind.__name__ not in TOKEN_CLASSIFIERS or not kind.__module__.startswith("transformers.models."):
        return f"{kind.__name__} is not one of {', '.join(TOKEN_CLASSIFIERS)}"
    return fastforward.unsupported_reason(fastforward.base_model(model))


class TokenClassifier(nn.Module):
    """A transformers token classifier whose forward returns per-piece logits (batch, pieces, tags). In eval mode the
    logits are padded with zeros (or cut) to `width` pieces when it is set, so the outputs of batches of different
    widths stack (`infer.run_batches` then `restore_order`); the positions past a row's length are never read. The
    wrapped model's weights are the parameters trained and saved.

    In training on a CPU, for `TOKEN_CLASSIFIERS` (and unless `fast` is False), the logits come from the model's own embeddings,
    then its layers run by `bertkit.models.layers.block_forward` (`fastforward.hidden_states`), then its dropout and
    classifier: the same arithmetic as the model's own forward (checked once at wrap time, `fastforward.agreement`,
    falling back to the model's own forward if it differs), with the CPU's cheaper dropout masks (`torch.rand`
    rather than `bernoulli_`) and attention dropout on explicit scores rather than SDPA's math fallback. In eval mode
    (no dropout: nothing to gain) and on a GPU the model's own forward runs (`fast` reads False there)."""

    layer = None
    """What runs each layer on the own-layers path (None: `layers.block_forward`)."""

    def __init__(self, model: Any, width: int | None = None, fast: bool = True) -> None:
        super().__init__()
        self.model = model
        self.width = width
        self.train(model.training)
        self.unsupported = tagger_unsupported_reason(model) if fast else "--fast-forward off"
        self.own_layers = self.unsupported is None
        if self.own_layers:
            batch = fastforward.check_batch(model)
            self.own_layers = fastforward.agreement(lambda: self.fast_logits(**batch), lambda: self.own_logits(**batch),
                                                    model, "the tagger's own layers")
            self.unsupported = None if self.own_layers else "its logits differed from the model's own on the check batch"

    @property
    def fast(self) -> bool:
        """Whether the forward runs bertkit's own layers: where they apply, on a CPU (`NOT_FAST`)."""
        return self.own_layers and next(self.model.parameters()).device.type == "cpu"

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        fast = self.own_layers and self.model.training and input_ids.device.type == "cpu"
        run = self.fast_logits if fast else self.own_logits
        logits = run(input_ids, attention_mask, token_type_ids)
        if self.training or self.width is None or logits.shape[1] == self.width:
            return logits
        if logits.shape[1] > self.width:
            return logits[:, : self.width]
        return nn.functional.pad(logits, (0, 0, 0, self.width - logits.shape[1]))

    def own_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The model's own forward's logits."""
        return fastforward.model_logits(self.model, input_ids, attention_mask, token_type_ids)

    def fast_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The logits by bertkit's own layers (see the class docstring); `attention_mask` None: nothing padded."""
        training = self.model.training  # the wrapped model's mode decides, as in its own forward
        batch = fastforward.given_inputs(input_ids, attention_mask, token_type_ids)
        encoder = fastforward.base_model(self.model)
        depth = len(fastforward.encoder_layers(encoder))
        hidden = fastforward.hidden_states(encoder, batch, depth, training, layer=self.layer)[depth]
        return self.model.classifier(dropout(hidden, self.model.dropout.p, training))


@dataclass
class SavedTagger:
    """A tagging model folder loaded for inference: the model (eval mode, on `compute`), its tokenizer, its tags
    (the model's id2label order), how the tags name entities, and how it reads words."""

    path: Path
    model: Any
    tokenizer: Any
    tags: tuple[str, ...]
    scheme: TagScheme
    reading: Reading
    compute: Compute


def load_tagger(model_dir: str, compute: Compute, reading: Reading | None = None) -> SavedTagger:
    """The tagging model in `model_dir` (a `bertkit finetune` best/ or final/ on tagged data), read as its record
    says (`reading`: the command's resolution of it, --max-length given included)."""
    path = Path(model_dir).expanduser()
    if not metadata.is_tagger(path):
        raise UserError(f"{model_dir} is not a tagging model: its {metadata.MODEL_INFO} records no task `tags` (nor "
                        f"does its config.json name a token classifier). Valid: the best/ or final/ folder of `bertkit "
                        f"finetune` on tagged data, or a transformers token-classification folder. Pass such a folder.")
    metadata.warn_if_foreign(path)  # a plain transformers folder: read as its config says, said once
    model = loading.load_classifier(str(path), require_head=True, tokens=True,
                                    head_fix="Fine-tune it on tagged data with `bertkit finetune --data train.iob2 "
                                             "--dev dev.iob2` and pass its best/ folder.")
    tokenizer = loading.load_tokenizer(str(path))
    if compute.precision == loading.INT8:
        model = quantize.quantized_int8(model.to(compute.torch_device).eval(), inplace=True)
    else:
        model = loading.cast_for_inference(model, compute.torch_device, compute.dtype).eval()
    tags = tuple(str(model.config.id2label[i]) for i in range(model.config.num_labels))
    reading = reading or Reading.from_json(metadata.read_model_info(path).get("reading")) or Reading.of_words()
    return SavedTagger(path, model, tokenizer, tags, metadata.saved_tag_scheme(path), reading, compute)


def window_logits(tagger: SavedTagger, sentences: Sequence[Sequence[str]], batch_size: int) -> tuple[np.ndarray, Any]:
    """(the logits of every piece of every window (windows, positions, tags), the windows: `align_words`' map from
    each word to its window and pieces), for sentences given as words, read in the tagger's windows."""
    windows = align_words(tagger.tokenizer, sentences, tagger.reading)
    if not windows.n_words:
        return np.zeros((0, 1, len(tagger.tags)), np.float32), windows
    lengths = windows.lengths
    encoded = Encoded(windows.ids, None, lengths, lengths, tagger.reading.max_length)
    net = TokenClassifier(tagger.model, width=int(lengths.max()), fast=False).eval()  # inference: its own forward
    batches = sorted_batches(lengths, batch_size)
    compute = tagger.compute
    outputs = infer.run_batches(lambda batch: net(**batch), encoded, batches, model=tagger.model,
                                pad_id=infer.pad_id_of(tagger.tokenizer), device=compute.torch_device,
                                dtype=compute.dtype)
    return restore_order(batches, outputs), windows

