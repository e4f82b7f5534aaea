"""`bertkit sweep`: many `finetune` runs over a --grid or an Optuna --space, K seeds each, resumable; OUT/best is the
best trial's best model (`bertkit.training.trials` runs them).

The options are the training package's `SweepOptions` (the search space, parsed there into `Dimension`s, each value
checked through a trial's `FinetuneOptions`); the result is `SweepResult`, what sweep.json holds as typed records
(`training.trials_report.SweepSummary`). Each trial resolves its own --precision, which may be a dimension of the
space."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.models.preflight import check_inputs
from bertkit.training.space import SweepOptions
from bertkit.training.trials_report import SweepSummary, TrialRow


@dataclass(frozen=True)
class SweepConfig(SweepOptions):
    """`bertkit sweep`: many `finetune` runs over a grid or an Optuna search, ranked by --metric-for-best."""


@dataclass(frozen=True)
class SweepResult:
    """What a sweep produced: its folder and (main process only) sweep.json's content, typed."""

    out: Path
    summary: SweepSummary | None
    is_main_process: bool = True

    @property
    def rows(self) -> tuple[TrialRow, ...]:
        """trials.csv's rows (none outside the main process)."""
        return () if self.summary is None else self.summary.rows

    def to_json(self) -> dict[str, Any]:
        """--json: sweep.json's keys and `out`."""
        return {**(self.summary.to_json() if self.summary is not None else {}), "out": str(self.out)}


def run(cfg: SweepConfig, *, progress: bool = True) -> SweepResult:
    """The sweep: its folder, sweep.json's content (main process), the ranked trials' rows."""
    check_inputs(cfg, need_labels=True, models=(cfg.model,))  # before torch and transformers are imported
    from bertkit.training.trials import run_sweep

    outcome = run_sweep(cfg, progress=progress)
    return SweepResult(outcome.out, outcome.summary, outcome.is_main_process)
