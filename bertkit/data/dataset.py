"""The rows of one split as bertkit holds them: texts, optional pair texts and labels, and where they came from.

Data comes in through `bertkit.data.splits.load_dataset_split` (one split) and `load_splits` (train/dev/test);
everything returns plain values (lists, numpy arrays, dataclasses), so a test can hand in 20 rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.table import CHUNK_ROWS


@dataclass
class TextDataset:
    """Rows of one split: texts, optional second texts (pairs), optional raw labels, and provenance."""

    texts: Sequence[str]
    pairs: Sequence[str] | None = None
    labels: Sequence[Any] | None = None
    source: str = "<memory>"
    fingerprint: str = ""
    line_numbers: Sequence[int] | None = None
    """1-based line in the source file for each row (for error messages); None for hub data."""
    task: str = "single_label"
    """The labels' shape (TASKS): one class per row (labels are values), a tag set per row (labels are tuples of
    tag names) or a number per row (labels are floats)."""
    label_columns: tuple[str, ...] | None = None
    """The column(s) the labels were read from: a regression's output is named after it, 0/1 columns are the tags."""

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Sequence[int]) -> TextDataset:
        """The rows at `indices`, in that order."""
        pick = np.asarray(indices, dtype=np.int64) if not isinstance(indices, np.ndarray) else indices
        return TextDataset(
            texts=_pick(self.texts, pick),
            pairs=_pick(self.pairs, pick),
            labels=_pick(self.labels, pick),
            source=self.source,
            fingerprint=self.fingerprint,
            line_numbers=_pick(self.line_numbers, pick),
            task=self.task,
            label_columns=self.label_columns,
        )

    def chunks(self, size: int = CHUNK_ROWS) -> Iterator[tuple[int, TextDataset]]:
        """(start, the rows start..start+size as plain lists), in order: how a pass over a dataset larger than memory
        reads it (only one chunk's Python values exist at a time)."""
        for start in range(0, len(self), size):
            stop = min(start + size, len(self))
            yield start, TextDataset(
                texts=list(self.texts[start:stop]), pairs=_part(self.pairs, start, stop),
                labels=_part(self.labels, start, stop), source=self.source, fingerprint=self.fingerprint,
                line_numbers=_part(self.line_numbers, start, stop), task=self.task, label_columns=self.label_columns)


def _pick(values: Sequence[Any] | None, pick: np.ndarray) -> Sequence[Any] | None:
    """The values at `pick`: lazily for a table column (`bertkit.data.table.Column`), as a list otherwise."""
    if values is None:
        return None
    if hasattr(values, "take"):
        return values.take(pick)
    return [values[i] for i in pick]


def _part(values: Sequence[Any] | None, start: int, stop: int) -> list[Any] | None:
    return None if values is None else list(values[start:stop])
