"""What a training run is, as option groups the training package owns: how it trains (`TrainingOptions`), on what
compute (`TrainingComputeOptions`), where it writes and checkpoints (`RunOutputOptions`), the experiment trackers
(`TrackingOptions`) and a distillation's teacher and loss (`DistillationOptions`); and the configs made of them with
the data, reading, tagging and metric groups: a fine-tuning run (`FinetuneOptions`) and a distillation
(`DistillOptions`). The commands' configs (`bertkit.commands`) are these; the loop, checkpoints, cards and trackers
read them.

Tracking: which trackers follow a run (--report-to), where MLflow keeps it (--tracking-uri), the project it is filed
under and how often the training numbers are logged (the trackers --report-to accepts: those in
`bertkit.training.trackers.REGISTRY`). None of them changes what is computed: a re-run may add or change them and
still resume (`bertkit.training.resume.NOT_IN_RESUME_KEY`). Starting them: `bertkit.training.tracking`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bertkit.data.options import TaskOptions, config_problems, reads_questions, reads_tagged
from bertkit.encoding.reading import WindowOptions
from bertkit.errors import UserError, raise_if_problems
from bertkit.models.compute import TRUST_HELP, precision_option
from bertkit.options import MODEL, OUTPUT, TRACKING, Config, group, option, overwrite_option, replaced
from bertkit.scoring.options import (
    CALIBRATIONS,
    CLASS_WEIGHTS,
    METRIC_FOR_BEST_HELP,
    MetricOptions,
    metric_for_best_problems,
)
from bertkit.training.learning_rate import canonical_lr, lr_problems
from bertkit.training.tag_options import TaggingOptions
from bertkit.training.trackers import REGISTRY, tracker_names

TRACKING_FIELDS = frozenset({"report_to", "tracking_uri", "project", "log_every"})
"""The option names of this group (a re-run may change them and still resume, or continue a sweep)."""


@dataclass(frozen=True)
class TrackingOptions:
    """Experiment trackers: where the run's hyper-parameters, training numbers and dev metrics are logged."""

    ADVANCED_OPTIONS = ("tracking_uri", "project", "log_every")

    report_to: tuple[str, ...] = option((), "Experiment tracker to log the run to (repeatable, or a comma list): "
                                        f"{', '.join(tracker.choice for tracker in REGISTRY.values())}, or none (the "
                                        "default).", panel=TRACKING)
    tracking_uri: str | None = option(None, "MLflow tracking URI: a local folder (works offline), file:/..., or a "
                                      "server http://host:5000. Default: MLFLOW_TRACKING_URI, else MLflow's own "
                                      "default (./mlflow.db).", panel=TRACKING)
    project: str = option("bertkit", "The MLflow experiment / Trackio or W&B project the run is filed under.",
                          panel=TRACKING)
    log_every: int = option(10, "Log the training loss (mean since the last log), learning rate, gradient norm and "
                            "samples/s every N optimizer steps.", panel=TRACKING, above=0)

    @property
    def trackers(self) -> tuple[str, ...]:
        """--report-to's trackers, comma lists split, in order, without repeats or `none`."""
        names = [part.strip().lower() for value in self.report_to for part in str(value).split(",") if part.strip()]
        return tuple(name for name in dict.fromkeys(names) if name != "none")

    def tracking_problems(self) -> list[str]:
        """--report-to names known trackers, `none` alone; --project is not empty; --tracking-uri only with mlflow."""
        if not all(isinstance(value, str) for value in self.report_to or ()):
            return []  # a wrong type is reported by the declarations' check
        given = [part.strip().lower() for value in self.report_to for part in value.split(",") if part.strip()]
        problems = []
        valid = ("none", *tracker_names())  # read when checked: a tracker registered since counts
        unknown = [name for name in given if name not in valid]
        if unknown:
            problems.append(f"--report-to {', '.join(unknown)}: not a tracker bertkit logs to. Valid: "
                            f"{', '.join(valid)}. Pass e.g. --report-to tensorboard.")
        elif "none" in given and len(set(given)) > 1:
            problems.append(f"--report-to none turns the trackers off, but {', '.join(self.trackers)} was also "
                            f"given. Drop --report-to none, or the others.")
        if isinstance(self.project, str) and not self.project.strip():
            problems.append("--project must name the experiment/project the run is filed under; got an empty text. "
                            "Pass e.g. --project sst2, or drop it (default: bertkit).")
        if self.tracking_uri is not None and "mlflow" not in self.trackers:
            problems.append(f"--tracking-uri {self.tracking_uri} is where MLflow keeps runs, but --report-to does not "
                            f"include mlflow. Add --report-to mlflow, or drop --tracking-uri.")
        return problems
NOT_REPRODUCED = frozenset({"overwrite", *TRACKING_FIELDS})
"""Options that do not change what a run produces: --overwrite, and where the run was logged (--report-to, ...)."""


@dataclass(frozen=True)
class TrainingOptions:
    """How a model is trained: BERT paper grid defaults (batch 32, 3 epochs, warmup 0.1) with the learning rate
    chosen for the model's size (--lr auto), and how the best checkpoint is picked."""

    ADVANCED_OPTIONS = ("grad_accum", "weight_decay", "max_grad_norm", "eval_every", "class_weight", "calibrate")

    epochs: int = option(3, "Passes over the training data (BERT paper: 2-4).", above=0)
    lr: str = option("auto", "Peak AdamW learning rate, or auto: chosen from the model's width (5e-5 x 768 / hidden, "
                     "at most 3e-4: MiniLM-L6 1e-4, BERT-base 5e-5, BERT-large 2e-5), logged and recorded in the run.",
                     numbers=True)
    batch_size: int = option(32, "Rows per forward pass per process (BERT paper: 16, 32); an optimizer step sees "
                             "batch x grad-accum x processes rows.", above=0)
    grad_accum: int = option(1, "Batches accumulated per optimizer step (a larger effective batch).", above=0)
    warmup_ratio: float = option(0.1, "Share of the optimizer steps with linear learning-rate warmup, in [0, 1).",
                                 minimum=0)
    weight_decay: float = option(0.01, "AdamW weight decay on weight matrices (never on biases and LayerNorm).",
                                 minimum=0)
    max_grad_norm: float = option(1.0, "Clip the gradient norm to this value (0 turns clipping off).", minimum=0)
    eval_every: str = option("epoch", "Evaluate on dev every N optimizer steps, or `epoch` (every epoch's end is "
                             "always evaluated).")
    early_stopping_patience: int | None = option(None, "Stop after N evaluations without improvement of "
                                                 "--metric-for-best.", above=0)
    metric_for_best: str | None = option(None, METRIC_FOR_BEST_HELP)
    class_weight: str = option("none", "balanced weighs the loss by inverse class frequency (imbalanced data).",
                               choices=CLASS_WEIGHTS)
    calibrate: str = option("none", "temperature: after training, fit one temperature on the best model's dev outputs "
                            "(Guo et al. 2017) and record it in best/; predict and evaluate divide the logits by it "
                            "(the same predictions, honest probabilities). Single-label classifiers.",
                            choices=CALIBRATIONS, families=("sentences",))
    freeze_encoder: bool = option(False, "Train only the classification head (the encoder stays frozen).",
                                  panel=MODEL)

    def training_problems(self, external_metrics: list[str]) -> list[str]:
        """--lr a number or auto (recorded canonically), --warmup-ratio below 1, --eval-every steps or `epoch`, and
        --metric-for-best a built-in metric or one of the `external_metrics` (--metric's evaluate modules)."""
        problems = []
        if isinstance(self.lr, str):  # another type: the declarations' check reported it
            problems += lr_problems(self.lr)
            object.__setattr__(self, "lr", canonical_lr(self.lr))
        if isinstance(self.warmup_ratio, float) and math.isfinite(self.warmup_ratio) and not self.warmup_ratio < 1.0:
            problems.append(f"--warmup-ratio must be in [0, 1); got {self.warmup_ratio}.")
        if self.eval_every != "epoch" and not (str(self.eval_every).isdigit() and int(self.eval_every) > 0):
            problems.append(f"--eval-every must be a positive number of steps or `epoch`; got {self.eval_every!r}.")
        # None (no flag, recipe or preset): the problem shape's headline metric, chosen once the data is read
        return problems + metric_for_best_problems(self.metric_for_best, external_metrics)


@dataclass(frozen=True)
class TrainingComputeOptions:
    """What a training step runs on and how: the precision, and the faster paths (bertkit's own last layer,
    torch.compile, CUDA graphs) that compute the same steps."""

    ADVANCED_OPTIONS = ("fast_forward", "compile", "cuda_graphs")

    precision: str = precision_option(training=True)
    fast_forward: bool = option(True, "BERT/DistilBERT: compute the last layer only where the logits need it ([CLS]); "
                                "same logits and gradients, fewer FLOPs. Off: the model's own forward.", panel=MODEL)
    compile: bool = option(False, "torch.compile (Inductor). On a GPU with CUDA-graph steps: each layer compiled "
                           "(fused bias, GELU, dropout, residual and LayerNorm, forward and backward) inside the graphs, "
                           "compile time part of the run (docs/gpus.md). Elsewhere: the model's forward and backward "
                           "(dynamic shapes), measured slower on a CPU without native bf16.", panel=MODEL)
    cuda_graphs: str = option("auto", "On one CUDA GPU in bf16/fp32, replay each step as CUDA graphs (one per padded "
                              "length bucket): the GPU stops waiting on Python between kernels. off: launch every "
                              "kernel from Python.", choices=("auto", "off"), panel=MODEL)


@dataclass(frozen=True)
class RunOutputOptions:
    """Where a training run writes (its run directory), how often it checkpoints for resuming, and what it keeps."""

    ADVANCED_OPTIONS = ("save_every", "save_every_minutes")

    out: str | None = option(None, "Run directory: checkpoints, best/ and final/ models, metrics, plots. Re-running "
                             "the same command resumes it.", panel=OUTPUT)
    save_every: int | None = option(100, "Checkpoint every N optimizer steps (and at every epoch's end) for resuming.",
                                    panel=OUTPUT, above=0)
    save_every_minutes: float = option(5.0, "Also checkpoint once this many minutes have passed since the last "
                                       "checkpoint (or the start), so a run stopped early loses minutes at most, "
                                       "however slow its steps. 0: by steps and epoch ends only.", panel=OUTPUT,
                                       minimum=0)
    keep_checkpoints: bool = option(False, "Keep checkpoints/ once the run has finished (they are only needed to "
                                    "resume an unfinished run; a finished run keeps best/, final/ and its reports).",
                                    panel=OUTPUT)
    overwrite: bool = overwrite_option("a run")


@dataclass(frozen=True)
class FinetuneOptions(Config):
    """What a fine-tuning run is (the `finetune` command's options, each trial of a sweep; `distill` and `sweep`
    extend them): the model, then its groups: the data, how texts are read, tagging (on tagged data: --task tags, or
    a CoNLL-style --data, the run trains a tagger and refuses what it does not read; on rows of text the tagging
    options are refused), training, metrics, compute, trackers and the run directory."""

    REQUIRED_OPTIONS = ("data", "out")
    ADVANCED_OPTIONS = ("trust_remote_code",)
    model: str = option("minilm-offline", "Pretrained encoder to fine-tune: hub id, local folder, or `minilm-offline`.",
                        panel=MODEL)
    inputs: TaskOptions = group(TaskOptions)
    reading: WindowOptions = group(WindowOptions)
    tagging: TaggingOptions = group(TaggingOptions)
    training: TrainingOptions = group(TrainingOptions)
    metrics: MetricOptions = group(MetricOptions)
    compute: TrainingComputeOptions = group(TrainingComputeOptions)
    tracking: TrackingOptions = group(TrackingOptions)
    output: RunOutputOptions = group(RunOutputOptions)
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        raise_if_problems(self.problems())

    def problems(self) -> list[str]:
        """Every problem of a fine-tuning run's options (`run_problems`; the command adds its problem family's
        refusals, `bertkit.families`)."""
        return self.run_problems()

    def run_problems(self) -> list[str]:
        """The problems of any training run's options (a distillation's too): the declarations and the data group's
        rules, the trackers, the training options, --data and --out given, the task and threshold."""
        problems = config_problems(self) + self.tracking.tracking_problems()
        problems += self.training.training_problems(self.metrics.external_metrics)
        if self.inputs.data is None:
            problems.append("--data is required: the training file (or hub dataset).")
        if not self.output.out:
            problems.append("--out is required: the run directory (re-running with the same --out resumes).")
        return problems + self.inputs.task_problems()

    @property
    def reads_words(self) -> bool:
        """Whether this run trains a tagger: --task tags, or --data a tagged corpus (`data.options.reads_tagged`)."""
        data = self.inputs
        return reads_tagged(data.task, data.data, data.data_config, data.train_split)

    @property
    def reads_questions(self) -> bool:
        """Whether this run trains a question-answering model: --task spans, or --data a SQuAD set
        (`data.options.reads_questions`)."""
        data = self.inputs
        return reads_questions(data.task, data.data, data.data_config, data.train_split)


@dataclass(frozen=True)
class DistillationOptions:
    """A distillation's teacher, student and loss (DistilBERT's recipe)."""

    teacher: str | None = option(None, "The fine-tuned teacher: a `bertkit finetune` best/ or final/ folder (any "
                                 "folder with a trained sequence-classification head).", panel=MODEL)
    student_layers: int = option(3, "Student depth: this many evenly spaced layers copied from the teacher (same "
                                 "width, embeddings and head), the DistilBERT way.", panel=MODEL, above=0)
    student: str | None = option(None, "A smaller pretrained encoder as the student instead of copied layers (hub "
                                 "id or folder; --student-layers is then not used).", panel=MODEL)
    temperature: float = option(2.0, "Softmax temperature of the soft targets (higher: softer).", above=0)
    alpha: float = option(0.5, "Weight of the soft-target loss (KL to the teacher); 1 - alpha weighs the hard "
                          "labels. In [0, 1].", minimum=0)
    cos_weight: float = option(0.0, "Weight of a cosine loss between student and teacher [CLS] vectors (DistilBERT "
                               "used one; needs the same hidden size).", minimum=0,
                               families=("sentences",))

    def distillation_problems(self) -> list[str]:
        """--teacher given, --alpha a share."""
        problems = []
        if self.teacher is None:
            problems.append("--teacher is required: the fine-tuned model to distil (e.g. runs/sst2/best).")
        if isinstance(self.alpha, float) and not 0.0 <= self.alpha <= 1.0:
            problems.append(f"--alpha must be in [0, 1] (the share of the soft-target loss); got {self.alpha}.")
        return problems


@dataclass(frozen=True)
class DistillOptions(FinetuneOptions):
    """`bertkit distill`: a smaller student trained on a fine-tuned teacher's soft targets (DistilBERT's recipe), with
    the fine-tuning loop's options, checkpoints and exact resume, and a teacher-vs-student report."""

    # the student comes from --teacher (or --student); the teacher's soft targets are computed on texts cut as the
    # teacher records (`commands.distill`: its --max-length and truncation), the student trained on the same cut and
    # tagged (a tagging teacher) in the teacher's scheme
    NOT_OPTIONS = ("model", "truncation", "tag_scheme")
    REQUIRED_OPTIONS = ("teacher", "data", "out")

    distillation: DistillationOptions = group(DistillationOptions)
    report: bool = option(True, "After training, measure teacher vs student (size, batch-1 latency, throughput, "
                          "dev quality) and check the DistilBERT claims.", panel=OUTPUT)
    report_seconds: float = option(2.0, "The report's timing: seconds each model is timed per measurement (batch-1 "
                                   "latency, each throughput setting), at least 10 iterations each. Lower it for a "
                                   "quicker, noisier report.", panel=OUTPUT, minimum=0)

    def problems(self) -> list[str]:
        """A training run's problems and the distillation's; messages and records name the student where a command
        names its model (the teacher's copy, or --student)."""
        if self.distillation.teacher is not None:
            object.__setattr__(self, "model", self.distillation.student or self.distillation.teacher)
        return self.run_problems() + self.distillation.distillation_problems()

    def in_the_teachers_shape(self, shape: str) -> DistillOptions:
        """This config reading the data in the teacher's problem shape (--task auto); another --task is refused."""
        if self.inputs.task == shape:
            return self
        if self.inputs.task != "auto":
            raise UserError(f"--task {self.inputs.task}: the teacher {self.distillation.teacher} is a {shape} model, "
                            f"and the student learns its outputs. Drop --task (the teacher's shape is used), or distil "
                            f"a {self.inputs.task} teacher.")
        return replaced(self, task=shape)
