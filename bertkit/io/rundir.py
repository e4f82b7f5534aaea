"""Run directories: whether a command may write into its --out, claiming it, and replacing a previous run.

A run directory holds `config.json` (see `bertkit.io.trail`), `metrics.json` / `metrics.jsonl`, and the command's
plots and tables, each written atomically (`bertkit.io.atomic`).

Ownership (see `inspect_run_dir` / `RunDir`): bertkit writes only into a new or empty directory or one of its
own runs, marked by `.bertkit-run.json` (which command owns it). It deletes or replaces only the names its
command writes (`RUN_ENTRIES`, and below them the files each kind of folder holds: `ownership.foreign_paths`), never
a folder holding anything else, never the current directory, the home directory or `/`, never an --out that is,
holds or is inside one of the command's inputs (`ownership.check_out_not_input`). `--overwrite` builds the new output
in `OUT/.bertkit-next/` and swaps it in only once the command succeeded (`RunDir.commit`), so a failed or killed run
leaves the previous output as it was.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io.atomic import read_json_record, write_json_atomic
from bertkit.io.faults import kill_point
from bertkit.io.ownership import (
    COMPLETE,
    MARKER,
    MARKER_FORMAT,
    OLD,
    RUN_ENTRIES,
    SPLIT_NAMES,
    STAGING,
    STORE_FORMAT,
    check_out_not_input,
    foreign_paths,
    is_bertkit_temp,
    read_json_or_none,
    remove_owned,
    suggest_out,
)
from bertkit.io.trail import Compare

log = logging.getLogger(__name__)



@dataclass
class RunDir:
    """An --out directory as seen by one command: `inspect_run_dir` (read-only) says what a run would do there,
    `claim` makes it so, `commit` swaps a staged output in. Commands write only below `path`."""

    out: Path
    """The directory the user named."""
    command: str
    overwrite: bool = False
    compare: Compare | None = None
    path: Path = field(default=Path())
    """Where the command writes: `out`, or `out/.bertkit-next` when it replaces a previous run."""
    existing: bool = False
    """`path` already holds this same run: resume it, report it finished, or recompute it in place."""
    replacing: bool = False
    """`path` is the staging folder: `commit` swaps it in for the previous output once the command succeeded."""
    pending_swap: bool = False
    """An earlier `commit` was interrupted; `claim` finishes (or undoes) it before anything else."""
    claimed: bool = False

    def claim(self) -> RunDir:
        """Create/adopt the directory (marker first), finish an interrupted swap, prepare staging. Idempotent."""
        if self.claimed:
            return self
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            if self.pending_swap:
                _finish_swap(self.out, self.command)
            fresh = inspect_run_dir(self.out, self.command, overwrite=self.overwrite, compare=self.compare)
            _write_marker(self.out, self.command)
            staging = self.out / STAGING
            if not fresh.replacing:
                _remove_tree(staging, self.command)  # an interrupted --overwrite run's output: the previous one stays
            elif not fresh.existing:
                _remove_tree(staging, self.command)
                staging.mkdir()
                _write_marker(staging, self.command)
        except OSError as exc:
            raise UserError(
                f"Cannot write to --out {self.out} ({exc.strerror or exc}). Choose a directory you can write to."
            ) from None
        self.path, self.existing, self.replacing = fresh.path, fresh.existing, fresh.replacing
        self.pending_swap, self.claimed = False, True
        return self

    def commit(self) -> None:
        """Swap the staged output in for the previous one (nothing to do for a run written in place).

        Old owned entries go aside into OLD, staging is marked COMPLETE, its entries move up, OLD and staging
        are removed. A kill before COMPLETE leaves the previous output (restored by the next run); after it,
        the next run finishes the swap."""
        if not self.replacing:
            return
        out, staging, old = self.out, self.out / STAGING, self.out / OLD
        check_only_bertkit_files(out, self.command)  # again: a long run gives time to put a file into best/
        old.mkdir(exist_ok=True)
        for name in _owned_names(out, self.command):
            os.replace(out / name, old / name)
        kill_point("runs.commit.old-aside")
        write_json_atomic(staging / COMPLETE, {"complete": True, "command": self.command})
        kill_point("runs.commit.complete")
        _move_entries(staging, out)
        kill_point("runs.commit.moved")
        _remove_tree(old, self.command)
        _remove_tree(staging, self.command)
        self.path, self.replacing, self.existing = out, False, True


def inspect_run_dir(out: str | Path, command: str, *, overwrite: bool = False, compare: Compare | None = None,
                    inputs: list[tuple[str, str | None]] | None = None) -> RunDir:
    """What `command` may do in --out, without changing anything; a UserError when it must not write there.

    Refused whatever --overwrite says: a file, the current/home/root directory, a directory holding anything
    bertkit did not write (at any depth), another command's run, an unreadable marker, an --out that is, holds or
    is inside one of the command's `inputs` ((flag, path) pairs, see `input_paths`). Refused without --overwrite: a
    run of this command with other settings (`compare` lists them)."""
    out = Path(out).expanduser()
    run = RunDir(out, command, overwrite, compare, path=out)
    _check_location(out, command)
    holds_run = _holds_own_run(out, command)
    check_out_not_input(out, inputs or [], command)
    if not holds_run:
        return run
    run.pending_swap = (out / OLD).is_dir() or (out / STAGING / COMPLETE).is_file()
    if run.pending_swap:
        return run  # `claim` finishes the interrupted swap, then looks again
    if overwrite:
        run.path, run.replacing = out / STAGING, True
        run.existing = _resumable(out / STAGING, command, compare)
        return run
    differences = compare(out) if compare is not None else []
    if differences:
        raise UserError(
            f"--out {out} holds a `bertkit {command}` run made with different settings:\n  "
            + "\n  ".join(differences)
            + "\nRe-run with that run's settings to reuse it, choose another --out, or pass --overwrite to replace "
            "it (the previous output stays until the new one is complete)."
        )
    run.existing = True
    return run


def _holds_own_run(out: Path, command: str) -> bool:
    """Whether --out holds output of a `command` run (or an interrupted swap of one); False: new, empty, or only
    bertkit's marker and temp files. A UserError where bertkit must not write: someone else's files (at any depth),
    another command's run."""
    if not out.is_dir():
        return False
    names = sorted(p.name for p in out.iterdir())
    content = [n for n in names if not is_bertkit_temp(n)]
    owner = _read_marker(out) or (_legacy_owner(out) if content else None)
    if owner is None:
        if names:
            raise UserError(_foreign_message(out, command, names))
        return False
    if content and owner != command:
        raise UserError(
            f"--out {out} holds a `bertkit {owner}` run; `bertkit {command}` never writes into another command's "
            f"run (not even with --overwrite). Choose another --out, e.g. --out {suggest_out(out, command)}."
        )
    check_only_bertkit_files(out, owner)
    return bool(content) or (out / OLD).is_dir() or (out / STAGING / COMPLETE).is_file()


def claim_run_dir(out: str | Path, command: str, *, overwrite: bool = False, compare: Compare | None = None) -> RunDir:
    """`inspect_run_dir` + `RunDir.claim`: the directory to write into, ready."""
    return inspect_run_dir(out, command, overwrite=overwrite, compare=compare).claim()


def write_path(out: str | Path, overwrite: bool) -> Path:
    """Where a run claimed by another process writes (multi-process runs: rank 0 claims, all ranks write)."""
    out = Path(out).expanduser()
    staging = out / STAGING
    return staging if overwrite and (staging / MARKER).is_file() else out

def _check_location(out: Path, command: str) -> None:
    """Not a file, not the current/home/root directory, and under a directory we may write to."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is an existing file, not a directory. Pass a directory path for --out.")
    resolved = out.resolve()
    for name, place in (("the current directory", _cwd()), ("your home directory", Path.home().resolve()),
                        ("the filesystem root", Path(resolved.anchor))):
        if resolved == place:
            raise UserError(
                f"--out {out} is {name}. bertkit writes each run into a directory of its own, never into the "
                f"current directory, your home directory or /. Choose a new directory, e.g. --out runs/{command}."
            )
    existing = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise UserError(f"Cannot write to --out {out} ({existing} is a file, not a directory). "
                        "Choose a directory you can write to.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"Cannot write to --out {out} (no write permission on {existing}). "
                        "Choose a directory you can write to.")


def _cwd() -> Path | None:
    try:
        return Path.cwd().resolve()
    except OSError:
        return None
def check_only_bertkit_files(out: Path, command: str) -> None:
    """A UserError naming what bertkit did not write anywhere in the run directory `out` of `command` (in best/,
    checkpoints/step-N/, the staging folder, ...): a run never starts, resumes or replaces where it would have to
    delete or replace it."""
    foreign = [p.relative_to(out).as_posix() for p in foreign_paths(out, f"run:{command}")]
    if foreign:
        raise UserError(_foreign_message(out, command, foreign, own_run=True))


def _foreign_message(out: Path, command: str, names: list[str], own_run: bool = False) -> str:
    """`names`: paths relative to `out`; in a run of bertkit's own (`own_run`) at any depth."""
    shown = [n + ("/" if (out / n).is_dir() and not (out / n).is_symlink() else "") for n in names[:5]]
    more = f", and {len(names) - 5} more" if len(names) > 5 else ""
    if own_run:
        return (
            f"--out {out} holds files bertkit did not write ({', '.join(shown)}{more}) in its `bertkit {command}` "
            f"run; bertkit deletes or replaces only the files it wrote, never a folder holding anything else (not "
            f"even with --overwrite). Move them out of {out}, or choose another --out, e.g. --out "
            f"{suggest_out(out, command)}."
        )
    return (
        f"--out {out} holds files bertkit did not write ({', '.join(shown)}{more}); bertkit only writes into a new "
        f"or empty directory or one of its own runs, and never deletes what it did not write (not even with "
        f"--overwrite). Choose another --out, e.g. --out {suggest_out(out, command)}."
    )


def _read_marker(path: Path) -> str | None:
    """The command named by the marker in `path` (None: no marker); a UserError for an unreadable one."""
    file = path / MARKER
    if not file.exists():
        return None
    record, reason = read_json_record(file, lambda r: None if isinstance(r, dict) and r.get("format") == MARKER_FORMAT
                                      and isinstance(r.get("command"), str) else f"not a {MARKER_FORMAT} record")
    if reason is not None:
        raise UserError(
            f"--out {path} has a {MARKER} that bertkit did not write ({reason}), so bertkit cannot tell which "
            f"command owns {path} and leaves it alone. Choose another --out, e.g. --out {suggest_out(path, 'run')}."
        )
    return str(record["command"])


def _legacy_owner(path: Path) -> str | None:
    """The command that wrote a run directory made before markers existed (its config.json or store files)."""
    record = read_json_or_none(path / "config.json")
    if isinstance(record, dict) and isinstance(record.get("config"), dict) and record.get("command") in RUN_ENTRIES:
        return str(record["command"])
    for base in (path, *(path / n for n in SPLIT_NAMES)):
        for name in ("manifest.json", "splits.json"):
            found = read_json_or_none(base / name)
            if isinstance(found, dict) and found.get("format") == STORE_FORMAT:
                return "embed"
        identity = read_json_or_none(base / "identity.json")  # an unfinished store
        if isinstance(identity, dict) and {"model", "shard_size", "data_fingerprint"} <= set(identity):
            return "embed"
    return None


def _resumable(staging: Path, command: str, compare: Compare | None) -> bool:
    """An interrupted --overwrite run of the same command and settings left its output in `staging`."""
    if not staging.is_dir() or (staging / COMPLETE).exists():
        return False
    try:
        if _read_marker(staging) != command:
            return False
        if not [p for p in staging.iterdir() if not is_bertkit_temp(p.name)]:
            return False
        return not (compare(staging) if compare is not None else [])
    except UserError:
        return False


def _write_marker(path: Path, command: str) -> None:
    """The marker, unless `path` already carries this command's (a re-run changes no byte of its run)."""
    record = read_json_or_none(path / MARKER)
    if isinstance(record, dict) and record.get("format") == MARKER_FORMAT and record.get("command") == command:
        return
    from bertkit import __version__

    write_json_atomic(path / MARKER, {"format": MARKER_FORMAT, "command": command,
                                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "bertkit": __version__})


def _owned_names(path: Path, command: str) -> list[str]:
    """The entries of `path` that `command` wrote (its outputs and its temp leftovers), never anything else."""
    return sorted(p.name for p in path.iterdir()
                  if p.name in RUN_ENTRIES[command]
                  or (is_bertkit_temp(p.name) and p.name not in (MARKER, STAGING, OLD)))


def _move_entries(source: Path, target: Path) -> None:
    """Move the outputs in `source` up into `target` (bertkit's hidden names stay behind)."""
    for entry in sorted(source.iterdir()):
        if is_bertkit_temp(entry.name):
            continue
        if (target / entry.name).exists():  # an old entry not yet set aside (an interrupted swap)
            (target / OLD).mkdir(exist_ok=True)
            os.replace(target / entry.name, target / OLD / entry.name)
        os.replace(entry, target / entry.name)


def _finish_swap(out: Path, command: str) -> None:
    """Complete an interrupted `commit`: roll forward when staging was complete, else put the old output back."""
    staging, old = out / STAGING, out / OLD
    if (staging / COMPLETE).is_file():
        log.info("finishing the interrupted replacement of %s", out)
        _move_entries(staging, out)
        _remove_tree(staging, command)
    elif old.is_dir():
        log.info("restoring the previous output of %s (its replacement was interrupted)", out)
        for entry in sorted(old.iterdir()):
            if not (out / entry.name).exists():
                os.replace(entry, out / entry.name)
    _remove_tree(old, command)


def _remove_tree(path: Path, command: str) -> None:
    """Remove one of bertkit's own folders (staging, OLD): the files `command` wrote there; anything else stays
    (`inspect_run_dir` then names it)."""
    if path.is_dir() and not path.is_symlink():
        kept = remove_owned(path, f"run:{command}")
        if kept:
            log.warning("kept %s: bertkit did not write %s", path, ", ".join(map(str, kept[:5])))
    elif path.exists() or path.is_symlink():
        path.unlink()
