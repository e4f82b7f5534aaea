"""The data group of every command that reads a dataset (`inputs: DataOptions = group(DataOptions)`): where the data
comes from, which columns to use, how a dev set is held out, and --task-preset (which fills the options left unset);
with how labels are read (`LabelOptions`) and the problem shape with its multi-label threshold (`TaskOptions`).
`config_problems` is the first check of every command's config: the preset, then every option's declaration."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bertkit.data.cachedir import cache_in_out_problem
from bertkit.data.cells import is_blank_text
from bertkit.data.labels import SPANS_TASK
from bertkit.data.labels import TASKS as SHAPE_NAMES
from bertkit.data.presets import NO_PRESET, PresetFill, apply_preset
from bertkit.data.sources import HEADER_MODES
from bertkit.data.squad import looks_like_squad
from bertkit.data.squad_rows import HUB_VERSIONS
from bertkit.data.tagged import is_file_value, is_tagged_file, is_tagged_hub
from bertkit.options import DATA, RUN, field_problems, option, value


@dataclass(frozen=True)
class DataOptions:
    """Where the data comes from and which columns to use: the data group of every command that reads a dataset."""

    ADVANCED_OPTIONS = ("data_config", "train_split", "encoding", "header", "dev_fraction", "cache_dir")
    preset_fill: ClassVar[PresetFill] = NO_PRESET
    """Which options --task-preset set (not a field: `apply_preset` records it on the instance, in
    `config_problems`)."""

    data: str | None = option(None, "Training (or only) data: a .csv/.tsv/.txt/.json/.jsonl/.parquet file, or a hub "
                              "dataset name.", panel=DATA)
    dev: str | None = option(None, "Dev data: a file, or a split name of the hub dataset given by --data. Omitted: a "
                             "stratified hold-out of --data (--dev-fraction).", panel=DATA)
    test: str | None = option(None, "Test data: a file, or a split name of the hub dataset.", panel=DATA)
    data_config: str | None = option(None, "Hub dataset configuration (e.g. sst2 for nyu-mll/glue).", panel=DATA)
    train_split: str = option("train", "Split of the hub dataset used as training data.", panel=DATA)
    text_column: str | None = option(None, "Text column: a name, or a 0-based index for headerless files. Default: "
                                     "sentence/text/first column.", panel=DATA)
    text_pair_column: str | None = option(None, "Second text column for sentence pairs (encoded as a true pair).",
                                          panel=DATA, families=("sentences",))
    label_column: str | None = option(None, "Label column: a name or 0-based index; integer or string labels.",
                                      panel=DATA)
    encoding: str = option("utf-8", "Text encoding of local files.", panel=DATA)
    header: str = option("auto", "Header row in CSV/TSV files.", panel=DATA, choices=HEADER_MODES)
    dev_fraction: float = option(0.1, "Share of --data held out (stratified) as dev when --dev is not given.",
                                 panel=DATA)
    cache_dir: str | None = option(None, "Where parsed inputs and token ids are cached (memory-mapped, reused by "
                                   "later commands and resume). Default: $BERTKIT_CACHE_DIR, else "
                                   "~/.cache/bertkit.", panel=DATA)
    limit: int | None = option(None, "Use only the first N rows of each split (quick runs).", panel=DATA, above=0)
    seed: int = option(42, "Random seed (splits, sampling, initialisation).", panel=RUN)
    task_preset: str | None = option(None, "A GLUE task: glue/cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte or wnli. "
                                     "Fills the columns (hub data or the GLUE TSV files), problem type and official "
                                     "metrics that no flag or recipe sets.", panel=DATA, families=("sentences",))

    def data_problems(self) -> list[str]:
        """The data options' own rules (once the declarations were checked: `config_problems`)."""
        fraction = self.dev_fraction
        if isinstance(fraction, float) and math.isfinite(fraction) and not 0.0 < fraction < 1.0:
            return [f"--dev-fraction must be between 0 and 1 (exclusive); got {fraction}."]
        return []


def config_problems(config: Any) -> list[str]:
    """The first checks of a command's config: its --task-preset fills the options left unset, every option is
    checked against its declaration (`options.field_problems`), then the data group's own rules and where the
    cache is against the run directory."""
    problems = apply_preset(config)
    problems += field_problems(config)
    cache_problem = cache_in_out_problem(value(config, "cache_dir", None), value(config, "out", None))
    if cache_problem:
        problems.append(cache_problem)
    inputs = getattr(config, "inputs", None)
    return problems + (inputs.data_problems() if inputs is not None else [])


WORD_TASK = "tags"
"""--task tags: one tag per word (a tagged corpus): the word path of every command that has --task."""
TASKS = ("auto", *SHAPE_NAMES, WORD_TASK, SPANS_TASK)
WORD_TASKS = ("auto", WORD_TASK)
"""--task where a command reads either rows or tagged corpora and nothing else (embed)."""
THRESHOLD_MODES = ("tune", "tune-per-label")


def reads_tagged(task: str, data: str | None, config: str | None = None, train_split: str = "train") -> bool:
    """Whether a run reads --data as a tagged corpus: --task tags, or --task auto and a file that is one
    (`data.tagged.is_tagged_file`: a tagged extension, a column file's shape, a parquet file of word and tag lists)
    or a hub dataset whose --train-split is one (`data.tagged.is_tagged_hub`: a list-of-ClassLabel tag feature)."""
    if task == WORD_TASK:
        return True
    if task != "auto" or data is None:
        return False
    try:
        return is_tagged_file(data) if is_file_value(data) else is_tagged_hub(data, config, train_split)
    except OSError:  # a path this machine cannot open (too long...): the data options' checks say why
        return False


def reads_questions(task: str, data: str | None, config: str | None = None, train_split: str = "train") -> bool:
    """Whether a run reads --data as questions on passages (extractive question answering): --task spans, or --task
    auto and a local file that holds SQuAD questions (`data.squad.looks_like_squad`: SQuAD JSON, or rows with
    context, question and answers) or a hub dataset named squad or squad_v2 (its name declares its version)."""
    if task == SPANS_TASK:
        return True
    if task != "auto" or data is None:
        return False
    if is_file_value(data):
        return looks_like_squad(Path(data).expanduser())
    return data.rsplit("/", 1)[-1] in HUB_VERSIONS


def blank_text_problems(texts: tuple[str, ...]) -> list[str]:
    """--text values that are empty or only invisible characters, refused as the --data path refuses empty cells."""
    blank = [str(i) for i, text in enumerate(texts, start=1) if is_blank_text(text)]
    if not blank:
        return []
    return [f"--text number {', '.join(blank)} (of {len(texts)}) is empty or only whitespace/invisible characters; "
            f"a model cannot classify an empty text. Drop it or pass a sentence."]


@dataclass(frozen=True)
class LabelOptions(DataOptions):
    """How labels are read where their shape matters (fine-tuning, evaluation): tag lists as well as single labels."""

    ADVANCED_OPTIONS = ("label_sep",)

    label_sep: str | None = option(None, "Multi-label data: the separator of the tags in one label cell (e.g. \"|\"). "
                                   "JSON/parquet list cells and several 0/1 columns (--label-column a,b,c) need none.",
                                   panel=DATA, families=("sentences",))

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

    ADVANCED_OPTIONS = ("threshold",)

    task: str = option("auto", "Problem shape. auto: tag lists, --label-sep or several label columns -> multi_label; "
                       "numbers with fractions -> regression; else single_label. tags: one tag per word (a CoNLL-style "
                       "column file; detected from .iob2/.iob/.bio/.conll files and their content). spans: an answer "
                       "span of a passage per question (SQuAD; detected from a SQuAD file's content, or the hub's "
                       "squad and squad_v2).", panel=DATA,
                       choices=TASKS)
    threshold: str = option("tune", "Multi-label decision threshold on each sigmoid: a probability in (0, 1), tune "
                            "(one threshold, best dev micro-F1) or tune-per-label (one per label, best dev F1).",
                            numbers=True, families=("sentences",))

    def task_problems(self) -> list[str]:
        """--threshold in (0, 1) or a tuning mode; --label-sep only where tags are read. (Every command with a task
        reads tagged data too: --task tags, or a tagged --data, is its word path.)"""
        problems = threshold_problems(self.threshold)
        if self.label_sep is not None and self.task in ("single_label", "regression"):
            problems.append(f"--label-sep splits tag lists (multi-label data); it does not apply to --task {self.task}. "
                            f"Drop --label-sep, or pass --task multi_label (or auto).")
        return problems
