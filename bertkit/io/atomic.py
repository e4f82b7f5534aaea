"""Atomic file writes and JSON for results.

Every write goes to a temp file in the same directory and is renamed into place, so a killed process never leaves a
partial file where a complete one should be.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import UserError


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    return str(value)


def to_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text for results: numpy scalars/arrays, paths and dataclasses included."""
    return json.dumps(obj, indent=indent, default=_json_default, ensure_ascii=False)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temp path next to `path`; on success it is fsynced and renamed over `path`, else removed."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"Cannot write {path}: it is an existing directory. Pass a file path (check --out).")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists()), None)
        reason = f"{blocker} is a file, not a directory" if blocker and not blocker.is_dir() else exc.strerror or exc
        raise UserError(
            f"Cannot write {path} ({reason}). Choose an output path (--out) in a directory you can write to."
        ) from None
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results should get the usual permissions
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
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


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line (flushed and fsynced: a log of progress survives a kill)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(to_json(record, indent=None) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_json_record(file: Path, valid: Any) -> tuple[Any, str | None]:
    """(the JSON in `file`, None) when it parses and `valid(record)` says None; else (None, why not): what a reader
    of bertkit's own records (markers, config.json) turns into its message."""
    try:
        record = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__
    reason = valid(record)
    return (record, None) if reason is None else (None, reason)
