"""`bertkit distill`: make a smaller model for your task from your fine-tuned one, and measure what it costs.

The student is built the DistilBERT way - the teacher's width, embeddings and head, and `--student-layers`
evenly spaced layers copied from it - or is any smaller pretrained encoder (`--student`), and trained by the
fine-tuning loop on the teacher's soft targets (`bertkit.training.distill`). The report
(`distill_report.json/.md/.png`, measured by `bertkit.measure.distill_report`) puts teacher and student side by side on the user's dev data: parameters, disk
size, batch-1 latency and best-batch throughput (measured by `bertkit.measure`, interleaved), dev quality, and the
DistilBERT paper's three claims as ratios with pass/fail.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from bertkit.data.columns import check_data_files
from bertkit.families.base import Family, teacher_data_problems
from bertkit.families.registry import cached_family
from bertkit.io import ownership, rundir
from bertkit.measure.distill_report import DistillReport, measure_teacher_student, report_markdown
from bertkit.models.compute import Compute
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs, check_model_limits
from bertkit.options import all_fields
from bertkit.training.options import DistillOptions
from bertkit.training.outcome import TrainingRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistillConfig(DistillOptions):
    """`bertkit distill`: a smaller student trained on a fine-tuned teacher's soft targets (DistilBERT's recipe), with
    the fine-tuning loop's options, checkpoints and exact resume, and a teacher-vs-student report; a tagging teacher
    (fine-tuned on tagged data) gives a tagging student, compared by dev entity F1."""

    def problems(self) -> list[str]:
        """A distillation's problems; with a --teacher, the options its problem family does not read and --data or
        --dev of another family (the student learns the teacher's outputs on them)."""
        problems = super().problems()
        teacher = self.distillation.teacher
        if teacher is None:
            return problems
        family = self.family
        return (problems + family.refused_options(self, "distill", f"--teacher {teacher}")
                + teacher_data_problems(family, self.inputs, teacher))

    @property
    def family(self) -> Family:
        """The problem family of the --teacher (`bertkit.families`), asked once."""
        return cached_family(self, model=str(self.distillation.teacher))


@dataclass(frozen=True)
class DistillResult:
    """The student's training run (the training loop's `TrainingRun`) and the teacher-vs-student report (None:
    --no-report, or not the main process)."""

    training: TrainingRun
    report: DistillReport | None = None

    def to_json(self) -> dict[str, object]:
        """The --json object: the student's metrics.json keys with where the run is, and the report."""
        training = self.training
        return {"training": {**training.summary.to_json(), "out": str(training.out),
                             "already_finished": training.already_finished},
                "report": self.report.to_json() if self.report is not None else None}


def run(cfg: DistillConfig, *, progress: bool = True) -> DistillResult:
    """Train the student (resumable, like finetune), then the teacher-vs-student report (main process). The
    teacher's problem family (`bertkit.families`) reads the data and gives the run its task: a tagging teacher
    distils into a tagging student on tagged --data and --dev."""
    check_inputs(cfg, need_labels=True, models=(cfg.distillation.teacher, cfg.distillation.student),
                 data_fields=())  # before torch
    family = cfg.family
    check_data_files(cfg.inputs, family.table_fields, need_labels=True)
    if cfg.output.out:  # --out's refusals before the teacher is loaded and the data read (as finetune's)
        rundir.inspect_run_dir(cfg.output.out, "distill", overwrite=cfg.output.overwrite,
                               inputs=ownership.input_paths(cfg))
    check_model_limits(cfg.distillation.teacher, max_length=cfg.reading.max_length)
    # the teacher read as it was trained; the student trained to read so too
    cfg, task = family.distillation(read_as_saved(cfg, cfg.distillation.teacher))
    default_layers = next(f.default for f in all_fields(type(cfg)) if f.name == "student_layers")
    if cfg.distillation.student and cfg.distillation.student_layers != default_layers:
        log.warning("--student-layers %d copies layers of the teacher; with --student %s the student is that encoder, "
                    "so it is ignored. Drop --student-layers.", cfg.distillation.student_layers, cfg.distillation.student)
    from bertkit.training.distill import REPORT
    from bertkit.training.finetune import finetune, training_device

    compute = Compute.resolve(training_device(), cfg.compute.precision)
    result = finetune(cfg, progress=progress, task=task, compute=compute, reading=task.reading)
    if not (result.is_main_process and cfg.report):
        return DistillResult(result)
    report_path = result.out / f"{REPORT}.json"
    if result.already_finished and report_path.is_file():
        return DistillResult(result, DistillReport.from_json(json.loads(report_path.read_text(encoding="utf-8"))))
    return DistillResult(result, write_report(cfg, task, result))  # a new run, or a finished one killed before it


# ---------------------------------------------------------------- the report


def write_report(cfg: DistillConfig, task: Any, result: TrainingRun) -> DistillReport:
    """Measure teacher vs student and write distill_report.json, .md and .png into the run directory."""
    from bertkit import plots
    from bertkit.io import atomic, record
    from bertkit.training.distill import REPORT

    compute = Compute.resolve(None, cfg.compute.precision)  # the report's one resolution of --precision, default device
    report = measure_teacher_student(cfg, task, result, compute)
    out = result.out
    record.track(out)  # the report is the run's: its files go into the run's record, so a re-run reads them as its own
    try:
        atomic.write_json_atomic(out / f"{REPORT}.json", report)
        atomic.write_text_atomic(out / f"{REPORT}.md", report_markdown(report))
        plots.distill_bars(report, out / f"{REPORT}.png")
    finally:
        record.untrack(out)
    return DistillReport.from_json(report, tuple(str(out / f"{REPORT}.{ext}") for ext in ("json", "md", "png")))
