"""The events of a run directory's record (`bertkit.io.record`): their kinds, what each does to the recorded
entries, and which paths a record may name at all (`confined`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DIR, FILE, TEMP, OPEN, RUN = "dir", "file", "temp", "open", "run"
"""The kinds of recorded entries (see the module docstring)."""
KINDS = (DIR, FILE, TEMP, OPEN, RUN)


@dataclass
class Entry:
    """One recorded path: its kind and, for a file, every (size, sha256) bertkit wrote there."""

    kind: str
    versions: set[tuple[int, str]] = field(default_factory=set)

    def copied(self, kind: str | None = None) -> Entry:
        return Entry(kind or self.kind, set(self.versions))


def parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def confined(rel: Any) -> bool:
    """Whether `rel` is a path as bertkit records them: relative, "/"-separated, normalised (no empty, `.` or `..`
    part), so that it names something inside the run directory (links aside: `Record.outside` resolves them)."""
    return (isinstance(rel, str) and bool(rel) and not rel.startswith("/") and "\0" not in rel
            and all(part not in ("", ".", "..") for part in rel.split("/")))


def digested(event: dict[str, Any]) -> bool:
    """Whether a file event carries the size and sha256 of the bytes written (every one bertkit writes does)."""
    sha = event.get("sha256")
    return (isinstance(event.get("size"), int) and not isinstance(event.get("size"), bool) and isinstance(sha, str)
            and len(sha) == 64)


def event_paths(event: dict[str, Any]) -> list[Any]:
    """The paths an event names (those of the keys it carries that take a path)."""
    return [event[key] for key in (FILE, "copy", "to", "gone", DIR, TEMP, OPEN, RUN) if key in event]


def apply(entries: dict[str, Entry], event: dict[str, Any]) -> None:
    """One event on the entries (see `bertkit.io.record`); an event of another shape is ignored."""
    if isinstance(event.get(FILE), str):
        rel = event[FILE]
        if rel not in entries or entries[rel].kind != FILE:
            entries[rel] = Entry(FILE)
        if isinstance(event.get("size"), int) and isinstance(event.get("sha256"), str):
            entries[rel].versions.add((event["size"], event["sha256"]))
    elif isinstance(event.get("copy"), str) and isinstance(event.get("to"), str) and event.get("as") in KINDS:
        source, target = event["copy"], event["to"]
        for rel in [r for r in entries if r == source or r.startswith(f"{source}/")]:
            moved = target + rel[len(source):]
            entries[moved] = entries[rel].copied(event["as"] if rel == source else None)
    elif isinstance(event.get("gone"), str):
        rel = event["gone"]
        for key in [r for r in entries if r == rel or r.startswith(f"{rel}/")]:
            del entries[key]
    else:
        for kind in (DIR, TEMP, OPEN, RUN):
            if isinstance(event.get(kind), str):
                entries[event[kind]] = Entry(kind)
                return


def line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
