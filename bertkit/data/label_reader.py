"""A table's label cells read as their problem shape says (one class, a tag set or a number per row), with
--task auto's detection of that shape; every cell problem is collected, to be reported in one error."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bertkit.data.cells import is_missing, is_nested, nested_problem, where_rows
from bertkit.data.columns import Columns
from bertkit.data.labels import label_key, label_number, normalise_labels


def _zero_one(value: Any) -> int | float | None:
    """A 0/1 label cell as 0 or 1 (true/false, in any case, too); anything else as its number or None."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return int(value.strip().lower() == "true")
    return label_number(value)


def detect_task(values: list[Any], label_sep: str | None, several_columns: bool) -> str:
    """--task auto: tag lists, a --label-sep or several 0/1 columns -> multi_label; a column of numbers with a
    fractional value -> regression; anything else -> single_label (integers stay classes: force --task regression
    for ratings like 1-5)."""
    if several_columns or label_sep is not None or any(is_nested(v) for v in values):
        return "multi_label"
    numbers = [label_number(v) for v in values if not is_missing(v)]
    if numbers and all(n is not None for n in numbers) and any(isinstance(n, float) for n in numbers):
        return "regression"
    return "single_label"


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


def _shown_cells(rows: list[int], values: list[Any], lines: list[int] | None, unit: str, limit: int = 5) -> str:
    """`line 7 ('n/a'), line 12 ('-')`: where the cells are and what they hold (the first `limit`, then a count)."""
    shown = [f"{unit} {lines[i] if lines else i} ({values[i]!r})" for i in rows[:limit]]
    return ", ".join(shown) + (f" (+{len(rows) - limit} more)" if len(rows) > limit else "")


@dataclass
class LabelReader:
    """The labels of one table, read as its task says; every problem is added to `problems`."""

    source: str
    cols: Columns
    lines: list[int] | None
    problems: list[str]
    label_sep: str | None
    reads_tags: bool

    def read(self, frame: pd.DataFrame, task: str) -> tuple[str, list[Any]]:
        """(the task, resolved from auto; the labels, [] when they have problems)."""
        values = frame[self.cols.label].tolist()
        if task == "auto":
            task = detect_task(values, self.label_sep, bool(self.cols.tag_columns))
            if task != "multi_label" and not self._auto_shape_is_clear(values):
                return task, []
        if self.cols.tag_columns and task != "multi_label":
            self.problems.append(f"Several label columns ({', '.join(map(str, self.cols.tag_columns))}) are 0/1 "
                                 f"columns of multi-label data; --task {task} reads one label column. Pass one "
                                 f"--label-column, or --task multi_label.")
            return task, []
        if task == "multi_label":
            return task, (self._tag_columns(frame) if self.cols.tag_columns else self._tag_lists(values))
        if task == "regression":
            return task, self._numbers(values)
        return task, self._single(values)

    @property
    def _unit(self) -> str:
        return "line" if self.lines else "row"

    def _auto_shape_is_clear(self, values: list[Any]) -> bool:
        """--task auto guesses no shape from a column of numbers with a few other cells (a data error, almost
        always: `n/a`, `-`, `inf` among scores), nor from huge numbers not written as plain integers (`1e30`): it
        says which cells, and that --task chooses. False when it added that problem."""
        cells = [i for i, v in enumerate(values) if not is_missing(v)]
        numbers = [i for i in cells if label_number(values[i]) is not None]
        others = [i for i in cells if label_number(values[i]) is None]
        if others and len(others) < len(numbers):
            odd = "not finite numbers" if all(_not_finite_number(values[i]) for i in others) else "not numbers"
            self.problems.append(
                f"Column {self.cols.label!r} of {self.source} holds numbers in {len(numbers)} of {len(cells)} label "
                f"cells, but {len(others)} cell(s) are {odd}: {_shown_cells(others, values, self.lines, self._unit)}. "
                f"A number column with a few other cells is almost always a data error, so --task auto does not "
                f"guess its shape. Fix or drop those rows, or pass --task single_label to read every value, these "
                f"included, as a class name.")
            return False
        huge = [i for i in numbers if abs(label_number(values[i])) > MAX_TARGET and  # type: ignore[arg-type]
                not (is_plain_integer(values[i]) and abs(label_number(values[i])) < 2**53)]  # type: ignore[arg-type]
        if huge and not others:
            self.problems.append(
                f"Column {self.cols.label!r} of {self.source} holds numbers beyond +-{MAX_TARGET:g} that are not "
                f"plain integers: {_shown_cells(huge, values, self.lines, self._unit)}. As class names they are "
                f"unusual and as regression targets they need scaling, so --task auto does not guess. Pass --task "
                f"single_label to read each value as a class name, or scale the targets to within about +-1000 "
                f"(e.g. divide them by a power of 10) and pass --task regression.")
            return False
        return True

    def _missing(self, values: list[Any], skip: set[int]) -> bool:
        missing = [i for i, v in enumerate(values) if i not in skip and is_missing(v)]
        if missing:
            self.problems.append(
                f"{len(missing)} missing/blank label(s) in {self.source} (--label-column) at "
                f"{where_rows(missing, self.lines, self._unit)}. Fill them in or drop those rows."
            )
        return bool(missing)

    def _single(self, values: list[Any]) -> list[Any]:
        option = self.cols.label_option if self.cols.label_option.startswith("--") else "--label-column"
        nested = [i for i, v in enumerate(values) if is_nested(v)]
        if nested:
            how = ("Labels must be single values for single-label data (--task single_label, or a single-label "
                   "model); `bertkit finetune --task auto` (or multi_label) reads tag lists" if self.reads_tags else
                   "Labels must be single values (one class per row); multi-label data is not supported by this "
                   "command (`bertkit finetune` and `evaluate` read tag lists)")
            self.problems.append(nested_problem(nested, values, self.cols.label, option, self.source, self.lines,
                                                 f"{how}. Keep one label per row, or pick another --label-column."))
        missing = self._missing(values, set(nested))
        return [] if nested or missing else normalise_labels(values)

    def _numbers(self, values: list[Any]) -> list[Any]:
        missing = self._missing(values, set())
        bad = [i for i, v in enumerate(values) if not is_missing(v) and label_number(v) is None]
        if bad and all(_not_finite_number(values[i]) for i in bad):
            self.problems.append(
                f"Regression targets must be finite numbers, but {len(bad)} cell(s) of column {self.cols.label!r} "
                f"of {self.source} are not finite (inf or nan): {_shown_cells(bad, values, self.lines, self._unit)}. Fix those "
                f"cells, or drop those rows.")
        elif bad:
            shown = ", ".join(repr(values[i]) for i in bad[:5])
            self.problems.append(
                f"--task regression needs a number in every label cell, but column {self.cols.label!r} of "
                f"{self.source} mixes numbers and names: {len(bad)} cell(s) are not numbers, at "
                f"{where_rows(bad, self.lines, self._unit)} (e.g. {shown}). Fix those cells, or, to classify the labels "
                f"as names, fine-tune with --task single_label (or auto)."
            )
        return [] if missing or bad else [float(label_number(v)) for v in values]  # type: ignore[arg-type]

    def _tag_lists(self, values: list[Any]) -> list[Any]:
        """Tag sets from list cells, cells split at --label-sep, or single values (one tag)."""
        missing = self._missing(values, {i for i, v in enumerate(values) if is_nested(v)})
        rows, empty, nested = [], [], []
        for i, value in enumerate(values):
            items = list(value) if is_nested(value) and not isinstance(value, dict) else \
                [value] if self.label_sep is None or is_nested(value) else str(value).split(self.label_sep)
            if any(is_nested(t) for t in items):
                nested.append(i)
            tags = [str(label_key(t)) for t in items if not is_missing(t) and not is_nested(t)]
            rows.append(tuple(dict.fromkeys(tags)))  # each tag once, in the order given
            if not tags and not is_missing(value):
                empty.append(i)
        if nested:
            self.problems.append(nested_problem(nested, values, self.cols.label, "--label-column", self.source,
                                                 self.lines, "A tag list holds tag names, not lists or objects."))
        if empty:
            self.problems.append(
                f"{len(empty)} empty tag list(s) in {self.source} (--label-column {self.cols.label}) at "
                f"{where_rows(empty, self.lines, self._unit)}: every row needs at least one tag. Drop those rows, or give "
                f"them an explicit tag (e.g. \"none\"); with 0/1 columns (--label-column a,b,c) a row of zeros is fine."
            )
        return [] if missing or empty or nested else rows

    def _tag_columns(self, frame: pd.DataFrame) -> list[Any]:
        """Tag sets from several 0/1 columns: a row's tags are the columns holding 1 (a row of zeros has none)."""
        names = [str(c) for c in self.cols.tag_columns]
        bits = np.zeros((len(frame), len(names)), dtype=bool)
        bad: list[tuple[int, Any, Any]] = []
        for j, column in enumerate(self.cols.tag_columns):
            for i, value in enumerate(frame[column].tolist()):
                number = _zero_one(value)
                if number not in (0, 1):
                    bad.append((i, column, value))
                bits[i, j] = number == 1
        if bad:
            rows = sorted({i for i, _, _ in bad})
            shown = ", ".join(f"{c}={v!r}" for _, c, v in bad[:5])
            self.problems.append(
                f"Multi-label 0/1 columns must hold 0 or 1 (or true/false); {len(bad)} cell(s) of {self.source} do "
                f"not, at {where_rows(rows, self.lines, self._unit)} (e.g. {shown}). Fix them, or list the tags in one "
                f"column with --label-sep."
            )
            return []
        return [tuple(n for n, on in zip(names, row, strict=True) if on) for row in bits]
