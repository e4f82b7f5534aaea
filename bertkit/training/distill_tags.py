"""Distilling a tagger (`bertkit distill` with a tagging model as --teacher): `DistillTagTask`, a tagger's run
(`training.tagging.TagTask`: tagged data, windows of word pieces, the per-word dev scores) whose student and
objective come from the teacher:

* the student is the teacher's token classifier with fewer layers (`distill.student_from_teacher`) or a --student
  encoder with a new tagging head; it outputs the teacher's tags, in the teacher's order, scored with the teacher's
  tag scheme (the data may not bring a tag the teacher does not know);
* the teacher's logits at every labelled piece of the training windows are computed once (inference mode,
  length-sorted batches) and cached in the run directory like a sentence teacher's (`distill.cached_teacher_outputs`:
  keyed by teacher, data and reading, checksummed), so a re-run or a resume does not run the teacher again;
* the objective is `scoring.tag_distill.TagDistillation`: KL at temperature to the teacher over the labelled pieces
  mixed with the hard cross-entropy; dev scored per word as any tagger (entity F1 picks best/).

best/ and final/ record what a tagger's do (task `tags`, the tag scheme, the reading of words), so `bertkit predict`
and `bertkit evaluate` read the student as they read its teacher."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.labels import TAGS_TASK, LabelMap
from bertkit.data.tagged_splits import TaggedTraining, corpus_fingerprint
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.encoding.run_tokens import RunTokens
from bertkit.encoding.word_labels import LabelledWindows
from bertkit.errors import UserError
from bertkit.models import loading
from bertkit.models.compute import Compute
from bertkit.models.tagger import TokenClassifier
from bertkit.scoring.tag_distill import TagDistillation, labelled_positions, same_windows, teacher_targets
from bertkit.training.distill import (
    Student,
    cached_teacher_outputs,
    check_student_fits,
    student_from_teacher,
    teacher_window_outputs,
)
from bertkit.training.options import DistillOptions
from bertkit.training.tagging import TagTask, tag_windows

log = logging.getLogger(__name__)

TEACHER_HEAD_FIX = ("A teacher is a fine-tuned tagger: fine-tune it first with `bertkit finetune --data train.iob2 "
                    "--dev dev.iob2 ...`, then pass that run's best/ folder as --teacher.")


@dataclass(frozen=True)
class TeacherTagged(TaggedTraining):
    """The tagged data read as the teacher tags: its tags (the student's outputs, in the teacher's order) and the
    scheme it scores them with, instead of the training corpus's own."""

    teacher_tags: tuple[str, ...] = ()
    teacher_scheme: TagScheme = TagScheme()

    @property
    def tags(self) -> tuple[str, ...]:
        return self.teacher_tags

    @property
    def scheme(self) -> TagScheme:
        return self.teacher_scheme


def teacher_tags(model: Any) -> tuple[str, ...]:
    """A token classifier's tags in its output order."""
    return tuple(str(model.config.id2label[i]) for i in range(int(model.config.num_labels)))


def unknown_tag_problems(data: TaggedTraining, tags: tuple[str, ...], teacher: str) -> list[str]:
    """Each split's tags the teacher does not know (the student could not learn them from it)."""
    problems = []
    for flag, corpus in (("--data", data.train), ("--dev", data.dev)):
        unknown = sorted(set(corpus.tags) - set(tags))
        if unknown:
            problems.append(f"{flag} {corpus.source} has tags the teacher {teacher} does not know: "
                            f"{', '.join(unknown[:10])}. The teacher tags: {', '.join(tags)}. Distil on data tagged "
                            f"with the teacher's tags (or fine-tune a teacher on this data first).")
    return problems


class DistillTagTask(Student, TagTask):
    """A tagger's run with a student built from a tagging teacher and the token-level distillation objective."""

    command = "distill"

    def __init__(self, cfg: DistillOptions, data: TaggedTraining, scheme: TagScheme, reading: Reading) -> None:
        """`data`: --data and --dev read with the teacher's scheme (`scheme`, as it records it); `reading`: the
        reading of words the teacher was trained with (the student learns to read so too)."""
        self.cfg, self.reading = cfg, reading
        self.teacher = loading.load_classifier(cfg.distillation.teacher or "", require_head=True, tokens=True,
                                               head_fix=TEACHER_HEAD_FIX)
        self.teacher_tokenizer = loading.load_tokenizer(cfg.distillation.teacher or "")
        check_student_fits(cfg, self.teacher, self.teacher_tokenizer)
        tags = teacher_tags(self.teacher)
        problems = unknown_tag_problems(data, tags, str(cfg.distillation.teacher))
        if problems:
            raise UserError(" ".join(problems))
        fields = {f.name: getattr(data, f.name) for f in dataclasses.fields(TaggedTraining)}
        super().__init__(TeacherTagged(**fields, teacher_tags=tags, teacher_scheme=scheme))
        self.reading = reading  # known from the start here (TagTask learns its reading with the windows)
        self.teacher_labels = LabelMap(tags, TAGS_TASK)
        self.kept_layers: list[int] | None = None
        self.teacher_windows: LabelledWindows | None = None
        """The training sentences in the teacher's windows (the student's, unless --student reads otherwise)."""

    def build_model(self, cfg: DistillOptions, label_map: LabelMap) -> tuple[Any, Any]:
        """The student: the teacher's token classifier with --student-layers of its layers, or --student with a new
        tagging head for the teacher's tags."""
        loading.check_max_length(self.reading.max_length, self.teacher_tokenizer, self.teacher.config,
                                  cfg.distillation.teacher or "")  # the teacher reads the training windows too
        if not cfg.distillation.student:
            student, self.kept_layers = student_from_teacher(self.teacher, cfg.distillation.student_layers)
            return student, self.teacher_tokenizer
        student = loading.load_classifier(cfg.distillation.student, label_map.id2label, cfg.trust_remote_code,
                                          tokens=True)
        return student, loading.load_tokenizer(cfg.distillation.student, cfg.trust_remote_code)

    def tokens(self, cfg: DistillOptions, tokenizer: Any, splits: Any, reading: Reading, min_rows: int) -> RunTokens:
        """The student's windows (`TagTask.tokens`), and the teacher's: the same ones when the student reads with the
        teacher's tokenizer. Another tokenizer's pieces line up with the teacher's word by word only, so with
        --label-all-pieces (every piece learnt) it is refused before --out is claimed."""
        run_tokens = super().tokens(cfg, tokenizer, splits, reading, min_rows)
        assert self.windows is not None
        student = self.windows[0]
        self.teacher_windows = student if tokenizer is self.teacher_tokenizer else tag_windows(
            cfg, self.teacher_tokenizer, self.data.train_sentences, self.data.tags, reading)
        if cfg.tagging.label_all_pieces and not same_windows(self.teacher_windows, student):
            raise UserError(f"--label-all-pieces learns every word piece from the teacher's outputs there, but "
                            f"--student {cfg.distillation.student} splits words into other pieces than the teacher "
                            f"{cfg.distillation.teacher}: their pieces do not line up. Drop --label-all-pieces (each "
                            f"word is then learnt at its first piece), or pass a --student with the teacher's "
                            f"vocabulary.")
        return run_tokens

    def objective(self, cfg: DistillOptions, splits: Any, out: Path, accelerator: Any) -> TagDistillation:
        hard = super().objective(cfg, splits, out, accelerator)
        assert self.windows is not None and self.teacher_windows is not None, "tokens() makes the windows first"
        pieces = teacher_piece_logits(self, out, accelerator)
        targets = teacher_targets(self.teacher_windows, self.windows[0], pieces)
        loss = TagDistillation(hard, targets, cfg.distillation.temperature, cfg.distillation.alpha)
        return loss.to(accelerator.device)


def teacher_piece_logits(task: DistillTagTask, out: Path, accelerator: Any) -> np.ndarray:
    """The teacher's logits at each labelled piece of its training windows (`labelled_positions` order), from the
    run's cache when it was made for the same teacher, data, reading and precision (`cached_teacher_outputs`)."""
    cfg, windows, reading = task.cfg, task.teacher_windows, task.reading
    assert windows is not None
    key = {"teacher": loading.model_revision(cfg.distillation.teacher or ""),
           "data": corpus_fingerprint(task.data.train),
           "sentences": len(task.data.train_sentences), "windows": windows.n_windows,
           "rows": int(len(labelled_positions(windows))), "max_length": reading.max_length,
           "stride": reading.window_stride, "label_all_pieces": cfg.tagging.label_all_pieces,
           "precision": cfg.compute.precision}
    cached = cached_teacher_outputs(out, key, len(task.data.tags), accelerator,
                                    lambda: (_compute_piece_logits(task, Compute.of_accelerator(accelerator)), None))
    return cached["logits"]


def _compute_piece_logits(task: DistillTagTask, compute: Compute) -> np.ndarray:
    """The teacher's logits at the labelled pieces of its windows, where and in the precision the run trains."""
    windows = task.teacher_windows
    assert windows is not None
    logits = teacher_window_outputs(task, windows.encoded, lambda model, width: TokenClassifier(model, width=width),
                                    compute)  # (windows, widest window, tags)
    if logits is None:
        return np.zeros((0, len(task.data.tags)), np.float32)
    positions = labelled_positions(windows)
    window_of = np.searchsorted(windows.labels.offsets, positions, side="right") - 1
    return np.ascontiguousarray(logits[window_of, positions - windows.labels.offsets[window_of]], dtype=np.float32)
