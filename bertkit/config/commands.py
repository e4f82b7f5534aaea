"""One frozen dataclass per command: its options (declared once, with `fields.option`; the groups several commands
share are `groups.py`'s) and the rules that involve several of them. Field names are the CLI option names with
dashes turned into underscores (`--text-column` -> `text_column`): a recipe's keys, the CLI flags and the config
fields are one vocabulary. Each `__post_init__` collects every problem (`fields.field_problems` for what one
declaration says, then the cross-option rules) and raises once.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from bertkit.config.fields import BENCH, DATA, INFERENCE_PRECISIONS, MODEL, OUTPUT, PRECISIONS, PROBE, option
from bertkit.config.groups import (
    BENCH_PROTOCOLS,
    BENCH_QUALITY,
    CLASS_WEIGHTS,
    COMBINES,
    INFERENCE_PRECISION_HELP,
    INT8_HELP,
    METRIC_FOR_BEST_HELP,
    POOLS,
    PRECISION_HELP,
    STORE_DTYPES,
    TRUST_HELP,
    LabelOptions,
    LongTextOptions,
    MetricOptions,
    TaskOptions,
    TruncationOption,
    blank_text_problems,
    check_device,
    layers_problem,
    metric_for_best_problems,
)
from bertkit.config.quality_args import quality_args_problems
from bertkit.config.tracking import TrackingOptions
from bertkit.data.options import DataOptions
from bertkit.encoding.longtext import LongText
from bertkit.errors import UserError, raise_if_problems


@dataclass(frozen=True)
class TokensConfig(DataOptions):
    """`bertkit tokens`: how a tokenizer sees a sentence, or the token-length profile of a dataset."""

    model: str = option("minilm-offline", "Model (tokenizer): a hub id, a local folder, or `minilm-offline`.",
                        panel=MODEL)
    text: str | None = option(None, "A sentence to show token by token (instead of --data).", panel=DATA)
    text_pair: str | None = option(None, "Second sentence, encoded as a pair with --text.", panel=DATA)
    max_length: int = option(128, "Max length used to report truncation and padding waste.", panel=MODEL, above=0)
    batch_size: int = option(32, "Batch size for the padding-waste estimate.", above=0)
    out: str | None = option(None, "Run directory for tokens.json and the histogram PNG.", panel=OUTPUT)
    overwrite: bool = option(False, "Replace an --out that holds a tokens run with other options (swapped in once "
                             "the new report is complete).", panel=OUTPUT)
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.text is None) == (self.data is None):
            problems.append("Give exactly one of --text (a sentence) or --data (a dataset).")
        if self.text_pair is not None and self.text is None:
            problems.append("--text-pair needs --text.")
        raise_if_problems(problems)


@dataclass(frozen=True)
class EmbedConfig(LongTextOptions, DataOptions):
    """`bertkit embed`: pooled encoder features for every row, written to a sharded, resumable store."""

    # embed writes every row of every split it is given and makes no hold-out split, so these
    # DataOptions fields are not options of the command (nor valid recipe keys).
    NOT_OPTIONS = ("seed", "dev_fraction")
    HELP_OVERRIDES = {"dev": "Dev data (a file or a hub split), embedded into OUT/dev; no hold-out is made.",
                      "test": "Test data (a file or a hub split), embedded into OUT/test."}

    model: str = option("minilm-offline", "Encoder: a hub id, a local folder, or `minilm-offline`.", panel=MODEL)
    pool: str = option("cls", "Token pooling (mean/max ignore padding).", panel=MODEL, choices=POOLS)
    layers: str = option("-1", "Hidden states to pool: -1 (last), a list like -4,-3,-2,-1 (0 = embeddings), or all.",
                         panel=MODEL)
    combine: str = option("concat", "How several --layers are combined (all + concat keeps a layer axis).",
                          panel=MODEL, choices=COMBINES)
    max_length: int = option(128, "Truncate inputs to this many tokens (truncated rows are counted).", panel=MODEL,
                             above=0)
    batch_size: str = option("auto", "Rows per batch, or auto (a padded-token budget from the model size).")
    precision: str = option("auto", INFERENCE_PRECISION_HELP, choices=INFERENCE_PRECISIONS, aliases=("--dtype",))
    store_dtype: str = option("float32", "Stored precision (float16 halves the disk).", panel=OUTPUT,
                              choices=STORE_DTYPES)
    normalize: bool = option(False, "L2-normalise every feature vector (each layer's for --layers all).",
                             panel=OUTPUT)
    shard_size: int = option(2048, "Rows per shard: the unit of streaming writes and of resume.", panel=OUTPUT,
                             above=0)
    device: str = option("auto", "cpu, cuda, cuda:N, mps or auto.")
    out: str | None = option(None, "Store directory (with --dev/--test: OUT/train, OUT/dev, OUT/test).", panel=OUTPUT)
    overwrite: bool = option(False, "Replace a store made with other settings (swapped in once the new one is "
                             "complete).", panel=OUTPUT)
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if self.data is None:
            problems.append("--data is required: the file (or hub dataset) whose rows to embed.")
        if not self.out:
            problems.append("--out is required: the directory the feature store is written to.")
        problems += layers_problem(self.layers)
        problems += self.long_text_problems()
        if str(self.batch_size) != "auto" and (not str(self.batch_size).isdigit() or int(self.batch_size) <= 0):
            problems.append(f"--batch-size must be a positive integer or auto; got {self.batch_size!r}.")
        check_device(problems, self.device)
        raise_if_problems(problems)

    @property
    def rows_per_batch(self) -> int | None:
        """--batch-size as a number, or None for `auto`."""
        return None if str(self.batch_size) == "auto" else int(self.batch_size)


@dataclass(frozen=True)
class FinetuneConfig(TrackingOptions, TruncationOption, MetricOptions, TaskOptions):
    """`bertkit finetune`: full fine-tuning (BERT paper grid defaults: lr 5e-5, batch 32, 3 epochs, warmup 0.1)."""

    model: str = option("minilm-offline", "Pretrained encoder to fine-tune: hub id, local folder, or `minilm-offline`.",
                        panel=MODEL)
    out: str | None = option(None, "Run directory: checkpoints, best/ and final/ models, metrics, plots. Re-running "
                             "the same command resumes it.", panel=OUTPUT)
    epochs: int = option(3, "Passes over the training data (BERT paper: 2-4).", above=0)
    lr: float = option(5e-5, "Peak AdamW learning rate (BERT paper: 5e-5, 3e-5, 2e-5; small encoders such as MiniLM "
                       "barely move at 2e-5 in short runs).", above=0)
    batch_size: int = option(32, "Rows per forward pass per process (BERT paper: 16, 32); an optimizer step sees "
                             "batch x grad-accum x processes rows.", above=0)
    grad_accum: int = option(1, "Batches accumulated per optimizer step (a larger effective batch).", above=0)
    warmup_ratio: float = option(0.1, "Share of the optimizer steps with linear learning-rate warmup, in [0, 1).",
                                 minimum=0)
    weight_decay: float = option(0.01, "AdamW weight decay on weight matrices (never on biases and LayerNorm).",
                                 minimum=0)
    max_grad_norm: float = option(1.0, "Clip the gradient norm to this value (0 turns clipping off).", minimum=0)
    max_length: int = option(128, "Truncate inputs to this many tokens (batches are padded to their longest row).",
                             panel=MODEL, above=0)
    precision: str = option("auto", PRECISION_HELP, choices=PRECISIONS, aliases=("--dtype",))
    eval_every: str = option("epoch", "Evaluate on dev every N optimizer steps, or `epoch` (every epoch's end is "
                             "always evaluated).")
    early_stopping_patience: int | None = option(None, "Stop after N evaluations without improvement of "
                                                 "--metric-for-best.", above=0)
    metric_for_best: str | None = option(None, METRIC_FOR_BEST_HELP)
    class_weight: str = option("none", "balanced weighs the loss by inverse class frequency (imbalanced data).",
                               choices=CLASS_WEIGHTS)
    freeze_encoder: bool = option(False, "Train only the classification head (the encoder stays frozen).",
                                  panel=MODEL)
    fast_forward: bool = option(True, "BERT/DistilBERT: compute the last layer only where the logits need it ([CLS]); "
                                "same logits and gradients, fewer FLOPs. Off: the model's own forward.", panel=MODEL)
    compile: bool = option(False, "torch.compile the model's forward and backward (Inductor, dynamic shapes: one "
                           "compile, no recompiles per batch length). Off by default: on a CPU without native bf16 it "
                           "measured slower (README, \"Training levers\").", panel=MODEL)
    cuda_graphs: str = option("auto", "On one CUDA GPU in bf16/fp32, replay each step as CUDA graphs (one per padded "
                              "length bucket): the GPU stops waiting on Python between kernels. off: launch every "
                              "kernel from Python.", choices=("auto", "off"), panel=MODEL)
    save_every: int | None = option(100, "Checkpoint every N optimizer steps (and at every epoch's end) for resuming.",
                                    panel=OUTPUT, above=0)
    overwrite: bool = option(False, "Replace an --out that holds a run with other options (swapped in once the new "
                             "run is complete).", panel=OUTPUT)
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if self.data is None:
            problems.append("--data is required: the training file (or hub dataset).")
        if not self.out:
            problems.append("--out is required: the run directory (re-running with the same --out resumes).")
        if isinstance(self.warmup_ratio, float) and math.isfinite(self.warmup_ratio) and not self.warmup_ratio < 1.0:
            problems.append(f"--warmup-ratio must be in [0, 1); got {self.warmup_ratio}.")
        if self.eval_every != "epoch" and not (str(self.eval_every).isdigit() and int(self.eval_every) > 0):
            problems.append(f"--eval-every must be a positive number of steps or `epoch`; got {self.eval_every!r}.")
        # None (no flag, recipe or preset): the problem shape's headline metric, chosen once the data is read
        problems += metric_for_best_problems(self.metric_for_best, self.external_metrics)
        problems += self.task_problems()
        raise_if_problems(problems)


@dataclass(frozen=True)
class DistillConfig(FinetuneConfig):
    """`bertkit distill`: a smaller student trained on a fine-tuned teacher's soft targets (DistilBERT's recipe), with
    the fine-tuning loop's options, checkpoints and exact resume, and a teacher-vs-student report."""

    # the student comes from --teacher (or --student); the teacher's soft targets are computed on head-cut texts
    NOT_OPTIONS = ("model", "truncation")

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
                               "used one; needs the same hidden size).", minimum=0)
    report: bool = option(True, "After training, measure teacher vs student (size, batch-1 latency, throughput, "
                          "dev quality) and check the DistilBERT claims.", panel=OUTPUT)

    def __post_init__(self) -> None:
        if self.teacher is not None:  # messages and records name the teacher where a command names its model
            object.__setattr__(self, "model", self.student or self.teacher)
        problems: list[str] = []
        try:
            super().__post_init__()
        except UserError as exc:
            problems.append(str(exc))
        if self.teacher is None:
            problems.append("--teacher is required: the fine-tuned model to distil (e.g. runs/sst2/best).")
        if isinstance(self.alpha, float) and not 0.0 <= self.alpha <= 1.0:
            problems.append(f"--alpha must be in [0, 1] (the share of the soft-target loss); got {self.alpha}.")
        raise_if_problems(problems)


@dataclass(frozen=True)
class PredictConfig(LongTextOptions, DataOptions):
    """`bertkit predict`: labels and probabilities from a fine-tuned model (or a saved probe)."""

    # reads one --data file (or --text) and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")
    NO_PRESET = ("label_column",)  # data to label need not have labels (GLUE's test files have none)

    model: str | None = option(None, "Fine-tuned model folder (e.g. runs/sst2/best).", panel=MODEL)
    probe: str | None = option(None, "A probe saved by `bertkit probe` (instead of --model).", panel=MODEL)
    text: tuple[str, ...] = option((), "A sentence to classify (repeatable), instead of --data.", panel=DATA)
    out: str | None = option(None, "CSV file for the predictions (written atomically; never one of the inputs).",
                             panel=OUTPUT)
    batch_size: int = option(64, "Rows per inference batch (sorted by length; output keeps the input order).",
                             above=0)
    max_length: int = option(128, "Truncate inputs to this many tokens.", panel=MODEL, above=0)
    precision: str = option("fp32", "Compute precision (auto = bf16 where native)." + INT8_HELP,
                            choices=INFERENCE_PRECISIONS, aliases=("--dtype",))

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", tuple(self.text or ()))
        problems = self.data_problems()
        if (self.model is None) == (self.probe is None):
            problems.append("Give exactly one of --model (a fine-tuned folder) or --probe (a saved probe).")
        if bool(self.text) == (self.data is not None):
            problems.append("Give exactly one of --text (repeatable) or --data (a file to label).")
        problems += blank_text_problems(self.text)
        problems += self.long_text_problems()
        if self.probe is not None and (self.long_text, self.truncation) != (LongText.mode, LongText.truncation):
            problems.append("--long-text chunk and --truncation tail/head+tail work with --model; a saved --probe "
                            "reads texts as its features were extracted (the settings saved with it). Drop them, or "
                            "use a fine-tuned --model.")
        raise_if_problems(problems)


@dataclass(frozen=True)
class EvaluateConfig(LongTextOptions, MetricOptions, LabelOptions):
    """`bertkit evaluate`: metrics of a fine-tuned model on labelled data."""

    # reads one --data file and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")

    model: str | None = option(None, "Fine-tuned model folder (e.g. runs/sst2/best).", panel=MODEL)
    out: str | None = option(None, "Run directory for metrics.json, predictions.csv and the confusion-matrix PNG.",
                             panel=OUTPUT)
    overwrite: bool = option(False, "Replace an --out that holds an evaluate run with other options (swapped in once "
                             "the new one is complete).", panel=OUTPUT)
    batch_size: int = option(64, "Rows per inference batch (sorted by length).", above=0)
    max_length: int = option(128, "Truncate inputs to this many tokens.", panel=MODEL, above=0)
    precision: str = option("fp32", "Compute precision (auto = bf16 where native)." + INT8_HELP,
                            choices=INFERENCE_PRECISIONS, aliases=("--dtype",))

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if self.model is None:
            problems.append("--model is required: a fine-tuned model folder (e.g. runs/sst2/best).")
        if self.data is None:
            problems.append("--data is required: a labelled file (pass --label-column if it is not `label`).")
        problems += self.long_text_problems()
        raise_if_problems(problems)


@dataclass(frozen=True)
class ProbeConfig(LongTextOptions, MetricOptions, TaskOptions):
    """`bertkit probe`: linear probes on frozen features, per pooling and layer, with baselines: logistic regression
    (one label), one-vs-rest logistic regression (tags) or ridge regression (numbers)."""

    features: str | None = option(None, "A `bertkit embed` store (its --out directory) instead of --data.",
                                  panel=DATA)
    model: str | None = option(None, "Encoder for on-the-fly features (default minilm-offline); with --features it "
                               "must match the store.", panel=MODEL)
    pool: str | None = option(None, "Poolings to compare: cls, mean, max, comma-separated (default cls, or the "
                              "store's).", panel=MODEL)
    layers: str | None = option(None, "Layers probed one by one: -1, a list like 0,3,6 (0 = embeddings), or all "
                                "(default -1, or every layer in the store).", panel=MODEL)
    max_length: int = option(128, "Truncate inputs to this many tokens when extracting features.", panel=MODEL,
                             above=0)
    batch_size: int = option(64, "Rows per batch for feature extraction.", above=0)
    precision: str = option("auto", INFERENCE_PRECISION_HELP, choices=INFERENCE_PRECISIONS, aliases=("--dtype",))
    normalize: bool = option(False, "L2-normalise features before the probe (extraction option).", panel=MODEL)
    C: float | None = option(None, "Inverse regularisation strength (default 1.0 without --cv; regression: ridge "
                             "alpha = 1/C, chosen by --cv 5 unless given).", panel=PROBE,
                             above=0)
    cv: int | None = option(None, "Choose C by K-fold cross-validation (data order; stratified for one label per "
                            "row).", panel=PROBE,
                            minimum=2)
    C_grid: str | None = option(None, "C values for --cv, comma-separated, or `alammar` (linspace(0.0001, 100, 20)). "
                                "Default: 0.001..10.", panel=PROBE)
    class_weight: str = option("none", "balanced weighs classes by inverse frequency (imbalanced data).",
                               panel=PROBE, choices=CLASS_WEIGHTS)
    repeats: int = option(0, "Refit the best cell N times on random 80% train subsets (mean ± std).", panel=PROBE,
                          minimum=0)
    baselines: bool = option(True, "Also score majority class, TF-IDF + LR on the raw text, and the same encoder with "
                             "random weights.", panel=PROBE)
    out: str | None = option(None, "Run directory: config, metrics, plots, saved probe, cached features.",
                             panel=OUTPUT)
    overwrite: bool = option(False, "Replace an --out that holds a probe run with other options (swapped in once the "
                             "new one is complete).", panel=OUTPUT)
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.features is None) == (self.data is None):
            problems.append("Give exactly one of --features (a `bertkit embed` store) or --data (text to extract from).")
        problems += self.long_text_problems()
        problems += [f"--pool must be one of {', '.join(POOLS)}; got {pool!r}." for pool in self.pools
                     if pool not in POOLS]
        if len(set(self.pools)) != len(self.pools) or not self.pools:
            problems.append(f"--pool must list distinct poolings (cls, mean, max), e.g. cls,mean; got {self.pool!r}.")
        problems += layers_problem(self.layers)
        problems += self.task_problems()
        if self.features is not None and (self.task in ("multi_label", "regression") or self.label_sep is not None):
            problems.append("--features stores hold one class per row; probe tags or numbers from the text with --data "
                            "(and --task / --label-sep).")
        if self.C is not None and self.cv is not None:
            problems.append("--C fixes the regularisation and --cv searches for it; give one of them.")
        if self.C_grid is not None:
            if self.cv is None:
                problems.append("--C-grid is searched with cross-validation; add --cv K (e.g. --cv 5).")
            try:
                _ = self.c_values
            except ValueError:
                problems.append(f"--C-grid must be positive finite numbers separated by commas (e.g. 0.01,0.1,1), or "
                                f"alammar; got {self.C_grid!r}.")
        raise_if_problems(problems)

    @property
    def pools(self) -> list[str]:
        """--pool as a list (default: cls)."""
        return [p.strip() for p in str(self.pool or "cls").split(",") if p.strip()]

    @property
    def c_values(self) -> list[float] | None:
        """--C-grid as numbers (None: the default grid). Raises ValueError on a bad grid."""
        if self.C_grid is None:
            return None
        if self.C_grid.strip().lower() == "alammar":
            return [0.0001 + i * (100 - 0.0001) / 19 for i in range(20)]
        values = [float(v) for v in self.C_grid.split(",") if v.strip()]
        if not values or any(not math.isfinite(v) or v <= 0 for v in values):
            raise ValueError(self.C_grid)
        return values


QUALITY_CONFIGS: dict[str, type] = {"probe": ProbeConfig, "finetune": FinetuneConfig}
"""The commands `bench --quality` runs for each model, and their configs."""
QUALITY_COMMANDS = tuple(QUALITY_CONFIGS)


@dataclass(frozen=True)
class BenchConfig(DataOptions):
    """`bertkit bench`: speed, size, memory and optional quality of several encoders, side by side."""

    models: str | None = option(None, "Comma-separated hub ids or folders, e.g. "
                                "distilbert-base-uncased,bert-base-uncased.", panel=MODEL)
    preset: str | None = option(None, "distilbert-vs-bert: exact DistilBertConfig() vs BertConfig() shapes, random "
                                "init, works offline.", panel=MODEL)
    random_init: bool = option(False, "Build --models from their configs with random weights (speed/size only).",
                               panel=MODEL)
    max_length: int = option(128, "Truncation length, and the width of static padding.", panel=MODEL, above=0)
    protocol: str = option("standard", "standard (latency, throughput, training step) or paper (CPU, batch 1, one "
                           "full pass over the data).", panel=BENCH, choices=BENCH_PROTOCOLS)
    batch_sizes: str = option("1,8,32", "Throughput batch sizes, comma-separated.", panel=BENCH)
    train_batch_size: int = option(32, "Batch size of the timed training step (0 skips it).", panel=BENCH, minimum=0)
    warmup: int = option(1, "Untimed warm-up iterations per model and measurement.", panel=BENCH, minimum=0)
    min_iters: int = option(3, "Minimum timed iterations per measurement and model.", panel=BENCH, above=0)
    min_seconds: float = option(2.0, "Minimum timed seconds per measurement and model.", panel=BENCH, minimum=0)
    rounds: int = option(2, "Chunks per measurement, alternating models (A B A B) so drift hits both.", panel=BENCH,
                         above=0)
    precision: str = option("auto", INFERENCE_PRECISION_HELP, panel=BENCH, choices=INFERENCE_PRECISIONS, aliases=("--dtype",))
    device: str = option("auto", "cpu, cuda, cuda:N, mps or auto.", panel=BENCH)
    threads: int | None = option(None, "torch intra-op threads (default: torch's choice).", panel=BENCH, above=0)
    quality: str = option("none", "none, probe, finetune or probe,finetune: score each model through those commands, "
                          "same settings.", panel=BENCH)
    quality_args: str | None = option(None, "Extra flags for every quality command, e.g. \"--epochs 1\".", panel=BENCH)
    out: str | None = option(None, "Directory for bench.json, bench.md, bench.png (default runs/bench).",
                             panel=OUTPUT)
    overwrite: bool = option(False, "Replace an --out that holds a bench run with other options (swapped in once the "
                             "new one is complete).", panel=OUTPUT)
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.models is None) == (self.preset is None):
            problems.append("Give exactly one of --models (comma-separated names) or --preset (e.g. distilbert-vs-bert).")
        if self.preset is not None and self.random_init:
            problems.append("--random-init goes with --models; --preset already builds random-init models.")
        if self.models is not None and not self.model_list:
            problems.append("--models is empty; pass comma-separated names, e.g. --models distilbert-base-uncased,bert-base-uncased.")
        if (",".join(self.quality_kinds) or "none") not in BENCH_QUALITY:
            problems.append(f"--quality must be one of {', '.join(BENCH_QUALITY)}; got {self.quality!r}.")
        try:
            sizes = self.batch_size_list
            if not sizes or min(sizes) <= 0:
                raise ValueError
        except ValueError:
            problems.append(f"--batch-sizes must be comma-separated positive integers, e.g. 1,8,32; got {self.batch_sizes!r}.")
        if self.quality_kinds and self.data is None:
            problems.append("--quality needs labelled --data (and usually --dev); pass them, or drop --quality.")
        check_device(problems, self.device, check_available=self.protocol != "paper")  # paper runs on the CPU
        problems += quality_args_problems(QUALITY_CONFIGS, self.quality_kinds, self.quality_args)
        raise_if_problems(problems)

    @property
    def model_list(self) -> list[str]:
        return [m.strip() for m in (self.models or "").split(",") if m.strip()]

    @property
    def batch_size_list(self) -> tuple[int, ...]:
        return tuple(int(v) for v in str(self.batch_sizes).split(",") if v.strip())

    @property
    def quality_kinds(self) -> list[str]:
        order = QUALITY_COMMANDS
        asked = {q.strip() for q in str(self.quality).split(",") if q.strip() and q.strip() != "none"}
        return [q for q in order if q in asked] + sorted(asked - set(order))


def config_dict(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict (for config.json in a run directory)."""
    return dataclasses.asdict(config)
