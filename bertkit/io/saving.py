"""A folder saved whole (a checkpoint, a model folder, a sweep's best model): built in a temp folder next to its place
and put in place by a rename, so a kill leaves the previous folder or the new one, never half of either.

The temp folder is recorded in the run's record before it is made (`bertkit.io.record`), once the disk can hold
what is saved, with the files the libraries are about to write there (`library_files.expect`): the next run removes
exactly what a kill left. A save that runs out of space removes its temp folder and ends in one message
(`disk.full_error`), so the same command resumes once space is freed. A folder is replaced or removed only as far as
the run's record says bertkit wrote it; anything else stays, and is named.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import disk, faults, library_files, ownership, record

log = logging.getLogger(__name__)


def start_folder(final: Path, need_bytes: int, expected: list[str]) -> Path:
    """A new temp folder next to `final` (recorded before it is made), once the disk can hold `need_bytes`; the
    files the libraries are expected to write there (`expected`) are recorded too, so a kill mid-save leaves only
    files the record lists (a save with nothing to go by - the first of a run - records them once written)."""
    disk.check_free(final.parent, need_bytes)
    tmp = record.temp_name(final, folder=True)
    record.make_dirs(final.parent)
    record.note(record.TEMP, tmp)
    tmp.mkdir()
    library_files.expect(tmp, expected)
    return tmp


@contextmanager
def full_disk_cleanup(tmp: Path, need_bytes: int) -> Iterator[None]:
    """A save that runs out of space removes its temp folder (ours, half written) and says disk full."""
    try:
        yield
    except Exception as exc:
        if not disk.is_disk_full(exc):
            raise
        remove_ours(tmp)
        raise disk.full_error(tmp.parent, need_bytes) from None


def replace_folder(tmp: Path, path: Path, kill_at: str | None = None) -> None:
    """Swap the complete folder `tmp` in for `path` (a folder bertkit wrote, checked again: a file may have come
    since the run was checked); the previous one goes aside under a temp name first, so a kill leaves one of the
    two whole, and the next run removes the other."""
    old = None
    if path.exists():
        check_only_ours(path)
        old = record.temp_name(path, folder=True, role="old")
        record.move(path, old, record.TEMP)
    if kill_at:
        faults.kill_point(kill_at)
    record.move(tmp, path)
    if old is not None:
        remove_ours(old)


def listed_files(folder: Path | None) -> list[str]:
    """The files a folder saved earlier in this run lists (`ownership.FILE_LIST`: what the next save of it writes
    again)."""
    listed = (ownership.read_json_or_none(folder / ownership.FILE_LIST) or {}) if folder is not None else {}
    files = listed.get("files") if isinstance(listed, dict) else None
    return [name for name in files if isinstance(name, str)] if isinstance(files, list) else []


def vouched_files(folder: Path, suffixes: tuple[str, ...]) -> list[str]:
    """The files directly in a folder this run saved that its file list names and that end in one of `suffixes`,
    each still holding the bytes the run's record says bertkit wrote; empty when the folder cannot vouch for all of
    them (or lists none)."""
    names = [name for name in listed_files(folder) if name.endswith(suffixes) and "/" not in name]
    holder = ownership.record_of(folder)
    if not names or holder is None:
        return []
    rec, rel = holder
    ours = all((entry := rec.entry(f"{rel}/{name}")) is not None and record.matches(folder / name, entry)
               for name in names)
    return names if ours else []


def remove_ours(folder: Path) -> None:
    """Remove a folder of ours (a checkpoint, a model folder, their temp folders): what the run's record says
    bertkit wrote there (`ownership.remove_recorded`); anything else stays, with a warning, and the next run
    names it."""
    kept = ownership.remove_recorded(folder)
    if kept:
        log.warning("kept %s: it holds what bertkit did not write (%s)", folder, ", ".join(map(str, kept[:5])))


def check_only_ours(folder: Path) -> None:
    """A UserError when `folder`, about to be replaced, holds anything the run's record does not vouch for."""
    found = ownership.unowned(folder)
    if found:
        shown = ", ".join(f"{folder / u.path.rstrip('/')}" + (" (changed since bertkit wrote it)"
                                                                if u.why == ownership.CHANGED else "")
                          for u in found[:5])
        raise UserError(f"{folder} holds files bertkit did not write ({shown}); bertkit never replaces a folder "
                        f"holding anything else. Move them out of {folder} and re-run the same command to resume.")
