"""What every experiment tracker is to a training run (`Tracker`), what it is told (`TrackingPlan` before the run,
`RunStart` when it starts) and what it hands back once started (`TrackerRun`). The trackers themselves are the other
modules of this package; the run-level coordination (trackers.json, the loss mean, one failure message) is
`bertkit.training.tracking`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.io import library_files


@dataclass(frozen=True)
class TrackingPlan:
    """The tracking options as given, before anything is claimed: what a tracker checks and starts from."""

    project: str
    """--project: the experiment / project the run is filed under."""
    tracking_uri: str | None
    """--tracking-uri as given (MLflow's store)."""
    out: str
    """--out as given."""


@dataclass(frozen=True)
class RunStart:
    """What a tracker starts its run from: on the main process, once the checkpoint is restored."""

    plan: TrackingPlan
    folder: Path
    """Where this run writes: --out, or its staging folder while it replaces another run (--overwrite)."""
    out: Path
    """The run directory the user named: what the record says and the summary shows."""
    step: int
    """The restored optimizer step (0 for a new run): a continued tracker run logs only the steps after it."""
    saved: Mapping[str, Any]
    """What trackers.json records of this tracker's run ({}: start a new tracker run)."""
    hparams: Mapping[str, Any]
    """The run's options and data fingerprints, as tracker parameters (logged by a new tracker run)."""

    @property
    def name(self) -> str:
        """The run's name in every tracker: its run directory's name."""
        return self.out.name


@dataclass
class TrackerRun:
    """One started tracker run: the library's handle, where it logs, and the steps it already has (skipped: a
    resumed run logs no step twice)."""

    tracker: Tracker
    handle: Any
    """What the tracker's library returned (an accelerate tracker)."""
    where: dict[str, Any]
    """Where the run is logged (trackers.json, metrics.json "trackers", the summary line); its continuation key."""
    done: dict[str, int] = field(default_factory=dict)
    """metric key -> its last logged step, for trackers that know it per metric (MLflow)."""
    done_before: int = 0
    """Every step up to this one is logged already (W&B, Trackio); 0: none."""
    folder: Path | None = None
    """The folder in the run directory the tracker's library writes (TensorBoard): its files are recorded as the
    library makes them (`library_files`), with their digests once it is closed."""
    finished: bool = False

    def new_values(self, values: Mapping[str, float], step: int) -> dict[str, float]:
        """The values this tracker run has not logged at `step` yet."""
        return {k: v for k, v in values.items() if step > max(self.done.get(k, 0), self.done_before)}

    def log(self, values: Mapping[str, float], step: int) -> None:
        new = self.new_values(values, step)
        if new:
            self.tracker.log(self, new, step)

    def finish(self, ok: bool) -> None:
        """Close the tracker run once (`ok`: the training finished), then seal the files its library wrote."""
        if self.finished:
            return
        self.finished = True
        self.tracker.finish(self, ok)
        if self.folder is not None:
            library_files.seal_open(self.folder)


class Tracker(ABC):
    """One tracker --report-to names. A subclass is one module of this package and one line of its registry
    (`bertkit.training.trackers.REGISTRY`); the run calls `check`, `start`, `log` and `finish`, the summary
    `summary_line`."""

    name: str
    """Its --report-to value."""
    start_hint: str = ""
    """How to fix a start its library refused, as " (...)" after "Fix that" in the message."""

    @property
    def package(self) -> str:
        """The package it needs (import name = pip name): --report-to checks it is installed before the run. Its
        name, unless a tracker says otherwise."""
        return self.name

    @property
    def choice(self) -> str:
        """How --report-to's help names it: its name, and where it logs when that is worth saying."""
        return self.name

    def check(self, plan: TrackingPlan) -> None:  # noqa: B027 - most trackers have nothing more to check
        """Raise a UserError, before anything is claimed, for options with which it cannot start (its package is
        checked already)."""

    @abstractmethod
    def start(self, run: RunStart) -> TrackerRun:
        """Its run started - the one `run.saved` records continued - with the hyper-parameters of a new one logged."""

    def log(self, run: TrackerRun, values: Mapping[str, float], step: int) -> None:
        """Log `values` (not logged yet) at optimizer step `step`."""
        run.handle.log(dict(values), step=step)

    def finish(self, run: TrackerRun, ok: bool) -> None:
        """Close its run; `ok`: the training finished (False: it failed or was stopped)."""
        run.handle.finish()

    @abstractmethod
    def summary_line(self, where: Mapping[str, Any]) -> str:
        """Where a run is logged (`where`: what `start` recorded), with the command that shows it."""
