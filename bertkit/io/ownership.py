"""What bertkit wrote in a run directory, by its record alone, and what it never writes over.

Every run directory carries the record of everything bertkit wrote there (`bertkit.io.record`: each file with its
size and sha256, each folder, each temp file or folder before it was made, each nested run directory with a record
of its own). Nothing is bertkit's by its name, at any depth: `unowned` lists whatever the record does not vouch for
(not recorded, or a file whose bytes changed since), and a run directory holding any of it is refused before
anything is removed (`bertkit.io.rundir`); `remove_recorded` removes only recorded entries whose bytes still match,
temp files and folders a killed run left (recorded by their unique names before they were made), and folders once
empty - anything else stays, with the folders holding it. An --out that is, holds or is inside one of the command's
inputs is refused too (`check_out_not_input`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import record
from bertkit.io.atomic import (
    atomic_path,
    read_json_or_none,  # noqa: F401 - atomic's, read as ownership.read_json_or_none too
    write_json_atomic,
)
from bertkit.io.record import FILE, OPEN, RECORD, RUN, TEMP, Record

MARKER = ".bertkit-run.json"
"""Written first into every run directory bertkit creates or adopts: which command owns it."""
MARKER_FORMAT = "bertkit-run/1"
STAGING = ".bertkit-next"
"""Where an --overwrite run builds its output until `RunDir.commit` swaps it in (recorded in the run's record)."""
OLD = ".bertkit-old"
"""Where `RunDir.commit` puts the previous output while it swaps; removed at the end."""
COMPLETE = ".bertkit-complete"
"""In STAGING: the new output is whole; a swap interrupted after this is finished (rolled forward) by the next run."""
SPLIT_NAMES = ("train", "dev", "test")
"""The splits of an embed store (`OUT/train`, `OUT/dev`, `OUT/test`)."""
STORE_FORMAT = "bertkit-store/1"
"""The format of an embed store's manifest (`bertkit.features.store` writes it; run directories recognise it)."""
COMMANDS = ("tokens", "embed", "probe", "finetune", "distill", "evaluate", "bench", "export", "sweep")
"""The commands that write run directories."""
FILE_LIST = ".bertkit-files.json"
"""In every model folder bertkit saves (best/, final/): the relative paths of the files it wrote there (what `push`
uploads; ownership is the run's record)."""
FILE_LIST_FORMAT = "bertkit-files/1"
CHECKPOINT_MANIFEST = "bertkit_checkpoint.json"
"""A checkpoint's list of files (with digests); checkpoints.py writes it (it imports this module, not the reverse)."""
NOT_WRITTEN, CHANGED, NO_RECORD = "not written by bertkit", "changed since bertkit wrote it", "no record"
DAMAGED = "a damaged record"
"""Why an entry is not bertkit's (`Unowned.why`)."""


def write_file_list(folder: Path) -> None:
    """FILE_LIST in a folder bertkit has just written whole (a saved model): every file in it, by relative path."""
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != FILE_LIST)
    write_json_atomic(folder / FILE_LIST, {"format": FILE_LIST_FORMAT, "files": files})


# ---------------------------------------------------------------- what the record vouches for


@dataclass(frozen=True)
class Unowned:
    """An entry bertkit may not remove or replace: its path (relative to the folder checked; a folder ends in "/")
    and why (NOT_WRITTEN, CHANGED, NO_RECORD)."""

    path: str
    why: str


def unowned(folder: Path) -> list[Unowned]:
    """Everything below `folder` (a run directory, or a folder in one) that its record does not vouch for: entries
    it does not list, files whose size or sha256 differ from every version bertkit wrote, links, nested run
    directories without a record. A folder nobody recorded is listed once, not its contents."""
    folder = Path(folder)
    holder = record_of(folder)
    if holder is None:
        return [Unowned(_shown(p, p.name), NO_RECORD) for p in sorted(folder.iterdir())] if folder.is_dir() else []
    found: list[Unowned] = []
    _check(folder, holder[0], holder[0].nested_runs(), holder[1], "", found)
    return found


def unowned_in_run(rec: Record) -> list[Unowned]:
    """`unowned` of a whole run directory whose (existing) record the caller has read already (a run being
    inspected or committed): that record is used as it is, not looked up again from the folder."""
    found: list[Unowned] = []
    _check(rec.root, rec, rec.nested_runs(), "", "", found)
    return found


def _check(folder: Path, rec: Record, runs: dict[str, Record], rel: str, shown: str, found: list[Unowned]) -> None:
    """Add to `found` what `rec` (listing the nested runs `runs`: asked once per record, not per folder) does not
    vouch for in `folder` (`rel` in it, named `shown`)."""
    entries = rec.entries()
    for path in sorted(folder.iterdir()):
        child, child_shown = _join(rel, path.name), _join(shown, path.name)
        if child in (RECORD, rec.draft()) and not path.is_symlink():
            continue  # the record, and the draft of its next version a kill left (the record announces its name)
        entry = None if path.is_symlink() else entries.get(child)  # bertkit makes no links
        if not _same_shape(entry, path):
            found.append(Unowned(_shown(path, child_shown), NOT_WRITTEN))
        elif entry.kind == FILE:
            if not record.matches(path, entry):
                found.append(Unowned(child_shown, CHANGED))
        elif entry.kind == RUN:
            nested = runs[child]
            if nested.exists() and nested.damaged():
                found.append(Unowned(_shown(path, child_shown), DAMAGED))
            elif nested.exists():
                _check(path, nested, nested.nested_runs(), "", child_shown, found)
            elif any(path.iterdir()):
                found.append(Unowned(_shown(path, child_shown), NO_RECORD))
        elif path.is_dir():  # a folder bertkit made, a temp folder or a library's: only what its record lists
            _check(path, rec, runs, child, child_shown, found)
        # a TEMP or OPEN file: bertkit's whole (a temp being written, a file a library writes)


def _same_shape(entry: record.Entry | None, path: Path) -> bool:
    """Whether `path` is what its entry says bertkit made there: a file for a file, a folder for a folder (a temp or
    a library's either); a link never (bertkit makes none)."""
    if entry is None or path.is_symlink():
        return False
    return entry.kind in (TEMP, OPEN) or (entry.kind == FILE) != path.is_dir()


def record_of(path: Path) -> tuple[Record, str] | None:
    """(the record of the nearest run directory at or above `path`, `path` relative to it), or None."""
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        rec = Record.at(folder)
        if rec.exists():
            return rec, rec.rel(path)
    return None


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _shown(path: Path, rel: str) -> str:
    return rel + "/" if path.is_dir() and not path.is_symlink() else rel


def unowned_message(out: Path, command: str, found: list[Unowned]) -> str:
    """What is not bertkit's in its run at --out: files it did not write, files changed since, runs without records."""
    parts = []
    for why, words in ((NOT_WRITTEN, "files bertkit did not write"), (CHANGED, "files changed since bertkit wrote "
                       "them"), (NO_RECORD, "folders without a record of what bertkit wrote there"),
                      (DAMAGED, f"runs whose record ({RECORD}) is damaged (paths outside them, files without "
                                "digests)")):
        names = [u.path for u in found if u.why == why]
        if names:
            more = f", and {len(names) - 5} more" if len(names) > 5 else ""
            parts.append(f"{words} ({', '.join(names[:5])}{more})")
    return (
        f"--out {out} holds {' and '.join(parts)} in its `bertkit {command}` run; bertkit deletes or replaces only "
        f"the files its record ({RECORD}) says it wrote, with the bytes it wrote, never a folder holding anything "
        f"else (not even with --overwrite). Move them out of {out}"
        + (" (or delete the changed ones, if they are bertkit's own files, damaged)"
           if any(u.why == CHANGED for u in found) else "")
        + f", or choose another --out, e.g. --out {suggest_out(out, command)}."
    )


def foreign_message(out: Path, command: str, names: list[str]) -> str:
    """--out holds `names` (its entries) and is no run of bertkit's."""
    shown = [n + ("/" if (out / n).is_dir() and not (out / n).is_symlink() else "") for n in names[:5]]
    more = f", and {len(names) - 5} more" if len(names) > 5 else ""
    return (
        f"--out {out} holds files bertkit did not write ({', '.join(shown)}{more}); bertkit only writes into a new "
        f"or empty directory or one of its own runs, and never deletes what it did not write (not even with "
        f"--overwrite). Choose another --out, e.g. --out {suggest_out(out, command)}."
    )


def unrecorded_run_message(out: Path, owner: str) -> str:
    """A run of `owner` made before bertkit kept records (or with its record removed)."""
    return (
        f"--out {out} holds a `bertkit {owner}` run without the record of the files bertkit wrote there ({RECORD}): "
        f"it was made by an older bertkit, or its record was removed. bertkit deletes or replaces only files its "
        f"record says it wrote, so it does not guess which of these are its own (not even with --overwrite). "
        f"{move_aside(out, owner)}"
    )


def move_aside(out: Path, command: str) -> str:
    """The fix for a run bertkit will not touch: move it aside, or write elsewhere."""
    aside = out.with_name(f"{out.name}.old") if out.name else Path("old-run")
    return (f"Move that run aside (e.g. `mv {out} {aside}`) and re-run, or choose another --out, e.g. --out "
            f"{suggest_out(out, command)}.")



# ---------------------------------------------------------------- removing what bertkit recorded writing


def remove_recorded(path: Path) -> list[Path]:
    """Remove what bertkit recorded writing at `path` (a file or folder in a run directory, or a nested run):
    files whose bytes still match, temp and open folders whole, folders once empty. Anything else stays, with the
    folders holding it; returns what stayed (empty: `path` is gone)."""
    path = Path(path)
    holder = record_of(path.parent)
    if not (path.exists() or path.is_symlink()):
        return []
    if holder is None or not _resolves_inside(path.parent, holder[0].root) or holder[0].damaged():
        return [path]  # a record is trusted only for what lies inside its own folder, and only when all of it does
    rec, rel = holder[0], _join(holder[1], path.name)
    kept: list[Path] = []
    rec.gone(*_remove(path, rec, rel, kept))
    return kept


def _remove(path: Path, rec: Record, rel: str, kept: list[Path]) -> list[str]:
    """Remove what `rec` vouches for at `path` (`rel` in it), adding what stays to `kept`; the entries removed, for
    the caller to record gone all at once (a folder removed whole is one entry: gone takes everything below it).
    Each is recorded after it is removed, so a kill in between leaves entries for paths no longer there, which
    nothing acts on and the next claim compacts away."""
    entry = None if path.is_symlink() else rec.entry(rel)
    if not _same_shape(entry, path) or (entry.kind == FILE and not record.matches(path, entry)):
        kept.append(path)
        return []
    if entry.kind in (FILE, TEMP, OPEN) and not path.is_dir():
        path.unlink()  # a file with the bytes bertkit wrote; a temp file being written or a library's: whole
        return [rel]
    nested = rec.nested_runs().get(rel)
    if nested is not None and nested.exists():
        return _remove_run(path, nested, rel, kept)
    before, removed = len(kept), []
    for child in sorted(path.iterdir()):
        removed += _remove(child, rec, _join(rel, child.name), kept)
    if len(kept) > before:
        return removed  # the folder stays, with what it holds
    return [rel] if _rmdir(path, kept) else removed


def _remove_run(path: Path, nested: Record, rel: str, kept: list[Path]) -> list[str]:
    """`_remove` of a nested run directory with a record of its own: what that record vouches for, then the record
    (last: until then it says what the rest of the folder is), then the folder; [rel] once it is gone, else []
    (what went is recorded gone in the nested run's own record)."""
    if nested.damaged():
        kept.append(path)
        return []
    before, removed = len(kept), []
    for child in sorted(path.iterdir()):
        if child.name == RECORD:
            continue
        if child.name == nested.draft() and not child.is_symlink():
            child.unlink()  # a draft of the record a kill left: announced by the record, so bertkit's
            continue
        removed += _remove(child, nested, child.name, kept)
    if len(kept) > before:
        nested.gone(*removed)
        return []
    nested.file.unlink()
    return [rel] if _rmdir(path, kept) else []


def _rmdir(path: Path, kept: list[Path]) -> bool:
    """Remove the emptied folder `path`; False, with `path` added to `kept`, when something appeared in it
    meanwhile."""
    try:
        path.rmdir()
    except OSError:
        kept.append(path)
        return False
    return True


def remove_temps(root: Path) -> list[str]:
    """Remove the temp files and folders recorded in the run directory `root` (what killed writes left; nested run
    directories clean their own when they are claimed); their relative paths."""
    rec = Record.at(root)
    removed = []
    if rec.damaged():
        return removed  # a damaged record is not acted on (`inspect_run_dir` refuses the run)
    kept: list[Path] = []
    gone: list[str] = []
    for rel in sorted(rel for rel, entry in rec.entries().items() if entry.kind == TEMP):
        path = rec.root / rel
        if not (path.exists() or path.is_symlink()):
            continue  # inside a temp folder removed just now, or renamed into place (compaction drops them)
        before = len(kept)
        gone += _remove(path, rec, rel, kept)  # a temp folder: only what the record lists in it
        if len(kept) == before:                # (`inspect_run_dir` names anything else, before any of this)
            removed.append(rel)
    rec.gone(*gone)  # before the draft below: this new version of the record takes a draft a kill left
    draft = rec.root / rec.draft() if rec.draft() else None
    if draft is not None and draft.is_file() and not draft.is_symlink():
        draft.unlink()  # the next version of the record, never renamed in (a kill): the record announces its name
        removed.append(draft.name)
    return removed


def _resolves_inside(path: Path, root: Path) -> bool:
    """Whether `path`, links resolved, is `root` or below it (resolved too)."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def place_file(source: Path, target: Path) -> None:
    """A copy of the file `source` at `target`, written atomically (and recorded below a tracked run directory)."""
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)




def suggest_out(out: Path, command: str) -> Path:
    """The --out an error message suggests instead of `out`."""
    return out.with_name(f"{out.name}-{command}") if out.name else Path("runs") / command


# ---------------------------------------------------------------- what a command reads is never inside its --out


def input_paths(cfg: Any) -> list[tuple[str, str]]:
    """(flag, value) of everything a command's config reads that may be a path: --teacher, --student, --model, each
    of bench's --models, --features, --probe, --data, --dev, --test, each --metric script, and the files questions
    on passages read (--predictions, --null-odds, --context-file). A value given under two
    names (distill's `model` is its --student or --teacher) is named by the flag the user typed.

    (--recipe is read before the config exists; inside an --out it is a file bertkit did not write, so
    `inspect_run_dir` refuses it, and an --out inside a file is refused as a path below a file.)"""
    teacher, data, metrics = (getattr(cfg, name, None) for name in ("distillation", "inputs", "metrics"))  # groups
    fields = [(f"--{name}", getattr(teacher, name, None)) for name in ("teacher", "student")]
    fields += [("--model", getattr(cfg, "model", None))]
    fields += [("--models", name) for name in getattr(cfg, "model_list", [])]
    fields += [(f"--{name}", getattr(cfg, name, None)) for name in ("features", "probe")]
    fields += [(f"--{name}", getattr(data, name, None)) for name in ("data", "dev", "test")]
    fields += [("--metric", spec.partition(":")[0]) for spec in (metrics.external_metrics if metrics else [])]
    fields += [(f"--{name.replace('_', '-')}", getattr(cfg, name, None)) for name in ("predictions", "null_odds",
                                                                                       "context_file")]
    found: dict[str, str] = {}
    for flag, given in fields:
        if isinstance(given, str) and given and given not in found:
            found[given] = flag
    return [(flag, given) for given, flag in found.items()]


def check_out_not_input(out: str | Path, inputs: list[tuple[str, str | None]], command: str,
                        suggestion: Path | None = None) -> None:
    """A UserError when --out is one of the command's inputs, inside one, or holds one (symlinks resolved): a run
    never writes over, replaces or deletes what it reads, with or without --overwrite. Values that are not existing
    paths (hub ids, split names, `minilm-offline`) have nothing to protect and are skipped."""
    path = Path(out).expanduser()
    target = path.resolve()
    for flag, given in inputs:
        source = Path(given).expanduser() if given else None
        relation = _relation(path, target, source) if source is not None and _exists(source) else None
        if relation is not None:
            example = suggestion or (Path("runs") / command if relation == "is inside" else suggest_out(path, command))
            raise UserError(
                f"--out {out} {relation} the {flag} {given}: `bertkit {command}` never writes over what it reads. "
                f"Choose another --out, e.g. --out {example}."
            )


def _relation(path: Path, target: Path, source: Path) -> str | None:
    """How --out (`path`, resolved: `target`) stands to an existing input: "is", "is inside", "contains" or None."""
    real = source.resolve()
    if real == target or (path.exists() and os.path.samefile(path, source)):
        return "is"
    if real in target.parents:
        return "is inside"
    return "contains" if target in real.parents else None


def _exists(path: Path) -> bool:
    """Whether `path` exists; False for a name this system cannot even stat (too long): nothing there to protect,
    and the command's reader refuses the name itself."""
    try:
        return path.exists()
    except OSError:
        return False
