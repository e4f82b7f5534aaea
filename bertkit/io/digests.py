"""Digests of the files bertkit writes, and their check when it reads them back ("verified on read").

A file's record is `{"size": bytes, "sha256": hex}`. Writers take it from the bytes as they go out
(`HashingWriter` wraps the handle an array or Arrow writer writes to), or, for a file a library writes whole
(`save_pretrained`, the ONNX exporter), from one streaming pass right after (`file_record`). Readers compare
the size first (free: a truncated or extended file is found without reading it), then stream the bytes once
(`record_problem`); a file verified once in a process is not read again while its size and mtime stay the same.
Each artifact's own module keeps the records in its own record file (bertkit_model.json, probe.json, a store's
manifest, a cache entry's meta.json) and words the message; this module only measures and compares.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, BinaryIO

from bertkit.io.record_events import confined

BLOCK = 1 << 20
"""Bytes read per step of a streaming pass (memory stays at one block, whatever the file's size)."""

_verified: set[tuple[str, int, int, str]] = set()
"""(path, size, mtime_ns, sha256) of the files this process has verified already."""


def forget_verified() -> None:
    """Empty this process's memo of verified files: the next read of each file hashes it again (benchmarks)."""
    _verified.clear()


class HashingWriter:
    """A binary handle that hashes every byte written through it: the digest is made while the file is written.
    Enough of a file object for `numpy.save`, safetensors-free writers and `pyarrow.PythonFile`."""

    def __init__(self, handle: BinaryIO, written_before: bytes = b"") -> None:
        """`written_before`: the bytes the file already holds before the handle's position (hashed first)."""
        self.handle = handle
        self.hash = hashlib.sha256(written_before)
        self.size = len(written_before)
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        written = self.handle.write(view)
        written = len(view) if written is None else written
        self.hash.update(view[:written])
        self.size += written
        return written

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.closed = True  # the caller owns (and closes) the handle

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def record(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.hash.hexdigest()}


def bytes_record(data: bytes) -> dict[str, Any]:
    """The record of bytes about to be written as one file."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def file_record(path: Path) -> dict[str, Any]:
    """The record of a file on disk, streamed (one block in memory)."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
            size += len(block)
    return {"size": size, "sha256": digest.hexdigest()}


def folder_records(folder: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """{name: record} of these files of `folder` (the ones that exist)."""
    return {name: file_record(folder / name) for name in sorted(names) if (folder / name).is_file()}


def is_record(value: Any) -> bool:
    """Whether `value` is a record as this module writes it."""
    return (isinstance(value, dict) and isinstance(value.get("size"), int) and isinstance(value.get("sha256"), str)
            and len(value["sha256"]) == 64)


def record_problem(path: Path, record: dict[str, Any]) -> str | None:
    """Why the file at `path` is not the one `record` describes (None: it is): missing, another size, or other
    bytes."""
    if not is_record(record):
        return "its record is not a size and a sha256"
    try:
        stat = os.stat(path)
    except OSError:
        return "it is missing"
    if not Path(path).is_file():
        return "it is not a file"
    if stat.st_size != record["size"]:  # edited, cut short or appended to: its size alone does not say which
        return f"it is {stat.st_size:,} bytes but was written as {record['size']:,} (changed since it was written)"
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, record["sha256"])
    if key in _verified:
        return None
    try:
        found = file_record(path)["sha256"]
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if found != record["sha256"]:
        return "its bytes changed since it was written (sha256 differs from the record)"
    _verified.add(key)
    return None


def records_problems(folder: Path, records: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, why) of every file in `records` (relative names under `folder`) that is not as recorded; a name that is
    not a normalised relative path inside `folder` (links resolved) makes the record damaged: it is never read."""
    found = []
    for name, record in sorted(records.items()):
        problem = _outside(Path(folder), name) or record_problem(Path(folder) / name, record)
        if problem is not None:
            found.append((name, problem))
    return found


def _outside(folder: Path, name: str) -> str | None:
    """Why `name` does not name a file inside `folder` (None: it does)."""
    top = os.path.realpath(folder)
    real = os.path.realpath(folder / name) if confined(name) else None
    if real is None or not real.startswith(top.rstrip(os.sep) + os.sep):
        return "the record names a path outside the folder (damaged)"
    return None


# ---------------------------------------------------------------- the digests a run directory's record keeps


_DIGESTS: dict[tuple[int, int, int, int], tuple[int, str]] = {}
"""(device, inode, size, mtime) -> (size, sha256): a file is hashed once per process while it is unchanged (a
rename keeps all four: a temp file's digest is its final file's)."""


def file_digest(path: str | Path) -> tuple[int, str]:
    """(size, sha256 hex) of the file at `path`."""
    stat = os.stat(path)
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(BLOCK), b""):
                digest.update(block)
        _DIGESTS[key] = (stat.st_size, digest.hexdigest())
    return _DIGESTS[key]


def matches(path: str | Path, entry: Any) -> bool:
    """Whether the file at `path` holds bytes bertkit recorded writing there (`entry.versions`, a record entry; the
    size is checked first)."""
    try:
        size = os.stat(path).st_size
        return any(s == size for s, _ in entry.versions) and file_digest(path) in entry.versions
    except OSError:
        return False
