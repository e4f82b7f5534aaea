"""One writer per run directory: an OS lock (`flock`) on `OUT/.bertkit-lock`, taken when a run claims its --out and
held until the run ends.

Two runs writing one folder at once would each remove the other's temp files as "left by a killed run" and
replace each other's outputs; the second run is refused instead, naming the process that holds the lock. The kernel
releases the lock when its process ends, however it ends (a kill included), so a killed run never blocks the next.
The lock file stays empty: bertkit never writes into it (a hard-linked copy of the run keeps its bytes), and the
run's record lists it (0 bytes) like every file bertkit made.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io.ownership import another_out

LOCK = ".bertkit-lock"

_HELD: dict[str, int] = {}
"""Run directory (absolute path) -> the open lock file this process holds the lock through."""


def hold(base: Path, out: Path, command: str) -> None:
    """Take the lock of the run directory `base` (--out `out`) for this process, or a UserError naming its holder.
    Locks this process holds on run directories that neither hold `base` nor are held by it (an earlier command in
    the same process) are released first."""
    key = os.path.abspath(base)
    for other in [k for k in _HELD if not (_inside(key, k) or _inside(k, key))]:
        release(other)
    if key in _HELD:
        return
    fd = os.open(Path(key) / LOCK, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(busy_message(out, command, holder(Path(key) / LOCK))) from None
    _HELD[key] = fd


def check_free(base: Path, out: Path, command: str) -> None:
    """A UserError when another process holds the lock of `base` now (read-only: nothing is created)."""
    lock = Path(base) / LOCK
    if os.path.abspath(base) in _HELD or not lock.is_file() or lock.is_symlink():
        return
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # unreadable: the ownership checks name it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(busy_message(out, command, holder(lock))) from None
    finally:
        os.close(fd)  # releases the lock just taken, if it was


def release(base: str | Path) -> None:
    """Release the lock of `base` (and of the run directories below it) if this process holds it."""
    key = os.path.abspath(base)
    for other in [k for k in _HELD if _inside(k, key)]:
        os.close(_HELD.pop(other))


def release_all() -> None:
    """Release every lock this process holds (its command ended, however it ended)."""
    for key in list(_HELD):
        release(key)


def holder(lock: Path) -> int | None:
    """The process holding the flock on `lock`, from /proc/locks (None where the system does not say)."""
    try:
        stat = os.stat(lock)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in lines:
        parts = line.split()
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == where and parts[4].isdigit():
            return int(parts[4])
    return None


def busy_message(out: Path, command: str, pid: int | None) -> str:
    who = f"process {pid}" if pid is not None else "another process"
    return (
        f"--out {out} is being written right now by another bertkit run ({who} holds its lock, {Path(out) / LOCK}); "
        f"one run writes a folder at a time, or they would remove and replace each other's files. Wait for that run "
        f"to end (or stop it: its lock goes with it), then re-run; or {another_out(Path(out), command)}"
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
