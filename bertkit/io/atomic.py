"""Atomic file writes and JSON for results.

Every write goes to a temp file in the same directory and is renamed into place, so a killed process never leaves a
partial file where a complete one should be. Below a run directory this process claimed, the temp file is recorded
before it is made (a unique name) and the new file's size and digest before the rename (`bertkit.io.record`), so a
later run removes exactly the temp files a killed run left, and replaces only files bertkit wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bertkit.errors import UserError
from bertkit.io import record


class JsonRecord:
    """A typed record read from a JSON object (its `record` field) that writes that object back unchanged: results
    keep the JSON they always had while their readers use attributes."""

    JSON_RECORD: ClassVar[bool] = True
    record: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.record


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if getattr(type(value), "JSON_RECORD", False):  # a typed record that writes the JSON object it was read from
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # one level: what it holds comes back here
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return str(value)


def to_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text for results: numpy scalars/arrays, paths and dataclasses included."""
    return json.dumps(obj, indent=indent, default=_json_default, ensure_ascii=False)


@contextlib.contextmanager
def scratch_folder(near: str | Path | None = None, role: str = "scratch") -> Iterator[Path]:
    """A folder only this call uses: made under a fresh unique name (beside `near`, else in the system's temp
    folder) and removed with whatever is still in it when the block ends. What the block moves out of it stays.

    Beside `near` below a tracked run directory, the folder is recorded as a temp entry before it is made (and as
    gone once removed), so a kill leaves it inside the run, for the next claim to remove; what the block writes in
    it is recorded by the block (`library_files.expect`, atomic writes), never adopted."""
    if near is None:
        folder = Path(tempfile.mkdtemp(prefix=f"bertkit-{role}-"))
    else:
        folder = record.temp_name(near, folder=True, role=role)
        record.note(record.TEMP, folder)
        folder.mkdir()  # fails if the name exists: nothing of anyone else's is ever in it
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # gone already if the block renamed it into place
        if near is not None and not folder.exists():
            record.note_gone(folder)


@contextlib.contextmanager
def atomic_path(path: Path, vouch: Callable[[tuple[int, str]], None] | None = None) -> Iterator[Path]:
    """Yield a temp path next to `path`; on success it is fsynced and renamed over `path`, else removed.

    `vouch(digest)`: called with the (size, sha256) of the new bytes before the rename, to record them where no run
    directory's record does (predict's --out FILE)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"Cannot write {path}: it is an existing directory. Pass a file path (check --out).")
    tmp = record.temp_name(path)
    try:
        record.make_dirs(path.parent)
        record.note(record.TEMP, tmp)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as for any file
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists()), None)
        reason = f"{blocker} is a file, not a directory" if blocker and not blocker.is_dir() else exc.strerror or exc
        raise UserError(
            f"Cannot write {path} ({reason}). Choose an output path (--out) in a directory you can write to."
        ) from None
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        record.note_file(path, record.file_digest(tmp))
        if vouch is not None:
            vouch(record.file_digest(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, to_json(obj) + "\n")


_APPENDED: dict[str, tuple[int, Any]] = {}
"""path -> (its size, the sha256 state of its bytes): an appended log is hashed whole once per process."""


def append_jsonl(path: Path, entry: dict[str, Any]) -> None:
    """Append one JSON line (flushed and fsynced: a log of progress survives a kill). The log's new size and digest
    are recorded first; a write that fails part-way (a full disk) is cut back to the bytes before it."""
    path = Path(path)
    data = (to_json(entry, indent=None) + "\n").encode("utf-8")
    _own_copy(path)
    before = path.stat().st_size if path.is_file() else 0
    digest = _digest_state(path, before)
    digest.update(data)
    record.note_file(path, (before + len(data), digest.hexdigest()))
    try:
        with open(path, "ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        if path.is_file() and path.stat().st_size > before:
            os.truncate(path, before)
        raise
    _APPENDED[os.path.abspath(path)] = (before + len(data), digest.copy())


def _own_copy(path: Path) -> None:
    """Give `path` a copy of its own when another name shares its bytes (a hard link: a `cp -al` snapshot of the
    run): an append in place would change the snapshot too. The copy is written and renamed like any file."""
    if path.is_file() and os.stat(path).st_nlink > 1:
        with atomic_path(path) as tmp:
            shutil.copyfile(path, tmp)


def _digest_state(path: Path, size: int) -> Any:
    """The sha256 state of the first `size` bytes of `path` (kept from this process's last append when it fits)."""
    kept = _APPENDED.get(os.path.abspath(path))
    if kept is not None and kept[0] == size:
        return kept[1].copy()
    digest = hashlib.sha256()
    if size:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(record.BLOCK), b""):
                digest.update(block)
    return digest


def read_json_or_none(path: Path) -> Any:
    """The JSON in `path`; None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def read_json_record(file: Path, valid: Any) -> tuple[Any, str | None]:
    """(the JSON in `file`, None) when it parses and `valid(record)` says None; else (None, why not): what a reader
    of bertkit's own records (markers, config.json) turns into its message."""
    try:
        found = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__
    reason = valid(found)
    return (found, None) if reason is None else (None, reason)
