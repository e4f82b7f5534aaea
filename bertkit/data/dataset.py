"""The one seam through which bertkit reads data: files or hub datasets -> validated texts, pairs and labels
-> tokenized, length-aware batches with dynamic padding.

Only this module knows file formats. Everything returns plain values (lists, numpy arrays, dataclasses),
so a test can hand in 20 rows.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import errno
import hashlib
import io
import json
import logging
import math
import os
import re
import stat
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertkit.config.commands import DataOptions
from bertkit.data.presets import preset_origin
from bertkit.errors import UserError, raise_if_problems

log = logging.getLogger(__name__)

LOCAL_SUFFIXES = {".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet"}
DEFAULT_TEXT_COLUMNS = ("sentence", "text", "sentence1", "question", "premise")
MAX_LISTED = 10


# ---------------------------------------------------------------- datasets and labels


@dataclass
class TextDataset:
    """Rows of one split: texts, optional second texts (pairs), optional raw labels, and provenance."""

    texts: list[str]
    pairs: list[str] | None = None
    labels: list[Any] | None = None
    source: str = "<memory>"
    fingerprint: str = ""
    line_numbers: list[int] | None = None
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
        pick = list(indices)
        return TextDataset(
            texts=[self.texts[i] for i in pick],
            pairs=None if self.pairs is None else [self.pairs[i] for i in pick],
            labels=None if self.labels is None else [self.labels[i] for i in pick],
            source=self.source,
            fingerprint=self.fingerprint,
            line_numbers=None if self.line_numbers is None else [self.line_numbers[i] for i in pick],
            task=self.task,
            label_columns=self.label_columns,
        )


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
            return np.asarray(labels, dtype=np.float64)
        if self.task == "multi_label":
            return self._encode_tags(labels, where)
        mapping = {label_key(label): i for i, label in enumerate(self.labels)}
        keys = [label_key(label) for label in labels]
        unseen = sorted({label for label, key in zip(labels, keys, strict=True) if key not in mapping}, key=str)
        if unseen:
            shown = ", ".join(repr(x) for x in unseen[:MAX_LISTED])
            raise UserError(
                f"{where} has labels not seen in the training data: {shown}. Known labels: "
                f"{', '.join(repr(x) for x in self.labels)}. Fix the labels, or train on data that contains them."
            )
        return np.asarray([mapping[key] for key in keys], dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> list[Any]:
        return [self.labels[int(i)] for i in ids]

    def _encode_tags(self, labels: Sequence[Any], where: str) -> np.ndarray:
        index = {str(tag): j for j, tag in enumerate(self.labels)}
        unseen = sorted({str(t) for row in labels for t in row} - set(index))
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
        labels = _normalise_labels(names)  # the same canonical labels the training data had
        return cls(tuple(labels if len(set(labels)) == len(labels) else names))


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


TASKS = ("single_label", "multi_label", "regression")
"""Problem shapes (--task without auto)."""


def task_of_problem_type(problem_type: str | None, num_labels: int) -> str:
    """The TASKS name of a transformers config's problem_type (unset: regression for one output, else single)."""
    if problem_type == "multi_label_classification":
        return "multi_label"
    if problem_type == "regression" or (problem_type is None and num_labels == 1):
        return "regression"
    return "single_label"


@dataclass
class Splits:
    """Train/dev/test datasets with the label mapping built from train, and notes to show the user."""

    train: TextDataset
    dev: TextDataset | None = None
    test: TextDataset | None = None
    label_map: LabelMap | None = None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- reading tables


def is_local_source(source: str) -> bool:
    """A path on disk (or one that looks like a file) rather than a hub dataset name."""
    path = Path(source)
    return path.exists() or path.suffix.lower() in LOCAL_SUFFIXES or source.startswith((".", "/", "~"))


def fingerprint_file(path: Path) -> str:
    """sha256 of the file's bytes: identifies exactly which data a result came from."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32", "utf-32"), (codecs.BOM_UTF32_BE, "UTF-32", "utf-32"),
    (codecs.BOM_UTF16_LE, "UTF-16", "utf-16"), (codecs.BOM_UTF16_BE, "UTF-16", "utf-16"),
)


def _read_file_bytes(path: Path) -> bytes:
    """The bytes of a local data file; every way a path can fail to be a readable, non-empty regular file of a
    supported type is a UserError that says which."""
    try:
        info = path.stat()
    except OSError as exc:
        raise _access_error(path, exc) from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path} is a directory; --data/--dev/--test take a file (.csv, .tsv, .json, .jsonl, .parquet).")
    suffix = path.suffix.lower()
    if suffix not in LOCAL_SUFFIXES:
        raise UserError(
            f"{path}: unsupported file type {suffix or '(none)'}. Supported: {', '.join(sorted(LOCAL_SUFFIXES))}."
        )
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "a device"
        raise UserError(f"{path} is not a regular file but {kind}; bertkit reads data files whole. "
                        f"Save the data to a file and pass that to --data/--dev/--test.")
    if info.st_size == 0:
        raise UserError(f"{path} is empty (0 bytes). Point --data at a file with rows.")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise _access_error(path, exc) from None


def _access_error(path: Path, exc: OSError) -> UserError:
    """A UserError for an OSError met while looking at or reading `path`, with the OS's reason."""
    if exc.errno == errno.ELOOP:
        return UserError(f"{path} is a symlink loop (it leads back to itself through symlinks), so there is no file "
                         f"to read. Point --data/--dev/--test at the real file, or fix the link.")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        if path.is_symlink():
            return UserError(f"{path} is a symlink to {os.readlink(path)}, which does not exist. "
                             f"Check the path given to --data/--dev/--test, or fix the link.")
        return UserError(f"Data file {path} does not exist. Check the path given to --data/--dev/--test.")
    reason = exc.strerror or str(exc)
    fix = ("Make it readable (e.g. chmod u+r), or copy it somewhere you can read it"
           if exc.errno in (errno.EACCES, errno.EPERM) else "Check the file and the disk, or copy it somewhere readable")
    return UserError(f"Cannot read data file {path}: {reason} (OS error {exc.errno}). {fix}, and pass that to --data/--dev/--test.")


def _check_raw_bytes(raw: bytes, path: Path, encoding: str) -> None:
    """Refuse bytes that no --encoding of a text table explains: gzip data, or UTF-16/32 read as something else."""
    if raw[:2] == b"\x1f\x8b":
        raise UserError(f"{path} is gzip-compressed (it starts with the gzip magic bytes 1f 8b). "
                        f"Decompress it first (gunzip -k {path.name}) and pass the uncompressed file.")
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        raise UserError(f"Unknown --encoding {encoding!r}. Use a Python codec name such as utf-8 or latin-1.") from None
    for bom, name, option in BYTE_ORDER_MARKS:
        if raw.startswith(bom) and not codec.startswith(option):
            raise UserError(f"{path} is {name}-encoded (it starts with a {name} byte-order mark), not {encoding}. "
                            f"Pass --encoding {option}, or re-save the file as UTF-8.")


def _decode_text(raw: bytes, path: Path, encoding: str) -> str:
    """The file's text; a leading byte-order mark (UTF-8 with BOM, UTF-16 with --encoding utf-16-le) is dropped."""
    _check_raw_bytes(raw, path, encoding)
    try:
        return raw.decode(encoding).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path} is not valid {encoding}: byte 0x{raw[exc.start]:02x} at line {line} cannot be decoded. "
            f"Pass --encoding with the file's real encoding (e.g. --encoding latin-1), or re-save it as UTF-8."
        ) from None
    except LookupError:  # a codec that is not a text encoding (e.g. base64)
        raise UserError(f"Unknown --encoding {encoding!r}. Use a Python codec name such as utf-8 or latin-1.") from None


def _looks_like_header(first: list[str], rest: pd.DataFrame, label_index: int | None) -> bool:
    """Guess whether the first row of a file read without header is a header row.

    Used only when every column is addressed by index and --header is auto. The label column decides: a header
    cell like `label` is a value that never recurs in a column of few distinct values, or is text in a column
    of numbers.
    """
    if label_index is None or label_index >= len(first) or rest.empty:
        return False
    cell, column = first[label_index], rest.iloc[:, label_index].astype(str)
    numeric = column.str.fullmatch(r"-?\d+(\.\d+)?").mean() > 0.95
    if numeric:
        return not _is_number_text(cell)
    return column.nunique() <= 50 and cell not in set(column)


def read_local_table(path: Path, encoding: str, header: str, by_index: bool, label_index: int | None) -> pd.DataFrame:
    """A local file as a DataFrame of strings (csv/tsv/txt) or native values (json/jsonl/parquet).

    `frame.attrs` carries `fingerprint` (sha256 of the bytes read) and, for csv/tsv/jsonl, `line_numbers`: the
    1-based file line where each row's record starts (quoted fields may span lines; blank lines are skipped).
    """
    raw = _read_file_bytes(path)
    fingerprint = "sha256:" + hashlib.sha256(raw).hexdigest()
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        if raw[:2] == b"\x1f\x8b":
            _check_raw_bytes(raw, path, "utf-8")
        try:
            frame = pd.read_parquet(io.BytesIO(raw))
        except Exception as exc:  # pyarrow raises many types for a bad file
            raise UserError(f"{path} is not a readable parquet file ({exc}). Re-export it.") from None
        frame.attrs["fingerprint"] = fingerprint
        return frame
    text = _decode_text(raw, path, encoding)
    if not text.strip():
        raise UserError(f"{path} contains only whitespace. Point --data at a file with rows.")
    if suffix in {".json", ".jsonl"}:
        frame = _read_json_text(text, path, lines=suffix == ".jsonl")
    else:
        frame = _read_delimited_text(text, path, "," if suffix == ".csv" else "\t", header, by_index, label_index)
    frame.attrs["fingerprint"] = fingerprint
    return frame


def _read_json_text(text: str, path: Path, lines: bool) -> pd.DataFrame:
    numbers = None
    try:
        if lines:
            numbered = [(i, line) for i, line in enumerate(text.split("\n"), start=1) if line.strip()]
            records = [json.loads(line) for _, line in numbered]
            numbers = [i for i, _ in numbered]
        else:
            loaded = json.loads(text)
            records = loaded if isinstance(loaded, list) else pd.DataFrame(loaded).to_dict("records")
    except (json.JSONDecodeError, ValueError) as exc:
        raise UserError(f"{path} is not valid {'JSON Lines' if lines else 'JSON'}: {exc}. Fix the file.") from None
    except RecursionError:
        raise UserError(f"{path} is nested too deeply to read (lists/objects inside each other thousands of levels "
                        f"deep). A data file holds a list of flat objects, one per row, e.g. "
                        f"{{\"text\": ..., \"label\": ...}}; fix or re-export the file.") from None
    if not records or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path} must hold a list of objects (one per row), e.g. {{\"text\": ..., \"label\": ...}}.")
    frame = pd.DataFrame.from_records(records)
    if numbers is not None:
        frame.attrs["line_numbers"] = numbers
    return frame


def _read_delimited_text(
    text: str, path: Path, sep: str, header: str, by_index: bool, label_index: int | None
) -> pd.DataFrame:
    # TSV (GLUE style) has no quoting: quotes are literal characters in sentences.
    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    read_kw: dict[str, Any] = dict(sep=sep, quoting=quoting, dtype=str, keep_default_na=False, engine="c")
    try:
        frame = pd.read_csv(io.StringIO(text), header=None, **read_kw)
    except pd.errors.ParserError as exc:
        raise UserError(
            f"{path} could not be parsed as {'TSV' if sep == chr(9) else 'CSV'}: {exc}. Check the delimiter "
            f"(.tsv files are tab-separated, .csv comma-separated) and that every row has the same number of fields."
        ) from None
    lines = record_lines(text, sep, quoting)
    if lines is None or len(lines) != len(frame):  # a layout the two parsers see differently: number rows plainly
        lines = list(range(1, len(frame) + 1))
    has_header = header == "yes" or (
        header == "auto" and (not by_index or _looks_like_header(list(frame.iloc[0]), frame.iloc[1:200], label_index))
    )
    if has_header:
        names = [str(c) for c in frame.iloc[0]]
        frame = frame.iloc[1:].reset_index(drop=True)
        frame.columns = _unique_names(names)
        lines = lines[1:]
    frame.attrs["line_numbers"] = lines
    if frame.empty:
        raise UserError(f"{path} has a header but no data rows. Add rows, or use --header no if that row is data.")
    return frame


def record_lines(text: str, sep: str, quoting: int) -> list[int] | None:
    """The 1-based line on which each record of a delimited text starts, as pandas splits records: a quoted field
    may span lines, and lines of only spaces/tabs are skipped. None when Python's csv module cannot read it."""
    previous_limit = csv.field_size_limit(sys.maxsize)  # a 1 MB line is a valid (if long) record
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, quoting=quoting)
        starts, last = [], 0
        for row in reader:
            if row and not (len(row) == 1 and row[0] and not row[0].strip(" \t")):
                starts.append(last + 1)
            last = reader.line_num
        return starts
    except csv.Error:
        return None
    finally:
        csv.field_size_limit(previous_limit)


def _unique_names(names: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for name in names:
        out.append(name if not seen[name] else f"{name}.{seen[name]}")
        seen[name] += 1
    return out


def read_hub_split(name: str, config: str | None, split: str, limit: int | None = None) -> pd.DataFrame:
    """One split of a hub dataset as a DataFrame (needs network unless it is cached); with `limit`, only its first
    rows, asked for by split slicing (`train[:N]`) so the rest is never turned into a DataFrame."""
    try:
        import datasets

        dataset = datasets.load_dataset(name, config, split=split if limit is None else f"{split}[:{limit}]")
    except Exception as exc:  # connection, missing dataset, missing config, missing split all land here
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise UserError(
            f"Could not load hub dataset {name!r} (config {config!r}, split {split!r}): {reason}. "
            f"The hub may be unreachable (offline?) or the name/config/split wrong. Use a local file instead: "
            f"--data train.tsv [--dev dev.tsv] with --text-column/--label-column, or run where the hub is reachable."
        ) from None
    return dataset.to_pandas()


# ---------------------------------------------------------------- columns


def resolve_column(frame: pd.DataFrame, selector: str | None, option: str, source: str,
                   preset: str | None = None) -> Any:
    """The DataFrame column a --*-column selector names: a column name, or a 0-based index. `preset`: the
    --task-preset that chose the selector (the message then says so, and how to override it)."""
    columns = list(frame.columns)
    if selector in columns:
        return selector
    if selector is not None and _is_int_text(selector):
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


def _default_column(frame: pd.DataFrame, candidates: tuple[str, ...]) -> Any:
    for name in candidates:
        if name in frame.columns:
            return name
    return None


def _is_int_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def _is_number_text(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INVISIBLE = frozenset("\u115f\u1160\u2800\u3164\uffa0")  # Hangul fillers and the blank braille cell
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})  # controls, zero-width/format marks, spaces


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


def _normalise_labels(values: list[Any]) -> list[Any]:
    """Labels that are equal as numbers are one label: a column of numbers (or number texts) becomes canonical
    numbers (1, 1.0, "1.0" -> 1; "0.50" -> 0.5); any other column becomes strings, its number-like cells written
    canonically ("1.0" -> "1") so they still meet."""
    numbers = [label_number(v) for v in values]
    if all(n is not None for n in numbers):
        return numbers
    return [str(n) if n is not None else str(v).strip() for v, n in zip(values, numbers, strict=True)]


def label_key(label: Any) -> Any:
    """What decides whether two labels are the same class: the canonical number, else the stripped text."""
    number = label_number(label)
    return number if number is not None else str(label).strip()


def is_blank_text(text: str) -> bool:
    """True when a text shows nothing: empty, whitespace, or only invisible characters (zero-width spaces and
    joiners, BOMs, soft hyphens, control characters), which a BERT tokenizer turns into no tokens at all."""
    for char in text:  # returns at the first visible character: cheap for real text
        if not (char.isspace() or char in _INVISIBLE or unicodedata.category(char) in _INVISIBLE_CATEGORIES):
            return False
    return True


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and np.isnan(value):
        return True
    return isinstance(value, str) and (value.strip() in {"", "nan", "NaN", "None", "null"} or is_blank_text(value))


def _is_nested(value: Any) -> bool:
    """A list, tuple, set, dict or array inside one cell (JSON arrays/objects, parquet list columns)."""
    return isinstance(value, (list, tuple, set, dict, np.ndarray))


def _where(rows: list[int], line_numbers: list[int] | None, unit: str = "line") -> str:
    shown = [line_numbers[r] if line_numbers else r for r in rows[:MAX_LISTED]]
    more = f" (+{len(rows) - MAX_LISTED} more)" if len(rows) > MAX_LISTED else ""
    return f"{unit}{'s' if len(rows) > 1 else ''} {', '.join(map(str, shown))}{more}"


# ---------------------------------------------------------------- loading one split


def load_dataset_split(opts: DataOptions, source: str, *, split: str | None = None, need_labels: bool = True,
                       task: str | None = None) -> TextDataset:
    """Read one split (a local file, or `split` of the hub dataset `source`) into a validated TextDataset.

    `task` (TASKS or auto) is the labels' shape; None: the command's --task (auto), or single_label for commands
    that read one class per row."""
    label_parts = _label_selectors(opts) or [None]
    by_index = all(s is None or _is_int_text(s) for s in (opts.text_column, opts.text_pair_column, *label_parts))
    if is_local_source(source):
        path = Path(source).expanduser()
        label_index = int(label_parts[0]) if _is_int_text(label_parts[0]) else None
        frame = read_local_table(path, opts.encoding, opts.header, by_index and opts.text_column is not None, label_index)
        fingerprint = frame.attrs["fingerprint"]
        lines: list[int] | None = list(frame.attrs.get("line_numbers") or range(1, len(frame) + 1))
    else:
        hub_split = split or opts.train_split
        frame = read_hub_split(source, opts.data_config, hub_split, opts.limit)
        fingerprint, lines = f"hub:{source}/{opts.data_config or ''}/{hub_split}", None
        source = f"{source}[{hub_split}]"
    if opts.limit is not None:
        frame = frame.iloc[: opts.limit]
        lines = None if lines is None else lines[: opts.limit]
    wanted = task or getattr(opts, "task", None) or ("auto" if _reads_tags(opts) else "single_label")
    return _dataset_from_frame(frame, opts, source, fingerprint, lines, need_labels, wanted)


def _reads_tags(opts: DataOptions) -> bool:
    """Whether the command reads labels of every shape (its options have --label-sep), not one class per row."""
    return hasattr(opts, "label_sep")


def _label_selectors(opts: DataOptions) -> list[str]:
    """--label-column as a list: several comma-separated 0/1 columns where the command reads tags, else one."""
    if opts.label_column is None:
        return []
    parts = [p.strip() for p in str(opts.label_column).split(",")]
    return parts if _reads_tags(opts) and len(parts) > 1 and all(parts) else [opts.label_column]


@dataclass(frozen=True)
class _Columns:
    text: Any
    pair: Any
    label: Any
    label_option: str
    """How the label column was chosen, for messages: `--label-column` or `the label column found by default`."""
    tag_columns: tuple[Any, ...] = ()
    """Several 0/1 label columns (multi-label data, one column per tag); `label` is then the first."""


def _dataset_from_frame(frame: pd.DataFrame, opts: DataOptions, source: str, fingerprint: str,
                        lines: list[int] | None, need_labels: bool, task: str) -> TextDataset:
    """Validated texts/pairs/labels of a table; every cell problem of the file is reported in one error."""
    cols = _choose_columns(frame, opts, source, need_labels)
    problems: list[str] = []
    texts = _text_cells(frame[cols.text].tolist(), source, "--text-column", cols.text, lines, problems)
    pairs = None
    if cols.pair is not None:
        pairs = _text_cells(frame[cols.pair].tolist(), source, "--text-pair-column", cols.pair, lines, problems)
    labels, columns = None, None
    if cols.label is not None:
        reader = _LabelReader(source, cols, lines, problems, getattr(opts, "label_sep", None), _reads_tags(opts))
        task, labels = reader.read(frame, task)
        columns = tuple(str(c) for c in (cols.tag_columns or (cols.label,)))
    raise_if_problems(problems, f"Problems in the data {source}")
    return TextDataset(texts, pairs, labels, source, fingerprint, lines,
                       task="single_label" if task == "auto" else task, label_columns=columns)


def _choose_columns(frame: pd.DataFrame, opts: DataOptions, source: str, need_labels: bool) -> _Columns:
    """The text, pair and label columns (by flag or by default); one column in two roles is an error."""
    default_text = opts.text_column is None
    text_col = (_default_column(frame, DEFAULT_TEXT_COLUMNS) or frame.columns[0]) if default_text else \
        resolve_column(frame, opts.text_column, "--text-column", source, preset_origin(opts, "text_column"))
    pair_col = None
    if opts.text_pair_column is not None:
        pair_col = resolve_column(frame, opts.text_pair_column, "--text-pair-column", source,
                                  preset_origin(opts, "text_pair_column"))
    label_option, tag_cols = "--label-column", ()
    selectors = _label_selectors(opts)
    if len(selectors) > 1 and opts.label_column not in frame.columns:  # several 0/1 columns, one per tag
        tag_cols = tuple(resolve_column(frame, sel, "--label-column", source) for sel in selectors)
        label_col = tag_cols[0]
    elif opts.label_column is not None:
        label_col = resolve_column(frame, opts.label_column, "--label-column", source,
                                   preset_origin(opts, "label_column"))
    else:
        label_option = "the label column found by default"
        label_col = _default_column(frame, ("label", "labels"))
        if label_col is None and need_labels:
            raise UserError(
                f"No label column in {source}: pass --label-column (columns are: "
                f"{', '.join(map(str, frame.columns))}, or 0-based indexes)."
            )
        if label_col is not None and not need_labels and (
            label_col in (text_col, pair_col) or any(_is_missing(v) or _is_nested(v) for v in frame[label_col])
        ):
            label_col = None  # optional labels: an auto-detected column is used only when complete, single and not a text
    roles = [("--text-column" if not default_text else "the text column chosen by default", text_col),
             ("--text-pair-column", pair_col), *((label_option, c) for c in (tag_cols or (label_col,)))]
    _check_distinct_columns(roles, frame, source)
    return _Columns(text_col, pair_col, label_col, label_option, tag_cols)


_ROLE_FLAGS = {"the text column chosen by default": "--text-column", "the label column found by default": "--label-column"}


def _check_distinct_columns(roles: list[tuple[str, Any]], frame: pd.DataFrame, source: str) -> None:
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


def _nested_problem(nested: list[int], values: list[Any], column: Any, option: str, source: str,
                    lines: list[int] | None, what: str) -> str:
    example = repr(values[nested[0]])
    example = example if len(example) <= 60 else example[:57] + "..."
    return (f"{len(nested)} cell(s) of column {column!r} ({option}) in {source} hold a list or an object instead of "
            f"a single value, at {_where(nested, lines, 'line' if lines else 'row')} (e.g. {example}). {what}")


def _text_cells(values: list[Any], source: str, option: str, column: Any, lines: list[int] | None,
                problems: list[str]) -> list[str]:
    nested = [i for i, v in enumerate(values) if _is_nested(v)]
    if nested:
        problems.append(_nested_problem(nested, values, column, option, source, lines,
                                        "Text cells must be strings: join the pieces into one string per row."))
    texts = ["" if _is_missing(v) or _is_nested(v) else str(v) for v in values]
    skip = set(nested)
    empty = [i for i, t in enumerate(texts) if i not in skip and is_blank_text(t)]
    if empty:
        problems.append(
            f"{len(empty)} empty text cell(s) in {source} ({option}) at {_where(empty, lines, 'line' if lines else 'row')} "
            f"(blank, or only invisible characters such as zero-width spaces). "
            f"Remove those rows or fill them in; a model cannot learn from or embed an empty text."
        )
    return texts


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
    if several_columns or label_sep is not None or any(_is_nested(v) for v in values):
        return "multi_label"
    numbers = [label_number(v) for v in values if not _is_missing(v)]
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
class _LabelReader:
    """The labels of one table, read as its task says; every problem is added to `problems`."""

    source: str
    cols: _Columns
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
        cells = [i for i, v in enumerate(values) if not _is_missing(v)]
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
        missing = [i for i, v in enumerate(values) if i not in skip and _is_missing(v)]
        if missing:
            self.problems.append(
                f"{len(missing)} missing/blank label(s) in {self.source} (--label-column) at "
                f"{_where(missing, self.lines, self._unit)}. Fill them in or drop those rows."
            )
        return bool(missing)

    def _single(self, values: list[Any]) -> list[Any]:
        option = self.cols.label_option if self.cols.label_option.startswith("--") else "--label-column"
        nested = [i for i, v in enumerate(values) if _is_nested(v)]
        if nested:
            how = ("Labels must be single values for single-label data (--task single_label, or a single-label "
                   "model); `bertkit finetune --task auto` (or multi_label) reads tag lists" if self.reads_tags else
                   "Labels must be single values (one class per row); multi-label data is not supported by this "
                   "command (`bertkit finetune` and `evaluate` read tag lists)")
            self.problems.append(_nested_problem(nested, values, self.cols.label, option, self.source, self.lines,
                                                 f"{how}. Keep one label per row, or pick another --label-column."))
        missing = self._missing(values, set(nested))
        return [] if nested or missing else _normalise_labels(values)

    def _numbers(self, values: list[Any]) -> list[Any]:
        missing = self._missing(values, set())
        bad = [i for i, v in enumerate(values) if not _is_missing(v) and label_number(v) is None]
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
                f"{_where(bad, self.lines, self._unit)} (e.g. {shown}). Fix those cells, or, to classify the labels "
                f"as names, fine-tune with --task single_label (or auto)."
            )
        return [] if missing or bad else [float(label_number(v)) for v in values]  # type: ignore[arg-type]

    def _tag_lists(self, values: list[Any]) -> list[Any]:
        """Tag sets from list cells, cells split at --label-sep, or single values (one tag)."""
        missing = self._missing(values, {i for i, v in enumerate(values) if _is_nested(v)})
        rows, empty, nested = [], [], []
        for i, value in enumerate(values):
            items = list(value) if _is_nested(value) and not isinstance(value, dict) else \
                [value] if self.label_sep is None or _is_nested(value) else str(value).split(self.label_sep)
            if any(_is_nested(t) for t in items):
                nested.append(i)
            tags = [str(label_key(t)) for t in items if not _is_missing(t) and not _is_nested(t)]
            rows.append(tuple(dict.fromkeys(tags)))  # each tag once, in the order given
            if not tags and not _is_missing(value):
                empty.append(i)
        if nested:
            self.problems.append(_nested_problem(nested, values, self.cols.label, "--label-column", self.source,
                                                 self.lines, "A tag list holds tag names, not lists or objects."))
        if empty:
            self.problems.append(
                f"{len(empty)} empty tag list(s) in {self.source} (--label-column {self.cols.label}) at "
                f"{_where(empty, self.lines, self._unit)}: every row needs at least one tag. Drop those rows, or give "
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
                f"not, at {_where(rows, self.lines, self._unit)} (e.g. {shown}). Fix them, or list the tags in one "
                f"column with --label-sep."
            )
            return []
        return [tuple(n for n, on in zip(names, row, strict=True) if on) for row in bits]


# ---------------------------------------------------------------- train/dev/test


def _load_named(opts: DataOptions, source: str, need_labels: bool, task: str | None = None) -> TextDataset:
    """A --dev/--test value: a local file, or a split name of the hub dataset given by --data."""
    if opts.data is not None and is_local_source(opts.data) and not is_local_source(source) and "/" not in source:
        # e.g. a hub recipe (`dev = "validation"`) run with `--data train.tsv`: a split name needs a hub --data.
        raise UserError(
            f"--dev/--test {source!r} looks like a split name of a hub dataset, but --data {opts.data} is a local "
            f"file. Pass --dev/--test with local files of the same layout (e.g. --dev dev.tsv)."
        )
    if is_local_source(source) or opts.data is None or is_local_source(opts.data):
        return load_dataset_split(opts, source, need_labels=need_labels, task=task)
    return load_dataset_split(opts, opts.data, split=source, need_labels=need_labels, task=task)


def hold_out_size(n_rows: int, n_classes: int, fraction: float) -> int:
    """Rows held out as dev: ceil(fraction * rows), but at least one per class (a stratified split needs that)."""
    return max(math.ceil(fraction * n_rows), n_classes)


def stratified_split(labels: Sequence[Any], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held_out), deterministic for a seed: `hold_out_size` rows, stratified by label; rows of a
    class with a single row stay in training. Every class keeps a training row, or this is a UserError."""
    from sklearn.model_selection import train_test_split

    labels = list(labels)
    counts = Counter(labels)
    n_held = hold_out_size(len(labels), len(counts), fraction)
    if len(labels) - n_held < len(counts):
        raise UserError(
            f"Too little data to hold out a dev set: {len(labels)} rows of {len(counts)} classes, and the hold-out "
            f"needs {n_held} rows (--dev-fraction {fraction}, at least one per class) while training keeps at least "
            f"one row per class, so at least {n_held + len(counts)} rows are needed. Pass --dev with a dev file, "
            f"or use more data (a larger --limit)."
        )
    indices = np.arange(len(labels))
    single = np.asarray([counts[label] == 1 for label in labels])
    pool, rest = indices[~single], [label for label, one in zip(labels, single, strict=True) if not one]
    train_idx, held_idx = train_test_split(pool, test_size=n_held, random_state=seed, stratify=rest)
    train_idx = np.concatenate([train_idx, indices[single]])
    _check_every_class_trains(labels, train_idx, n_held, fraction)
    return np.sort(train_idx), np.sort(held_idx)


def _check_every_class_trains(labels: list[Any], train_idx: np.ndarray, n_held: int, fraction: float) -> None:
    lost = sorted(set(labels) - {labels[i] for i in train_idx}, key=str)
    if lost:
        raise UserError(
            f"Holding out {n_held} of {len(labels)} rows (--dev-fraction {fraction}) leaves no training row for "
            f"class(es) {', '.join(repr(x) for x in lost[:MAX_LISTED])}. Pass --dev with a dev file, a smaller "
            f"--dev-fraction, or more data."
        )


def load_splits(opts: DataOptions, *, need_labels: bool = True, need_dev: bool = True) -> Splits:
    """Train (from --data), dev (--dev, or a stratified hold-out of train) and test (--test), with the label map.

    The labels' shape (--task, auto-detected on the training data) holds for dev and test too."""
    if opts.data is None:
        raise UserError("No data given: pass --data with a file (.tsv/.csv/.json/.jsonl/.parquet) or a hub dataset name.")
    train = load_dataset_split(opts, opts.data, need_labels=need_labels)
    task = train.task if train.labels is not None else None
    notes: list[str] = []
    dev = _load_named(opts, opts.dev, need_labels, task) if opts.dev else None
    test = _load_named(opts, opts.test, need_labels, task) if opts.test else None
    label_map = None
    if need_labels and train.labels is not None:
        label_map = LabelMap.build(train.labels, train.task, train.label_columns)
        _check_trainable(label_map, train)
        if dev is None and need_dev:
            train, dev, note = _hold_out_dev(train, label_map, opts)
            notes.append(note)
        for name, split in (("dev", dev), ("test", test)):
            if split is not None and split.labels is not None:
                label_map.encode(split.labels, f"The {name} data {split.source}")
    return Splits(train, dev, test, label_map, notes)


def _check_trainable(label_map: LabelMap, train: TextDataset) -> None:
    """A model needs two classes, one tag, or a target that varies."""
    if label_map.task == "single_label" and len(label_map) < 2:
        raise UserError(
            f"Training data {train.source} has a single class ({label_map.labels[0]!r}) in --label-column; "
            f"a classifier needs at least two. Check the label column, or the data file."
        )
    if label_map.task == "multi_label" and len(label_map) == 0:
        raise UserError(f"Training data {train.source} has no tags: every 0/1 label column is all zeros. Check "
                        f"--label-column, or the data file.")
    if label_map.task == "regression" and len(set(train.labels or [])) < 2:
        raise UserError(f"Training data {train.source} has the same target value in every row; a regression needs "
                        f"targets that vary. Check --label-column, or the data file.")


def _hold_out_dev(train: TextDataset, label_map: LabelMap, opts: DataOptions) -> tuple[TextDataset, TextDataset, str]:
    """(train, dev, note): a stratified hold-out for single-label data, a random one for tags and numbers."""
    n_rows = len(train)
    if label_map.task != "single_label":
        train_idx, dev_idx = random_split(n_rows, opts.dev_fraction, opts.seed)
        note = (f"No --dev given: held out {len(dev_idx)} of {n_rows} training rows as dev (random, "
                f"--dev-fraction {opts.dev_fraction}, seed {opts.seed}).")
        return train.subset(train_idx), train.subset(dev_idx), note
    train_idx, dev_idx = stratified_split(train.labels or [], opts.dev_fraction, opts.seed)
    raised = math.ceil(opts.dev_fraction * n_rows) < len(dev_idx)
    note = (
        f"No --dev given: held out {len(dev_idx)} of {n_rows} training rows as dev "
        f"(stratified, --dev-fraction {opts.dev_fraction}, seed {opts.seed})"
        + (f"; raised from {math.ceil(opts.dev_fraction * n_rows)} to one row per class "
           f"({len(label_map)} classes): a dev set this small says little, pass --dev for a real one."
           if raised else ".")
    )
    return train.subset(train_idx), train.subset(dev_idx), note


def random_split(n_rows: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held_out), deterministic for a seed: ceil(fraction * rows) random rows held out (at least one;
    at least one left to train on, or a UserError)."""
    n_held = max(math.ceil(fraction * n_rows), 1)
    if n_rows - n_held < 1:
        raise UserError(f"Too little data to hold out a dev set: {n_rows} row(s). Pass --dev with a dev file, or use "
                        f"more data.")
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


# ---------------------------------------------------------------- tokenization and batching


@dataclass
class Encoded:
    """Token ids per row (unpadded), their lengths, and how many rows were truncated."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    lengths: np.ndarray
    full_lengths: np.ndarray
    """Lengths before truncation (for length reports)."""
    max_length: int

    @property
    def n_truncated(self) -> int:
        return int((self.full_lengths > self.max_length).sum())


@contextlib.contextmanager
def quiet_length_warnings() -> Iterator[None]:
    """Silence transformers' "longer than the maximum" warning: bertkit counts and reports cut rows per dataset."""
    quiet = logging.getLogger("transformers.tokenization_utils_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)


def encode_dataset(tokenizer: Any, dataset: TextDataset, max_length: int, chunk: int = 4096, *,
                   truncation: str = "head") -> Encoded:
    """Tokenize every row (pairs as true pairs) with truncation to `max_length`; no padding.

    Rows are first tokenized untruncated to count truncation; only over-long rows are cut. `truncation` says
    which tokens an over-long row keeps (`--truncation`): head (the tokenizer's own truncation, as always), tail,
    or head+tail (see `longtext.kept_positions`); special tokens are kept either way.
    """
    want_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    ids: list[list[int]] = []
    types: list[list[int]] | None = [] if want_types else None
    full: list[int] = []
    with quiet_length_warnings():
        for start in range(0, len(dataset), chunk):
            part = dataset.subset(range(start, min(start + chunk, len(dataset))))
            enc = tokenizer(part.texts, part.pairs, truncation=False, return_token_type_ids=want_types)
            long_rows = [i for i, row in enumerate(enc["input_ids"]) if len(row) > max_length]
            full.extend(len(row) for row in enc["input_ids"])
            if long_rows and truncation == "head":
                cut = tokenizer(
                    [part.texts[i] for i in long_rows],
                    None if part.pairs is None else [part.pairs[i] for i in long_rows],
                    truncation=True, max_length=max_length, return_token_type_ids=want_types,
                )
                for j, i in enumerate(long_rows):
                    enc["input_ids"][i] = cut["input_ids"][j]
                    if want_types:
                        enc["token_type_ids"][i] = cut["token_type_ids"][j]
            elif long_rows:
                from bertkit.encoding.longtext import truncate_row

                for i in long_rows:
                    row_types = enc["token_type_ids"][i] if want_types else None
                    enc["input_ids"][i], kept_types = truncate_row(enc["input_ids"][i], row_types, enc.sequence_ids(i),
                                                                   max_length, truncation)
                    if want_types:
                        enc["token_type_ids"][i] = kept_types
            ids.extend(enc["input_ids"])
            if types is not None:
                types.extend(enc["token_type_ids"])
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    return Encoded(ids, types, lengths, np.asarray(full, dtype=np.int64), max_length)


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Inference batches: rows sorted by length, longest first (memory peaks show up at once)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def token_budget_batches(lengths: np.ndarray, max_tokens: int, max_rows: int) -> list[np.ndarray]:
    """Inference batches by padded-token budget: long rows in small batches, short rows in big ones."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, start = [], 0
    while start < len(order):
        longest = int(lengths[order[start]])
        size = max(1, min(max_rows, max_tokens // max(longest, 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def grouped_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, group: int = 50) -> list[np.ndarray]:
    """Training batches: shuffled, then sorted by length within groups of `group` batches, batch order shuffled.

    Rows of similar length share a batch (little padding) while every epoch sees a new random order.
    Deterministic for (seed, epoch).
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    batches: list[np.ndarray] = []
    span = batch_size * group
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)  # type: ignore[arg-type]
    return batches


def pad_batch(encoded: Encoded, indices: Sequence[int], pad_id: int, pad_to: int | None = None,
              multiple_of: int | None = None) -> dict[str, Any]:
    """Tensors for the rows at `indices`, padded to the longest of them (dynamic) or to `pad_to` (static);
    `multiple_of` rounds the dynamic width up (8 suits GPU tensor cores)."""
    import torch

    rows = [encoded.input_ids[i] for i in indices]
    width = pad_to or max(len(r) for r in rows)
    if multiple_of and not pad_to:
        width = -(-width // multiple_of) * multiple_of
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for j, row in enumerate(rows):
        input_ids[j, : len(row)] = row
        mask[j, : len(row)] = 1
    batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
    if encoded.token_type_ids is not None:
        types = np.zeros((len(rows), width), dtype=np.int64)
        for j, i in enumerate(indices):
            row = encoded.token_type_ids[i]
            types[j, : len(row)] = row
        batch["token_type_ids"] = torch.from_numpy(types)
    return batch


def restore_order(batches: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> np.ndarray:
    """Stack per-batch outputs (rows in batch order) back into the original row order."""
    order = np.concatenate(batches)
    stacked = np.concatenate(outputs)
    result = np.empty_like(stacked)
    result[order] = stacked
    return result
