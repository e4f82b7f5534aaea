"""Run directories: whether a command may write into its --out, claiming it, and replacing a previous run.

A run directory holds `config.json` (see `bertkit.io.trail`), `metrics.json` / `metrics.jsonl`, and the command's
plots and tables, each written atomically (`bertkit.io.atomic`), and the record of everything bertkit wrote there
(`bertkit.io.record`).

Ownership (see `inspect_run_dir` / `RunDir`): bertkit writes only into a new or empty directory or one of its
own runs, marked by `.bertkit-run.json` (which command owns it) and carrying its record. It deletes or replaces only
what that record says it wrote, with the bytes it wrote (`ownership.unowned`), never a folder holding anything else,
never the current directory, the home directory or `/`, never an --out that is, holds or is inside one of the
command's inputs (`ownership.check_out_not_input`). A run made before records existed is refused, not guessed at.
`--overwrite` builds the new output in `OUT/.bertkit-next/` and swaps it in only once the command succeeded
(`RunDir.commit`), so a failed or killed run leaves the previous output as it was; a run refused after its claim
(a tracker that cannot start) takes back what the claim made (`RunDir.abandon`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit import __version__
from bertkit.errors import UserError
from bertkit.io import record, runlock, swap
from bertkit.io.atomic import read_json_or_none, read_json_record, write_json_atomic
from bertkit.io.faults import kill_point
from bertkit.io.ownership import (
    COMMANDS,
    COMPLETE,
    MARKER,
    MARKER_FORMAT,
    OLD,
    SPLIT_NAMES,
    STAGING,
    STORE_FORMAT,
    another_out,
    check_out_not_input,
    foreign_message,
    move_aside,
    remove_temps,
    suggest_out,
    unowned_in_run,
    unowned_message,
    unrecorded_run_message,
)
from bertkit.io.record import RECORD, Record
from bertkit.io.runlock import LOCK
from bertkit.io.trail import Compare, key_compare, write_run_config

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
    """Where the command writes: `base`, or `base/.bertkit-next` when it replaces a previous run."""
    existing: bool = False
    """`path` already holds this same run: resume it, report it finished, or recompute it in place."""
    replacing: bool = False
    """`path` is the staging folder: `commit` swaps it in for the previous output once the command succeeded."""
    pending_swap: bool = False
    """An earlier `commit` was interrupted; `claim` finishes (or undoes) it before anything else."""
    claimed: bool = False
    base: Path = field(default=Path())
    """The directory holding the run and its record: `out`, or where `out` is staged while the run directory
    holding it is being replaced (a sweep --overwrite's trials, `located`)."""
    made: str = ""
    """What the claim made, for `abandon`: "folder" (base), "contents" (base was empty), "staging", or ""."""
    made_from: Path | None = None
    """The outermost folder the claim created (base or a parent of it), for `abandon`."""
    record_before: bytes = field(default=b"", repr=False)
    """The record as the claim found it, put back by `abandon` once it took back the staging folder."""

    def claim(self) -> RunDir:
        """Create/adopt the directory (record and marker first), finish an interrupted swap, remove what killed
        writes left (recorded temp files), prepare staging. Idempotent."""
        if self.claimed:
            return self
        base = self.base
        try:
            made = "folder" if not base.exists() else "contents" if not any(base.iterdir()) else ""
            made_from = next((p for p in reversed([base, *base.parents]) if not p.exists()), None)
            record.note(record.RUN, base)  # a run inside a run being written (a trial, a quality run)
            base.mkdir(parents=True, exist_ok=True)
            _start_record(base, self.command)
            runlock.hold(base, self.out, self.command)  # from here to the end of the run, no other run writes here
            record.track(base)
            if Record.at(base).entry(LOCK) is None:
                record.note_file(base / LOCK)
            self.record_before = Record.at(base).file.read_bytes()
            if self.pending_swap:
                swap.finish_swap(base)
            fresh = inspect_run_dir(self.out, self.command, overwrite=self.overwrite, compare=self.compare)
            for rel in remove_temps(base):
                log.info("removed %s: a temp file or folder an interrupted run left", base / rel)
            Record.at(base).compact()
            _write_marker(base, self.command)
            staging = base / STAGING
            if not fresh.replacing:
                swap.remove_tree(staging)  # an interrupted --overwrite run's output: the previous one stays
            elif not fresh.existing:
                swap.remove_tree(staging)
                record.make_dirs(staging)
                _write_marker(staging, self.command)
                made = made or "staging"
            if fresh.replacing:
                swap.stage(base, staging)
        except OSError as exc:
            raise UserError(
                f"Cannot write to --out {self.out} ({exc.strerror or exc}). Choose a directory you can write to."
            ) from None
        self.path, self.existing, self.replacing = fresh.path, fresh.existing, fresh.replacing
        self.pending_swap, self.claimed, self.made, self.made_from = False, True, made, made_from
        return self

    def status(self) -> str:
        """'new', 'resume' or 'finished' for the run written at `path`: a run with a config.json is finished when
        its metrics.json says so (none yet, or unreadable: its checkpoints decide, so it resumes)."""
        if not self.existing or not (self.path / "config.json").is_file():
            return "new"
        found = read_json_or_none(self.path / "metrics.json")
        return "finished" if isinstance(found, dict) and found.get("finished") else "resume"

    def finished(self) -> Path | None:
        """Where --out holds this run, finished (a read-only look: not while it replaces or swaps one)."""
        done = not self.replacing and not self.pending_swap and self.status() == "finished"
        return self.path if done else None

    @property
    def record(self) -> Record:
        """The record of the run directory (`Record.at` keeps one object per directory in this process)."""
        return Record.at(self.base)

    def commit(self) -> None:
        """Swap the staged output in for the previous one (nothing to do for a run written in place); the run
        directory's writes stop being recorded.

        Old recorded entries go aside into OLD, staging is marked COMPLETE, its entries move up, OLD and staging
        are removed. A kill before COMPLETE leaves the previous output (restored by the next run); after it,
        the next run finishes the swap."""
        if not self.replacing:
            _close(self.base)
            return
        base, staging, old = self.base, self.base / STAGING, self.base / OLD
        check_only_bertkit_files(self.record, self.command)  # again: a long run gives time to put a file into best/
        record.make_dirs(old)
        for name in swap.owned_names(base):
            record.move(base / name, old / name)
        kill_point("runs.commit.old-aside")
        write_json_atomic(staging / COMPLETE, {"complete": True, "command": self.command})
        kill_point("runs.commit.complete")
        swap.move_entries(staging, base)
        kill_point("runs.commit.moved")
        swap.remove_tree(old)
        swap.remove_tree(staging)
        _close(base)
        self.path, self.replacing, self.existing = base, False, True

    def abandon(self) -> None:
        """Take back what `claim` made, for a run refused before it started (a tracker that cannot start): the
        staging folder it made (and the record as it was), what it wrote into a folder it found empty, the folders
        it created. A run it resumed stays as it is."""
        if not self.claimed:
            return
        base, rec = self.base, Record.at(self.base)
        if self.made == "staging":
            swap.remove_tree(base / STAGING)
            if self.record_before and not (base / STAGING).exists():
                rec.restore(self.record_before)
        elif self.made:
            for path in sorted(base.iterdir()):
                if path.name != RECORD:
                    swap.remove_tree(path)
            if [p.name for p in base.iterdir()] == [RECORD]:
                rec.file.unlink()
                _remove_made_folders(base, self.made_from if self.made == "folder" else None)
        swap.unstage(base)
        record.untrack(base)
        runlock.release(base)
        self.claimed = False


def _start_record(base: Path, command: str) -> None:
    """A record in `base` unless it has one (a run racing this one may have just made it: then that one is used)."""
    if not Record.at(base).exists():
        try:
            Record.create(base, command)
        except FileExistsError:
            pass


def _close(base: Path) -> None:
    """The run in `base` is done: its record compacted (one line per entry), its writes no longer recorded, its
    lock released."""
    swap.unstage(base)
    rec = Record.at(base)
    if rec.exists():
        rec.compact()
    record.untrack(base)
    runlock.release(base)


def _remove_made_folders(base: Path, made_from: Path | None) -> None:
    """Remove `base` and its parents up to `made_from` (the folders a claim created), each only when empty."""
    if made_from is None:
        return
    for folder in [base, *base.parents]:
        try:
            folder.rmdir()
        except OSError:
            return
        record.note_gone(folder)
        if folder == made_from:
            return


def inspect_run_dir(out: str | Path, command: str, *, overwrite: bool = False, compare: Compare | None = None,
                    inputs: list[tuple[str, str | None]] | None = None) -> RunDir:
    """What `command` may do in --out, without changing anything; a UserError when it must not write there.

    Refused whatever --overwrite says: a file, the current/home/root directory, a directory holding anything
    bertkit did not record writing (at any depth) or a file changed since, a run made before records existed,
    another command's run, an unreadable marker or record, an --out that is, holds or is inside one of the
    command's `inputs` ((flag, path) pairs, see `input_paths`). Refused without --overwrite: a run of this command
    with other settings (`compare` lists them)."""
    out = Path(out).expanduser()
    base = swap.located(out)
    run = RunDir(out, command, overwrite, compare, path=base, base=base)
    _check_location(out, command)
    holds_run = _holds_own_run(base, command, out)
    check_out_not_input(out, inputs or [], command)
    if not holds_run:
        return run
    run.pending_swap = (base / OLD).is_dir() or (base / STAGING / COMPLETE).is_file()
    if run.pending_swap:
        return run  # `claim` finishes the interrupted swap, then looks again
    if overwrite:
        run.path, run.replacing = base / STAGING, True
        run.existing = _resumable(base / STAGING, command, compare)
        return run
    differences = compare(base) if compare is not None else []
    if differences:
        raise UserError(
            f"--out {out} holds a `bertkit {command}` run made with different settings:\n  "
            + "\n  ".join(differences)
            + "\nRe-run with that run's settings to reuse it, choose another --out, or pass --overwrite to replace "
            "it (the previous output stays until the new one is complete)."
        )
    run.existing = True
    return run


def _holds_own_run(base: Path, command: str, out: Path) -> bool:
    """Whether --out holds output of a `command` run (or an interrupted swap of one); False: new, empty, or only
    bertkit's record and marker. A UserError where bertkit must not write: someone else's files (at any depth), a
    file changed since bertkit wrote it, another command's run, a run without a record."""
    if not base.is_dir():
        return False
    runlock.check_free(base, out, command)  # a run writing here now: its files are in flux, say so first
    names = sorted(p.name for p in base.iterdir())
    rec = Record.at(base)
    owner = _read_marker(base, out) or rec.command() or (_legacy_owner(base) if names else None)
    content = [n for n in names if n not in (RECORD, MARKER)]
    if owner is not None and content and owner != command:
        raise UserError(
            f"--out {out} holds a `bertkit {owner}` run; `bertkit {command}` never writes into another command's "
            f"run (not even with --overwrite). {another_out(out, command, 'Choose')}"
        )
    if not rec.exists():
        if names and owner is None:
            raise UserError(foreign_message(out, command, names))
        if names:
            raise UserError(unrecorded_run_message(out, owner or command))
        return False
    if not rec.valid():
        raise UserError(
            f"--out {out} has a {RECORD} that bertkit did not write (its first line is not a {record.FORMAT} "
            f"header), so bertkit cannot tell which files there are its own and leaves them alone. Choose another "
            f"--out, e.g. --out {suggest_out(out, command)}."
        )
    if rec.damaged():
        raise UserError(_damaged_message(out, command, rec))
    check_only_bertkit_files(rec, owner or command, out)
    return bool(content)


def _damaged_message(out: Path, command: str, rec: Record) -> str:
    """The record of the run at --out names paths outside it (or leading out of it through a link), or files
    without their digests: like a record bertkit did not write (above), it is trusted for nothing."""
    parts = [f"{words} ({_listed(paths)})" for words, paths in (
        (f"names paths outside {out}, directly or through a link", rec.outside()),
        ("lists files without their size and sha256", rec.undigested())) if paths]
    return (
        f"--out {out} has a damaged record: {rec.file} {' and '.join(parts)}. bertkit removes or replaces only what "
        f"a record says it wrote inside the folder it describes, with the size and sha256 it wrote, so it trusts none "
        f"of this one and has removed nothing. {move_aside(out, command)}"
    )


def _listed(paths: list[str]) -> str:
    more = f", and {len(paths) - 5} more" if len(paths) > 5 else ""
    return ", ".join(map(str, paths[:5])) + more


def claim_run_dir(out: str | Path, command: str, *, overwrite: bool = False, compare: Compare | None = None) -> RunDir:
    """`inspect_run_dir` + `RunDir.claim`: the directory to write into, ready."""
    return inspect_run_dir(out, command, overwrite=overwrite, compare=compare).claim()


def claim_resumable(out: str | Path, command: str, key: dict[str, Any], *, overwrite: bool, config: dict[str, Any],
                    extra: dict[str, Any], family: str | None = None) -> tuple[RunDir, str]:
    """Claim --out for a run that resumes (the same run: the same resume `key`, `trail.key_compare`): the run
    directory (without its compare closure, so it can be sent to every process) and its status; a finished run
    committed, a new one's config.json written (`config`, the `key`, `extra`; of `family`, the run's)."""
    run = claim_run_dir(out, command, overwrite=overwrite, compare=key_compare(key, command, family))
    status = run.status()
    if status == "finished":
        run.commit()
    elif status == "new":
        write_run_config(run.path, command, config, family, resume_key=key, data_fingerprints=key["data"], **extra)
    return replace(run, compare=None), status


located = swap.located
"""Where the run directory --out `out` is written now (read by sweeps and finished runs; see `swap.located`)."""


def write_path(out: str | Path, overwrite: bool) -> Path:
    """Where a run claimed by another process writes (multi-process runs: rank 0 claims, all ranks write); this
    process's writes there are recorded too."""
    base = swap.located(out)
    record.track(base)
    staging = base / STAGING
    return staging if overwrite and (staging / MARKER).is_file() else base


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


def check_only_bertkit_files(rec: Record, command: str, out: Path | None = None) -> None:
    """A UserError naming what `rec`, the record of a run directory (of `command`; --out `out`), does not vouch
    for, anywhere in it (in best/, checkpoints/step-N/, the staging folder, a trial, ...): a run never starts,
    resumes or replaces where it would have to delete or replace it."""
    found = unowned_in_run(rec)
    if found:
        raise UserError(unowned_message(out or rec.root, command, found))


def _read_marker(path: Path, out: Path | None = None) -> str | None:
    """The command named by the marker in `path` (None: no marker); a UserError for an unreadable one."""
    file = path / MARKER
    if not file.exists():
        return None
    found, reason = read_json_record(file, lambda r: None if isinstance(r, dict) and r.get("format") == MARKER_FORMAT
                                     and isinstance(r.get("command"), str) else f"not a {MARKER_FORMAT} record")
    if reason is not None:
        shown = out or path
        raise UserError(
            f"--out {shown} has a {MARKER} that bertkit did not write ({reason}), so bertkit cannot tell which "
            f"command owns {shown} and leaves it alone. Choose another --out, e.g. --out {suggest_out(shown, 'run')}."
        )
    return str(found["command"])


def _legacy_owner(path: Path) -> str | None:
    """The command that wrote a run directory made before markers existed (its config.json or store files): named
    in the refusal."""
    found = read_json_or_none(path / "config.json")
    if isinstance(found, dict) and isinstance(found.get("config"), dict) and found.get("command") in COMMANDS:
        return str(found["command"])
    for base in (path, *(path / n for n in SPLIT_NAMES)):
        for name in ("manifest.json", "splits.json"):
            manifest = read_json_or_none(base / name)
            if isinstance(manifest, dict) and str(manifest.get("format")).startswith(STORE_FORMAT.rsplit("/", 1)[0]):
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
        if not [p for p in staging.iterdir() if p.name != MARKER]:
            return False
        return not (compare(staging) if compare is not None else [])
    except UserError:
        return False


def _write_marker(path: Path, command: str) -> None:
    """The marker, unless `path` already carries this command's (a re-run changes no byte of its run)."""
    found = read_json_or_none(path / MARKER)
    if isinstance(found, dict) and found.get("format") == MARKER_FORMAT and found.get("command") == command:
        return

    write_json_atomic(path / MARKER, {"format": MARKER_FORMAT, "command": command,
                                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "bertkit": __version__})
