"""Distilling a question-answering model (`bertkit distill` with a question-answering model as --teacher):
`DistillSpanTask`, a question-answering run (`training.spans.SpanTask`: SQuAD data, windows of the passage, the
official dev scores) whose student and objective come from the teacher:

* the student is the teacher with fewer layers (`distill.student_from_teacher`) or a --student encoder with a new
  question-answering head; both read the teacher's windows (its recorded --max-length and doc stride), so a --student
  must split text into the teacher's word pieces (its start and end distributions are over the same tokens);
* the teacher's start and end logits of every training window are computed once (inference mode, length-sorted
  batches) and cached in the run directory like the other families' (`distill.cached_teacher_outputs`: keyed by
  teacher, data and reading, checksummed), so a re-run or a resume does not run the teacher again;
* the objective is `scoring.answer_distill.AnswerDistillation` (DistilBERT's SQuAD setting): KL at temperature to the
  teacher's start and end distributions over each window's tokens, mixed with the hard start/end cross-entropy; dev
  scored by the official SQuAD EM/F1 (best/ by F1).

best/ and final/ record what a question-answering model's do (task `spans`, the SQuAD version, the windows), so
`bertkit predict` and `bertkit evaluate` read the student as they read its teacher."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.squad_splits import QATraining, qa_fingerprint
from bertkit.encoding.qa_windows import QAReading, qa_windows
from bertkit.encoding.reading import Reading
from bertkit.encoding.run_tokens import RunTokens
from bertkit.errors import UserError
from bertkit.models import loading
from bertkit.models.answerer import SpanLogits
from bertkit.models.compute import Compute
from bertkit.scoring.answer_distill import AnswerDistillation, TeacherSpans
from bertkit.training import distill
from bertkit.training.options import DistillOptions
from bertkit.training.spans import SpanTask

log = logging.getLogger(__name__)

TEACHER_HEAD_FIX = ("A teacher is a fine-tuned question-answering model: fine-tune it first with `bertkit finetune "
                    "--data train.json --dev dev.json ...`, then pass that run's best/ folder as --teacher.")


class DistillSpanTask(distill.Student, SpanTask):
    """A question-answering run with a student built from a question-answering teacher and the span distillation
    objective."""

    command = "distill"

    reading: Any

    def __init__(self, cfg: DistillOptions, data: QATraining, reading: Reading) -> None:
        """`data`: --data and --dev read and checked as SQuAD sets; `reading`: the teacher's windows (the student
        learns to read so too)."""
        super().__init__(data)
        self.cfg, self.teacher_reading = cfg, reading
        self.reading = reading  # the run reads the teacher's windows (`tokens` then keeps them as a QAReading)
        self.teacher = loading.load_classifier(cfg.distillation.teacher or "", require_head=True, questions=True,
                                               head_fix=TEACHER_HEAD_FIX)
        self.teacher_tokenizer = loading.load_tokenizer(cfg.distillation.teacher or "")
        distill.check_student_fits(cfg, self.teacher, self.teacher_tokenizer)
        self.teacher_labels = data.label_map
        self.kept_layers: list[int] | None = None

    def build_model(self, cfg: DistillOptions, label_map: Any) -> tuple[Any, Any]:
        """The student: the teacher with --student-layers of its layers, or --student with a new question-answering
        head."""
        loading.check_max_length(self.teacher_reading.max_length, self.teacher_tokenizer, self.teacher.config,
                                 cfg.distillation.teacher or "")  # the teacher reads the training windows too
        if not cfg.distillation.student:
            student, self.kept_layers = distill.student_from_teacher(self.teacher, cfg.distillation.student_layers)
            return student, self.teacher_tokenizer
        student = loading.load_classifier(cfg.distillation.student, trust_remote_code=cfg.trust_remote_code,
                                          questions=True)
        return student, loading.load_tokenizer(cfg.distillation.student, cfg.trust_remote_code)

    def tokens(self, cfg: DistillOptions, tokenizer: Any, splits: Any, reading: Reading, min_rows: int) -> RunTokens:
        """The student's windows (`SpanTask.tokens`), which must be the teacher's: the student learns the teacher's
        distribution over each window's tokens, so a --student that splits text into other pieces is refused."""
        run_tokens = super().tokens(cfg, tokenizer, splits, reading, min_rows)
        if tokenizer is not self.teacher_tokenizer and not same_windows(
                self.train_windows().encoded, qa_windows(self.teacher_tokenizer, self.data.train_questions,
                                                         QAReading.of(reading)).encoded):
            raise UserError(f"--student {cfg.distillation.student} splits text into other word pieces than the teacher "
                            f"{cfg.distillation.teacher}: the student learns the teacher's start and end scores per "
                            f"token, so their windows must hold the same tokens. Pass a --student with the teacher's "
                            f"vocabulary (e.g. a BERT of the same tokenizer), or drop --student to copy "
                            f"--student-layers of the teacher.")
        return run_tokens

    def train_windows(self) -> Any:
        assert self.windows is not None, "tokens() makes the windows first"
        return self.windows[0]

    def objective(self, cfg: DistillOptions, splits: Any, out: Path, accelerator: Any) -> AnswerDistillation:
        hard = super().objective(cfg, splits, out, accelerator)
        teacher = teacher_span_logits(self, out, accelerator)
        return AnswerDistillation(hard, teacher, cfg.distillation.temperature, cfg.distillation.alpha).to(
            accelerator.device)

    def baseline(self, cfg: DistillOptions, objective: Any, label_map: Any) -> Any:
        """The overlap baseline on the dev questions the hard objective scores."""
        return super().baseline(cfg, objective.hard, label_map)


def same_windows(a: Any, b: Any) -> bool:
    """Whether two windowings of the same questions hold the same tokens, window by window."""
    return (len(a.lengths) == len(b.lengths) and bool(np.array_equal(a.lengths, b.lengths))
            and all(np.array_equal(x, y) for x, y in zip(a.input_ids, b.input_ids, strict=True)))


def teacher_span_logits(task: DistillSpanTask, out: Path, accelerator: Any) -> TeacherSpans:
    """The teacher's start and end logits of every training window, from the run's cache when it was made for the
    same teacher, data, windows and precision (`cached_teacher_outputs`)."""
    cfg, windows, reading = task.cfg, task.train_windows(), task.teacher_reading
    lengths = np.asarray(windows.lengths, dtype=np.int64)
    key = {"teacher": loading.model_revision(cfg.distillation.teacher or ""), "data": qa_fingerprint(task.data.train),
           "questions": len(task.data.train_questions), "windows": int(windows.n_windows),
           "rows": int(lengths.sum()), "max_length": reading.max_length, "doc_stride": reading.stride,
           "precision": cfg.compute.precision}
    cached = distill.cached_teacher_outputs(out, key, 2, accelerator,
                                    lambda: (_compute_span_logits(task, Compute.of_accelerator(accelerator)), None))
    return TeacherSpans(cached["logits"], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def _compute_span_logits(task: DistillSpanTask, compute: Compute) -> np.ndarray:
    """The teacher's start and end logits at every token of its training windows, one window after another, where
    and in the precision the run trains."""
    windows = task.train_windows()
    padded = distill.teacher_window_outputs(task, windows.encoded, lambda model, width: SpanLogits(model, width=width), compute)
    if padded is None:
        return np.zeros((0, 2), np.float32)
    return TeacherSpans.of_windows(padded, windows.lengths).logits
