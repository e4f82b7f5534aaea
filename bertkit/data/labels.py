"""What labels mean: the problem shapes (TASKS), the label <-> output mapping a model is built with (LabelMap),
and when two label cells are the same class (numbers compare as numbers: 1, 1.0 and "1" are one label)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.cells import MAX_LISTED
from bertkit.data.dataset import TextDataset
from bertkit.errors import UserError

TASKS = ("single_label", "multi_label", "regression")
"""Problem shapes (--task without auto)."""
TAGS_TASK = "tags"
"""The task of a tagger's labels, and what a tagging model records (`bertkit finetune` on tagged data: one tag per
word)."""
SPANS_TASK = "spans"
"""The task of extractive question answering (an answer span of a passage per question), and what a
question-answering model records (`bertkit finetune` on SQuAD data)."""


def task_of_problem_type(problem_type: str | None, num_labels: int) -> str:
    """The TASKS name of a transformers config's problem_type (unset: regression for one output, else single)."""
    if problem_type == "multi_label_classification":
        return "multi_label"
    if problem_type == "regression" or (problem_type is None and num_labels == 1):
        return "regression"
    return "single_label"


@dataclass(frozen=True)
class LabelMap:
    """What a model's outputs mean: for single-label data the deterministic label <-> id mapping (the distinct labels
    sorted, numbers numerically, strings as text); for multi-label data the tags, one sigmoid each; for regression
    the one output, named after the label column."""

    labels: tuple[Any, ...]
    task: str = "single_label"

    @classmethod
    def build(cls, labels: Sequence[Any], task: str = "single_label",
              columns: tuple[str, ...] | None = None) -> LabelMap:
        if task == "regression":
            return cls((columns[0] if columns else "score",), task)
        if task == "multi_label":  # 0/1 columns keep their order; tags from lists are sorted
            tags = columns if columns and len(columns) > 1 else sorted({t for row in labels for t in row})
            return cls(tuple(tags), task)
        distinct = set(labels)
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in distinct)
        ordered = sorted(distinct) if numeric else sorted(distinct, key=str)
        return cls(tuple(ordered))

    @property
    def problem_type(self) -> str:
        """transformers' `config.problem_type` for this shape: always set on a model bertkit builds, so a head trained
        for one class per row never keeps the regression or multi-label problem_type of the folder it started from."""
        return {"regression": "regression", "multi_label": "multi_label_classification"}.get(
            self.task, "single_label_classification")

    @property
    def label2id(self) -> dict[Any, int]:
        return {label: i for i, label in enumerate(self.labels)}

    @property
    def id2label(self) -> dict[int, str]:
        """Ids to label names as strings (what a transformers config stores)."""
        return {i: str(label) for i, label in enumerate(self.labels)}

    def __len__(self) -> int:
        return len(self.labels)

    def encode(self, labels: Sequence[Any], where: str) -> np.ndarray:
        """Training targets for `labels`: label ids (single-label; matched by `label_key`, so 1, 1.0 and "1" are one
        label), a (rows, tags) 0/1 matrix (multi-label) or floats (regression). Labels absent from the mapping are
        an error that lists them."""
        if self.task == "regression":
            return np.fromiter(labels, dtype=np.float64, count=len(labels))
        if self.task == "multi_label":
            return self._encode_tags(labels, where)
        mapping = {label_key(label): i for i, label in enumerate(self.labels)}
        ids = np.empty(len(labels), dtype=np.int64)
        unseen: set[Any] = set()
        memo: dict[tuple[type, Any], Any] = {}
        for start, part in _chunked(labels):  # a chunk of keys at a time: millions of rows hold no Python list
            keys = _keys(part, memo)
            unseen.update(label for label, key in zip(part, keys, strict=True) if key not in mapping)
            if not unseen:
                ids[start:start + len(part)] = [mapping[key] for key in keys]
        if unseen:
            unseen = sorted(unseen, key=str)  # type: ignore[assignment]
            shown = ", ".join(repr(x) for x in list(unseen)[:MAX_LISTED])
            raise UserError(
                f"{where} has labels not seen in the training data: {shown}. Known labels: "
                f"{', '.join(repr(x) for x in self.labels)}. Fix the labels, or train on data that contains them."
            )
        return ids

    def decode(self, ids: Sequence[int]) -> list[Any]:
        return [self.labels[int(i)] for i in ids]

    def _encode_tags(self, labels: Sequence[Any], where: str) -> np.ndarray:
        index = {str(tag): j for j, tag in enumerate(self.labels)}
        unseen = sorted({str(t) for _, part in _chunked(labels) for row in part for t in row} - set(index))
        if unseen:
            raise UserError(
                f"{where} has tags not seen in the training data: {', '.join(repr(x) for x in unseen[:MAX_LISTED])}. "
                f"Known tags: {', '.join(repr(x) for x in self.labels)}. Fix the tags, or train on data that has them."
            )
        matrix = np.zeros((len(labels), len(self.labels)), dtype=np.int64)
        for i, row in enumerate(labels):
            matrix[i, [index[str(t)] for t in row]] = 1
        return matrix


    def to_json(self) -> dict[str, Any]:
        return {"labels": list(self.labels)} if self.task == "single_label" else \
            {"labels": list(self.labels), "task": self.task}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LabelMap:
        return cls(tuple(obj["labels"]), obj.get("task", "single_label"))

    @classmethod
    def from_id2label(cls, id2label: dict[Any, str], problem_type: str | None = None) -> LabelMap:
        """Rebuild from a transformers config's id2label (keys may be strings in JSON) and problem_type (a one-output
        model without one is a regression, as in transformers)."""
        names = [id2label[k] for k in sorted(id2label, key=int)]
        task = task_of_problem_type(problem_type, len(names))
        if task != "single_label":
            return cls(tuple(str(n) for n in names), task)
        labels = normalise_labels(names)  # the same canonical labels the training data had
        return cls(tuple(labels if len(set(labels)) == len(labels) else names))


def _keys(labels: Sequence[Any], memo: dict[tuple[type, Any], Any]) -> list[Any]:
    """`label_key` of every label, computed once per distinct (type, value): millions of rows hold a few classes."""
    keys = []
    for label in labels:
        slot = (type(label), label)
        try:
            key = memo.get(slot, memo)
        except TypeError:  # an unhashable cell (reported elsewhere): no memo
            key = label_key(label)
        if key is memo:
            key = memo[slot] = label_key(label)
        keys.append(key)
    return keys


def _chunked(values: Sequence[Any], size: int = 65_536) -> Any:
    """(start, values[start:start+size]) in order: a lazy column reads one slice at a time."""
    for start in range(0, len(values), size):
        yield start, values[start:start + size]


def check_tag_columns(label_map: LabelMap, dataset: TextDataset, whose: str) -> None:
    """0/1 label columns (one per tag) read for a multi-label model must be exactly its tags: a tag left out would
    read as never on, and a column the model does not know would be ignored."""
    columns, known = dataset.label_columns or (), [str(t) for t in label_map.labels]
    if label_map.task != "multi_label" or not (len(columns) > 1 or (columns and columns[0] in known)):
        return
    missing = [t for t in known if t not in columns]
    extra = [c for c in columns if c not in known]
    if not missing and not extra:
        return
    wrong = ([f"no column for its tag(s) {', '.join(map(repr, missing))} (each would read as never on)"] if missing
             else []) + ([f"column(s) {', '.join(map(repr, extra))} that are not its tags"] if extra else [])
    raise UserError(
        f"--label-column {','.join(columns)} does not match the tags of {whose}: {' and '.join(wrong)}. Its tags are "
        f"{', '.join(known)}. Pass --label-column {','.join(known)} (one 0/1 column per tag; add the missing columns "
        f"to {dataset.source} if it has none)."
    )


_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def label_number(value: Any) -> int | float | None:
    """The number a label stands for, canonical (integral -> int, else float: 1, 1.0, "1.0", "1e0" -> 1; "0.50" ->
    0.5), or None when it is not a finite number (text, booleans, nan, inf)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if not _NUMBER_TEXT.fullmatch(text):
            return None
        if text.lstrip("+-").isdigit():
            return int(text)  # exact, however many digits
        value = float(text)
    if not isinstance(value, (float, np.floating)) or not math.isfinite(value):
        return None
    number = float(value)
    return int(number) if number.is_integer() else number


def normalise_labels(values: list[Any], numeric: bool | None = None) -> list[Any]:
    """Labels that are equal as numbers are one label: a column of numbers (or number texts) becomes canonical
    numbers (1, 1.0, "1.0" -> 1; "0.50" -> 0.5); any other column becomes strings, its number-like cells written
    canonically ("1.0" -> "1") so they still meet. `numeric`: whether the whole column is numbers (when `values` is
    one chunk of it); None: decide from `values`."""
    numbers = [label_number(v) for v in values]
    if numeric if numeric is not None else all(n is not None for n in numbers):
        return numbers
    return [str(n) if n is not None else str(v).strip() for v, n in zip(values, numbers, strict=True)]


def label_key(label: Any) -> Any:
    """What decides whether two labels are the same class: the canonical number, else the stripped text."""
    number = label_number(label)
    return number if number is not None else str(label).strip()
