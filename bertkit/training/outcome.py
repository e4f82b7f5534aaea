"""What a training run returns (`training.finetune.finetune`), typed: the metrics.json summary, the epoch table and
what a resume restored, each written back as the JSON it always was. Light on purpose (no torch): commands and the
CLI import these types at start-up, and a command's Result holds them as its fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.io.atomic import JsonRecord
from bertkit.scoring.calibration import TemperatureFit
from bertkit.scoring.scores import Scores


@dataclass(frozen=True)
class RunSummary(JsonRecord):
    """metrics.json: the best and final dev scores, history, throughput, outputs. The fields are what readers use;
    `record` is the whole object as written (history, train log, step launch, baseline...), kept for to_json."""

    best_metric_name: str
    best_metric: float | None
    best_step: int | None
    global_step: int
    train_samples_per_second: float
    best_dev: Scores
    best_test: Scores | None
    final_test: Scores | None
    outputs: Mapping[str, str]
    """Output name -> path (best, final, metrics.jsonl, training_table.csv, plots...)."""
    trackers: Mapping[str, Mapping[str, object]]
    """Tracker name -> where it logs the run (logdir, run id, project, url)."""
    final_same_as_best: bool
    checkpoints_kept: bool
    record: Mapping[str, object] = field(repr=False)
    calibration: TemperatureFit | None = None
    """--calibrate temperature: the temperature fitted on dev and what it did there."""

    @classmethod
    def from_json(cls, record: Mapping[str, object]) -> RunSummary:
        """metrics.json as read back (its calibration too)."""
        return cls.of(record, TemperatureFit.from_json(record.get("calibration")))

    @classmethod
    def of(cls, record: Mapping[str, object], calibration: TemperatureFit | None) -> RunSummary:
        """metrics.json's object and the calibration it records, as the run that writes it holds them (the fit in
        hand, not read back from its own record)."""
        def scores(key: str) -> Scores | None:
            return Scores.from_json(record[key]) if record.get(key) else None  # type: ignore[arg-type]

        return cls(str(record.get("best_metric_name") or ""), record.get("best_metric"),  # type: ignore[arg-type]
                   record.get("best_step"), int(record.get("global_step") or 0),  # type: ignore[arg-type]
                   float(record.get("train_samples_per_second") or 0.0),  # type: ignore[arg-type]
                   scores("best_dev") or Scores.from_json({}), scores("best_test"), scores("final_test"),
                   dict(record.get("outputs") or {}), dict(record.get("trackers") or {}),  # type: ignore[call-overload]
                   bool(record.get("final_same_as_best")), bool(record.get("checkpoints_kept", True)), dict(record),
                   calibration)

    def to_json(self) -> dict[str, object]:
        return dict(self.record)


@dataclass(frozen=True)
class EpochRow(JsonRecord):
    """One row of the training table: epoch, losses, the shape's dev metrics (`dev_<metric>`: which ones is data),
    running train seconds and samples/s."""

    record: Mapping[str, float | int | None]

    @property
    def epoch(self) -> int:
        return int(self.record["epoch"] or 0)

    def to_json(self) -> dict[str, float | int | None]:
        return dict(self.record)


@dataclass(frozen=True)
class Restored(JsonRecord):
    """What a resumed run restored: the checkpoint it continued from and where in training that was."""

    checkpoint: str
    epoch: int
    step: int
    batch_in_epoch: int
    steps_per_epoch: int
    lr: float
    best_metric: float | None
    verified: bool
    """False: the checkpoint was saved before checksums, so its files could not be checked."""

    @classmethod
    def from_json(cls, record: Mapping[str, object] | None) -> Restored | None:
        return cls(**record) if record else None  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        return {"checkpoint": self.checkpoint, "epoch": self.epoch, "step": self.step,
                "batch_in_epoch": self.batch_in_epoch, "steps_per_epoch": self.steps_per_epoch, "lr": self.lr,
                "best_metric": self.best_metric, "verified": self.verified}


@dataclass(frozen=True)
class TrainingRun:
    """A training run's outcome: its folder, summary, epoch table, what a resume restored, notes. The finetune
    command reports it as its `FinetuneResult`; distill's result holds the student's."""

    out: Path
    summary: RunSummary
    epoch_table: tuple[EpochRow, ...] = ()
    restored: Restored | None = None
    already_finished: bool = False
    is_main_process: bool = True
    notes: tuple[str, ...] = ()

    @property
    def metrics(self) -> dict[str, object]:
        """metrics.json's object, for library callers that read it whole (a sweep's trial rows, benchmarks)."""
        return self.summary.to_json()
