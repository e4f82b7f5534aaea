"""A training run's checkpoint folders on disk: `checkpoints/step-N/`, each Accelerate's `save_state` (model,
optimizer, scheduler, RNG states), the trainer's state (`trainer_state.json`: where the run is) and
`bertkit_checkpoint.json`, a manifest with the size and sha256 of every other file.

A checkpoint is built in a temp folder `checkpoints/.tmp-step-N-XXXXXXXX/` (`bertkit.io.saving`: recorded in the run's
record before it is made) and renamed into place (`put_in_place`), so a kill leaves the previous complete checkpoint
or the new complete one, and the next run removes exactly the temp folder the kill left; `KEEP` are kept. Resuming
verifies the newest checkpoint against its manifest before loading anything (Accelerate would silently skip a
damaged RNG file and the run would quietly stop being exact); a damaged one is refused with the name of the newest
intact one to resume from (`choose_checkpoint`). Only the folders the run's record lists are checkpoints.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic, faults, ownership, record, saving

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
MANIFEST = ownership.CHECKPOINT_MANIFEST
MANIFEST_FORMAT = "bertkit-checkpoint/1"
KEEP = 2
"""Complete checkpoints kept: the newest, and one to fall back on if the newest is found damaged."""
STEP_FOLDER = re.compile(r"step-(\d+)")


@dataclass
class Restored:
    """The checkpoint a run resumes from, the trainer state saved with it, and what was passed over."""

    path: Path
    state: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def step_folders(out: Path) -> list[Path]:
    """The `checkpoints/step-N` folders the run's record lists, oldest first. A folder it does not list (a user's
    `step-5.bak`, or a `step-7` copied in) is neither loaded nor deleted (`rundir.inspect_run_dir` refuses a run
    holding it, naming it)."""
    folder = out / "checkpoints"
    holder = ownership.record_of(folder) if folder.is_dir() else None
    if holder is None:
        return []
    rec, rel = holder
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
             and (m := STEP_FOLDER.fullmatch(p.name)) and _recorded_folder(rec.entry(f"{rel}/{p.name}"))]
    return [p for _, p in sorted(found)]


def _recorded_folder(entry: record.Entry | None) -> bool:
    return entry is not None and entry.kind == record.DIR


def remove_unfinished_saves(out: Path) -> list[str]:
    """Remove the temp folders of checkpoint saves that never completed (a kill mid-save), as the run's record
    lists them (`RunDir.claim` removes every temp leftover first; this is for a run not claimed here); their names.
    They can be as large as a checkpoint and would keep a nearly full disk full."""
    folder = out / "checkpoints"
    holder = ownership.record_of(folder) if folder.is_dir() else None
    if holder is None:
        return []
    rec, rel = holder
    found = sorted(p for p in folder.iterdir() if (entry := rec.entry(f"{rel}/{p.name}")) is not None
                   and entry.kind == record.TEMP)
    for tmp in found:
        saving.remove_ours(tmp)
    return [p.name for p in found]


def latest_checkpoint(out: Path) -> Path | None:
    """The newest checkpoint folder that has its trainer state (whether it is intact is `verify`'s question)."""
    done = [p for p in step_folders(out) if (p / STATE_FILE).exists()]
    return done[-1] if done else None


# ---------------------------------------------------------------- saving


def folder_of(out: Path, step: int) -> Path:
    """Where the checkpoint of optimizer step `step` is kept in the run directory `out`."""
    return out / "checkpoints" / f"step-{step}"


def start_save(final: Path, need_bytes: int, library_names: list[str]) -> Path:
    """The temp folder the checkpoint `final` is saved into (main process, `saving.start_folder`): the files the
    newest checkpoint lists are expected there (what the next save writes again), else `library_names` (the first
    save of a run has no earlier checkpoint to go by)."""
    expected = _saved_files(step_folders(final.parent.parent)[-1:]) or library_names
    return saving.start_folder(final, need_bytes, expected)


def seal(tmp: Path, state: dict[str, Any]) -> None:
    """Complete a checkpoint's temp folder once its library files are written (main process): the trainer state,
    the manifest of every file's digest, and the record of them all."""
    atomic.write_json_atomic(tmp / STATE_FILE, state)
    atomic.write_json_atomic(tmp / MANIFEST, {"format": MANIFEST_FORMAT, "files": file_digests(tmp)})
    record.seal(tmp)


def put_in_place(tmp: Path, final: Path) -> None:
    """Rename the complete checkpoint `tmp` into `final` (a re-save of the same step replaces it, if it holds only
    what bertkit wrote), then remove the checkpoints that are no longer kept (`_stale`; main process)."""
    faults.kill_point("finetune.checkpoint.before_rename")
    if final.exists():  # a re-save of the same step
        saving.check_only_ours(final)
        saving.remove_ours(final)
    record.move(tmp, final)
    for stale in _stale(step_folders(final.parent.parent), final):
        saving.remove_ours(stale)  # step-N folders of this run only (see _stale)


def remove_finished_checkpoints(out: Path) -> None:
    """Remove a finished run's checkpoints/ (only what the run's record says bertkit wrote; they are needed to resume
    an unfinished run, not to use a finished one: --keep-checkpoints keeps them)."""
    folder = out / "checkpoints"
    if not folder.exists():
        return
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    saving.remove_ours(folder)
    if not folder.exists():
        log.info("removed %s (%.0f MB): the run is finished; --keep-checkpoints keeps them", folder, size / 1e6)


def _stale(folders: list[Path], final: Path) -> list[Path]:
    """The step-N folders to remove once `final` is saved: older ones beyond KEEP, and any numbered after it - a
    run resumes from its newest complete checkpoint, so those are saves that never finished (no trainer state)."""
    older = [p for p in folders if _step(p) < _step(final)]
    newer = [p for p in folders if _step(p) > _step(final)]
    return older[: -(KEEP - 1) or None] + newer


def _step(folder: Path) -> int:
    return int(folder.name.split("-")[1])


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """{relative path: {size, sha256}} of every file in `folder` but the manifest itself."""
    digests = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        size, sha = record.file_digest(path)
        digests[path.relative_to(folder).as_posix()] = {"size": size, "sha256": sha}
    return digests


def _saved_files(folders: list[Path]) -> list[str]:
    """The files the checkpoint folders `folders` list in their manifests (what the next save writes again)."""
    found = [ownership.read_json_or_none(folder / MANIFEST) or {} for folder in folders]
    return sorted({name for manifest in found if isinstance(manifest.get("files"), dict) for name in manifest["files"]})


# ---------------------------------------------------------------- verifying and restoring


def verify(folder: Path) -> str | None:
    """Why the checkpoint in `folder` cannot be trusted (None when every file matches its manifest).

    A checkpoint written before manifests existed has none: it is trusted as before (see `restore`'s note).
    """
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        expected = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"its manifest {MANIFEST} is damaged"
    found = file_digests(folder)
    missing = sorted(set(expected) - set(found))
    if missing:
        return f"{', '.join(missing[:3])} missing"
    changed = sorted(name for name, digest in expected.items() if found[name] != digest)
    if changed:
        return f"{', '.join(changed[:3])} changed since it was saved (size or sha256 differs)"
    return None


def read_state(folder: Path) -> dict[str, Any]:
    """The trainer state saved with a checkpoint; a damaged file is a UserError naming it."""
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        if not isinstance(state, dict) or "global_step" not in state:
            raise ValueError("not a bertkit trainer state")
        return state
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder / STATE_FILE} is damaged ({exc}).") from None


def choose_checkpoint(out: Path) -> Restored | None:
    """The newest checkpoint, verified (main process); None when the run has none yet.

    A damaged newest checkpoint is refused, never skipped silently and never deleted: the message names the newest
    intact one and how to resume from it (delete the damaged folder), or to start over. A newer step folder without
    its trainer_state.json is a save that never finished (bertkit renames a checkpoint into place only with it): it
    holds no position to resume from, so it is passed over, with a note, as before checksums existed.
    """
    folders = step_folders(out)
    candidates = [p for p in folders if (p / STATE_FILE).exists()]
    if not candidates:
        return None
    newest = candidates[-1]
    problem, state = _check(newest)
    if problem is None:
        unfinished = [p for p in folders if p not in candidates and _step(p) > _step(newest)]
        notes = [f"{p} has no {STATE_FILE} (a save that never finished): resumed from {newest} instead."
                 for p in unfinished]
        if not (newest / MANIFEST).is_file():
            notes.append(f"{newest} was saved before checkpoints carried checksums: loaded without verifying it.")
        return Restored(newest, state, notes)
    intact = next((p for p in reversed(candidates[:-1]) if _check(p)[0] is None), None)
    fallback = (f"The previous checkpoint {intact} is intact: delete {newest} to resume from it, or "
                if intact else "No older intact checkpoint exists: ")
    raise UserError(f"Checkpoint {newest} is damaged ({problem}), so the run cannot resume from it exactly. "
                    f"{fallback}pass --overwrite (or a new --out) to start the run over.")


def _check(folder: Path) -> tuple[str | None, dict[str, Any]]:
    """(why `folder` cannot be resumed from or None, its trainer state)."""
    problem = verify(folder)
    if problem is not None:
        return problem, {}
    try:
        return None, read_state(folder)
    except UserError as exc:
        return str(exc), {}
