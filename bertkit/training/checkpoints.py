"""Saving what a training run keeps, through `bertkit.io`: its checkpoints (Accelerate's `save_state` on every
process, completed, verified and put in place by `io.checkpoint_folders`) and its model folders (`save_pretrained`,
bertkit_model.json and the card, swapped in whole by `io.saving`); loading a verified checkpoint; and `_on_main`, the
main process's answer on every process.

When: every --save-every steps and at each epoch's end (the loop's schedule), and once --save-every-minutes have
passed since the last checkpoint (`Checkpointing`, whose clock a test can give), so a run stopped early loses minutes
at most; `Checkpointing` also says what a re-run resumes from (`Checkpointing.resume_note`).

Disk space is checked before each save from the size of what is saved, and a write that fails for lack of space
removes its temporary folder and ends in one message (`disk.full_error`), so the same command resumes once space
is freed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic, checkpoint_folders, disk, ownership, record, saving
from bertkit.io.checkpoint_folders import Restored
from bertkit.models.card import CARD_FILE, CardFacts, card_text
from bertkit.models.metadata import write_model_info

log = logging.getLogger(__name__)


def save_checkpoint(accelerator: Any, out: Path, state: dict[str, Any], need_bytes: int) -> Path:
    """save_state into a temp folder, add the trainer state and the manifest, rename into place; keep
    `checkpoint_folders.KEEP`.

    Every process takes part (save_state writes one RNG file per process); only the main one records, renames and
    cleans (the temp folder's name is the main process's)."""
    final = checkpoint_folders.folder_of(out, state["global_step"])
    library_names = _state_files(accelerator)
    tmp = _on_main(accelerator, lambda: checkpoint_folders.start_save(final, need_bytes, library_names))
    with saving.full_disk_cleanup(tmp, need_bytes):
        accelerator.save_state(str(tmp), safe_serialization=True)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            checkpoint_folders.seal(tmp, state)
    if accelerator.is_main_process:
        checkpoint_folders.put_in_place(tmp, final)
    accelerator.wait_for_everyone()
    return final


@dataclass
class Checkpointing:
    """A run's checkpoints by the clock (--save-every-minutes, on top of the step schedule) and the last one made or
    restored: what a re-run resumes from."""

    minutes: float = 0.0
    """Checkpoint once this many minutes have passed since the last checkpoint (or the run's start); 0: never by time."""
    clock: Callable[[], float] = time.monotonic
    """Seconds, from any origin (tests give their own)."""
    last: dict[str, int] | None = None
    """The last checkpoint's `global_step`, `epoch` (0-based: the epoch it resumes in) and `step_in_epoch`."""
    since: float = field(init=False)

    def __post_init__(self) -> None:
        self.since = self.clock()

    def due(self, accelerator: Any) -> bool:
        """Whether --save-every-minutes have passed since the last checkpoint. In a run of several processes one
        collective: a process whose clock says so decides for all, since every process takes part in a save."""
        if not self.minutes:
            return False
        due = self.clock() - self.since >= self.minutes * 60
        if accelerator is not None and accelerator.num_processes > 1:
            import torch

            flag = torch.tensor([1.0 if due else 0.0], device=accelerator.device)
            due = bool(accelerator.reduce(flag, reduction="sum").item() > 0)
        return due

    def saved(self, state: dict[str, Any]) -> None:
        """A checkpoint of the trainer state `state` is in place (saved, or restored): the clock starts again."""
        self.since = self.clock()
        self.last = {k: int(state[k]) for k in ("global_step", "epoch", "step_in_epoch")}

    def resume_note(self, steps_per_epoch: int) -> str:
        """What a re-run of the same command does now: resume from the last checkpoint (its step and where in its
        epoch of `steps_per_epoch` steps), or start over when there is none yet."""
        if self.last is None:
            return "no checkpoint yet: a re-run of the same command starts the run over"
        step, epoch, batch = self.last["global_step"], self.last["epoch"], self.last["step_in_epoch"]
        where = (f"the end of epoch {epoch}" if batch == 0 else
                 f"epoch {epoch + 1}, batch {batch}/{steps_per_epoch}")
        return f"a re-run of the same command resumes from the checkpoint at step {step} ({where})"


def save_run_checkpoint(session: Any, state: dict[str, Any]) -> None:
    """A checkpoint of a training run (`loop.Session`) with its trainer `state`, on every process, and the clock of
    --save-every-minutes started again."""
    save_checkpoint(session.accelerator, session.out, state, session.checkpoint_bytes)
    session.checkpointing.saved(state)


def resumed_line(restored: dict[str, Any], metric: str | None) -> str:
    """Where a resumed run started again (a `loop.restore` record: checkpoint, epoch, step, batch_in_epoch,
    steps_per_epoch, lr, best_metric), its numbers as summary lines show them; logged when it resumes and shown in
    the summary (once: the CLI does not repeat a line that was logged)."""
    best = restored.get("best_metric")
    return (f"resumed from {restored['checkpoint']}: epoch {restored['epoch']}, step {restored['step']} (batch "
            f"{restored['batch_in_epoch']}/{restored['steps_per_epoch']} of the epoch), lr {restored['lr']:.3e}, "
            f"best {metric} so far {'none yet' if best is None else format(best, '.4f')}")


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
    linked = saving.vouched_files(same_weights_as, WEIGHT_SUFFIXES) if same_weights_as is not None else []
    state_dict = None if linked else {k.removeprefix("model."): v for k, v in accelerator.get_state_dict(net).items()}
    if accelerator.is_main_process:
        expected = saving.listed_files(path) or saving.listed_files(same_weights_as) or _model_folder_files(tokenizer)
        readme = card_text(card) if card is not None else None  # rendered before the folder is started
        tmp = saving.start_folder(path, MODEL_FOLDER_MARGIN if linked else need_bytes, expected)
        with saving.full_disk_cleanup(tmp, need_bytes):
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
            if readme is not None:
                atomic.write_text_atomic(tmp / CARD_FILE, readme)
            disk.umask_permissions(tmp)  # transformers writes the weights 0600: other users could not read them
            ownership.write_file_list(tmp)  # what push uploads
            record.seal(tmp)
        saving.replace_folder(tmp, path, "finetune.model.swap")
    accelerator.wait_for_everyone()


MODEL_FOLDER_MARGIN = 16 << 20
"""Disk a model folder whose weights are linked needs (config, tokenizer, card): 16 MB."""
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json")


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


# ---------------------------------------------------------------- restoring


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
