"""The experiment trackers --report-to names, one module each (tensorboard, mlflow, trackio, wandb), found by name in
`REGISTRY`. A tracker (`base.Tracker`) owns the package it needs, its checks before the run, how it starts (and
continues a resumed run's tracker run), logs and finishes, and the summary's line saying where the run is logged.

Adding a tracker: its module here (a `Tracker` subclass and its instance, `TRACKER`) and its line in `REGISTRY`;
--report-to, the run (`bertkit.training.tracking`) and the summary (`summary_lines`) find it there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertkit.training.trackers import mlflow, tensorboard, trackio, wandb
from bertkit.training.trackers.base import Tracker

REGISTRY: dict[str, Tracker] = {tracker.name: tracker for tracker in (
    tensorboard.TRACKER,
    mlflow.TRACKER,
    trackio.TRACKER,
    wandb.TRACKER,
)}
"""--report-to value -> its tracker, in the order --report-to's help and messages list them."""


def tracker_names() -> tuple[str, ...]:
    """The trackers --report-to accepts (besides `none`), in the registry's order."""
    return tuple(REGISTRY)


def summary_lines(trackers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Where a run is logged, one line per tracker (`trackers`: metrics.json's "trackers"), with the command that
    shows it; a tracker this bertkit does not know (an older run's record) gets its record, plainly."""
    return [REGISTRY[name].summary_line(where) if name in REGISTRY
            else f"{name}: {', '.join(f'{key} {value}' for key, value in where.items())}"
            for name, where in trackers.items()]
