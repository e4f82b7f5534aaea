"""Tagging models (token classification: one tag per word): `TokenClassifier`, the module fine-tuning trains and
inference runs (per-piece logits from the model's own forward), and a saved tagger read back (`load_tagger`: the
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
from bertkit.models import infer, loading, metadata, quantize
from bertkit.models.compute import Compute

NOT_FAST = "a token classifier reads every position (the [CLS]-only last layer is for sentence heads)"
"""Why the fast forward does not run a tagger: training logs it, metrics.json records `forward: transformers`."""


class TokenClassifier(nn.Module):
    """A transformers token classifier whose forward returns per-piece logits (batch, pieces, tags), by the model's
    own forward. In eval mode the logits are padded with zeros (or cut) to `width` pieces when it is set, so the
    outputs of batches of different widths stack (`infer.run_batches` then `restore_order`); the positions past a
    row's length are never read. The wrapped model's weights are the parameters trained and saved."""

    fast = False
    unsupported = NOT_FAST
    layer = None

    def __init__(self, model: Any, width: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.width = width
        self.train(model.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        if attention_mask is not None:
            extra["attention_mask"] = attention_mask
        logits = self.model(input_ids=input_ids, **extra).logits
        if self.training or self.width is None or logits.shape[1] == self.width:
            return logits
        if logits.shape[1] > self.width:
            return logits[:, : self.width]
        return nn.functional.pad(logits, (0, 0, 0, self.width - logits.shape[1]))


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
        raise UserError(f"{model_dir} is not a tagging model: its {metadata.MODEL_INFO} records no task `tags`. Valid: "
                        f"the best/ or final/ folder of `bertkit finetune` on tagged data. Pass such a folder.")
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
    net = TokenClassifier(tagger.model, width=int(lengths.max())).eval()
    batches = sorted_batches(lengths, batch_size)
    compute = tagger.compute
    outputs = infer.run_batches(lambda batch: net(**batch), encoded, batches, model=tagger.model,
                                pad_id=infer.pad_id_of(tagger.tokenizer), device=compute.torch_device,
                                dtype=compute.dtype)
    return restore_order(batches, outputs), windows

