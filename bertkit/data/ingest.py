"""Input files parsed once into the Arrow cache: `local_table` streams a .csv/.tsv/.txt (pandas' C parser, a chunk
at a time) or .parquet file (its record batches) into an Arrow IPC file under the cache folder, keyed by the
file's content fingerprint and the reading options, and opens it memory-mapped; later commands, a resume and
every process of `accelerate launch` open the same file. JSON and JSON Lines files are parsed whole once (a JSON
document is one value) and cached the same way. `hub_table` wraps a hub split's own memory-mapped Arrow table.

Only one chunk of the file is ever held as Python values; the fingerprint and the encoding check stream the
bytes. Nothing here judges cells: `bertkit.data.splits` does.

Every entry is verified before it is read: meta.json records the size and sha256 of rows.arrow (hashed as it is
written), and an entry whose meta.json is unreadable, whose rows.arrow differs from that record (a changed row, a
truncated file) or cannot be opened is parsed again from the input, with a warning, never read as the data.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from bertkit.data import sources
from bertkit.data.cachedir import cache_root, entry_lock
from bertkit.data.table import LINE_FIELD, RowTable
from bertkit.errors import UserError
from bertkit.io import digests, disk
from bertkit.io.atomic import scratch_folder

log = logging.getLogger(__name__)

CACHE_VERSION = 2
"""Bumped when the cached layout changes: older entries are then parsed again (2: meta.json records rows.arrow's
digest)."""
ROWS_FILE = "rows.arrow"
META_FILE = "meta.json"
META_KEYS = ("columns", "rows", "line_mode", "digest")
PARSE_ROWS = 65_536
"""Rows pandas parses at a time (one Arrow record batch)."""
BLOCK = 1 << 20


def local_table(path: Path, encoding: str, header: str, by_index: bool, label_index: int | None,
                cache_dir: str | None = None) -> tuple[RowTable, str]:
    """(the parsed file, memory-mapped from the cache; its fingerprint "sha256:..."). Parsed on first use."""
    size = sources.check_data_file(path)
    fingerprint = scan_bytes(path, encoding)
    options = {"fingerprint": fingerprint, "suffix": path.suffix.lower(), "encoding": encoding, "header": header,
               "by_index": by_index, "label_index": label_index, "version": CACHE_VERSION}
    key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:40]
    root = cache_root(cache_dir)
    folder = root / "tables" / key
    with entry_lock(root, key, path):  # one writer per entry: a second process waits, then reads the first one's
        table, problem = cached_table(folder)
        parsed_now = table is None
        if parsed_now:
            if problem is not None:
                aside = _set_aside(folder)
                log.warning("The cached copy of %s in %s failed verification (%s); parsing the file again. The "
                            "changed copy is kept as %s (delete it when you have looked).", path, folder, problem,
                            aside)
            _build(folder, path, size, options)
            table, problem = cached_table(folder)
            if table is None:
                raise UserError(f"The cache entry {folder} for {path} cannot be read back right after it was "
                                f"written ({problem}). Pass --cache-dir with a folder on a working disk (or set "
                                f"BERTKIT_CACHE_DIR).")
    if parsed_now and size >= NOTE_BYTES:
        table.note = (f"Parsed {path} ({len(table):,} rows) once into the cache {folder} "
                      f"({_folder_mb(folder):,.0f} MB; --cache-dir or BERTKIT_CACHE_DIR moves it): later commands "
                      f"and resumes read it memory-mapped.")
    return table, fingerprint


NOTE_BYTES = 64 << 20
"""Inputs from this size on get a note saying where their parsed copy went (and its size)."""


def cached_table(folder: Path) -> tuple[RowTable | None, str | None]:
    """(the entry in `folder`, memory-mapped, None) once meta.json reads and rows.arrow matches its recorded size
    and sha256 (one streaming pass); (None, why not) otherwise ((None, None): there is no entry yet)."""
    if not (folder / META_FILE).is_file():
        return None, None
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"its {META_FILE} is not valid JSON: {exc}"
    if not isinstance(meta, dict) or any(k not in meta for k in META_KEYS):
        return None, f"its {META_FILE} lacks {', '.join(k for k in META_KEYS if k not in (meta or {}))}"
    problem = digests.record_problem(folder / ROWS_FILE, meta["digest"])
    if problem is not None:
        return None, f"{ROWS_FILE}: {problem}"
    try:
        table = RowTable.open(folder / ROWS_FILE, meta)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        return None, f"{ROWS_FILE} cannot be read: {exc}"
    if len(table) != meta["rows"] or len(table.columns) != len(meta["columns"]):
        return None, f"{ROWS_FILE} holds {len(table)} rows, its {META_FILE} says {meta['rows']}"
    return table, None


def _set_aside(folder: Path) -> Path | None:
    """Move an entry that failed verification out of the way (renamed, bytes kept: bertkit removes only files whose
    recorded digest still matches), so the rebuilt one takes its name; where it went, or None when another process
    moved it first."""
    aside = folder.with_name(f".failed-{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(folder, aside)
    except OSError:
        return None
    return aside


def _folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir()) / (1 << 20)


def _build(folder: Path, path: Path, size: int, options: dict[str, Any]) -> None:
    """Parse `path` into `folder` (rows.arrow + meta.json), atomically: a temp folder renamed into place, so a
    killed parse leaves nothing a later command would trust, and two processes parsing at once both end with one
    complete entry."""
    parent = folder.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot create the cache folder {parent}: {exc.strerror or exc}. Pass --cache-dir with a "
                        f"writable folder (or set BERTKIT_CACHE_DIR).") from None
    disk.check_free(parent, disk.with_margin(2 * size))  # the cells once, plus line numbers and Arrow offsets
    try:
        with scratch_folder(folder, role="tmp") as tmp:
            meta = _parse_into(tmp / ROWS_FILE, path, options)
            (tmp / META_FILE).write_text(json.dumps({**meta, "source": str(path), **options}))
            try:
                os.replace(tmp, folder)
            except OSError:  # another process finished the same entry first: keep theirs
                if not (folder / META_FILE).is_file():
                    raise
    except OSError as exc:
        if disk.is_disk_full(exc):
            raise disk.full_error(parent, disk.with_margin(2 * size)) from None
        raise


def _parse_into(target: Path, path: Path, options: dict[str, Any]) -> dict[str, Any]:
    suffix = options["suffix"]
    if suffix == ".parquet":
        return _parquet_into(target, path)
    if suffix in {".json", ".jsonl"}:
        return _json_into(target, path, options["encoding"], suffix == ".jsonl")
    return _delimited_into(target, path, options)


# ---------------------------------------------------------------- bytes: fingerprint and encoding


def scan_bytes(path: Path, encoding: str) -> str:
    """The file's sha256 fingerprint, streamed; refuses bytes the encoding cannot read (which byte, which line),
    gzip data, a foreign byte-order mark and a file of only whitespace (parquet: the gzip check only)."""
    digest = hashlib.sha256()
    text_file = path.suffix.lower() != ".parquet"
    decoder, visible, offset = None, False, 0
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(BLOCK), b""):
                if offset == 0:
                    sources.check_raw_bytes(block, path, encoding if text_file else "utf-8")
                    decoder = codecs.getincrementaldecoder(encoding)("strict") if text_file else None
                digest.update(block)
                if decoder is not None:
                    text = _decode_block(decoder, block, offset, path, encoding)
                    visible = visible or bool(text.replace("\ufeff", "").strip())
                offset += len(block)
            if decoder is not None:
                visible = visible or bool(_decode_block(decoder, b"", offset, path, encoding, final=True).strip())
    except OSError as exc:
        raise sources.access_error(path, exc) from None
    if text_file and not visible:
        raise UserError(f"{path} contains only whitespace. Point --data at a file with rows.")
    return "sha256:" + digest.hexdigest()


def _decode_block(decoder: Any, block: bytes, offset: int, path: Path, encoding: str, final: bool = False) -> str:
    pending = len(decoder.getstate()[0])
    try:
        return decoder.decode(block, final)
    except UnicodeDecodeError as exc:
        position = offset - pending + exc.start
        raise UserError(
            f"{path} is not valid {encoding}: byte 0x{exc.object[exc.start]:02x} at line {_line_at(path, position)} "
            f"cannot be decoded. Pass --encoding with the file's real encoding (e.g. --encoding latin-1), or re-save "
            f"it as UTF-8."
        ) from None


def _line_at(path: Path, position: int) -> int:
    """The 1-based line holding byte `position` (counted by streaming the bytes before it)."""
    newlines, seen = 0, 0
    with open(path, "rb") as handle:
        while seen < position:
            block = handle.read(min(BLOCK, position - seen))
            if not block:
                break
            newlines += block.count(b"\n")
            seen += len(block)
    return newlines + 1


def _text_stream(path: Path, encoding: str) -> Any:
    """The file as text, without a leading byte-order mark, newlines untranslated (the csv module's way)."""
    stream = open(path, encoding=encoding, newline="")  # noqa: SIM115 - the caller closes it
    if stream.read(1) != "\ufeff":
        stream.seek(0)
    return stream


# ---------------------------------------------------------------- delimited text


def _delimited_into(target: Path, path: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Stream a csv/tsv/txt file through pandas' C parser into Arrow string columns (a missing field is null),
    with the file line each record starts on (`sources.record_lines`' rules, streamed alongside)."""
    sep, quoting = sources.delimiter(options["suffix"])
    read_kw: dict[str, Any] = dict(sep=sep, quoting=quoting, dtype=str, keep_default_na=False, engine="c",
                                   header=None, chunksize=PARSE_ROWS)
    writer, names, rows, has_header = None, None, 0, False
    with _text_stream(path, options["encoding"]) as text, _text_stream(path, options["encoding"]) as again:
        lines = _LineFeed(sources.iter_record_lines(again, sep, quoting))
        try:
            for k, frame in enumerate(pd.read_csv(text, **read_kw)):
                line_numbers = lines.take(len(frame))
                if k == 0:
                    has_header = _has_header(frame, options)
                    names = sources.unique_names([str(c) for c in frame.iloc[0]]) if has_header else list(frame.columns)
                    if has_header:
                        frame, line_numbers = frame.iloc[1:], line_numbers[1:]
                    writer = _ArrowWriter(target, len(names))
                writer.write([frame.iloc[:, j] for j in range(len(names))], line_numbers)
                rows += len(frame)
        except pd.errors.ParserError as exc:
            raise UserError(
                f"{path} could not be parsed as {'TSV' if sep == chr(9) else 'CSV'}: {exc}. Check the delimiter "
                f"(.tsv files are tab-separated, .csv comma-separated) and that every row has the same number of "
                f"fields."
            ) from None
        finally:
            if writer is not None:
                writer.close()
        exact = lines.exhausted_at_end()
    if rows == 0:
        raise UserError(f"{path} has a header but no data rows. Add rows, or use --header no if that row is data.")
    return {"columns": names, "rows": rows, "json_cells": False, "line_mode": "column" if exact else "plain",
            "header_rows": int(has_header), "digest": writer.digest}


def _has_header(first: pd.DataFrame, options: dict[str, Any]) -> bool:
    label_index = options["label_index"]
    rest = first.iloc[1:sources.HEADER_GUESS_ROWS]
    return sources.has_header(options["header"], options["by_index"], [str(c) for c in first.iloc[0]],
                              lambda: [str(v) for v in rest.iloc[:, label_index]], label_index)


class _LineFeed:
    """Record start lines from a generator, taken in step with pandas' chunks; when the two parsers disagree on
    the number of records (a layout they read differently), rows are numbered plainly instead."""

    def __init__(self, lines: Iterator[int] | None) -> None:
        self.lines, self.agree, self.next_plain = lines, lines is not None, 1

    def take(self, n: int) -> np.ndarray:
        got: list[int] = []
        if self.agree:
            for line in self.lines:  # type: ignore[union-attr]
                got.append(line)
                if len(got) == n:
                    break
            self.agree = len(got) == n
        first = self.next_plain
        self.next_plain += n
        return np.asarray(got, dtype=np.int64) if self.agree else np.arange(first, first + n, dtype=np.int64)

    def exhausted_at_end(self) -> bool:
        return self.agree and next(self.lines, None) is None  # type: ignore[arg-type]


class _ArrowWriter:
    """Record batches of string cells plus the line column into an Arrow IPC file, hashed as it is written
    (`digest` once closed)."""

    def __init__(self, target: Path, n_columns: int, types: list[pa.DataType] | None = None) -> None:
        fields = [pa.field(str(j), t) for j, t in enumerate(types or [pa.string()] * n_columns)]
        self.schema = pa.schema([*fields, pa.field(LINE_FIELD, pa.int64())])
        self.file = open(target, "wb")  # noqa: SIM115 - closed in close()
        self.hashing = digests.HashingWriter(self.file)
        self.sink = pa.PythonFile(self.hashing, mode="w")
        self.writer = pa.ipc.new_file(self.sink, self.schema)
        self.digest: dict[str, Any] | None = None

    def write(self, columns: list[Any], line_numbers: np.ndarray) -> None:
        arrays = [pa.array(c, type=f.type, from_pandas=True) for c, f in zip(columns, self.schema, strict=False)]
        self.writer.write_batch(pa.record_batch([*arrays, pa.array(line_numbers, pa.int64())], schema=self.schema))

    def close(self) -> None:
        try:
            self.writer.close()
            self.sink.close()
            self.digest = self.hashing.record()
        finally:
            self.file.close()


# ---------------------------------------------------------------- parquet and JSON


def _parquet_into(target: Path, path: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        types = [f.type for f in parquet.schema_arrow]
        names = list(parquet.schema_arrow.names)
        writer, rows = _ArrowWriter(target, len(names), types), 0
        try:
            for batch in parquet.iter_batches(batch_size=PARSE_ROWS):
                writer.write(list(batch.columns), np.arange(rows + 1, rows + batch.num_rows + 1))
                rows += batch.num_rows
        finally:
            writer.close()
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"{path} is not a readable parquet file ({exc}). Re-export it.") from None
    return {"columns": names, "rows": rows, "json_cells": False, "line_mode": "plain", "header_rows": 0,
            "digest": writer.digest}


def _json_into(target: Path, path: Path, encoding: str, lines: bool) -> dict[str, Any]:
    """JSON is read whole (one document), as before; its cells are cached as JSON texts, so a column that mixes
    numbers, names and lists keeps each cell as written."""
    with _text_stream(path, encoding) as stream:
        frame = sources.json_frame(stream.read(), path, lines)
    numbers = frame.attrs.get("line_numbers") or range(1, len(frame) + 1)
    digest = write_frame(target, frame, np.asarray(numbers, dtype=np.int64))
    return {"columns": [str(c) for c in frame.columns], "rows": len(frame), "json_cells": True,
            "line_mode": "column" if lines else "plain", "header_rows": 0, "digest": digest}


def write_frame(target: Path, frame: pd.DataFrame, line_numbers: np.ndarray) -> dict[str, Any]:
    """A DataFrame of any cells as JSON-text columns, in PARSE_ROWS batches; the file's record (size, sha256)."""
    writer = _ArrowWriter(target, len(frame.columns))
    try:
        for start in range(0, len(frame), PARSE_ROWS):
            part = frame.iloc[start:start + PARSE_ROWS]
            writer.write([[json_cell(v) for v in part.iloc[:, j].tolist()] for j in range(len(frame.columns))],
                         line_numbers[start:start + PARSE_ROWS])
    finally:
        writer.close()
    assert writer.digest is not None
    return writer.digest


def json_cell(value: Any) -> str | None:
    """A cell as JSON text (None for a missing one: NaN from a key some rows lack, or null)."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return json.dumps(value, ensure_ascii=False, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def hub_table(dataset: Any) -> RowTable:
    """A hub split (a `datasets.Dataset`, memory-mapped from the hub cache) as a RowTable, zero-copy."""
    table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
    return RowTable(table, list(dataset.column_names), lines=None)
