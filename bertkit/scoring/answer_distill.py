"""Distilling a question-answering model (DistilBERT's SQuAD setting): the student's start and end distributions over
each training window's tokens learn the teacher's - alpha x T^2 x KL(teacher || student at temperature T), a start and
an end term per window, mean over windows - mixed with (1 - alpha) x the hard start/end cross-entropy
(`AnswerObjective.loss`); dev is scored as any question-answering run (official SQuAD EM/F1, `AnswerObjective`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.scoring.answer_objective import AnswerObjective
from bertkit.scoring.shapes import Scored


@dataclass(frozen=True)
class TeacherSpans:
    """The teacher's start and end logits of every training window, one window's tokens after another's: window w's
    are `logits[offsets[w]:offsets[w + 1]]`, (its length, 2)."""

    logits: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of_windows(cls, padded: np.ndarray, lengths: np.ndarray) -> TeacherSpans:
        """From logits padded per window, (windows, width, 2), each read to its length."""
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = [padded[w, :n] for w, n in enumerate(lengths)]
        logits = np.concatenate(flat) if flat else np.zeros((0, 2), np.float32)
        return cls(np.ascontiguousarray(logits, dtype=np.float32), offsets)

    def batch(self, rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(the logits of windows `rows`, (len(rows), width, 2), zero past each window's length; the mask of the
        positions inside each window, (len(rows), width))."""
        out = np.zeros((len(rows), width, 2), np.float32)
        inside = np.zeros((len(rows), width), bool)
        for i, w in enumerate(rows):
            start, end = int(self.offsets[w]), int(self.offsets[w + 1])
            n = min(end - start, width)
            out[i, :n], inside[i, :n] = self.logits[start:start + n], True
        return out, inside


class AnswerDistillation:
    """The distillation loss over the windows' tokens; the hard objective's dev scores (module docstring)."""

    def __init__(self, hard: AnswerObjective, teacher: TeacherSpans, temperature: float, alpha: float) -> None:
        self.hard, self.teacher, self.temperature, self.alpha = hard, teacher, temperature, alpha
        self.label_names, self.y_dev, self.table_metrics = hard.label_names, hard.y_dev, hard.table_metrics
        self.num_outputs = hard.num_outputs

    def to(self, device: torch.device) -> AnswerDistillation:
        self.hard.to(device)
        return self

    def loss(self, logits: torch.Tensor, rows: Any) -> torch.Tensor:
        """alpha x T^2 x the start and end KL (teacher || student at temperature T) over each window's tokens, mean
        over the batch's windows and both ends, plus (1 - alpha) x the hard loss (fp32)."""
        rows = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        teacher, inside = self.teacher.batch(rows, logits.shape[1])
        teacher = torch.as_tensor(teacher, device=logits.device)
        inside = torch.as_tensor(inside, device=logits.device)[..., None]
        t = self.temperature
        outside = torch.finfo(torch.float32).min  # past a window's end: no probability for either model
        student_log = torch.log_softmax((logits.float() / t).masked_fill(~inside, outside), dim=1)
        teacher_log = torch.log_softmax((teacher / t).masked_fill(~inside, outside), dim=1)
        terms = torch.where(inside, teacher_log.exp() * (teacher_log - student_log), torch.zeros_like(student_log))
        soft = terms.sum(dim=1).mean() * t * t
        return self.alpha * soft + (1.0 - self.alpha) * self.hard.loss(logits, rows)

    def score(self, logits: np.ndarray) -> Scored:
        return self.hard.score(logits)

    def write_errors(self, path: Path, outputs: np.ndarray) -> int:
        return self.hard.write_errors(path, outputs)
