"""The option groups several commands share (truncation and long texts, metrics, labels, the problem shape), their
rules, and the values their options take.

A group is a frozen dataclass of options (declared once, with `fields.option`); a command's config inherits the
groups it has (`commands.py`). Rules that involve several options of a group are its `*_problems` methods; rules
commands need (devices, --layers, --threshold, --metric-for-best, blank --text) are functions here.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path

from bertkit.config.fields import DATA, MODEL, RUN, option
from bertkit.data.cells import is_blank_text
from bertkit.data.labels import TASKS as SHAPE_NAMES
from bertkit.data.options import DataOptions
from bertkit.encoding.longtext import LONG_TEXT_MODES, TRUNCATIONS, LongText, default_stride
from bertkit.scoring.table import SHAPE

POOLS = ("cls", "mean", "max")
COMBINES = ("concat", "mean", "sum")
STORE_DTYPES = ("float32", "float16")
BEST_METRICS = tuple(dict.fromkeys(name for shape in SHAPE.values() for name in shape.scored()))
"""The built-in metrics (scikit-learn/scipy, offline; `bertkit.scoring.metrics`); any other --metric is an evaluate module."""
METRIC_FOR_BEST_HELP = (
    f"Dev metric that picks the best checkpoint: a built-in one ({', '.join(SHAPE['single_label'].scored())}), or a "
    f"--metric evaluate module or one of its scores. Regression: {', '.join(SHAPE['regression'].metrics)}; "
    f"multi-label: {', '.join(SHAPE['multi_label'].metrics)}. Default: {SHAPE['single_label'].headline} "
    f"({SHAPE['regression'].headline} / {SHAPE['multi_label'].headline} for those shapes), or the --task-preset's "
    f"official metric.")
TASKS = ("auto", *SHAPE_NAMES)
THRESHOLD_MODES = ("tune", "tune-per-label")
CLASS_WEIGHTS = ("none", "balanced")
BENCH_PROTOCOLS = ("standard", "paper")
BENCH_QUALITY = ("none", "probe", "finetune", "probe,finetune")
TRUST_HELP = "Allow custom code from the model repository (off by default: it runs arbitrary code)."
PRECISION_HELP = "Compute precision. auto = bf16 where the hardware runs it natively (GPU, AVX512-BF16/AMX CPU), else fp32."
INT8_HELP = " int8 = the linear layers' weights in int8, activations quantized per batch (dynamic int8); CPU only."
INFERENCE_PRECISION_HELP = PRECISION_HELP + INT8_HELP


def check_device(problems: list[str], value: str, *, check_available: bool = True) -> None:
    """Record a problem unless --device names a device (cpu, cuda, cuda:N, mps, auto) that this machine has."""
    if value in ("auto", "cpu"):
        return
    from bertkit.models.loading import device_problem  # imports torch: only for a device other than auto/cpu

    problem = device_problem(value, check_available=check_available)
    if problem:
        problems.append(problem)


def layers_problem(spec: str | None, default: str = "-1") -> list[str]:
    """A problem with --layers (the syntax; the range is checked against the model)."""
    try:
        parse_layers(spec if spec is not None else default)
    except ValueError:
        return [f"--layers must be -1, a comma list of distinct layer indices (e.g. -4,-3,-2,-1; 0 = embeddings), "
                f"or all; got {spec!r}."]
    return []


def parse_layers(spec: str | int) -> list[int] | None:
    """`--layers`: `all` -> None; `-1` / `-4,-3,-2,-1` / `0,6` -> list of hidden-state indices.

    Index 0 is the embedding output, 1..L the encoder layers; negative indices count from the last layer.
    Raises ValueError on anything else.
    """
    text = str(spec).strip().lower()
    if text == "all":
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p.lstrip("-").isdigit() for p in parts):
        raise ValueError(spec)
    values = [int(p) for p in parts]
    if len(set(values)) != len(values):
        raise ValueError(spec)
    return values


def blank_text_problems(texts: tuple[str, ...]) -> list[str]:
    """--text values that are empty or only invisible characters, refused as the --data path refuses empty cells."""
    blank = [str(i) for i, text in enumerate(texts, start=1) if is_blank_text(text)]
    if not blank:
        return []
    return [f"--text number {', '.join(blank)} (of {len(texts)}) is empty or only whitespace/invisible characters; "
            f"a model cannot classify an empty text. Drop it or pass a sentence."]


# ---------------------------------------------------------------- the option groups


@dataclass(frozen=True)
class TruncationOption:
    """Which tokens of an over-long text are kept: every command that runs a model on text."""

    truncation: str = option(LongText.truncation, "Which tokens a text longer than --max-length keeps: head (the first), tail (the "
                             "last), head+tail (the first quarter and the last three quarters of the budget; Sun et "
                             "al. 2019).", panel=MODEL, choices=TRUNCATIONS)


@dataclass(frozen=True)
class LongTextOptions(TruncationOption):
    """Texts longer than the window: cut them (--truncation), or run every window and pool (embed/probe/predict/
    evaluate)."""

    long_text: str = option(LongText.mode, "Texts longer than --max-length: cut (see --truncation) or chunk (overlapping "
                            "windows of --max-length tokens, pooled: features by mean, logits by max; nothing is "
                            "cut).", panel=MODEL, choices=LONG_TEXT_MODES)
    stride: int | None = option(LongText.stride, "Tokens neighbouring windows share with --long-text chunk (default: a quarter "
                                "of --max-length).", panel=MODEL, minimum=0)

    def long_text_problems(self) -> list[str]:
        """--stride only with chunking, and smaller than the text part of a window (it would never move on)."""
        if self.stride is None:
            return []
        if self.long_text != "chunk":
            return [f"--stride is the overlap of --long-text chunk windows, but --long-text is {self.long_text}. "
                    f"Add --long-text chunk, or drop --stride."]
        window = getattr(self, "max_length", 0)
        if isinstance(self.stride, int) and isinstance(window, int) and self.stride >= window - 2:
            return [f"--stride {self.stride} must be smaller than the window: --max-length {window} leaves {window - 2} "
                    f"text tokens next to [CLS] and [SEP], and windows sharing {self.stride} of them never move on. "
                    f"Pass a smaller --stride (e.g. --stride {default_stride(window)}) or a larger --max-length."]
        return []


@dataclass(frozen=True)
class MetricOptions:
    """Extra metrics: built-in names, or `evaluate` modules (hub names, cached or online; local metric scripts)."""

    metric: tuple[str, ...] = option((), "A metric to report (repeatable, or a comma list): a built-in name, or an "
                                     "evaluate module: a hub name (matthews_correlation, glue:mrpc) from the hub or "
                                     "the local evaluate cache, or a local metric script (.py or its folder).",
                                     panel=RUN)

    @property
    def metric_list(self) -> list[str]:
        """--metric values, comma lists split, in order, without repeats."""
        names = [part.strip() for value in self.metric for part in str(value).split(",") if part.strip()]
        return list(dict.fromkeys(names))

    @property
    def external_metrics(self) -> list[str]:
        """The --metric values that are evaluate modules (not built-in names)."""
        return [name for name in self.metric_list if name not in BEST_METRICS]


@dataclass(frozen=True)
class LabelOptions(DataOptions):
    """How labels are read where their shape matters (fine-tuning, evaluation): tag lists as well as single labels."""

    label_sep: str | None = option(None, "Multi-label data: the separator of the tags in one label cell (e.g. \"|\"). "
                                   "JSON/parquet list cells and several 0/1 columns (--label-column a,b,c) need none.",
                                   panel=DATA)

    def data_problems(self) -> list[str]:
        problems = super().data_problems()
        if isinstance(self.label_sep, str) and not self.label_sep.strip():
            problems.append(f"--label-sep must be a visible separator such as \"|\" or \";\"; got {self.label_sep!r}.")
        return problems


def threshold_problems(value: str) -> list[str]:
    """--threshold: tune, tune-per-label, or a number strictly between 0 and 1."""
    if value in THRESHOLD_MODES:
        return []
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if 0.0 < number < 1.0:
        return []
    return [f"--threshold must be a probability strictly between 0 and 1 (e.g. 0.5), tune (one threshold chosen on "
            f"dev) or tune-per-label; got {value!r}."]


@dataclass(frozen=True)
class TaskOptions(LabelOptions):
    """The problem shape of labelled data and the multi-label decision threshold: commands that learn from labels of
    every shape (finetune, probe)."""

    task: str = option("auto", "Problem shape. auto: tag lists, --label-sep or several label columns -> multi_label; "
                       "numbers with fractions -> regression; else single_label.", panel=DATA, choices=TASKS)
    threshold: str = option("tune", "Multi-label decision threshold on each sigmoid: a probability in (0, 1), tune "
                            "(one threshold, best dev micro-F1) or tune-per-label (one per label, best dev F1).",
                            numbers=True)

    def task_problems(self) -> list[str]:
        """--threshold in (0, 1) or a tuning mode; --label-sep only where tags are read."""
        problems = threshold_problems(self.threshold)
        if self.label_sep is not None and self.task in ("single_label", "regression"):
            problems.append(f"--label-sep splits tag lists (multi-label data); it does not apply to --task {self.task}. "
                            f"Drop --label-sep, or pass --task multi_label (or auto).")
        return problems


def metric_for_best_problems(name: str | None, external: list[str]) -> list[str]:
    """--metric-for-best must be a built-in metric, or name a --metric evaluate module (or one of its scores,
    `NAME/score`): a module is loaded before training starts, so a missing one stops the run at once. (Whether the
    data's problem shape has it is checked once the data is read, before training: `objectives.best_metric`.)"""
    if name is None or name in BEST_METRICS or name in external:
        return []
    stems = {Path(spec.partition(":")[0]).stem: spec for spec in external}
    if name in stems or name.partition("/")[0] in stems:
        return []
    close = difflib.get_close_matches(name, BEST_METRICS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return [f"--metric-for-best {name!r} is not a built-in metric{hint} ({', '.join(BEST_METRICS)}) nor one of the "
            f"--metric evaluate modules ({', '.join(external) or 'none given'}). To pick the best checkpoint by an "
            f"evaluate module, also pass it: --metric {name} --metric-for-best {name}."]
