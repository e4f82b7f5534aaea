"""Reading tables: local csv/tsv/txt/json/jsonl/parquet files (bytes, encodings, byte-order marks, header
detection, the file line of each row, the content fingerprint) and hub dataset splits. Only this module knows
file formats; it returns DataFrames and never judges their cells."""

from __future__ import annotations

import codecs
import csv
import errno
import hashlib
import io
import json
import os
import stat
import sys
from collections import Counter
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
        return not is_number_text(cell)
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
