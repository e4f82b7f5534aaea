"""Replacing a previous run (`--overwrite`): where the new output is staged, and the swap that moves it in.

A run being replaced is written in `OUT/.bertkit-next/` (`ownership.STAGING`); a run inside it named by its final
path (a sweep's trial) is written at the same place there (`located`). `bertkit.io.rundir` claims and commits; the
moves here follow the run's record (`record.move`), so a killed swap is finished or undone by the next claim.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from bertkit.io import record
from bertkit.io.ownership import COMPLETE, MARKER, OLD, STAGING, remove_recorded
from bertkit.io.record import TEMP, Record
from bertkit.io.runlock import LOCK

log = logging.getLogger(__name__)


def stage(base: Path, staging: Path) -> None:
    """Runs named below `base` are written below `staging` until `base`'s run ends (`unstage`)."""
    _STAGED[os.path.abspath(base)] = os.path.abspath(staging)


_STAGED: dict[str, str] = {}
"""Run directory -> its staging folder, while an --overwrite run builds its output there: a run inside it (a sweep's
trial) named by its final path is written at the same place in the staging folder (`located`)."""


def located(out: str | Path) -> Path:
    """Where the run directory --out `out` is written now: inside the staging folder while the run directory holding
    it is being replaced (a sweep --overwrite's trials), else `out` itself. A finished run is read from there."""
    path = Path(out).expanduser()
    key = os.path.abspath(path)
    for root in [r for r in _STAGED if not record.is_tracked(r)]:
        del _STAGED[root]  # a run no longer written by this process (untracked when another claim began)
    for root, staging in _STAGED.items():
        if record.inside(key, root) and key != root and not record.inside(key, staging):
            return Path(staging) / os.path.relpath(key, root)
    return path


def unstage(base: Path) -> None:
    """Forget the staging folders of `base` and of the runs inside it (their runs ended)."""
    key = os.path.abspath(base)
    for other in [k for k in _STAGED if record.inside(k, key)]:
        del _STAGED[other]


def owned_names(base: Path) -> list[str]:
    """The outputs of the run in `base` (its recorded top-level entries that exist), without its marker, staging
    folder, swap folder, lock (held while the swap moves the rest) and temp files."""
    entries = Record.at(base).entries()
    return sorted(rel for rel, entry in entries.items() if "/" not in rel and entry.kind != TEMP
                  and rel not in (MARKER, STAGING, OLD, LOCK) and ((base / rel).exists() or (base / rel).is_symlink()))


def move_entries(source: Path, target: Path) -> None:
    """Move the recorded outputs in `source` (the staging folder) up into `target` (its marker and completion
    mark stay behind)."""
    rec = Record.at(target)
    prefix = f"{rec.rel(source)}/"
    names = sorted(rel[len(prefix):] for rel, entry in rec.entries().items()
                   if rel.startswith(prefix) and "/" not in rel[len(prefix):] and entry.kind != TEMP)
    for name in names:
        if name in (MARKER, COMPLETE) or not ((source / name).exists() or (source / name).is_symlink()):
            continue
        if (target / name).exists():  # an old entry not yet set aside (an interrupted swap)
            record.make_dirs(target / OLD)
            record.move(target / name, target / OLD / name)
        record.move(source / name, target / name)


def finish_swap(base: Path) -> None:
    """Complete an interrupted `commit`: roll forward when staging was complete, else put the old output back."""
    staging, old = base / STAGING, base / OLD
    if (staging / COMPLETE).is_file():
        log.info("finishing the interrupted replacement of %s", base)
        move_entries(staging, base)
        remove_tree(staging)
    elif old.is_dir():
        log.info("restoring the previous output of %s (its replacement was interrupted)", base)
        rec = Record.at(base)
        for name in sorted(rel[len(OLD) + 1:] for rel in rec.entries() if rel.startswith(f"{OLD}/")
                           and "/" not in rel[len(OLD) + 1:]):
            if (old / name).exists() and not (base / name).exists():
                record.move(old / name, base / name)
    remove_tree(old)


def remove_tree(path: Path) -> None:
    """Remove one of bertkit's own folders (staging, OLD): what its record says bertkit wrote there; anything
    else stays (`inspect_run_dir` then names it)."""
    kept = remove_recorded(path)
    if kept:
        log.warning("kept %s: bertkit did not write %s", path, ", ".join(map(str, kept[:5])))
