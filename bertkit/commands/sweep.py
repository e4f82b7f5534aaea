"""`bertkit sweep`: many `finetune` runs over a --grid or an Optuna --space, K seeds each, resumable; OUT/best is the
best trial's best model (`bertkit.training.trials` runs them).

The options are the training package's `SweepOptions` (the search space, parsed there into `Dimension`s, each value
checked through a trial's `FinetuneOptions`); the result is `SweepResult`, what sweep.json holds as typed records
(`training.trials_report.SweepSummary`). Here --max-length and --truncation are resolved once against the --model's
record, and --precision resolved for each trial's value (it may be a dimension of the space, as may --max-length).
On tagged data (--task tags, or a CoNLL-style --data) every trial is a tagger, ranked by what its tags score (entity
F1, or word accuracy for plain tags); the tagged --data and --dev are read and checked here once, before torch is
imported, and every trial trains on them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.families.registry import ReadsItsData
from bertkit.models.compute import Compute
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.training.space import SweepOptions
from bertkit.training.trials_report import SweepSummary, TrialRow


@dataclass(frozen=True)
class SweepConfig(ReadsItsData, SweepOptions):
    """`bertkit sweep`: many `finetune` runs over a grid or an Optuna search, ranked by --metric-for-best; on tagged
    data (--task tags, or a CoNLL-style --data) taggers, ranked by dev entity F1 (or word accuracy for plain tags)."""

    COMMAND = "sweep"


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
    family = cfg.family
    check_inputs(cfg, need_labels=True, models=(cfg.model,), data_fields=family.table_fields)
    cfg = read_as_saved(cfg)  # every trial reads texts as the --model records, unless the space says otherwise
    training = family.training(cfg)  # once, for every trial; before torch is imported
    from bertkit.training.finetune import training_device
    from bertkit.training.trials import run_sweep

    device = training_device()
    outcome = run_sweep(cfg, lambda precision: Compute.resolve(device, precision), training, progress=progress)
    return SweepResult(outcome.out, outcome.summary, outcome.is_main_process)
