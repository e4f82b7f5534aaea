"""Training checkpoints and saved model folders: written atomically, verified before they are trusted.

A checkpoint is `checkpoints/step-N/`: Accelerate's `save_state` (model, optimizer, scheduler, RNG states),
bertkit's `trainer_state.json` (where the run is), and `bertkit_checkpoint.json`, a manifest with the size and
sha256 of every other file. It is built in a temp folder `checkpoints/.tmp-step-N-XXXXXXXX/` (recorded in the run's
record before it is made, `bertkit.io.record`) and renamed into place, so a kill leaves the previous complete
checkpoint or the new complete one, and the next run removes exactly the temp folder the kill left. Resuming verifies the newest checkpoint against its
manifest before loading anything (Accelerate would silently skip a damaged RNG file and the run would quietly stop
being exact); a damaged one is refused with the name of the newest intact one to resume from.

Disk space is checked before each save from the size of what is saved, and a write that fails for lack of space
removes its temporary folder and ends in one message (`disk.full_error`), so the same command resumes once space
is freed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic, disk, faults, library_files, ownership, record
from bertkit.models.card import CardFacts, write_model_card
from bertkit.models.metadata import write_model_info

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
        _remove(tmp)
    return [p.name for p in found]


def latest_checkpoint(out: Path) -> Path | None:
    """The newest checkpoint folder that has its trainer state (whether it is intact is `verify`'s question)."""
    done = [p for p in step_folders(out) if (p / STATE_FILE).exists()]
    return done[-1] if done else None


# ---------------------------------------------------------------- saving


def save_checkpoint(accelerator: Any, out: Path, state: dict[str, Any], need_bytes: int) -> Path:
    """save_state into a temp folder, add the trainer state and the manifest, rename into place; keep `KEEP`.

    Every process takes part (save_state writes one RNG file per process); only the main one records, renames and
    cleans (the temp folder's name is the main process's)."""
    folder = out / "checkpoints"
    final = folder / f"step-{state['global_step']}"
    expected = _saved_files(step_folders(out)[-1:]) or _state_files(accelerator)
    tmp = _on_main(accelerator, lambda: _start_folder(final, need_bytes, expected))
    with _full_disk_cleanup(accelerator, tmp, need_bytes):
        accelerator.save_state(str(tmp), safe_serialization=True)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            atomic.write_json_atomic(tmp / STATE_FILE, state)
            atomic.write_json_atomic(tmp / MANIFEST, {"format": MANIFEST_FORMAT, "files": file_digests(tmp)})
            record.seal(tmp)
    if accelerator.is_main_process:
        faults.kill_point("finetune.checkpoint.before_rename")
        if final.exists():  # a re-save of the same step
            _check_only_ours(final)
            _remove(final)
        record.move(tmp, final)
        for stale in _stale(step_folders(out), final):
            _remove(stale)  # step-N folders of this run only (see _stale)
    accelerator.wait_for_everyone()
    return final


def save_model_folder(accelerator: Any, net: Any, tokenizer: Any, path: Path, extra: dict[str, Any],
                      need_bytes: int, card: CardFacts | None = None, same_weights_as: Path | None = None) -> None:
    """save_pretrained (safetensors) of the wrapped `transformers` model + tokenizer, bertkit_model.json and the
    model card (README.md, from `card`) into a temp folder, then swap it in for `path` (best/ or final/).

    `same_weights_as`: a model folder this run saved from these very weights (best/ when the last evaluation was the
    best): its weight files are hard-linked instead of written again (copied where the file system has no links),
    so final/ costs the disk of its small files only and stays a complete model folder every reader loads as before.
    """
    from transformers.utils import logging as hf_logging

    accelerator.wait_for_everyone()
    linked = weight_files(same_weights_as) if same_weights_as is not None else []
    state_dict = None if linked else {k.removeprefix("model."): v for k, v in accelerator.get_state_dict(net).items()}
    if accelerator.is_main_process:
        tmp = _start_folder(path, MODEL_FOLDER_MARGIN if linked else need_bytes,
                            _listed_files(path) or _listed_files(same_weights_as) or _model_folder_files(tokenizer))
        with _full_disk_cleanup(None, tmp, need_bytes):
            hf_logging.disable_progress_bar()  # loading turns transformers' bars back on; a one-file save needs none
            model = accelerator.unwrap_model(net).model
            if linked:
                for name in linked:
                    disk.link_or_copy(same_weights_as / name, tmp / name)
                model.config.save_pretrained(tmp)
            else:
                model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
            tokenizer.save_pretrained(tmp)
            write_model_info(tmp, {**extra, **({"weights_shared_with": same_weights_as.name} if linked else {})})
            if card is not None:
                write_model_card(tmp, card)
            disk.umask_permissions(tmp)  # transformers writes the weights 0600: other users could not read them
            ownership.write_file_list(tmp)  # what push uploads
            record.seal(tmp)
        replace_folder(tmp, path, "finetune.model.swap")
    accelerator.wait_for_everyone()


MODEL_FOLDER_MARGIN = 16 << 20
"""Disk a model folder whose weights are linked needs (config, tokenizer, card): 16 MB."""
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")


def weight_files(folder: Path) -> list[str]:
    """The weight files of a model folder this run saved (as its file list names them, each still holding the bytes
    the run's record says bertkit wrote); empty when the folder cannot vouch for them (then the weights are saved)."""
    files = (ownership.read_json_or_none(folder / ownership.FILE_LIST) or {}).get("files") or []
    names = [name for name in files if isinstance(name, str) and name.endswith(WEIGHT_SUFFIXES) and "/" not in name]
    holder = ownership.record_of(folder)
    if not names or holder is None:
        return []
    rec, rel = holder
    ours = all((entry := rec.entry(f"{rel}/{name}")) is not None and record.matches(folder / name, entry)
               for name in names)
    return names if ours else []


def remove_finished_checkpoints(out: Path) -> None:
    """Remove a finished run's checkpoints/ (only what the run's record says bertkit wrote; they are needed to resume
    an unfinished run, not to use a finished one: --keep-checkpoints keeps them)."""
    folder = out / "checkpoints"
    if not folder.exists():
        return
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    _remove(folder)
    if not folder.exists():
        log.info("removed %s (%.0f MB): the run is finished; --keep-checkpoints keeps them", folder, size / 1e6)


def replace_folder(tmp: Path, path: Path, kill_at: str | None = None) -> None:
    """Swap the complete folder `tmp` in for `path` (a folder bertkit wrote, checked again: a file may have come
    since the run was checked); the previous one goes aside under a temp name first, so a kill leaves one of the
    two whole, and the next run removes the other."""
    old = None
    if path.exists():
        _check_only_ours(path)
        old = record.temp_name(path, folder=True, role="old")
        record.move(path, old, record.TEMP)
    if kill_at:
        faults.kill_point(kill_at)
    record.move(tmp, path)
    if old is not None:
        _remove(old)


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


def _start_folder(final: Path, need_bytes: int, expected: list[str]) -> Path:
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


def _saved_files(folders: list[Path]) -> list[str]:
    """The files the checkpoint folders `folders` list in their manifests (what the next save writes again)."""
    found = [ownership.read_json_or_none(folder / MANIFEST) or {} for folder in folders]
    return sorted({name for manifest in found if isinstance(manifest.get("files"), dict) for name in manifest["files"]})


def _state_files(accelerator: Any) -> list[str]:
    """The files `save_state` writes for this accelerator, by accelerate's own names (the first save of a run has
    no earlier checkpoint to go by): each model, optimizer and scheduler, each process's RNG states, the scaler and
    custom objects when there are. A name missed here is still recorded once the save is done; only a kill during
    that save then leaves a file the next run names instead of removing."""
    from accelerate.utils import constants

    def numbered(stem: str, suffix: str, count: int) -> list[str]:
        return [f"{stem}{'' if i == 0 else f'_{i}'}.{suffix}" for i in range(count)]

    names = numbered(constants.SAFE_MODEL_NAME, "safetensors", len(getattr(accelerator, "_models", [])))
    names += numbered(constants.OPTIMIZER_NAME, "bin", len(getattr(accelerator, "_optimizers", [])))
    names += numbered(constants.SCHEDULER_NAME, "bin", len(getattr(accelerator, "_schedulers", [])))
    names += [f"{constants.RNG_STATE_NAME}_{rank}.pkl" for rank in range(accelerator.num_processes)]
    names += [f"custom_checkpoint_{i}.pkl" for i in range(len(getattr(accelerator, "_custom_objects", [])))]
    return names + ([constants.SCALER_NAME] if getattr(accelerator, "scaler", None) is not None else [])


MODEL_FOLDER_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                      "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
"""What `save_pretrained` of a model and a fast tokenizer write, by the libraries' names."""


def _model_folder_files(tokenizer: Any) -> list[str]:
    """The files a model folder's first save in a run writes (no earlier save of it lists them): the libraries'
    names, the tokenizer's vocabulary files included. One missed is recorded once the save is done."""
    vocab = getattr(tokenizer, "vocab_files_names", None)
    names = [v for v in vocab.values() if isinstance(v, str)] if isinstance(vocab, dict) else []
    return sorted({*MODEL_FOLDER_FILES, *names})


def _listed_files(folder: Path | None) -> list[str]:
    """The files a model folder saved earlier in this run lists (what the next save of it writes again)."""
    listed = (ownership.read_json_or_none(folder / ownership.FILE_LIST) or {}) if folder is not None else {}
    files = listed.get("files") if isinstance(listed, dict) else None
    return [name for name in files if isinstance(name, str)] if isinstance(files, list) else []


@contextmanager
def _full_disk_cleanup(accelerator: Any, tmp: Path, need_bytes: int) -> Iterator[None]:
    """A save that runs out of space removes its temp folder (ours, half written) and says disk full."""
    try:
        yield
    except Exception as exc:
        if not disk.is_disk_full(exc):
            raise
        _remove(tmp)
        raise disk.full_error(tmp.parent, need_bytes) from None


def _remove(folder: Path) -> None:
    """Remove a folder of ours (a checkpoint, a model folder, their temp folders): what the run's record says
    bertkit wrote there (`ownership.remove_recorded`); anything else stays, with a warning, and the next run
    names it."""
    kept = ownership.remove_recorded(folder)
    if kept:
        log.warning("kept %s: it holds what bertkit did not write (%s)", folder, ", ".join(map(str, kept[:5])))


def _check_only_ours(folder: Path) -> None:
    """A UserError when `folder`, about to be replaced, holds anything the run's record does not vouch for."""
    found = ownership.unowned(folder)
    if found:
        shown = ", ".join(f"{folder / u.path.rstrip('/')}" + (" (changed since bertkit wrote it)"
                                                                if u.why == ownership.CHANGED else "")
                          for u in found[:5])
        raise UserError(f"{folder} holds files bertkit did not write ({shown}); bertkit never replaces a folder "
                        f"holding anything else. Move them out of {folder} and re-run the same command to resume.")


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


def load(accelerator: Any, restored: Restored) -> None:
    """Accelerate's load_state from a verified checkpoint (a load error is a UserError, not a traceback)."""
    try:
        accelerator.load_state(str(restored.path))
    except Exception as exc:  # safetensors, torch and pickle errors of many types
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"Checkpoint {restored.path} cannot be loaded ({type(exc).__name__}: {reason}). Delete that folder to "
            f"resume from the previous checkpoint, or pass --overwrite to start the run over."
        ) from None


# ---------------------------------------------------------------- processes


def _on_main(accelerator: Any, fn: Any) -> Any:
    """fn() on the main process; its (picklable) result, or its UserError, on every process - never a hang."""
    result: tuple[bool, Any] = (True, None)
    if accelerator is None or accelerator.is_main_process:
        try:
            result = (True, fn())
        except UserError as exc:
            result = (False, str(exc))
    if accelerator is not None and accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        holder = [result]
        broadcast_object_list(holder, from_process=0)
        result = holder[0]
    ok, value = result
    if not ok:
        raise UserError(value)
    return value

