"""What a local data file must be before it is parsed (a readable regular file of a known type, bytes its\n--encoding reads), header detection, the file line of each delimited record, JSON documents, and hub dataset\nsplits. `bertkit.data.ingest` streams files through these into the Arrow cache; nothing here judges cells."""

from __future__ import annotations

import codecs
import csv
import errno
import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from bertkit.data.cells import is_number_text
from bertkit.errors import UserError

LOCAL_SUFFIXES = {".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet"}
HEADER_MODES = ("auto", "yes", "no")
"""--header: whether the first row of a CSV/TSV file is a header (auto guesses)."""


def is_local_source(source: str) -> bool:
    """A path on disk (or one that looks like a file) rather than a hub dataset name."""
    path = Path(source)
    return path.exists() or path.suffix.lower() in LOCAL_SUFFIXES or source.startswith((".", "/", "~"))


BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32", "utf-32"), (codecs.BOM_UTF32_BE, "UTF-32", "utf-32"),
    (codecs.BOM_UTF16_LE, "UTF-16", "utf-16"), (codecs.BOM_UTF16_BE, "UTF-16", "utf-16"),
)


def check_data_file(path: Path) -> int:
    """The size of a local data file; every way a path can fail to be a readable, non-empty regular file of a
    supported type is a UserError that says which."""
    try:
        info = path.stat()
    except OSError as exc:
        raise access_error(path, exc) from None
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
    if not os.access(path, os.R_OK):
        raise access_error(path, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    return int(info.st_size)


def access_error(path: Path, exc: OSError) -> UserError:
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


def check_raw_bytes(raw: bytes, path: Path, encoding: str) -> None:
    """Refuse bytes that no --encoding of a text table explains: gzip data, or UTF-16/32 read as something else."""
    if raw[:2] == b"\x1f\x8b":
        raise UserError(f"{path} is gzip-compressed (it starts with the gzip magic bytes 1f 8b). "
                        f"Decompress it first (gunzip -k {path.name}) and pass the uncompressed file.")
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):  # e.g. base64: bytes to bytes, not text
        raise UserError(f"Unknown --encoding {encoding!r}. Use a Python codec name such as utf-8 or latin-1.") from None
    codec = info.name
    for bom, name, option in BYTE_ORDER_MARKS:
        if raw.startswith(bom) and not codec.startswith(option):
            raise UserError(f"{path} is {name}-encoded (it starts with a {name} byte-order mark), not {encoding}. "
                            f"Pass --encoding {option}, or re-save the file as UTF-8.")


def looks_like_header(first: list[str], rest: pd.DataFrame, label_index: int | None) -> bool:
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
        return not is_number_text(cell)
    return column.nunique() <= 50 and cell not in set(column)


def json_frame(text: str, path: Path, lines: bool) -> pd.DataFrame:
    """A JSON (a list of objects) or JSON Lines text as a DataFrame; for JSON Lines `frame.attrs["line_numbers"]`
    holds each record's file line (blank lines are skipped)."""
    if not text.strip():
        raise UserError(f"{path} contains only whitespace. Point --data at a file with rows.")
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


def record_lines(text: str, sep: str, quoting: int) -> list[int] | None:
    """The 1-based line on which each record of a delimited text starts (see `iter_record_lines`); None when Python's
    csv module cannot read it."""
    try:
        return list(_record_starts(io.StringIO(text, newline=""), sep, quoting))
    except csv.Error:
        return None


def iter_record_lines(stream: Any, sep: str, quoting: int) -> Iterator[int]:
    """The 1-based line on which each record of a delimited text stream starts, as pandas splits records: a quoted
    field may span lines, and lines of only spaces/tabs are skipped. Stops early where Python's csv module cannot
    read on (the caller then sees too few lines and numbers rows plainly)."""
    try:
        yield from _record_starts(stream, sep, quoting)
    except csv.Error:
        return


def _record_starts(stream: Any, sep: str, quoting: int) -> Iterator[int]:
    previous_limit = csv.field_size_limit(sys.maxsize)  # a 1 MB line is a valid (if long) record
    try:
        reader = csv.reader(stream, delimiter=sep, quoting=quoting)
        last = 0
        for row in reader:
            if row and not (len(row) == 1 and row[0] and not row[0].strip(" \t")):
                yield last + 1
            last = reader.line_num
    finally:
        csv.field_size_limit(previous_limit)


def read_hub_split(name: str, config: str | None, split: str, limit: int | None = None) -> Any:
    """One split of a hub dataset, a `datasets.Dataset` memory-mapped from the hub cache (needs network unless it is
    cached); with `limit`, only its first rows, asked for by split slicing (`train[:N]`)."""
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
    return dataset
