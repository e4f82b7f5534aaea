"""A run's experiment trackers (--report-to): the trackers themselves are `bertkit.training.trackers` (one module
each, found by name in its registry); this module runs them for one training run.

`check_trackers` runs before anything is claimed or trained (a tracker whose package is missing, or whose own check
refuses the options - an MLflow store that cannot work -, is one UserError). `started_trackers` runs after the
checkpoint is restored: on the main process it starts each tracker - continuing the tracker run recorded in
OUT/trackers.json when there is one (`recorded_runs`, read once the run directory is claimed) - and a new tracker run
logs the hyper-parameters; every process gets a `RunTrackers` (the loss mean is a collective). The loop calls
`RunTrackers.step_done` after each optimizer step and `RunTrackers.evaluated` after each dev evaluation; everything
is logged at step = the global optimizer step:

    train/loss (mean since the last log), train/learning_rate, train/grad_norm, train/samples_per_second,
    train/epoch every --log-every steps; eval/<metric> for every numeric dev metric (eval/loss included).

A resumed run logs no step twice (each tracker run knows the steps it has: `TrackerRun.new_values`). accelerate's
`end_training` is never called (it destroys the process group sweeps still need).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic
from bertkit.training.loop import Session, TrainState
from bertkit.training.options import FinetuneOptions
from bertkit.training.trackers import REGISTRY
from bertkit.training.trackers.base import RunStart, TrackerRun, TrackingPlan

log = logging.getLogger(__name__)

RECORD = "trackers.json"
"""In the run directory: which tracker runs follow it (per tracker, what its `start` recorded: MLflow run id and URI,
W&B id, Trackio project/name)."""
RECORD_FORMAT = "bertkit-trackers/1"


# ---------------------------------------------------------------- before the run


def check_trackers(cfg: FinetuneOptions) -> None:
    """Refuse, before anything is claimed or trained, a tracker that cannot start: its package missing, or options
    its own check refuses (an MLflow store that needs SQLAlchemy without it, or one inside --out)."""
    for name in cfg.tracking.trackers:
        package = REGISTRY[name].package
        if importlib.util.find_spec(package) is None:
            raise UserError(f"--report-to {name} needs the {package} package, which is not installed. Install the "
                            f"trackers with: pip install 'bertkit[track]'  (or: pip install {package}), or drop "
                            f"--report-to {name}.")
    for name in cfg.tracking.trackers:
        REGISTRY[name].check(tracking_plan(cfg))


def tracking_plan(cfg: FinetuneOptions) -> TrackingPlan:
    """What the trackers are told of the run's options."""
    return TrackingPlan(cfg.tracking.project, cfg.tracking.tracking_uri, cfg.output.out or "")


# ---------------------------------------------------------------- the run's trackers


@dataclass
class RunTrackers:
    """The trackers following one run: started ones on the main process, none elsewhere (every process takes part
    in the loss mean of a log step)."""

    cfg: FinetuneOptions
    runs: list[TrackerRun]
    where: dict[str, Any]
    """Where the run is logged, per tracker (metrics.json "trackers")."""
    grad_norm: float | None = None
    """The gradient norm of the last optimizer step (before clipping), when it was computed."""
    rows: int = 0
    since: float = field(default_factory=time.perf_counter)

    def due(self, step: int) -> bool:
        """Whether optimizer step `step` is a log step."""
        return step % self.cfg.tracking.log_every == 0

    def step_done(self, session: Session, state: TrainState, logged: dict[str, float] | None, batch_rows: int) -> None:
        """After an optimizer step; on a log step (`logged`: the loop's mean training loss and learning rate since
        the last one), log the training numbers."""
        self.rows += batch_rows
        if logged is None:
            return
        now = time.perf_counter()
        values = {"train/loss": logged["train_loss"], "train/learning_rate": logged["lr"],
                  "train/samples_per_second": self.rows / max(now - self.since, 1e-9),
                  "train/epoch": state.epoch + state.step_in_epoch / max(session.steps_per_epoch, 1)}
        if self.grad_norm is not None:
            values["train/grad_norm"] = self.grad_norm
        self.rows, self.since, self.grad_norm = 0, now, None
        self.log(values, state.global_step)

    def evaluated(self, record: dict[str, Any]) -> None:
        """After a dev evaluation: every numeric dev metric of its record as eval/<name>."""
        values = {f"eval/{k[len('dev_'):]}": float(v) for k, v in record.items()
                  if k.startswith("dev_") and isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v)}
        self.log(values, int(record["step"]))

    def log(self, values: dict[str, float], step: int) -> None:
        for run in self.runs:
            run.log(values, step)

    def finish(self, ok: bool) -> None:
        """Close every tracker run (once; `ok`: the training finished). A tracker that fails to close is logged:
        the run's own outputs are what matter."""
        for run in self.runs:
            try:
                run.finish(ok)
            except Exception as exc:  # noqa: BLE001 - a tracker's own failure never loses the run
                log.warning("could not close the %s run: %s", run.tracker.name, exc)


def recorded_runs(session: Session) -> dict[str, Any]:
    """What the run directory's trackers.json records of the tracker runs following this run (a resumed run continues
    them), read once the run directory is claimed: {} without --report-to, on the other processes, or for a new run."""
    if not session.cfg.tracking.trackers or not session.accelerator.is_main_process:
        return {}
    saved = atomic.read_json_or_none(session.out / RECORD)
    return saved if isinstance(saved, dict) and saved.get("format") == RECORD_FORMAT else {}


def started_trackers(session: Session, state: TrainState, fingerprints: dict[str, str],
                     saved: dict[str, Any]) -> RunTrackers | None:
    """The run's trackers (None without --report-to), started on the main process after the restore, continuing the
    tracker runs `saved` records (`recorded_runs`)."""
    cfg = session.cfg
    if not cfg.tracking.trackers:
        return None
    if not session.accelerator.is_main_process:
        return RunTrackers(cfg, [], {})
    hparams = hyper_parameters(session.config_record, fingerprints)
    runs, where = [], {}
    try:
        for name in cfg.tracking.trackers:
            start = RunStart(tracking_plan(cfg), session.out, Path(session.run.out), state.global_step,
                             saved.get(name) or {}, hparams)
            runs.append(_started(name, start))
            where[name] = runs[-1].where
    except BaseException:
        RunTrackers(cfg, runs, where).finish(ok=False)
        session.run.abandon()  # a refused start leaves --out as it was (a new run's config.json, metrics.jsonl)
        raise
    atomic.write_json_atomic(session.out / RECORD, {**saved, "format": RECORD_FORMAT, **where})
    return RunTrackers(cfg, runs, where)


def _started(name: str, start: RunStart) -> TrackerRun:
    """One tracker started; whatever its library raises while starting (no login, no network, an API it changed)
    is one UserError naming the option. The run directory is claimed but nothing is trained: a re-run resumes."""
    tracker = REGISTRY[name]
    try:
        return tracker.start(start)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the tracker libraries raise many types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"--report-to {name} could not start its run: {type(exc).__name__}: {first}. Fix that"
                        f"{tracker.start_hint}, or drop --report-to {name}, then re-run the same command: "
                        f"the run resumes.") from None


def hyper_parameters(config: dict[str, Any], fingerprints: dict[str, str]) -> dict[str, Any]:
    """The run's recorded options (config.json's `config`) as tracker parameters (scalars; lists joined by commas;
    None as "none") and the data fingerprints."""
    values: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        values[key] = "none" if value is None else value
    return {**values, **{f"data_fingerprint_{split}": fp for split, fp in fingerprints.items()}}
