"""`bertkit finetune`: full fine-tuning of a BERT-style classifier (the McCormick recipe as an Accelerate loop:
`bertkit.training.finetune`), resumable, on a CPU, one GPU (steps replayed as CUDA graphs) or several processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.models.preflight import check_inputs
from bertkit.training.options import FinetuneOptions


@dataclass(frozen=True)
class FinetuneConfig(FinetuneOptions):
    """`bertkit finetune`: full fine-tuning (batch 32, 3 epochs, warmup 0.1; --lr auto: chosen from the model's width,
    the BERT paper's 5e-5 for BERT-base, 1e-4 for MiniLM-L6)."""


def run(cfg: FinetuneConfig, *, progress: bool = True) -> Any:
    """The run (`bertkit.training.finetune.FinetuneResult`: its folder, metrics.json, epoch table, what a resume
    restored, notes)."""
    check_inputs(cfg, need_labels=True, models=(cfg.model,))  # before torch and transformers are imported
    from bertkit.training.finetune import finetune

    return finetune(cfg, progress=progress)
