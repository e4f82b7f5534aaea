"""`bertkit finetune`: full fine-tuning of a BERT-style classifier (the McCormick recipe as an Accelerate loop:
`bertkit.training.finetune`), resumable, on a CPU, one GPU (steps replayed as CUDA graphs) or several processes.

The options are the training package's `FinetuneOptions`, its nested groups (data, reading, tagging, training,
metrics, compute, tracking, output) declared there once because the library builds them too (a sweep's trial,
`training.space.finetune_config`) and distill and sweep extend them. The training loop
returns a typed `TrainingRun` (`bertkit.training.outcome`); this module owns the command around it: its config, the
checks before torch is imported, the one resolution of --precision and of how texts are read (--max-length and
--truncation: as the --model records them, else 128 and head), the run, and the `FinetuneResult` it reports."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from bertkit.families.registry import ReadsItsData
from bertkit.models.compute import Compute
from bertkit.models.preflight import checked_as_saved
from bertkit.training.options import FinetuneOptions
from bertkit.training.outcome import EpochRow, Restored, RunSummary, TrainingRun


@dataclass(frozen=True)
class FinetuneConfig(ReadsItsData, FinetuneOptions):
    """`bertkit finetune`: full fine-tuning (batch 32, 3 epochs, warmup 0.1; --lr auto: chosen from the model's width,
    the BERT paper's 5e-5 for BERT-base, 1e-4 for MiniLM-L6); on tagged data (--task tags, or a CoNLL-style --data) a
    tagger: one tag per word, best/ by dev entity F1 (conlleval counting) or word accuracy for plain tags."""

    COMMAND = "finetune"


@dataclass(frozen=True)
class FinetuneResult:
    """What `bertkit finetune` reports: the run's folder, its metrics.json summary, the epoch table, what a resume
    restored, whether it had finished already, and notes. The CLI renders it; `to_json` is its --json object."""

    out: Path
    summary: RunSummary
    epoch_table: tuple[EpochRow, ...]
    restored: Restored | None
    already_finished: bool
    is_main_process: bool
    notes: tuple[str, ...]

    @classmethod
    def of(cls, run: TrainingRun) -> FinetuneResult:
        """The command's result for the training loop's outcome (the same pieces, under the command's name)."""
        return cls(**{f.name: getattr(run, f.name) for f in fields(run)})

    @property
    def metrics(self) -> dict[str, object]:
        """metrics.json's object, for callers that read it whole (tests, benchmarks, a sweep's trial rows)."""
        return self.summary.to_json()

    def to_json(self) -> dict[str, object]:
        """metrics.json's keys, then where the run is, whether it had finished already and what a resume restored."""
        return {**self.summary.to_json(), "out": str(self.out), "already_finished": self.already_finished,
                "restored": self.restored.to_json() if self.restored is not None else None}


def run(cfg: FinetuneConfig, *, progress: bool = True) -> FinetuneResult:
    """The run: its folder, metrics.json's content, the epoch table, what a resume restored, notes. Every check
    before torch and transformers are imported: the --model, --out and --max-length, and the data (the family's:
    rows of text checked as tables, a tagger's tagged --data and --dev read and checked by their own reader)."""
    family = cfg.family
    cfg = checked_as_saved(cfg, "finetune", data_fields=family.table_fields)
    training = family.training(cfg)  # how its runs read texts, its data read and checked: before torch
    from bertkit.training.finetune import finetune, training_device

    compute = Compute.resolve(training_device(), cfg.compute.precision)
    return FinetuneResult.of(finetune(cfg, progress=progress, compute=compute, reading=training.reading(cfg),
                                      task=training.task()))
