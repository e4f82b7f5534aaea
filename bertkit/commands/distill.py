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
from pathlib import Path
from typing import Any

from bertkit.data.columns import check_data_files
from bertkit.data.labels import TAGS_TASK
from bertkit.data.options import reads_tagged
from bertkit.data.tagged import TaggedColumns, may_be_tagged
from bertkit.data.tagged_splits import load_tagged_training
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.io import ownership, rundir
from bertkit.measure.distill_report import DistillReport, measure_teacher_student, report_markdown
from bertkit.models.compute import Compute
from bertkit.models.metadata import is_tagger, read_as_saved, saved_tag_scheme
from bertkit.models.preflight import DATA_FIELDS, check_inputs, check_model_limits
from bertkit.options import all_fields, flag, replaced, value
from bertkit.training.options import DistillOptions
from bertkit.training.outcome import TrainingRun

log = logging.getLogger(__name__)


NOT_FOR_TAGS = ("text_pair_column", "label_sep", "dev_fraction", "test", "task_preset", "metric", "calibrate",
                "threshold", "cos_weight")
"""The options distilling a tagger does not read (given: refused, naming them)."""


@dataclass(frozen=True)
class DistillConfig(DistillOptions):
    """`bertkit distill`: a smaller student trained on a fine-tuned teacher's soft targets (DistilBERT's recipe), with
    the fine-tuning loop's options, checkpoints and exact resume, and a teacher-vs-student report; a tagging teacher
    (fine-tuned on tagged data) gives a tagging student, compared by dev entity F1."""

    # a tagging teacher's student learns on tagged data (`run` refuses tagged data for other teachers)


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
    """Train the student (resumable, like finetune), then the teacher-vs-student report (main process). A tagging
    teacher (`models.metadata.is_tagger`) distils into a tagging student on tagged --data and --dev."""
    check_inputs(cfg, need_labels=True, models=(cfg.distillation.teacher, cfg.distillation.student),
                 data_fields=())  # before torch
    tags = _distils_a_tagger(cfg)
    if not tags:
        check_data_files(cfg.inputs, DATA_FIELDS, need_labels=True)
    if cfg.output.out:  # --out's refusals before the teacher is loaded and the data read (as finetune's)
        rundir.inspect_run_dir(cfg.output.out, "distill", overwrite=cfg.output.overwrite,
                               inputs=ownership.input_paths(cfg))
    check_model_limits(cfg.distillation.teacher, max_length=cfg.reading.max_length)
    # the teacher read as it was trained; the student trained to read so too
    cfg = read_as_saved(cfg, cfg.distillation.teacher)
    cfg, task = _tagging_task(cfg) if tags else _sentence_task(cfg)
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


def _sentence_task(cfg: DistillConfig) -> tuple[DistillConfig, Any]:
    """A sentence classifier's distillation: `cfg` in the teacher's problem shape, and its `DistillTask`."""
    from bertkit.training.distill import DistillTask

    task = DistillTask(cfg, Reading.from_options(cfg.reading))
    return _in_the_teachers_shape(cfg, task.teacher_labels.task), task


def _tagging_task(cfg: DistillConfig) -> tuple[DistillConfig, Any]:
    """A tagger's distillation: --data and --dev read as tagged corpora (before torch is imported), checked against
    the teacher's tag scheme, and its `DistillTagTask` reading words as the teacher does (windows of the recorded
    --max-length, each word at its first piece)."""
    cfg = _in_the_teachers_shape(cfg, TAGS_TASK)
    teacher_scheme = saved_tag_scheme(str(cfg.distillation.teacher))
    inputs = cfg.inputs
    data = load_tagged_training(str(inputs.data), str(inputs.dev), TaggedColumns(inputs.text_column, inputs.label_column),
                                inputs.data_config, inputs.train_split, inputs.limit)
    for option, corpus in (("--data", data.train), ("--dev", data.dev)):
        if corpus.scheme.name != teacher_scheme.name:
            raise UserError(f"{option} {corpus.source} reads as {corpus.scheme.name} tags, but the teacher "
                            f"{cfg.distillation.teacher} was trained on {teacher_scheme.name} tags: their entities "
                            f"would be read differently. Valid: data in the teacher's scheme ({teacher_scheme.name}; "
                            f"IOB1 and IOB2 both read as IOB2). Pass such data, or convert it.")
    from bertkit.training.distill_tags import DistillTagTask

    return cfg, DistillTagTask(cfg, data, teacher_scheme, Reading.of_words(max_length=cfg.reading.max_length))


def _distils_a_tagger(cfg: DistillConfig) -> bool:
    """Whether --teacher is a tagger (a tagging student is then trained); a teacher that cannot read --data (a
    tagger on rows of text, a sentence classifier on tagged data) and options the other kind reads are refused,
    naming them."""
    tagger = is_tagger(str(cfg.distillation.teacher))
    if tagger:
        problems = _tagging_problems(cfg)
    elif reads_tagged(cfg.inputs.task, cfg.inputs.data, cfg.inputs.data_config, cfg.inputs.train_split):
        problems = [f"--teacher {cfg.distillation.teacher} is a sentence classifier (one label per text), but --data "
                    f"{cfg.inputs.data} is read as tagged data (one tag per word): the student learns the teacher's "
                    f"outputs, so both must be of one kind. Pass a tagger fine-tuned on tagged data (`bertkit finetune "
                    f"--data train.iob2 --dev dev.iob2`) as --teacher, or rows of text as --data."]
    else:
        problems = [f"--label-all-pieces applies to a tagging teacher; --teacher {cfg.distillation.teacher} is a "
                    f"sentence classifier. Drop --label-all-pieces."] if cfg.tagging.label_all_pieces else []
    raise_if_problems(problems)
    return tagger


def _tagging_problems(cfg: DistillConfig) -> list[str]:
    """What a tagging teacher cannot distil with: --data or --dev that is not tagged, no --dev, options of rows of
    text."""
    # a missing file: the tagged reader says so
    unread = [path for path in dict.fromkeys((cfg.inputs.data, cfg.inputs.dev))
              if path is not None and Path(path).expanduser().is_file() and not may_be_tagged(path)]
    problems = [f"--teacher {cfg.distillation.teacher} is a tagger (one tag per word), but {path} is read as rows of "
                f"text (passed as {'--data' if path == cfg.inputs.data else '--dev'}): the student learns the "
                f"teacher's tags per word. Pass tagged data (a CoNLL-style file such as train.iob2: a word and its tag "
                f"per line), or a teacher fine-tuned on rows of text as --teacher." for path in unread]
    if cfg.inputs.dev is None:
        problems.append("Distilling a tagger needs --dev (tagged dev data: a file, or a split of the hub dataset "
                        "--data); no dev split is held out of tagged data. Pass --dev dev.iob2.")
    defaults = {f.name: f.default for f in all_fields(type(cfg))}
    given = [name for name in NOT_FOR_TAGS if value(cfg, name) != defaults[name]]
    return problems + [f"{flag(name)} does not apply to distilling a tagger (--teacher {cfg.distillation.teacher} tags "
                       f"words). Drop {flag(name)}." for name in given]


def _in_the_teachers_shape(cfg: DistillConfig, shape: str) -> DistillConfig:
    """`cfg` reading the data in the teacher's problem shape (--task auto); another --task is refused."""
    if cfg.inputs.task == shape:
        return cfg
    if cfg.inputs.task != "auto":
        raise UserError(f"--task {cfg.inputs.task}: the teacher {cfg.distillation.teacher} is a {shape} model, and the "
                        f"student learns its outputs. Drop --task (the teacher's shape is used), or distil a "
                        f"{cfg.inputs.task} teacher.")
    return replaced(cfg, task=shape)


# ---------------------------------------------------------------- the report


def write_report(cfg: DistillConfig, task: Any, result: TrainingRun) -> DistillReport:
    """Measure teacher vs student and write distill_report.json, .md and .png into the run directory."""
    from bertkit import plots
    from bertkit.io import atomic
    from bertkit.training.distill import REPORT

    compute = Compute.resolve(None, cfg.compute.precision)  # the report's one resolution of --precision, default device
    report = measure_teacher_student(cfg, task, result, compute)
    out = result.out
    atomic.write_json_atomic(out / f"{REPORT}.json", report)
    atomic.write_text_atomic(out / f"{REPORT}.md", report_markdown(report))
    plots.distill_bars(report, out / f"{REPORT}.png")
    return DistillReport.from_json(report, tuple(str(out / f"{REPORT}.{ext}") for ext in ("json", "md", "png")))
