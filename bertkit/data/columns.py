"""Which columns of a table are the text, the pair text and the label(s) (by --*-column flag, by --task-preset,
or by default), and the text cells of a column, validated."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.cells import is_blank_text, is_int_text, is_missing, is_nested, nested_problem
from bertkit.data.findings import Found
from bertkit.data.options import DataOptions
from bertkit.data.sources import check_data_file, column_names, is_local_source
from bertkit.data.tagged import has_tagged_suffix
from bertkit.errors import UserError

DEFAULT_TEXT_COLUMNS = ("sentence", "text", "sentence1", "question", "premise")


def resolve_column(frame: Any, selector: str | None, option: str, source: str,
                   preset: str | None = None) -> Any:
    """The DataFrame column a --*-column selector names: a column name, or a 0-based index. `preset`: the
    --task-preset that chose the selector (the message then says so, and how to override it)."""
    columns = list(frame.columns)
    if selector in columns:
        return selector
    if selector is not None and is_int_text(selector):
        index = int(selector)
        if 0 <= index < len(columns):
            return columns[index]
    shown = ", ".join(str(c) for c in columns)
    hint = ""
    if len(columns) == 1:
        hint = " The file parsed into a single column: is the delimiter right (.tsv = tab, .csv = comma)?"
    origin = f"set by --task-preset {preset}, which expects the GLUE files' columns" if preset else f"from {option}"
    override = " to override the preset" if preset else ""
    raise UserError(
        f"Column {selector!r} ({origin}) not found in {source}; columns are: {shown} "
        f"(or 0-based indexes 0..{len(columns) - 1}).{hint} Pass {option} with one of them{override}."
    )


def _preset_of(opts: DataOptions, key: str) -> str | None:
    """The --task-preset that set option `key`, as `presets.apply_preset` recorded it once, or None."""
    fill = opts.preset_fill
    return fill.preset if key in fill.options else None


def _default_column(frame: Any, candidates: tuple[str, ...]) -> Any:
    for name in candidates:
        if name in frame.columns:
            return name
    return None


def reads_tags(opts: DataOptions) -> bool:
    """Whether the command reads labels of every shape (its options have --label-sep), not one class per row."""
    return hasattr(opts, "label_sep")


def label_selectors(opts: DataOptions) -> list[str]:
    """--label-column as a list: several comma-separated 0/1 columns where the command reads tags, else one."""
    if opts.label_column is None:
        return []
    parts = [p.strip() for p in str(opts.label_column).split(",")]
    return parts if reads_tags(opts) and len(parts) > 1 and all(parts) else [opts.label_column]


def by_index_reading(opts: DataOptions) -> tuple[bool, int | None]:
    """How a CSV/TSV file's columns are addressed: (every --*-column option is a 0-based index, --text-column among
    them: the header row is then guessed, not assumed; the label column's index, or None)."""
    label_parts = label_selectors(opts) or [None]
    by_index = all(s is None or is_int_text(s) for s in (opts.text_column, opts.text_pair_column, *label_parts))
    label_index = int(label_parts[0]) if is_int_text(label_parts[0]) else None
    return by_index and opts.text_column is not None, label_index


class _HeaderOnly:
    """A table known by its column names alone: what `choose_columns` needs to refuse a selector."""

    def __init__(self, names: list[Any]) -> None:
        self.columns = names

    def column(self, name: Any) -> list[Any]:
        return []


def check_data_files(opts: DataOptions, fields: Iterable[str], need_labels: bool) -> None:
    """`check_columns` for each of the options `fields` (data, dev, test) that names data (`opts`: a config's data
    group)."""
    for name in fields:
        source = getattr(opts, name, None)
        if source:
            check_columns(opts, str(source), need_labels)


def check_columns(opts: DataOptions, source: str, need_labels: bool) -> None:
    """The refusals of `splits.load_dataset_split` that a local data file's header alone decides, before anything
    heavy is imported: the file is missing (or not a readable data file), a --*-column names no column of it, two
    options pick one column, or labels are needed and no label column is found. A hub dataset, or a file whose
    column names cannot be told cheaply (`sources.column_names`), is left to the full read."""
    if not is_local_source(source):
        return
    path = Path(source).expanduser()
    if has_tagged_suffix(path) and path.is_file():  # its own reader checks it (`tagged_text`, the tagged path)
        return
    check_data_file(path)
    names = column_names(path, opts.encoding, opts.header, *by_index_reading(opts))
    if names is not None:
        choose_columns(_HeaderOnly(names), opts, source, need_labels)


@dataclass(frozen=True)
class Columns:
    text: Any
    pair: Any
    label: Any
    label_option: str
    """How the label column was chosen, for messages: `--label-column` or `the label column found by default`."""
    tag_columns: tuple[Any, ...] = ()
    """Several 0/1 label columns (multi-label data, one column per tag); `label` is then the first."""


def choose_columns(frame: Any, opts: DataOptions, source: str, need_labels: bool) -> Columns:
    """The text, pair and label columns (by flag or by default); one column in two roles is an error."""
    default_text = opts.text_column is None
    text_col = (_default_column(frame, DEFAULT_TEXT_COLUMNS) or frame.columns[0]) if default_text else \
        resolve_column(frame, opts.text_column, "--text-column", source, _preset_of(opts, "text_column"))
    pair_col = None
    if opts.text_pair_column is not None:
        pair_col = resolve_column(frame, opts.text_pair_column, "--text-pair-column", source,
                                  _preset_of(opts, "text_pair_column"))
    label_option, tag_cols = "--label-column", ()
    selectors = label_selectors(opts)
    if len(selectors) > 1 and opts.label_column not in frame.columns:  # several 0/1 columns, one per tag
        tag_cols = tuple(resolve_column(frame, sel, "--label-column", source) for sel in selectors)
        label_col = tag_cols[0]
    elif opts.label_column is not None:
        label_col = resolve_column(frame, opts.label_column, "--label-column", source,
                                   _preset_of(opts, "label_column"))
    else:
        label_option = "the label column found by default"
        label_col = _default_column(frame, ("label", "labels"))
        if label_col is None and need_labels:
            raise UserError(
                f"No label column in {source}: pass --label-column (columns are: "
                f"{', '.join(map(str, frame.columns))}, or 0-based indexes)."
            )
        if label_col is not None and not need_labels and (
            label_col in (text_col, pair_col) or any(is_missing(v) or is_nested(v) for v in frame.column(label_col))
        ):
            label_col = None  # optional labels: an auto-detected column is used only when complete, single and not a text
    roles = [("--text-column" if not default_text else "the text column chosen by default", text_col),
             ("--text-pair-column", pair_col), *((label_option, c) for c in (tag_cols or (label_col,)))]
    _check_distinct_columns(roles, frame, source)
    return Columns(text_col, pair_col, label_col, label_option, tag_cols)


_ROLE_FLAGS = {"the text column chosen by default": "--text-column", "the label column found by default": "--label-column"}


def _check_distinct_columns(roles: list[tuple[str, Any]], frame: Any, source: str) -> None:
    chosen = [(role, column) for role, column in roles if column is not None]
    for i, (role_a, col_a) in enumerate(chosen):
        for role_b, col_b in chosen[i + 1:]:
            if col_a == col_b:
                flags = " and ".join(_ROLE_FLAGS.get(role, role) for role in (role_a, role_b))
                raise UserError(
                    f"{role_a} and {role_b} both select column {col_a!r} of {source}; one column cannot play "
                    f"two roles. Columns are: {', '.join(map(str, frame.columns))} (or 0-based indexes). "
                    f"Pass {flags} with different columns."
                )


_MAYBE_MISSING = r"^[\s\p{Z}\p{Cc}\p{Cf}]*(nan|NaN|None|null)[\s\p{Z}\p{Cc}\p{Cf}]*$"
"""Cells that may read as missing words (`cells.is_missing`): a superset, checked again in Python."""


class TextCheck:
    """The text cells of one column, checked a chunk at a time (`feed`); `problems` says what was wrong."""

    def __init__(self, source: str, option: str, column: Any) -> None:
        self.source, self.option, self.column = source, option, column
        self.nested, self.empty = Found(), Found()

    def feed_strings(self, start: int, cells: Any) -> None:
        """An Arrow chunk of strings: only cells with no ASCII letter or digit, or that may be a missing word, are
        read in Python (a text with a visible ASCII character is never blank)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        visible = pc.match_substring_regex(cells, "[A-Za-z0-9]")
        suspect = pc.or_kleene(pc.invert(visible), pc.match_substring_regex(cells, _MAYBE_MISSING)).fill_null(True)
        offsets = np.flatnonzero(suspect.to_numpy(zero_copy_only=False))
        if len(offsets):
            values = dict(zip(offsets.tolist(), cells.take(pa.array(offsets)).to_pylist(), strict=True))
            self.empty.add(start, [o for o, v in values.items() if is_blank_text(text_value(v))], values)

    def feed(self, start: int, values: list[Any]) -> None:
        nested = [i for i, v in enumerate(values) if is_nested(v)]
        self.nested.add(start, nested, values)
        self.empty.add(start, [i for i, v in enumerate(values) if not is_nested(v) and is_blank_text(text_value(v))],
                       values)

    def problems(self, lines: Any) -> list[str]:
        found = []
        if self.nested:
            found.append(nested_problem(self.nested, self.column, self.option, self.source, lines,
                                        "Text cells must be strings: join the pieces into one string per row."))
        if self.empty:
            unit = "line" if lines is not None else "row"
            found.append(
                f"{self.empty.count} empty text cell(s) in {self.source} ({self.option}) at "
                f"{self.empty.where(lines, unit)} (blank, or only invisible characters such as zero-width spaces). "
                f"Remove those rows or fill them in; a model cannot learn from or embed an empty text."
            )
        return found


def text_value(value: Any) -> str:
    """A text cell as the model reads it: missing and nested cells as "" (they are reported, never read)."""
    return "" if is_missing(value) or is_nested(value) else str(value)


def text_values(values: list[Any]) -> list[str]:
    return [text_value(v) for v in values]
