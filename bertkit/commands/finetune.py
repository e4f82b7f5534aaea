"""`bertkit finetune`: full fine-tuning of a BERT-style classifier (the McCormick recipe as an Accelerate loop:
`bertkit.training.finetune`), resumable, on a CPU, one GPU (steps replayed as CUDA graphs) or several processes.

The options are the training package's `FinetuneOptions` group, declared there once because the library builds
them too (a sweep's trial, `training.space.finetune_config`) and distill and sweep extend them; the result is the
training run's `FinetuneResult` (distill's result holds one). This module composes them into the command: its
config, the checks before torch is imported, the one resolution of --precision and of how texts are read (--max-length
and --truncation: as the --model records them, a bertkit model used as a starting point; else 128 and head), and the
run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bertkit.encoding.reading import Reading
from bertkit.io import ownership, rundir
from bertkit.models.compute import Compute
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.training.options import FinetuneOptions

if TYPE_CHECKING:
    from bertkit.training.finetune import FinetuneResult


@dataclass(frozen=True)
class FinetuneConfig(FinetuneOptions):
    """`bertkit finetune`: full fine-tuning (batch 32, 3 epochs, warmup 0.1; --lr auto: chosen from the model's width,
    the BERT paper's 5e-5 for BERT-base, 1e-4 for MiniLM-L6)."""


def run(cfg: FinetuneConfig, *, progress: bool = True) -> FinetuneResult:
    """The run: its folder, metrics.json's content, the epoch table, what a resume restored, notes."""
    check_inputs(cfg, need_labels=True, models=(cfg.model,))  # before torch and transformers are imported
    cfg = read_as_saved(cfg)  # the run config records the reading it trains with
    if cfg.out:  # --out's refusals (someone else's files, another command's run, an input inside it) before the data
        # is read or a learning rate chosen; the run's own settings are compared once its data is fingerprinted
        rundir.inspect_run_dir(cfg.out, "finetune", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg))
    from bertkit.training.finetune import finetune, training_device

    return finetune(cfg, progress=progress, compute=Compute.resolve(training_device(), cfg.precision),
                    reading=Reading.from_options(cfg))
