"""What a local data file must be before it is parsed (a readable regular file of a known type, bytes its\n--encoding reads), header detection, the file line of each delimited record, JSON documents, and hub dataset\nsplits. `bertkit.data.ingest` streams files through these into the Arrow cache; nothing here judges cells."""

from __future__ import annotations

import codecs
import csv
import errno
import io
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.data.cells import is_number_text
from bertkit.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

LOCAL_SUFFIXES = {".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet"}
HEADER_MODES = ("auto", "yes", "no")
"""--header: whether the first row of a CSV/TSV file is a header (auto guesses)."""


@dataclass(frozen=True)
class DataSource:
    """Where a split is read from: a local file (`split` None), or a split of a hub dataset (tagged corpora and
    question sets read their sources alike)."""

    name: str
    """The file, or the hub dataset."""
    split: str | None = None
    config: str | None = None
    """The hub dataset's configuration (--data-config)."""

    @property
    def is_hub(self) -> bool:
        return self.split is not None

    def __str__(self) -> str:
        return f"{self.name}[{self.split}]" if self.is_hub else self.name


def json_objects(lines: Iterable[tuple[int, str]], path: Path, valid: str) -> Iterator[tuple[int, Any]]:
    """(line number, object) of each non-blank line of a JSON lines file; a line that is not JSON refused naming the
    file and the line (`valid`: what a line holds, for the message)."""
    for number, line in lines:
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(f"{path} line {number} is not a JSON object ({error}). Valid: {valid}. Fix that "
                                f"line.") from None


def is_local_source(source: str) -> bool:
    """A path on disk (or one that looks like a file) rather than a hub dataset name."""
    path = Path(source)
    if path.suffix.lower() in LOCAL_SUFFIXES or source.startswith((".", "/", "~")):
        return True
    try:
        return path.exists()
    except OSError:  # a name this system cannot stat (too long): a path all the same, refused as one by its reader
        return True


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


def delimiter(suffix: str) -> tuple[str, int]:
    """(separator, csv quoting) of a delimited file: .csv is comma-separated with quoted fields; .tsv and .txt are
    tab-separated and a quote is text."""
    sep = "," if suffix == ".csv" else "\t"
    return sep, csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL


HEADER_GUESS_ROWS = 200
"""The rows (the first one included) a header guess looks at."""
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def has_header(header: str, by_index: bool, first: list[str], column: Callable[[], list[str]],
               label_index: int | None) -> bool:
    """Whether the first row of a CSV/TSV file is its header: --header yes/no; auto: yes unless every column is
    addressed by index, when `looks_like_header` guesses from the label column's next cells (`column()`: as text, a
    missing one as "nan")."""
    if header != "auto":
        return header == "yes"
    if not by_index:
        return True
    if label_index is None or label_index >= len(first):
        return False
    return looks_like_header(first[label_index], column())


def looks_like_header(cell: str, column: list[str]) -> bool:
    """Guess whether `cell`, the first row's label cell of a file read without header, is a header cell: a value
    that never recurs in a column of few distinct values, or text in a column of numbers (`column`: the cells
    below it)."""
    if not column:
        return False
    numeric = sum(1 for value in column if _NUMBER.fullmatch(value)) / len(column) > 0.95
    if numeric:
        return not is_number_text(cell)
    distinct = set(column)
    return len(distinct) <= 50 and cell not in distinct


def unique_names(names: list[str]) -> list[str]:
    """Header cells as column names, a repeated one numbered as pandas does (`label`, `label.1`)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        out.append(name if not seen.get(name) else f"{name}.{seen[name]}")
        seen[name] = seen.get(name, 0) + 1
    return out


JSON_PEEK_BYTES = 32 << 20
"""A JSON file up to this size is read whole to learn its columns before the command's real work starts."""


def column_names(path: Path, encoding: str, header: str, by_index: bool, label_index: int | None) -> list[Any] | None:
    """The column names that parsing the data file `path` gives (`bertkit.data.ingest`), learnt cheaply: a CSV/TSV
    file's first records (the header, or its width: columns 0..N-1), a parquet file's schema, a JSON file of up to
    `JSON_PEEK_BYTES` read whole. None where that is not cheap or not sure (bytes the --encoding does not read, a
    row the csv module cannot split, a large JSON file): the parse itself then says what is wrong."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        if suffix in {".json", ".jsonl"}:
            if path.stat().st_size > JSON_PEEK_BYTES:
                return None
            with open(path, encoding=encoding, newline="") as stream:
                text = stream.read().removeprefix("\ufeff")
            return [str(c) for c in json_frame(text, path, suffix == ".jsonl").columns]
        return _delimited_names(path, encoding, header, by_index, label_index)
    except (OSError, UnicodeError, LookupError, csv.Error):
        return None
    except Exception as exc:  # pyarrow's own errors: the parse reports an unreadable parquet file
        if type(exc).__module__.startswith("pyarrow"):
            return None
        raise


def _delimited_names(path: Path, encoding: str, header: str, by_index: bool, label_index: int | None) -> list[Any] | None:
    sep, quoting = delimiter(path.suffix.lower())
    rows: list[list[str]] = []
    previous_limit = csv.field_size_limit(sys.maxsize)
    try:
        with open(path, encoding=encoding, newline="") as stream:
            if stream.read(1) != "\ufeff":
                stream.seek(0)
            for row in csv.reader(stream, delimiter=sep, quoting=quoting):
                if not _blank_record(row):
                    rows.append(row)
                if len(rows) >= HEADER_GUESS_ROWS:
                    break
    finally:
        csv.field_size_limit(previous_limit)
    if not rows:
        return None
    first = rows[0]

    def label_cells() -> list[str]:
        assert label_index is not None
        return [row[label_index] if label_index < len(row) else "nan" for row in rows[1:]]

    if has_header(header, by_index, first, label_cells, label_index):
        return unique_names(first)
    return list(range(len(first)))


def _blank_record(row: list[str]) -> bool:
    """A record pandas skips: an empty line, or one of only spaces/tabs."""
    return not row or (len(row) == 1 and bool(row[0]) and not row[0].strip(" \t"))


def json_frame(text: str, path: Path, lines: bool) -> pd.DataFrame:
    """A JSON (a list of objects) or JSON Lines text as a DataFrame; for JSON Lines `frame.attrs["line_numbers"]`
    holds each record's file line (blank lines are skipped)."""
    import pandas as pd

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
            if not _blank_record(row):
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
        script = ("That dataset is a loading script, which `datasets` 4 and later no longer run: pass a copy of it "
                  "in parquet (on the hub, e.g. lhoestq/conll2003 for conll2003) or a local file. "
                  if "scripts are no longer supported" in reason else "")
        raise UserError(
            f"Could not load hub dataset {name!r} (config {config!r}, split {split!r}): {reason}. {script}"
            f"The hub may be unreachable (offline?) or the name/config/split wrong. Use a local file instead: "
            f"--data train.tsv [--dev dev.tsv] with --text-column/--label-column, or run where the hub is reachable."
        ) from None
    return dataset
