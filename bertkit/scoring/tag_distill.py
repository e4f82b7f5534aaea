"""A tagging student learning from a tagging teacher (`bertkit distill` with a tagger as --teacher): `TagDistillation`,
the token-level twin of `bertkit.scoring.shapes.Distillation`. The loss is
`alpha x T^2 x KL(teacher at T || student at T) + (1 - alpha) x cross-entropy`, both over the labelled pieces of a
batch's windows (each word's first piece, or every piece with --label-all-pieces: the pieces `TagObjective` learns
on); the dev scores are the hard objective's (`scoring.tags.TagObjective`: per word, entity F1 as conlleval counts),
so a student picks best/ by the same entity F1 as a tagger fine-tuned alone. `teacher_targets` lines the teacher's cached
per-piece logits up with the student's windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.encoding.rows import TokenRows, offsets_of
from bertkit.encoding.word_labels import IGNORE, LabelledWindows
from bertkit.scoring.shapes import Scored
from bertkit.scoring.tags import TagObjective


def labelled_positions(windows: LabelledWindows) -> np.ndarray:
    """The flat positions (into the windows' pieces) that carry a label, in window order then piece order: the order
    in which a batch's labelled pieces are taken from its logits (`TagDistillation.loss`) and cached."""
    return np.flatnonzero(np.asarray(windows.labels.values) != IGNORE)


def same_windows(a: LabelledWindows, b: LabelledWindows) -> bool:
    """Whether two tokenizers cut the sentences into the same windows of the same pieces, labelled alike (the
    teacher's per-piece outputs then are the student's targets as they are)."""
    ids_a, ids_b = a.encoded.input_ids, b.encoded.input_ids
    return (len(ids_a) == len(ids_b) and all(np.array_equal(x, y) for x, y in zip(ids_a, ids_b, strict=True))
            and np.array_equal(np.asarray(a.labels.values), np.asarray(b.labels.values)))


def teacher_targets(teacher: LabelledWindows, student: LabelledWindows, pieces: np.ndarray) -> TokenRows:
    """The teacher's logits at the labelled pieces of its own windows (`pieces`: in `labelled_positions` order) as
    targets per student window (a TokenRows of (labelled pieces, tags) rows). The same windows: as they are; other
    windows (a --student with its own tokenizer, one labelled piece per word): word by word, each word's teacher
    logits at its first piece moved to where the student labels it."""
    offsets = student.labels.offsets
    window_of = np.searchsorted(offsets, labelled_positions(student), side="right") - 1
    counts = np.bincount(window_of, minlength=len(offsets) - 1)
    if same_windows(teacher, student):
        return TokenRows(pieces, offsets_of(counts))
    teacher_rank = _word_rank(teacher)  # word -> its place among the teacher's labelled pieces
    student_order = np.argsort(_word_position(student), kind="stable")  # student's labelled pieces -> words
    return TokenRows(pieces[teacher_rank][student_order], offsets_of(counts))


def _word_position(windows: LabelledWindows) -> np.ndarray:
    """Each word's flat position: its first piece in the window where it is read."""
    return windows.labels.offsets[windows.word_window] + windows.word_start


def _word_rank(windows: LabelledWindows) -> np.ndarray:
    """Each word's index among the windows' labelled pieces (one per word: --label-all-pieces is not on)."""
    return np.searchsorted(labelled_positions(windows), _word_position(windows))


def batch_targets(targets: TokenRows, rows: np.ndarray) -> np.ndarray:
    """The targets of windows `rows`, concatenated in `rows`' order: (their labelled pieces, tags)."""
    starts, ends = targets.offsets[rows], targets.offsets[rows + 1]
    lengths = ends - starts
    index = np.repeat(starts - offsets_of(lengths)[:-1], lengths) + np.arange(int(lengths.sum()))
    return np.asarray(targets.values)[index]


class TagDistillation:
    """The distillation loss over labelled pieces, the hard objective's dev scores (module docstring)."""

    def __init__(self, hard: TagObjective, targets: TokenRows, temperature: float, alpha: float) -> None:
        self.hard, self.targets, self.temperature, self.alpha = hard, targets, temperature, alpha
        self.label_names, self.y_dev, self.table_metrics = hard.label_names, hard.y_dev, hard.table_metrics

    @property
    def num_outputs(self) -> int:
        return self.hard.num_outputs

    def to(self, device: torch.device) -> TagDistillation:
        self.hard.to(device)
        return self

    def loss(self, logits: torch.Tensor, rows: Any) -> torch.Tensor:
        """alpha x T^2 x KL(teacher || student at temperature T), the mean over the batch's labelled pieces, plus
        (1 - alpha) x the hard cross-entropy over the same pieces (in fp32; no labelled piece: the soft term is 0)."""
        rows = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        labels = self.hard.labels.padded(rows, logits.shape[1], IGNORE)[0]
        mask = torch.as_tensor(labels != IGNORE, device=logits.device)
        student = logits.float()[mask]
        teacher = torch.as_tensor(batch_targets(self.targets, rows), dtype=torch.float32, device=logits.device)
        t = self.temperature
        soft = (torch.nn.functional.kl_div(torch.log_softmax(student / t, dim=-1), torch.log_softmax(teacher / t, dim=-1),
                                           reduction="batchmean", log_target=True) * t * t
                if len(teacher) else logits.sum() * 0.0)
        return self.alpha * soft + (1.0 - self.alpha) * self.hard.loss(logits, rows)

    def score(self, logits: np.ndarray) -> Scored:
        return self.hard.score(logits)

    def write_errors(self, path: Path, proba: np.ndarray) -> int:
        return self.hard.write_errors(path, proba)
