"""The record of what bertkit wrote in a run directory: `.bertkit-record.jsonl`, kept while it writes.

What bertkit may delete or replace is decided by this record alone, never by a name (`bertkit.io.ownership`). Each
line is one event, recorded *before* the change it records, so a kill leaves at worst an entry for something never
made - never something made without an entry. The record is never appended to in place: each new version is written
whole to a draft, fsynced and renamed over it (a hard link to the record - a `cp -al` snapshot - keeps the version
it links to); the header names the draft the next version is written to, so a draft a kill leaves is bertkit's by
the record, not by its name:

    {"format": "bertkit-record/1", "command": "finetune",     the first line: which command owns the directory, and
     "draft": ".bertkit-record.jsonl.1a2b3c4d.tmp"}           the draft of the next version
    {"dir": "best"}                                           a folder bertkit made (or adopted to write into)
    {"file": "metrics.json", "size": 812, "sha256": "..."}    a file bertkit wrote, with these bytes; every version
                                                              written is kept until the next claim compacts the record
    {"temp": "best/.config.json.1a2b3c4d.tmp"}                a temp file or folder (a unique name) about to be made:
                                                              whatever it holds is bertkit's, and it is removed whole
    {"open": "tensorboard"}                                   a folder a library writes into (TensorBoard's event
                                                              files); sealed, its files recorded, when it closes
    {"run": "trials/000_lr=0.001_seed=42"}                    a run directory of its own, with its own record
    {"copy": "a", "to": "b", "as": "dir"}                     before a rename a -> b: b holds what a holds
    {"gone": "a"}                                             a, and everything below it, is gone

Paths are relative to the run directory, with "/", normalised and inside it (links resolved): a record naming any
other path, or a file without its size and sha256, is damaged and trusted for nothing (`Record.damaged`). The
writers of `bertkit.io` record through the run directories this process claimed (`track`): an atomic write, an
append, a folder made or moved below one of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import faults
from bertkit.io.digests import BLOCK, file_digest, matches  # noqa: F401 - the digests of records, read as record.*
from bertkit.io.record_events import (  # noqa: F401 - the kinds and entries, read as record.* across bertkit
    DIR,
    FILE,
    KINDS,
    OPEN,
    RUN,
    TEMP,
    Entry,
    apply,
    confined,
    digested,
    event_paths,
    line,
    parse,
)

RECORD = ".bertkit-record.jsonl"
"""In every run directory bertkit writes: the record of everything it wrote there."""
FORMAT = "bertkit-record/1"


class Record:
    """The record of the run directory `root` (`Record.at(root)`: one object per directory in this process)."""

    def __init__(self, root: Path):
        self.root = Path(os.path.abspath(root))
        self.file = self.root / RECORD
        self._reset(None)

    @classmethod
    def at(cls, root: str | Path) -> Record:
        key = os.path.abspath(root)
        if key not in _RECORDS:
            _RECORDS[key] = cls(Path(key))
        return _RECORDS[key]

    @classmethod
    def create(cls, root: str | Path, command: str) -> Record:
        """A new, empty record in `root` (a folder bertkit just made or found empty)."""
        record = cls.at(root)
        fd = os.open(record.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666)
        try:
            _write_all(fd, line({"format": FORMAT, "command": command, "draft": _draft_name()}))
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    # ---------------------------------------------------------------- reading

    def exists(self) -> bool:
        return self.file.is_file() and not self.file.is_symlink()

    def valid(self) -> bool:
        """Whether the record starts as bertkit writes it (a damaged one is never guessed at)."""
        self._refresh()
        return isinstance(self._header, dict) and self._header.get("format") == FORMAT

    def command(self) -> str | None:
        """The command the record says owns the directory."""
        self._refresh()
        command = self._header.get("command") if isinstance(self._header, dict) else None
        return command if isinstance(command, str) else None

    def entries(self) -> dict[str, Entry]:
        """Every recorded path (relative, "/"-separated) as it stands after the events so far."""
        self._refresh()
        return self._entries

    def entry(self, rel: str) -> Entry | None:
        return self.entries().get(rel)

    def nested_runs(self) -> dict[str, Record]:
        """The run directories inside this one that it lists (RUN entries), each with its own record (which may
        not exist: a nested run whose record is missing)."""
        return {rel: Record.at(self.root / rel) for rel, entry in self.entries().items() if entry.kind == RUN}

    def rel(self, path: str | Path) -> str:
        """`path` relative to the run directory ("" for the directory itself)."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        return "" if rel == "." else Path(rel).as_posix()

    def outside(self) -> list[str]:
        """The recorded paths that are not inside this run directory: not relative, not normalised (`..`, `.`, an
        empty part), or leading out of it through a link (the folders holding them resolved; a recorded path that is
        itself a link is not bertkit's, and `ownership` names it). A record naming any is damaged: bertkit trusts
        none of it, so nothing is removed on its word (`rundir` refuses the run)."""
        self._refresh()
        root = os.path.realpath(self.root)
        resolved = [rel for rel in self._entries if not inside(os.path.realpath((self.root / rel).parent), root)]
        return [*self._outside, *resolved]

    def undigested(self) -> list[str]:
        """The files the record lists without a size and sha256: bertkit records every file with both, so a record
        lacking them is damaged (not older), and trusted for nothing."""
        self._refresh()
        return list(self._undigested)

    def damaged(self) -> bool:
        """Whether the record names a path outside its folder or a file without its digests: nothing is removed or
        replaced on its word."""
        return bool(self.outside() or self.undigested())

    def draft(self) -> str | None:
        """The name the next version of the record is written under before it is renamed into place: announced by
        the record itself, so a kill between the two leaves a file the record vouches for (None: an older record)."""
        self._refresh()
        name = self._header.get("draft") if isinstance(self._header, dict) else None
        return name if confined(name) and "/" not in name and name.startswith(f"{RECORD}.") else None

    def _reset(self, stamp: tuple[int, int, int] | None) -> None:
        self._entries: dict[str, Entry] = {}
        self._outside: list[str] = []
        self._undigested: list[str] = []
        self._header: Any = None
        self._lines: list[bytes] = []
        """The event lines after the header, each whole (a torn or unreadable one was never acted on: left out)."""
        self._stamp = stamp

    def _refresh(self) -> None:
        """Read the record again when it is another file or another version than the one read last."""
        try:
            stat = os.stat(self.file)
        except OSError:
            self._reset(None)
            return
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self._stamp:
            return
        with open(self.file, "rb") as handle:
            data = handle.read()
        self._load(data[: data.rfind(b"\n") + 1], stamp)  # a torn last line (an older, appended record) is not read

    def _load(self, data: bytes, stamp: tuple[int, int, int] | None) -> None:
        self._reset(stamp)
        lines = data.splitlines(keepends=True)
        header = parse(lines[0]) if lines else None
        self._header = header if isinstance(header, dict) else {}
        events = [event for raw in lines[1:] if isinstance(event := parse(raw), dict)]
        self._lines = [line(event) for event in events]
        self._take(events)

    def _take(self, events: list[dict[str, Any]]) -> None:
        """Apply `events` (read or just written) to the entries; one naming a path outside the run directory is
        never applied: no removal can reach it, and `outside` reports the record as damaged."""
        for event in events:
            outside = [rel for rel in event_paths(event) if not confined(rel)]
            if outside:
                self._outside.extend(outside)
                continue
            if FILE in event and not digested(event):
                self._undigested.append(event[FILE])
            apply(self._entries, event)

    # ---------------------------------------------------------------- writing (each before the change it records)

    def add(self, kind: str, *rels: str) -> None:
        """Folders made (DIR), temps about to be made (TEMP), a library's files or folder (OPEN), nested runs (RUN):
        one new version of the record for all of them."""
        self._append([{kind: rel} for rel in rels])

    def add_file(self, rel: str, size: int, sha256: str) -> None:
        self._append([{FILE: rel, "size": size, "sha256": sha256}])

    def add_files(self, folder_rel: str, folder: Path) -> None:
        """Every file and folder below `folder` (a temp or open folder bertkit filled), with digests."""
        events: list[dict[str, Any]] = []
        for path in sorted(folder.rglob("*")):
            rel = f"{folder_rel}/{path.relative_to(folder).as_posix()}"
            if path.is_dir() and not path.is_symlink():
                events.append({DIR: rel})
            elif path.is_file() and not path.is_symlink():
                size, sha = file_digest(path)
                events.append({FILE: rel, "size": size, "sha256": sha})
        self._append(events)

    def copy(self, source: str, target: str, kind: str) -> None:
        self._append([{"copy": source, "to": target, "as": kind}])

    def gone(self, *rels: str) -> None:
        self._append([{"gone": rel} for rel in rels])

    def compact(self) -> None:
        """Rewrite the record as one event per entry that still exists (and, for a file, only the version it
        holds): called when a run is claimed, by the one process that claims it."""
        entries = self.entries()
        events: list[dict[str, Any]] = []
        for rel in sorted(entries, key=lambda r: r.split("/")):
            entry, path = entries[rel], self.root / rel
            if not (path.exists() or path.is_symlink()):
                continue
            if entry.kind != FILE:
                events.append({entry.kind: rel})
                continue
            found = file_digest(path) if path.is_file() else None
            for size, sha in sorted(entry.versions):
                if found is None or (size, sha) == found or found not in entry.versions:
                    events.append({FILE: rel, "size": size, "sha256": sha})
        lines = [line(e) for e in events]
        if self.file.read_bytes() == line(self._header) + b"".join(lines):
            return  # a re-run that changed nothing changes no byte of the record either
        with self._writing():
            self._write(self._header, lines)
        self._stamp = None  # read back whole: the entries are the compacted ones

    def restore(self, content: bytes) -> None:
        """Put back the record as it was (`content`), once what was recorded since is gone again."""
        lines = content.splitlines(keepends=True)
        header = parse(lines[0])
        with self._writing():  # byte for byte: its header names a draft already used, so free again
            self._write(header, lines[1:], header.get("draft") if isinstance(header, dict) else None)
        self._stamp = None

    def _append(self, events: list[dict[str, Any]]) -> None:
        """The record with `events` added, written as a new file renamed over the old one: never appended in place,
        so a hard link to the record (a `cp -al` snapshot of the run) keeps the version it links to."""
        if not events:
            return
        with self._writing():
            self._refresh()
            if not self.exists():
                raise UserError(f"{self.file} disappeared while bertkit was writing {self.root}: without it bertkit "
                                f"cannot tell its files from others'. Move {self.root} aside and re-run the command.")
            self._write(self._header, [*self._lines, *(line(e) for e in events)])
            self._take(events)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One writer of the record at a time (the processes of a multi-process run record into one record): an
        OS lock on the run directory itself, held from reading the record to renaming its new version in."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, header: dict[str, Any], lines: list[bytes], next_draft: str | None = None) -> None:
        """`header` (announcing the next draft's name: `next_draft`, else a fresh one) and `lines` into the draft
        the record on disk announces, fsynced, renamed over the record."""
        draft = self.root / (self.draft() or _draft_name())  # an older record announces none: a fresh name
        header = {**header, "draft": next_draft or _draft_name()}
        with contextlib.suppress(FileNotFoundError):
            draft.unlink()  # a draft a kill left before its rename: the record on disk announced it, so it is bertkit's
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            _write_all(fd, line(header) + b"".join(lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        faults.kill_point("record.draft")
        os.replace(draft, self.file)
        stat = os.stat(self.file)
        self._header, self._lines, self._stamp = header, list(lines), (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _draft_name() -> str:
    return f"{RECORD}.{secrets.token_hex(4)}.tmp"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------- the run directories this process writes


_RECORDS: dict[str, Record] = {}
_TRACKED: dict[str, Record] = {}
"""The run directories claimed by this process (absolute paths): writes below them are recorded in their record."""


def track(root: str | Path) -> Record:
    """Record this process's writes below `root` in its record; run directories claimed earlier that hold neither
    `root` nor are held by it (a finished trial, a failed command of an earlier call) stop being tracked."""
    key = os.path.abspath(root)
    for other in list(_TRACKED):
        if not (inside(key, other) or inside(other, key)):
            untrack(other)
    _TRACKED[key] = Record.at(key)
    return _TRACKED[key]


def untrack(root: str | Path) -> None:
    """Stop recording writes below `root` (its run ended)."""
    key = os.path.abspath(root)
    for other in [k for k in _TRACKED if inside(k, key)]:
        del _TRACKED[other]


def is_tracked(root: str | Path) -> bool:
    """Whether this process records its writes below the run directory `root` (claimed, not ended)."""
    return os.path.abspath(root) in _TRACKED


def tracking(path: str | Path) -> tuple[Record, str] | None:
    """(the record of the nearest tracked run directory holding `path`, `path` relative to it), or None."""
    key = os.path.abspath(path)
    holders = [root for root in _TRACKED if inside(key, root) and key != root]
    if not holders:
        return None
    record = _TRACKED[max(holders, key=len)]
    return record, record.rel(key)


def inside(path: str, root: str) -> bool:
    """Whether the absolute path `path` is `root` or below it (as written: links are not resolved here)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def outside_of(folder: str | Path, rels: list[Any]) -> list[str]:
    """The paths among `rels` (as a record of `folder` lists them) that do not name something inside `folder`: not
    relative and normalised (`confined`), or leading out of it once resolved, links included (the last part's too).
    The rule every record's paths are held to, for readers that take a path list from a record (`bertkit push`)."""
    top = os.path.realpath(folder)
    return [str(rel) for rel in rels
            if not confined(rel) or not inside(os.path.realpath(os.path.join(top, rel)), top)]


# ---------------------------------------------------------------- recording writes below tracked run directories


def note_dirs(path: str | Path) -> None:
    """Record the folders from the tracked run directory down to `path`'s parent that are not recorded yet (a
    folder bertkit is about to make, or made to write into); a temp or open folder holds its own."""
    where = tracking(path)
    if where is None:
        return
    record, rel = where
    entries = record.entries()
    parts = rel.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        entry = entries.get(folder)
        if entry is not None and entry.kind in (TEMP, OPEN, RUN):
            return
        if entry is None or entry.kind == FILE:
            record.add(DIR, folder)


def make_dirs(folder: str | Path) -> Path:
    """`folder` and its missing parents, recorded first when below a tracked run directory."""
    folder = Path(folder)
    note_dirs(folder / "_")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def temp_name(path: str | Path, *, folder: bool = False, role: str = "tmp") -> Path:
    """A unique temp name next to `path`: `.NAME.XXXXXXXX.tmp` for a file, `.ROLE-NAME-XXXXXXXX` for a folder."""
    path, token = Path(path), secrets.token_hex(4)
    return path.with_name(f".{role}-{path.name}-{token}" if folder else f".{path.name}.{token}.tmp")


def note(kind: str, path: str | Path) -> None:
    """Record `path` as `kind` (DIR, TEMP, OPEN, RUN) when below a tracked run directory; its parents too."""
    where = tracking(path)
    if where is not None:
        note_dirs(path)
        entry = where[0].entry(where[1])
        if entry is None or entry.kind != kind:
            where[0].add(kind, where[1])


def note_file(path: str | Path, digest: tuple[int, str] | None = None) -> None:
    """Record the bytes `path` holds (or will hold: `digest`) when it is below a tracked run directory."""
    where = tracking(path)
    if where is not None:
        note_dirs(path)
        size, sha = digest or file_digest(path)
        where[0].add_file(where[1], size, sha)


def note_gone(path: str | Path) -> None:
    where = tracking(path)
    if where is not None:
        where[0].gone(where[1])


def move(source: str | Path, target: str | Path, kind: str | None = None) -> None:
    """os.replace(source, target), the record following it (target recorded before the rename, source after);
    `kind`: what the target is recorded as (default: what the source was; a temp folder becomes a folder)."""
    where = tracking(target)
    if where is None:
        os.replace(source, target)
        return
    record, target_rel = where
    source_rel = record.rel(source)
    entry = record.entry(source_rel)
    note_dirs(target)
    record.copy(source_rel, target_rel, kind or (DIR if entry is None or entry.kind == TEMP else entry.kind))
    os.replace(source, target)
    record.gone(source_rel)


def seal(folder: str | Path) -> None:
    """Record every file in `folder` (a temp folder bertkit filled, or an open folder a library wrote) with its
    digest; an open folder becomes a plain recorded folder."""
    where = tracking(folder)
    if where is None:
        return
    record, rel = where
    record.add_files(rel, Path(folder))
    entry = record.entry(rel)
    if entry is not None and entry.kind == OPEN:
        record.add(DIR, rel)
