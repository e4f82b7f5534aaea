"""Whether --out holds this run: the resume key (what must match for a re-run to continue it), the run's status
(new, resume, finished), and claiming the run directory with a new run's config.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from bertkit.io import atomic, ownership, rundir, trail
from bertkit.options import config_dict
from bertkit.training.options import TRACKING_FIELDS, FinetuneOptions

NOT_IN_RESUME_KEY = {"quiet", "overwrite", "out", "save_every", "keep_checkpoints", "cuda_graphs", *TRACKING_FIELDS}
"""Options that do not change what is computed (where it is logged included); a re-run may change them and still
resume. --cuda-graphs changes how steps are launched, like the device, not what they compute."""


def recorded_config(cfg: FinetuneOptions) -> dict[str, Any]:
    """The config as config.json and the resume key hold it: --lr as a number once resolved (runs recorded before
    `--lr auto` hold a number there too, so they still resume)."""
    values = config_dict(cfg)
    try:
        values["lr"] = float(values["lr"])
    except (KeyError, TypeError, ValueError):
        pass
    return values


def resume_key(cfg: FinetuneOptions, fingerprints: dict[str, str]) -> dict[str, Any]:
    """What must match for a re-run to continue an existing --out: the config (less cosmetics) and the data."""
    values = {k: v for k, v in recorded_config(cfg).items() if k not in NOT_IN_RESUME_KEY}
    return {"config": values, "data": fingerprints}


def resume_differences(run_path: Path, key: dict[str, Any]) -> list[str]:
    """What differs between the run in `run_path` and a run with resume key `key` (empty: the same run)."""
    record = trail.read_run_config(run_path)
    if record is None:  # claimed, but stopped before its config was written: nothing to differ from
        return []
    return _changed_keys(record.get("resume_key") or {}, json.loads(atomic.to_json(key)))


def run_status(run: rundir.RunDir) -> str:
    """'new', 'resume' or 'finished' for the directory a run writes into."""
    if not run.existing or not (run.path / "config.json").is_file():
        return "new"
    try:
        finished = json.loads((run.path / "metrics.json").read_text(encoding="utf-8")).get("finished")
    except (OSError, ValueError, AttributeError):  # none yet (or not readable): the checkpoints decide
        finished = False
    return "finished" if finished else "resume"


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changed = []
    for section in ("config", "data"):
        a, b = old.get(section, {}), new.get(section, {})
        changed += [f"--{k.replace('_', '-')}: {a.get(k)!r} -> {b.get(k)!r}" if section == "config"
                    else f"{k} data: {a.get(k)} -> {b.get(k)}"
                    for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return changed


def finished_run(cfg: FinetuneOptions, key: dict[str, Any], command: str) -> Path | None:
    """A read-only look at --out before any work (its refusals end the run here): where it holds this run,
    finished (None: it does not)."""
    plan = rundir.inspect_run_dir(cfg.out or "", command, overwrite=cfg.overwrite,
                                compare=lambda path: resume_differences(path, key), inputs=ownership.input_paths(cfg))
    finished = not plan.replacing and not plan.pending_swap and run_status(plan) == "finished"
    return plan.path if finished else None


def claim_out(cfg: FinetuneOptions, key: dict[str, Any], accelerator: Any, task: Any,
              learning_rate: dict[str, Any] | None = None) -> tuple[rundir.RunDir, str]:
    """Claim --out (main process): the run directory to write into and its status; a new run's config.json (with
    how --lr was chosen, `learning_rate`)."""
    run = rundir.claim_run_dir(cfg.out or "", task.command, overwrite=cfg.overwrite,
                             compare=lambda path: resume_differences(path, key))
    status = run_status(run)
    if status == "finished":
        run.commit()
    elif status == "new":
        trail.write_run_config(run.path, task.command, recorded_config(cfg), resume_key=key,
                              data_fingerprints=key["data"], learning_rate=learning_rate,
                              model_revision=task.model_revision(cfg), processes=accelerator.num_processes,
                              mixed_precision=accelerator.mixed_precision, device=str(accelerator.device))
    return dataclasses.replace(run, compare=None), status  # sent to every process: no closures
