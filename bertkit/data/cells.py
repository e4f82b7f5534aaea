"""What one table cell holds, as every reader of a table sees it: blank text (also only invisible characters),
a missing value, a nested value (a list or object in one cell), integer or number text; and where rows are, for
messages."""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np

MAX_LISTED = 10
"""Rows, labels or classes a message names before it gives a count."""
_INVISIBLE = frozenset("\u115f\u1160\u2800\u3164\uffa0")  # Hangul fillers and the blank braille cell
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})  # controls, zero-width/format marks, spaces


def is_int_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def is_number_text(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def is_blank_text(text: str) -> bool:
    """True when a text shows nothing: empty, whitespace, or only invisible characters (zero-width spaces and
    joiners, BOMs, soft hyphens, control characters), which a BERT tokenizer turns into no tokens at all."""
    for char in text:  # returns at the first visible character: cheap for real text
        if not (char.isspace() or char in _INVISIBLE or unicodedata.category(char) in _INVISIBLE_CATEGORIES):
            return False
    return True


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and np.isnan(value):
        return True
    return isinstance(value, str) and (value.strip() in {"", "nan", "NaN", "None", "null"} or is_blank_text(value))


def is_nested(value: Any) -> bool:
    """A list, tuple, set, dict or array inside one cell (JSON arrays/objects, parquet list columns)."""
    return isinstance(value, (list, tuple, set, dict, np.ndarray))


def nested_problem(nested: Any, column: Any, option: str, source: str, lines: Any, what: str) -> str:
    """The message for cells holding a list or an object (`nested`: a `findings.Found`)."""
    example = repr(nested.values[0])
    example = example if len(example) <= 60 else example[:57] + "..."
    return (f"{nested.count} cell(s) of column {column!r} ({option}) in {source} hold a list or an object instead of "
            f"a single value, at {nested.where(lines, 'line' if lines is not None else 'row')} (e.g. {example}). {what}")
