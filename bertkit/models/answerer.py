"""Question-answering models (extractive: a start and an end score per token): `SpanLogits`, the module fine-tuning
trains and inference runs (the model's own forward, its two scores stacked as one tensor), and a saved model read
back (`load_answerer`: the folder verified, its model and tokenizer, how it reads questions and passages and what its
record says of unanswerable questions) and run on windows of questions (`answer_logits`: each window's start and end
scores, cut to its length, as `bertkit.scoring.answers` reads them). The record itself is
`bertkit.models.metadata`'s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.encoding.qa_windows import QAReading, QAWindows, inference_batches, window_rows
from bertkit.models import infer, loading, metadata, quantize
from bertkit.models.compute import Compute

NOT_FAST = "a question-answering model runs its own transformers forward (start and end scores on every token)"
"""Why its steps run eagerly (no bertkit layers, no CUDA graphs): training's summary records `forward`."""


class SpanLogits(nn.Module):
    """A transformers question-answering model whose forward returns its start and end logits stacked, (batch,
    tokens, 2). In eval mode they are padded with zeros (or cut) to `width` tokens when it is set, so the outputs of
    batches of different widths stack (`infer.run_batches` then `restore_order`); the positions past a window's
    length are never read. The wrapped model's weights are the parameters trained and saved."""

    fast = False
    """bertkit's own layers do not run here (`NOT_FAST`): the loop and its summary read this."""
    unsupported = NOT_FAST

    def __init__(self, model: Any, width: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.width = width
        self.train(model.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        out = self.model(**inputs)
        logits = torch.stack([out.start_logits, out.end_logits], dim=-1)
        if self.training or self.width is None or logits.shape[1] == self.width:
            return logits
        if logits.shape[1] > self.width:
            return logits[:, : self.width]
        return nn.functional.pad(logits, (0, 0, 0, self.width - logits.shape[1]))


@dataclass
class SavedAnswerer:
    """A question-answering model folder loaded for inference: the model (eval mode, on `compute`), its tokenizer,
    how it reads questions and passages (`reading`), the SQuAD version it was trained on ("2.0": it may leave a
    question unanswered; None: a folder bertkit did not save) and the no-answer threshold its dev set chose (None:
    none recorded)."""

    path: Path
    model: Any
    tokenizer: Any
    reading: QAReading
    version: str | None
    null_threshold: float | None
    compute: Compute


HEAD_FIX = ("Fine-tune it on questions first with `bertkit finetune --data train.json --dev dev.json` (SQuAD JSON) "
            "and pass its best/ folder.")


def load_answerer(model_dir: str, compute: Compute, reading: QAReading) -> SavedAnswerer:
    """The question-answering model in `model_dir` (a `bertkit finetune` best/ or final/ on SQuAD data, or a
    transformers folder with a question-answering head), read as `reading` says (the command's resolution of the
    model's record and the options)."""
    path = Path(model_dir).expanduser()
    model = loading.load_classifier(str(path), require_head=True, questions=True, head_fix=HEAD_FIX)
    tokenizer = loading.load_tokenizer(str(path))
    loading.check_max_length(reading.max_length, tokenizer, model.config, str(model_dir), pair=True)
    if compute.precision == loading.INT8:
        model = quantize.quantized_int8(model.to(compute.torch_device).eval(), inplace=True)
    else:
        model = loading.cast_for_inference(model, compute.torch_device, compute.dtype).eval()
    version, _, threshold = metadata.saved_question_answering(path)
    return SavedAnswerer(path, model, tokenizer, reading, version, threshold, compute)


def answer_logits(answerer: SavedAnswerer, windows: QAWindows, batch_size: int,
                  bar: Any = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(start logits, end logits) of every window, each cut to the window's length: the windows in batches sorted by
    length (`inference_batches`), padded per batch."""
    if not windows.n_windows:
        return [], []
    batches = inference_batches(windows, batch_size)
    net = SpanLogits(answerer.model).eval()
    compute = answerer.compute
    outputs = infer.run_batches(lambda batch: net(**batch), windows.encoded, batches, model=answerer.model,
                                pad_id=infer.pad_id_of(answerer.tokenizer), device=compute.torch_device,
                                dtype=compute.dtype, bar=bar)
    starts = window_rows(batches, [o[..., 0] for o in outputs], windows.lengths)
    ends = window_rows(batches, [o[..., 1] for o in outputs], windows.lengths)
    return starts, ends
