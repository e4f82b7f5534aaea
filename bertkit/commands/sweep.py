"""`bertkit sweep`: many `finetune` runs over a --grid or an Optuna --space, K seeds each, resumable; OUT/best is the
best trial's model (`bertkit.training.trials` runs them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.models.preflight import check_inputs
from bertkit.training.space import SweepOptions


@dataclass(frozen=True)
class SweepConfig(SweepOptions):
    """`bertkit sweep`: many `finetune` runs over a grid or an Optuna search, ranked by --metric-for-best."""


def run(cfg: SweepConfig, *, progress: bool = True) -> Any:
    """The sweep (`bertkit.training.trials.SweepResult`: its folder, the ranked table, the trials)."""
    check_inputs(cfg, need_labels=True, models=(cfg.model,))  # before torch and transformers are imported
    from bertkit.training.trials import run_sweep

    return run_sweep(cfg, progress=progress)
