"""A table's label cells read as their problem shape says (one class, a tag set or a number per row), with
--task auto's detection of that shape; every cell problem is collected, to be reported in one error.

The cells are read a chunk at a time (`RowTable.scan`): a pass keeps counts and the first few problem cells, and
the labels come back as a lazy column that converts each chunk as it is read (`bertkit.data.table.Column`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertkit.data.cells import is_missing, is_nested, nested_problem
from bertkit.data.columns import Columns
from bertkit.data.findings import Found
from bertkit.data.labels import label_key, label_number, normalise_labels


def _zero_one(value: Any) -> int | float | None:
    """A 0/1 label cell as 0 or 1 (true/false, in any case, too); anything else as its number or None."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return int(value.strip().lower() == "true")
    return label_number(value)


MAX_TARGET = 1e6
"""Largest |number| bertkit reads without asking: beyond it, auto-detection does not guess a shape (as class names
the values are odd, as regression targets they need scaling) and fine-tuning refuses regression targets."""


def is_plain_integer(value: Any) -> bool:
    """A cell written as an integer (an int, or digits without a point or exponent): how class ids are written."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, str) and value.strip().lstrip("+-").isdigit()


def _not_finite_number(value: Any) -> bool:
    """A cell that reads as infinity or NaN (`inf`, `-Infinity`, `1e999`, a float nan/inf)."""
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        return False


@dataclass
class LabelSummary:
    """What --task auto and the label normalisation need to know of a whole label column, gathered in one pass."""

    cells: int = 0
    """Cells that are not missing."""
    numbers: int = 0
    any_float: bool = False
    any_nested: bool = False
    others: Found = field(default_factory=Found)
    """Cells (not missing) that are not finite numbers."""
    others_not_finite: bool = True
    huge: Found = field(default_factory=Found)

    def feed(self, start: int, coded: Any) -> None:
        """One chunk's cells (a `table.Coded`): the checks run once per distinct value."""
        for value, n in zip(coded.uniques, coded.counts(), strict=True):
            if not n:
                continue
            self.any_nested = self.any_nested or is_nested(value)
            if is_missing(value):
                continue
            self.cells += int(n)
            number = label_number(value)
            if number is None:
                self.others_not_finite = self.others_not_finite and _not_finite_number(value)
                continue
            self.numbers += int(n)
            self.any_float = self.any_float or isinstance(number, float)
        self.others.add(start, coded.rows(lambda v: not is_missing(v) and label_number(v) is None), coded)
        self.huge.add(start, coded.rows(_huge), coded)

    def task(self, label_sep: str | None, several_columns: bool) -> str:
        """--task auto: tag lists, a --label-sep or several 0/1 columns -> multi_label; a column of numbers with a
        fractional value -> regression; anything else -> single_label (integers stay classes: force --task
        regression for ratings like 1-5)."""
        if several_columns or label_sep is not None or self.any_nested:
            return "multi_label"
        if self.cells and not self.others and self.any_float:
            return "regression"
        return "single_label"


def _huge(value: Any) -> bool:
    number = None if is_missing(value) else label_number(value)
    return number is not None and abs(number) > MAX_TARGET and not (is_plain_integer(value) and abs(number) < 2**53)


@dataclass
class LabelReader:
    """The labels of one table, read as its task says; every problem is added to `problems`. `table` is the
    RowTable, `lines` the rows' file lines (a lazy column, or None)."""

    source: str
    cols: Columns
    lines: Any
    problems: list[str]
    label_sep: str | None
    reads_tags: bool
    table: Any

    def read(self, task: str) -> tuple[str, Any]:
        """(the task, resolved from auto; the labels as a lazy column, [] when they have problems)."""
        if task == "auto":
            summary = self._summary()
            task = summary.task(self.label_sep, bool(self.cols.tag_columns))
            if task != "multi_label" and not self._auto_shape_is_clear(summary):
                return task, []
        if self.cols.tag_columns and task != "multi_label":
            self.problems.append(f"Several label columns ({', '.join(map(str, self.cols.tag_columns))}) are 0/1 "
                                 f"columns of multi-label data; --task {task} reads one label column. Pass one "
                                 f"--label-column, or --task multi_label.")
            return task, []
        if task == "multi_label":
            return task, (self._tag_columns() if self.cols.tag_columns else self._tag_lists())
        if task == "regression":
            return task, self._numbers()
        return task, self._single()

    @property
    def _unit(self) -> str:
        return "line" if self.lines is not None else "row"

    def _chunks(self) -> Any:
        """(start, the chunk's label cells as a `table.Coded`): checks run once per distinct label."""
        yield from self.table.scan_coded(self.cols.label)

    def _summary(self) -> LabelSummary:
        summary = LabelSummary()
        for start, values in self._chunks():
            summary.feed(start, values)
        return summary

    def _auto_shape_is_clear(self, summary: LabelSummary) -> bool:
        """--task auto guesses no shape from a column of numbers with a few other cells (a data error, almost
        always: `n/a`, `-`, `inf` among scores), nor from huge numbers not written as plain integers (`1e30`): it
        says which cells, and that --task chooses. False when it added that problem."""
        others = summary.others
        if others and others.count < summary.numbers:
            odd = "not finite numbers" if summary.others_not_finite else "not numbers"
            self.problems.append(
                f"Column {self.cols.label!r} of {self.source} holds numbers in {summary.numbers} of {summary.cells} "
                f"label cells, but {others.count} cell(s) are {odd}: {others.cells(self.lines, self._unit)}. "
                f"A number column with a few other cells is almost always a data error, so --task auto does not "
                f"guess its shape. Fix or drop those rows, or pass --task single_label to read every value, these "
                f"included, as a class name.")
            return False
        if summary.huge and not others:
            self.problems.append(
                f"Column {self.cols.label!r} of {self.source} holds numbers beyond +-{MAX_TARGET:g} that are not "
                f"plain integers: {summary.huge.cells(self.lines, self._unit)}. As class names they are "
                f"unusual and as regression targets they need scaling, so --task auto does not guess. Pass --task "
                f"single_label to read each value as a class name, or scale the targets to within about +-1000 "
                f"(e.g. divide them by a power of 10) and pass --task regression.")
            return False
        return True

    def _add_missing(self, missing: Found) -> bool:
        if missing:
            self.problems.append(
                f"{missing.count} missing/blank label(s) in {self.source} (--label-column) at "
                f"{missing.where(self.lines, self._unit)}. Fill them in or drop those rows."
            )
        return bool(missing)

    def _single(self) -> Any:
        option = self.cols.label_option if self.cols.label_option.startswith("--") else "--label-column"
        nested, missing, numeric = Found(), Found(), True
        for start, values in self._chunks():
            nested.add(start, values.rows(is_nested), values)
            missing.add(start, values.rows(lambda v: not is_nested(v) and is_missing(v)), values)
            numeric = numeric and all(label_number(v) is not None for v in values.present())
        if nested:
            how = ("Labels must be single values for single-label data (--task single_label, or a single-label "
                   "model); `bertkit finetune --task auto` (or multi_label) reads tag lists" if self.reads_tags else
                   "Labels must be single values (one class per row); multi-label data is not supported by this "
                   "command (`bertkit finetune` and `evaluate` read tag lists)")
            self.problems.append(nested_problem(nested, self.cols.label, option, self.source, self.lines,
                                                f"{how}. Keep one label per row, or pick another --label-column."))
        if self._add_missing(missing) or nested:
            return []
        return self.table.column(self.cols.label, per_value=lambda value: normalise_labels([value], numeric)[0])

    def _numbers(self) -> Any:
        missing, bad, not_finite, any_number = Found(), Found(), True, False
        for start, values in self._chunks():
            missing.add(start, values.rows(is_missing), values)
            any_number = any_number or any(not is_missing(v) and label_number(v) is not None for v in values.present())
            wrong = values.rows(lambda v: not is_missing(v) and label_number(v) is None)
            bad.add(start, wrong, values)
            not_finite = not_finite and all(_not_finite_number(values[i]) for i in wrong)
        self._add_missing(missing)
        if bad and not_finite:
            self.problems.append(
                f"Regression targets must be finite numbers, but {bad.count} cell(s) of column {self.cols.label!r} "
                f"of {self.source} are not finite (inf or nan): {bad.cells(self.lines, self._unit)}. Fix those "
                f"cells, or drop those rows.")
        elif bad:
            self.problems.append(self._not_numbers(bad, any_number))
        if missing or bad:
            return []
        return self.table.column(self.cols.label, per_value=lambda v: float(label_number(v)))  # type: ignore[arg-type]

    def _not_numbers(self, bad: Found, any_number: bool) -> str:
        """The regression problem for label cells that are not numbers: a few among numbers, or all of them."""
        shown = ", ".join(repr(v) for v in bad.values[:5])
        start = (f"--task regression needs a number in every label cell, but column {self.cols.label!r} of "
                 f"{self.source}")
        if not any_number:
            return (f"{start} holds names, not numbers: none of its {bad.count} label cell(s) is a number (e.g. "
                    f"{shown}). To classify the labels as names, fine-tune with --task single_label (or auto); "
                    f"for regression, pick a column of numbers with --label-column.")
        return (f"{start} mixes numbers and names: {bad.count} cell(s) are not numbers, at "
                f"{bad.where(self.lines, self._unit)} (e.g. {shown}). Fix those cells, or, to classify the labels "
                f"as names, fine-tune with --task single_label (or auto).")

    def _tag_lists(self) -> Any:
        """Tag sets from list cells, cells split at --label-sep, or single values (one tag)."""
        missing, empty, nested = Found(), Found(), Found()
        for start, values in self._chunks():
            missing.add(start, values.rows(lambda v: not is_nested(v) and is_missing(v)), values)
            nested.add(start, values.rows(lambda v: any(is_nested(t) for t in self._items(v))), values)
            empty.add(start, values.rows(lambda v: not self._tags(v) and not is_missing(v)), values)
        self._add_missing(missing)
        if nested:
            self.problems.append(nested_problem(nested, self.cols.label, "--label-column", self.source, self.lines,
                                                "A tag list holds tag names, not lists or objects."))
        if empty:
            self.problems.append(
                f"{empty.count} empty tag list(s) in {self.source} (--label-column {self.cols.label}) at "
                f"{empty.where(self.lines, self._unit)}: every row needs at least one tag. Drop those rows, or give "
                f"them an explicit tag (e.g. \"none\"); with 0/1 columns (--label-column a,b,c) a row of zeros is fine."
            )
        if missing or empty or nested:
            return []
        return self.table.column(self.cols.label, per_value=self._tags)

    def _items(self, value: Any) -> list[Any]:
        if is_nested(value) and not isinstance(value, dict):
            return list(value)
        return [value] if self.label_sep is None or is_nested(value) else str(value).split(self.label_sep)

    def _tags(self, value: Any) -> tuple[str, ...]:
        tags = [str(label_key(t)) for t in self._items(value) if not is_missing(t) and not is_nested(t)]
        return tuple(dict.fromkeys(tags))  # each tag once, in the order given

    def _tag_columns(self) -> Any:
        """Tag sets from several 0/1 columns: a row's tags are the columns holding 1 (a row of zeros has none)."""
        names = [str(c) for c in self.cols.tag_columns]
        bad_rows, bad_cells, shown = Found(), 0, []
        for start, columns in self.table.scan(list(self.cols.tag_columns)):
            rows = []
            for i in range(len(columns[0])):
                wrong = [(c, col[i]) for c, col in zip(self.cols.tag_columns, columns, strict=True)
                         if _zero_one(col[i]) not in (0, 1)]
                if wrong:
                    rows.append(i)
                    bad_cells += len(wrong)
                    shown.extend(wrong[: 5 - len(shown)])
            bad_rows.add(start, rows, columns[0])
        if bad_rows:
            self.problems.append(
                f"Multi-label 0/1 columns must hold 0 or 1 (or true/false); {bad_cells} cell(s) of {self.source} do "
                f"not, at {bad_rows.where(self.lines, self._unit)} (e.g. {', '.join(f'{c}={v!r}' for c, v in shown)}). "
                f"Fix them, or list the tags in one column with --label-sep."
            )
            return []

        def tag_sets(columns: list[list[Any]]) -> list[tuple[str, ...]]:
            return [tuple(n for n, v in zip(names, row, strict=True) if _zero_one(v) == 1) for row in zip(*columns, strict=True)]

        return self.table.column(list(self.cols.tag_columns), tag_sets)
