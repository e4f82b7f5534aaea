"""Free disk space: checks before large writes, and one readable error when a write runs out of space.

A full disk shows up in several shapes: `OSError(ENOSPC)` from Python writes and `posix_fallocate`, a
`SafetensorError` whose text says "No space left on device", and torch's zip writer's
`RuntimeError: [enforce fail at inline_container.cc:...]` / "file write failed". `is_disk_full` recognises them
all; `full_error` turns them into the one message users see (exit 2 from `bertkit.cli`):
"disk full at PATH: need about N MB, M MB free; free space and re-run the same command to resume".
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bertkit.errors import UserError

MB = 1 << 20
MARGIN_BYTES = 16 * MB
"""Added to every estimate: metadata, tokenizer files, JSON, filesystem slack."""
FULL_MARKERS = ("no space left", "inline_container.cc", "file write failed", "disk quota exceeded")
"""Texts of write errors that mean a full disk. torch's zip writer says "[enforce fail at inline_container.cc:...]";
"enforce fail" alone is not enough: torch's CPU allocator says it too when memory runs out."""


def with_margin(n_bytes: int) -> int:
    """An estimate plus 5% and a fixed margin."""
    return int(n_bytes * 1.05) + MARGIN_BYTES


def free_bytes(path: str | Path) -> int:
    """Free bytes on the filesystem that holds `path` (or its nearest existing parent)."""
    target = Path(path)
    while not target.exists() and target != target.parent:
        target = target.parent
    return int(shutil.disk_usage(target).free)


def full_error(path: str | Path, need: int) -> UserError:
    """The disk-full message: where, how much is needed, how much is free, and the fix."""
    return UserError(
        f"disk full at {path}: need about {_mb(need)} MB, {_mb(free_bytes(path))} MB free; free space and "
        f"re-run the same command to resume."
    )


def check_free(path: str | Path, need: int) -> None:
    """Refuse a write of about `need` bytes under `path` before it starts when the disk cannot hold it."""
    if free_bytes(path) < need:
        raise full_error(path, need)


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` is a write that failed for lack of space (any of the shapes in the module docstring)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, (OSError, RuntimeError)) or type(exc).__name__ == "SafetensorError":
        text = str(exc).lower()
        return any(marker in text for marker in FULL_MARKERS)
    return False


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / MB:,.0f}" if n_bytes >= MB else f"{n_bytes / MB:.1f}"


@contextmanager
def writing(folder: str | Path, need: int) -> Iterator[None]:
    """A write of about `need` bytes into `folder`: refused up front when the disk cannot hold it, and a write that
    runs out of space anyway becomes the one disk-full message (the writer's own cleanup runs first)."""
    check_free(folder, need)
    with reported(folder, need):
        yield


@contextmanager
def reported(folder: str | Path, need: int) -> Iterator[None]:
    """Any write below that runs out of space becomes the one disk-full message; `need` is what the work still
    needs (for a whole run: its next checkpoint). Other errors pass through unchanged."""
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        raise full_error(folder, need) from None


def preallocate(path: str | Path) -> None:
    """Reserve the blocks of a sparse file (np.lib.format.open_memmap makes one) so that a full disk fails here,
    with ENOSPC, instead of killing the process with SIGBUS when a memory-mapped page cannot be backed later."""
    if not hasattr(os, "posix_fallocate"):
        return
    with open(path, "r+b") as handle:
        try:
            os.posix_fallocate(handle.fileno(), 0, os.fstat(handle.fileno()).st_size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # filesystems without fallocate: nothing to do
                raise


def link_or_copy(source: str | Path, target: str | Path) -> None:
    """`target` as a hard link to `source` (no new disk), or a copy where links are not possible."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def umask_permissions(folder: str | Path) -> None:
    """Give every file under `folder` the permissions a plain `open` would (0666 less the umask): some libraries
    write theirs 0600 (transformers' model.safetensors), which another user of a shared machine cannot read."""
    mask = current_umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~mask)


def current_umask() -> int:
    """The process's umask, read from /proc where it can be (reading it with os.umask means setting it for a moment,
    which another thread's new file could catch)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
