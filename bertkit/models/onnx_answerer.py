"""A question-answering model read for inference from either folder it can be in: the PyTorch one `bertkit finetune`
saved (`models.answerer.load_answerer`) or its ONNX export (`bertkit.models.onnx`, kind `answerer`). Both come back as
a `SavedAnswerer`, so predict, evaluate and the export gate run them through the one path of windows and answers
(`models.answerer.answer_logits`, `bertkit.scoring.answers`): an export's model is its session, which `SpanLogits`
calls as it calls a transformers question-answering model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.encoding.qa_windows import QAReading
from bertkit.models import loading, metadata, onnx
from bertkit.models.answerer import SavedAnswerer, load_answerer
from bertkit.models.compute import Compute


def load_exported_answerer(folder: str, compute: Compute, reading: QAReading) -> SavedAnswerer:
    """The question-answering export in `folder` (its files verified against its record) as a `SavedAnswerer`: its
    session, its tokenizer, and what its source's record says (SQuAD version, no-answer threshold). It runs on the
    CPU in the precision baked into its weights; `compute` asking for another (bf16, fp16) is refused
    (`onnx.check_precision`)."""
    own = onnx.export_compute(folder)
    if compute.precision not in ("fp32", own.precision):
        onnx.check_precision(compute.precision, folder)
    runner = onnx.load_export(folder, "answerer", "a question-answering model's predict/evaluate")
    tokenizer = loading.load_tokenizer(folder)
    loading.check_max_length(reading.max_length, tokenizer, runner.config, folder, pair=True)
    return saved_answerer(folder, runner, tokenizer, reading, own)


def saved_answerer(folder: str | Path, model: Any, tokenizer: Any, reading: QAReading,
                   compute: Compute) -> SavedAnswerer:
    """A question-answering model already loaded (a transformers model, or an export's session) as a
    `SavedAnswerer`, with the SQuAD version and no-answer threshold `folder` records."""
    version, _, threshold = metadata.saved_question_answering(folder)
    return SavedAnswerer(Path(folder).expanduser(), model, tokenizer, reading, version, threshold, compute)


def load_any_answerer(model_dir: str, compute: Compute, reading: QAReading) -> SavedAnswerer:
    """The question-answering model in `model_dir`: its ONNX export (`load_exported_answerer`) or the PyTorch folder
    on `compute` (`load_answerer`), reading questions and passages as `reading` says."""
    if onnx.is_export(model_dir):
        return load_exported_answerer(model_dir, compute, reading)
    return load_answerer(model_dir, compute, reading)
