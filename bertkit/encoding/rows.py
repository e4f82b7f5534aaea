"""Token ids of many rows without a Python object per row: `TokenRows` keeps every row's ids in one flat numpy array
(`values`) cut by `offsets`, and `FlatColumn` builds such an array chunk by chunk, in memory while it is small and
in an unlinked temporary file under the cache folder (read back memory-mapped) once it passes `SPILL_TOKENS`, so
a corpus larger than memory tokenizes with flat peak memory."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.cachedir import cache_root
from bertkit.io import disk

SPILL_TOKENS = 16 * 2**20
"""Tokens a column keeps in memory (64 MB of int32 ids); past this its values go to a temporary file in the cache
folder (`--cache-dir`), memory-mapped, deleted when the rows are dropped (or the process ends)."""
SPILL_FOLDER = "tokens"
"""The cache folder's subfolder for spilled token ids."""


class TokenRows(Sequence):
    """Rows of token ids stored flat: row i is `values[offsets[i]:offsets[i + 1]]` (a numpy view, no copy).

    `values` is a numpy array (int32 ids, int8 token types) or a read-only memory map of a spilled column;
    `offsets` (int64, one more than the rows) starts at 0."""

    __slots__ = ("offsets", "values")

    def __init__(self, values: np.ndarray, offsets: np.ndarray) -> None:
        self.values = values
        self.offsets = np.asarray(offsets, dtype=np.int64)

    @classmethod
    def from_lists(cls, rows: Sequence[Sequence[int]], dtype: Any = np.int32) -> TokenRows:
        """The rows of a list of lists (tests, small callers)."""
        values, lengths = flatten(rows, dtype)
        return cls(values, offsets_of(lengths))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        j = int(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        return self.values[self.offsets[j] : self.offsets[j + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        bounds = self.offsets.tolist()
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            yield self.values[start:end]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def tolist(self) -> list[list[int]]:
        return [row.tolist() for row in self]

    def padded(self, indices: np.ndarray, width: int, fill: int) -> tuple[np.ndarray, np.ndarray]:
        """(int64 array [len(indices), width] of the rows at `indices` left-aligned and filled with `fill`, the
        boolean mask of real tokens), gathered in one vectorised step. A row longer than `width` is an error."""
        starts = self.offsets[indices]
        lengths = self.offsets[indices + 1] - starts
        if len(lengths) and int(lengths.max()) > width:
            raise ValueError(f"a row of {int(lengths.max())} tokens does not fit a padded width of {width}")
        positions = np.arange(width, dtype=np.int64)
        mask = positions < lengths[:, None]
        out = np.full((len(indices), width), fill, dtype=np.int64)
        out[mask] = self.values[(starts[:, None] + positions)[mask]]
        return out, mask


def flatten(rows: Sequence[Sequence[int]], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """(all ids of `rows` in one flat array of `dtype`, each row's length as int32)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
    values = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=int(lengths.sum(dtype=np.int64)))
    return values, lengths


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """Row offsets (int64, starting at 0) for rows of `lengths`."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, dtype=np.int64, out=offsets[1:])
    return offsets


class FlatColumn:
    """One flat column (ids or token types) appended chunk by chunk: in memory up to `SPILL_TOKENS` values, then in
    an unlinked temporary file under `cache_root(cache_dir)/tokens` (the disk is checked first: the estimate is what
    the rows so far took, scaled to `expected_rows`). `finish()` returns the whole column (memory-mapped once
    spilled)."""

    def __init__(self, dtype: Any, expected_rows: int, cache_dir: str | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.expected_rows = expected_rows
        self.cache_dir = cache_dir
        self.parts: list[np.ndarray] = []
        self.count = 0
        self.rows = 0
        self.file: Any = None
        self.folder: Path | None = None

    def add(self, values: np.ndarray, rows: int) -> None:
        """Append `values` (the flat ids of `rows` more rows)."""
        values = np.asarray(values, dtype=self.dtype)
        self.count += len(values)
        self.rows += rows
        if self.file is None:
            self.parts.append(values)
            if self.count > SPILL_TOKENS:
                self._spill()
        else:
            self._write(values)

    def _spill(self) -> None:
        self.folder = cache_root(self.cache_dir) / SPILL_FOLDER
        need = disk.with_margin(self.count * self.dtype.itemsize * max(self.expected_rows, self.rows)
                                // max(self.rows, 1))
        disk.check_free(self.folder, need)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.file = tempfile.TemporaryFile(dir=self.folder, prefix="bertkit-ids-")  # unlinked: gone with the process
        parts, self.parts = self.parts, []
        for part in parts:
            self._write(part)

    def _write(self, values: np.ndarray) -> None:
        with disk.reported(self.folder, values.nbytes):
            self.file.write(values.tobytes())

    def finish(self) -> np.ndarray:
        """The whole column: one in-memory array, or a read-only memory map of the spilled file."""
        if self.file is None:
            return np.concatenate(self.parts) if self.parts else np.empty(0, dtype=self.dtype)
        self.file.flush()
        values = np.memmap(self.file, dtype=self.dtype, mode="r", shape=(self.count,))
        self.file.close()  # the map keeps its own handle; the file's blocks are freed when the map is dropped
        self.file = None
        return values
