"""Whether --out holds this run: the resume key (what must match for a re-run to continue it), and what is asked of
the run directory with it (`bertkit.io.rundir`: whether it holds this run finished; claiming it, with a new run's
config.json as `run_record` gathers it). The comparison of keys and the run's status are the run directory's
(`trail.key_compare`, `RunDir.status`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.encoding.reading import family_name
from bertkit.io import ownership, rundir, trail
from bertkit.options import config_dict, family_values
from bertkit.training.options import FinetuneOptions


def recorded_config(cfg: FinetuneOptions, family: str | None = None) -> dict[str, Any]:
    """The config as config.json (every option) and the resume key (`family`: the options that family reads,
    `options.family_values`) hold it: --lr as a number once resolved (runs recorded before `--lr auto` hold a number
    there too, so they still resume)."""
    values = config_dict(cfg) if family is None else family_values(cfg, family)
    try:
        values["lr"] = float(values["lr"])
    except (KeyError, TypeError, ValueError):
        pass
    return values


def resume_key(cfg: FinetuneOptions, fingerprints: dict[str, str]) -> dict[str, Any]:
    """What must match for a re-run to continue an existing --out: every option its problem family reads but those
    a re-run may change (`trail.RERUN_MAY_CHANGE`: where the run is written, launched or logged), and the data."""
    values = {k: v for k, v in recorded_config(cfg, run_family(cfg)).items() if k not in trail.RERUN_MAY_CHANGE}
    return {"config": values, "data": fingerprints}


def run_family(cfg: Any) -> str:
    """The problem family a training run reads (`encoding.reading.family_name`: its command's, or a tagger's)."""
    return family_name(cfg)


def finished_run(cfg: FinetuneOptions, key: dict[str, Any], command: str) -> Path | None:
    """A read-only look at --out before any work (its refusals end the run here): where it holds this run,
    finished (None: it does not). One question to `rundir`: the same run is the same resume key."""
    plan = rundir.inspect_run_dir(cfg.output.out or "", command, overwrite=cfg.output.overwrite,
                                  compare=trail.key_compare(key, command, run_family(cfg)),
                                  inputs=ownership.input_paths(cfg))
    return plan.finished()


def run_record(cfg: FinetuneOptions, accelerator: Any, task: Any,
               learning_rate: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a new run's config.json records, gathered once: its `config` (`recorded_config`), `extra` (how --lr
    was chosen, `learning_rate`; the model's revision; processes, precision and device) and its `family`. Handed to
    `rundir` whole when --out is claimed (`claim_resumable(..., **record)`)."""
    extra = {"learning_rate": learning_rate, "model_revision": task.model_revision(cfg),
             "processes": accelerator.num_processes, "mixed_precision": accelerator.mixed_precision,
             "device": str(accelerator.device)}
    return {"config": recorded_config(cfg), "extra": extra, "family": run_family(cfg)}
