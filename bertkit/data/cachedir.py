"""Where bertkit keeps what it derives from input files (parsed tables, token ids): --cache-dir, else the
BERTKIT_CACHE_DIR environment variable, else $XDG_CACHE_HOME/bertkit (~/.cache/bertkit). Everything in it can be
deleted at any time: it is rebuilt from the inputs. It never lives inside a run's --out (`cache_in_out_problem`):
a run directory holds only what its run writes, so a cache there would be refused as foreign files, or replaced
with the run.

Processes share the cache: an entry is checked and written by one process at a time (`entry_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "BERTKIT_CACHE_DIR"


def cache_root(cache_dir: str | None = None) -> Path:
    """The cache folder (not created here)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "bertkit"


@contextlib.contextmanager
def entry_lock(root: Path, key: str, source: Path) -> Iterator[None]:
    """Hold the OS lock (`flock`) of the cache entry `key` (`locks/<key>.lock` in the cache folder `root`, apart from
    the entries) while it is checked and, if need be, made from `source`: a second process asking for the same entry
    waits (saying so) and then reads the entry the first one wrote, instead of making it a second time. The kernel
    releases the lock when its holder ends, a kill included. A cache folder that cannot hold a lock file (read-only)
    is read without one."""
    lock = root / "locks" / f"{key}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("Another bertkit process is parsing %s into the cache %s: waiting for it, then reading its "
                        "copy.", source, root)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def cache_in_out_problem(cache_dir: str | None, out: str | None) -> str | None:
    """Why the cache cannot be where it would be for a run writing --out `out` (None: it can): it is --out or inside
    it. Checked with the options, before anything is created."""
    if not out:
        return None
    root, run = cache_root(cache_dir).resolve(), Path(out).expanduser().resolve()
    if root != run and run not in root.parents:
        return None
    if run in (Path(run.anchor), Path.home().resolve(), Path.cwd().resolve()):
        return None  # never a run directory: `io.rundir` refuses such an --out with its own message
    named = f"--cache-dir {cache_dir}" if cache_dir else f"The cache folder {root} (from ${ENV})" if (
        os.environ.get(ENV)) else f"The default cache folder {root}"
    fix = "Pass a --cache-dir outside --out" if cache_dir else f"Set {ENV} (or pass --cache-dir) to a folder outside --out"
    return (f"{named} is inside --out {out}. A run directory holds only what its run writes (a cache there would make "
            f"bertkit refuse --out for files it did not write, and --overwrite replaces the run whole), while the cache "
            f"is shared by later commands. {fix}, e.g. --cache-dir {run.parent / (run.name + '-cache')}; or leave "
            f"--cache-dir unset to use ${ENV} or ~/.cache/bertkit.")
