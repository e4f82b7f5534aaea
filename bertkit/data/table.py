"""A parsed input table held on disk, not in Python objects: Arrow record batches memory-mapped from the cache
(`bertkit.data.ingest` writes them), read a chunk at a time as Python values.

`RowTable` is the table (its columns keep the names the file gave them: header names, or 0, 1, ... for a
headerless file); `Column` is a lazy sequence over one or more of its columns, the rows picked by an index array
(a subset, a split) and each chunk of cells turned into the values a command wants (texts, labels, line numbers)
by a converter. Only one chunk of Python values exists at a time; the mapped pages a pass has read are handed
back to the page cache as it goes (`RowTable.release`), so a pass over ten million rows does not grow the
process's resident memory by the file's size.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

CHUNK_ROWS = 4096
"""Rows a streaming pass holds as Python values at a time (tokenizing, validating, writing outputs)."""
LINE_FIELD = "__line__"
"""The Arrow field holding each row's file line (a cached delimited or JSON Lines file)."""

RELEASE_ROWS = 65_536
"""Rows read (any column, any order) between two hand-backs of the mapped pages."""


class RowTable:
    """Rows of one input: an Arrow table whose column i holds the cells of `columns[i]`; `json_cells` marks a table
    whose cells are JSON texts (from .json/.jsonl/hub frames: one column may mix numbers, texts and lists); `lines`
    says where each row starts in its file (None for hub data)."""

    def __init__(self, table: pa.Table, columns: Sequence[Any], *, json_cells: bool = False,
                 lines: LineNumbers | None = None, mapped: mmap.mmap | None = None) -> None:
        self.table = table
        self.columns = list(columns)
        self.json_cells = json_cells
        self.lines = lines
        self._mapped = mapped
        self._unreleased = 0
        self.note: str | None = None
        """Set when the table was parsed just now from a large file: where its cache went."""

    @classmethod
    def open(cls, arrow_file: Path, meta: dict[str, Any]) -> RowTable:
        """The cached table at `arrow_file` (an Arrow IPC file), memory-mapped, with its meta.json record."""
        with open(arrow_file, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        table = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(mapped))).read_all()
        lines = LineNumbers(meta["line_mode"], int(meta.get("header_rows", 0)))
        return cls(table, meta["columns"], json_cells=meta.get("json_cells", False), lines=lines, mapped=mapped)

    def __len__(self) -> int:
        return self.table.num_rows

    def head(self, n_rows: int) -> RowTable:
        """The first `n_rows` rows (--limit): a zero-copy slice."""
        return RowTable(self.table.slice(0, n_rows), self.columns, json_cells=self.json_cells, lines=self.lines,
                        mapped=self._mapped)

    def release(self) -> None:
        """Hand the mapped pages read so far back to the page cache (they are read again, from there, when touched):
        the process's resident memory stays at one chunk, however many rows a pass reads."""
        if self._mapped is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._mapped.madvise(mmap.MADV_DONTNEED)

    def position(self, column: Any) -> int:
        """The Arrow column of a cell column (the line column is the field LINE_FIELD)."""
        if column == LINE_FIELD:
            return self.table.schema.get_field_index(LINE_FIELD)
        return self.columns.index(column)

    def cells(self, column: Any, rows: np.ndarray | range) -> list[Any]:
        """Python values of `column` at `rows` (a range reads a zero-copy slice; an index array takes)."""
        values = self.arrow(column, rows).to_pylist()
        if self.json_cells and column != LINE_FIELD:
            return [None if v is None else json.loads(v) for v in values]
        return values

    def arrow(self, column: Any, rows: np.ndarray | range) -> pa.Array:
        """The Arrow cells of `column` at `rows` (JSON texts for a table of JSON cells). Every read goes through
        here: after RELEASE_ROWS rows the mapped pages are handed back (`release`), whatever the access pattern."""
        self._unreleased += len(rows)
        if self._unreleased >= RELEASE_ROWS:
            self._unreleased = 0
            self.release()
        array = self.table.column(self.position(column))
        if isinstance(rows, range) and rows.step == 1:
            return array.slice(rows.start, len(rows)).combine_chunks()
        return array.take(pa.array(np.asarray(rows, dtype=np.int64))).combine_chunks()

    def plain_strings(self, column: Any) -> bool:
        """Whether every cell of `column` reads as a Python str or None (a delimited file's cells)."""
        kind = self.table.schema.field(self.position(column)).type
        return not self.json_cells and (pa.types.is_string(kind) or pa.types.is_large_string(kind))

    def coded(self, column: Any, rows: np.ndarray | range) -> Coded:
        """The cells of `column` at `rows` as their distinct values and a code per row (a check or conversion then
        runs once per distinct value: a label column of millions of rows has a handful)."""
        array = self.arrow(column, rows)
        try:
            encoded = array.dictionary_encode()
        except pa.ArrowNotImplementedError:  # lists, structs: one value per row
            return Coded(self._python(array), np.arange(len(array), dtype=np.int64))
        uniques = self._python(encoded.dictionary)
        codes = encoded.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False).astype(np.int64)
        return Coded([*uniques, None], codes)

    def _python(self, array: pa.Array) -> list[Any]:
        values = array.to_pylist()
        return [None if v is None else json.loads(v) for v in values] if self.json_cells else values

    def column(self, columns: Any | Sequence[Any], convert: Callable[..., list[Any]] | None = None, *,
               per_value: Callable[[Any], Any] | None = None) -> Column:
        """A lazy sequence of the cells of one column (or, with a list, of several columns given to `convert`);
        `per_value` converts each distinct cell once (labels)."""
        many = isinstance(columns, (list, tuple))
        return Column(self, tuple(columns) if many else (columns,), convert, None, many, per_value)

    def _ranges(self, size: int | None) -> Iterator[range]:
        size = size or CHUNK_ROWS
        for start in range(0, len(self), size):
            yield range(start, min(start + size, len(self)))

    def scan_coded(self, column: Any, size: int | None = None) -> Iterator[tuple[int, Coded]]:
        """(start, the chunk's cells coded) for every chunk of rows, in order."""
        for rows in self._ranges(size):
            yield rows.start, self.coded(column, rows)

    def scan_arrow(self, columns: Sequence[Any], size: int | None = None) -> Iterator[tuple[int, list[pa.Array]]]:
        """(start, [the Arrow cells of each column]) for every chunk of rows, in order."""
        for rows in self._ranges(size):
            yield rows.start, [self.arrow(c, rows) for c in columns]

    def scan(self, columns: Sequence[Any], size: int | None = None) -> Iterator[tuple[int, list[list[Any]]]]:
        """(start, [cells of each column]) for every chunk of rows, in order."""
        for rows in self._ranges(size):
            yield rows.start, [self.cells(c, rows) for c in columns]


class Coded:
    """One chunk of a column as its distinct values (`uniques`; None last, for missing cells) and each row's code.
    Indexing gives a row's value, so it stands in for the chunk's list of cells."""

    def __init__(self, uniques: list[Any], codes: np.ndarray) -> None:
        self.uniques, self.codes = uniques, codes

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, row: int) -> Any:
        return self.uniques[self.codes[row]]

    def present(self) -> list[Any]:
        """The distinct values that occur in the chunk."""
        counts = np.bincount(self.codes, minlength=len(self.uniques))
        return [u for u, n in zip(self.uniques, counts, strict=True) if n]

    def counts(self) -> np.ndarray:
        return np.bincount(self.codes, minlength=len(self.uniques))

    def rows(self, test: Callable[[Any], bool]) -> list[int]:
        """Offsets (ascending) of the rows whose value passes `test`, which runs once per distinct value."""
        flags = np.fromiter((bool(test(u)) for u in self.uniques), dtype=bool, count=len(self.uniques))
        return np.flatnonzero(flags[self.codes]).tolist()

    def map(self, fn: Callable[[Any], Any]) -> list[Any]:
        """`fn` of every row's value, computed once per distinct value."""
        out = [fn(u) if n else None for u, n in zip(self.uniques, self.counts(), strict=True)]
        return [out[c] for c in self.codes.tolist()]

class LineNumbers:
    """Where rows start in their file: `column` mode reads the `LINE_FIELD` column (quoted fields may span lines,
    blank lines are skipped), `plain` mode counts rows after `header_rows` header lines."""

    def __init__(self, mode: str, header_rows: int = 0) -> None:
        self.mode = mode
        self.header_rows = header_rows

    def of(self, table: RowTable, rows: np.ndarray | range) -> list[int]:
        if self.mode == "column":
            return [int(x) for x in table.cells(LINE_FIELD, rows)]
        return [int(r) + 1 + self.header_rows for r in rows]


class Column(Sequence):
    """A lazy sequence over a RowTable: the rows `index` (None: all, in order) of `columns`, converted a chunk at a
    time by `convert` (one list of cells -> values; with several columns, one list per column). Indexing by int
    or slice, iteration and `==` with a list behave as the list of values would; nothing is held between calls."""

    def __init__(self, table: RowTable, columns: tuple[Any, ...], convert: Callable[..., list[Any]] | None,
                 index: np.ndarray | None, many: bool = False, per_value: Callable[[Any], Any] | None = None) -> None:
        self.table, self.columns, self.convert, self.index, self.many = table, columns, convert, index, many
        self.per_value = per_value

    def __len__(self) -> int:
        return len(self.table) if self.index is None else len(self.index)

    def _rows(self, positions: range) -> np.ndarray | range:
        return positions if self.index is None else self.index[positions.start:positions.stop]

    def _values(self, rows: np.ndarray | range) -> list[Any]:
        if self.columns == (LINE_FIELD,):
            return self.table.lines.of(self.table, rows) if self.table.lines else list(rows)
        if self.per_value is not None:
            return self.table.coded(self.columns[0], rows).map(self.per_value)
        cells = [self.table.cells(c, rows) for c in self.columns]
        if self.convert is None:
            return cells[0]
        return self.convert(cells) if self.many else self.convert(cells[0])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._values(self._rows(range(start, max(start, stop))))
        position = int(key) + (len(self) if int(key) < 0 else 0)
        if not 0 <= position < len(self):
            raise IndexError(key)
        return self._values(self._rows(range(position, position + 1)))[0]

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), CHUNK_ROWS):
            yield from self._values(self._rows(range(start, min(start + CHUNK_ROWS, len(self)))))

    def take(self, positions: Sequence[int]) -> Column:
        """The rows at `positions` (of this sequence), lazily."""
        picked = np.asarray(positions, dtype=np.int64)
        index = picked if self.index is None else self.index[picked]
        return Column(self.table, self.columns, self.convert, index, self.many, self.per_value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, Column)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(list(self), dtype=dtype)

    def __repr__(self) -> str:
        return f"Column({self.columns!r}, {len(self)} rows)"


def line_column(table: RowTable) -> Column:
    """The file line of every row, lazily."""
    return Column(table, (LINE_FIELD,), None, None)
