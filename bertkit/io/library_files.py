"""The files a library writes into a run directory (accelerate's checkpoints, `save_pretrained`, TensorBoard's event
files), recorded by their paths as the library makes them, never by a pattern.

bertkit cannot record a library's file before the library opens it, so it records the names it knows:
* before the call, the names the library is about to write (`expect`: a checkpoint or model folder saved earlier
  in this run lists them), as files a library writes (OPEN: bertkit's whole while being written, so a kill leaves
  nothing the next run cannot remove);
* right after the call that made them, what appeared in the folder since (`note_new`: TensorBoard's writer names
  its event files itself);
* once the library is done, their digests (`seal_open`): from then on they are files like any other.
Nothing else in the folder is ever adopted: a file the record does not list is not bertkit's, wherever it is.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.io import record


def listing(folder: Path) -> set[str]:
    """Every path below `folder` (relative, "/"-separated; links not followed): what is there before a library call."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")} if folder.is_dir() else set()


def expect(folder: Path, names: list[str]) -> None:
    """Record `names` (relative paths in `folder`) as files a library is about to write there (one new version of
    the record for the names directly in `folder`: a save names several)."""
    where = record.tracking(folder)
    if where is None:
        return
    rec, rel = where
    flat = [name for name in names if record.confined(name) and "/" not in name]
    rec.add(record.OPEN, *(f"{rel}/{name}" for name in flat if rec.entry(f"{rel}/{name}") is None))
    for name in names:
        if record.confined(name) and "/" in name:
            record.note(record.OPEN, Path(folder) / name)  # its folders too


def note_new(folder: Path, before: set[str]) -> None:
    """Record what a library made in `folder` since `before` (its `listing`): folders as folders, files as files the
    library writes (their digests come with `seal_open`)."""
    folder = Path(folder)
    for rel in sorted(listing(folder) - before, key=lambda r: r.split("/")):
        path = folder / rel
        if path.is_symlink():
            continue  # not bertkit's: the ownership check names it
        record.note(record.DIR if path.is_dir() else record.OPEN, path)


def seal_open(folder: Path) -> None:
    """Record the digests of the files below `folder` recorded as a library's (OPEN); nothing else is recorded."""
    where = record.tracking(folder)
    if where is None:
        return
    rec, rel = where
    for path_rel, entry in sorted(rec.entries().items()):
        path = rec.root / path_rel
        if entry.kind == record.OPEN and path_rel.startswith(f"{rel}/") and path.is_file() and not path.is_symlink():
            size, sha = record.file_digest(path)
            rec.add_file(path_rel, size, sha)
