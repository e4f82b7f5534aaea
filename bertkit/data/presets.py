"""`--task-preset glue/<task>`: the columns, problem type and official metric(s) of every GLUE task, for the hub
data (`nyu-mll/glue`, one configuration per task) and for the TSV files of the GLUE download, in one table.

A preset only fills what the command line and the recipe left unset (an option still None, `auto`, or an empty
list), so the precedence is: explicit flag > recipe > preset > default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.data.sources import is_local_source
from bertkit.options import holder, option_fields, set_value, value

HUB_DATASET = "nyu-mll/glue"
HUB_NAMES = (HUB_DATASET, "glue")


@dataclass(frozen=True)
class PresetFill:
    """Which options of a config hold the value its --task-preset gives, recorded once by `apply_preset` (for
    messages: a column the preset chose is not one the user typed), so resolving a column never asks the presets."""

    preset: str | None = None
    """`glue/<task>`; None: no --task-preset."""
    options: frozenset[str] = frozenset()


NO_PRESET = PresetFill()


@dataclass(frozen=True)
class Preset:
    """One GLUE task: (text, pair, label) columns in the hub data and in the GLUE TSV download, the problem type,
    the official metric(s) (the first one picks the best checkpoint) and the hub's dev/test split names."""

    task: str
    hub_columns: tuple[str, str | None, str]
    tsv_columns: tuple[str, str | None, str]
    metrics: tuple[str, ...]
    problem: str = "single_label"
    dev_split: str = "validation"
    test_split: str | None = None
    tsv_header: str = "auto"


PRESETS: dict[str, Preset] = {p.task: p for p in (
    # CoLA's TSV has no header: source, label, original mark, sentence.
    Preset("cola", ("sentence", None, "label"), ("3", None, "1"), ("mcc",), tsv_header="no"),
    Preset("sst2", ("sentence", None, "label"), ("sentence", None, "label"), ("accuracy",)),
    # GLUE's F1 for MRPC and QQP is the F1 of the positive class (paraphrase / duplicate), not macro-F1.
    Preset("mrpc", ("sentence1", "sentence2", "label"), ("#1 String", "#2 String", "Quality"),
           ("binary_f1", "accuracy")),
    Preset("qqp", ("question1", "question2", "label"), ("question1", "question2", "is_duplicate"),
           ("binary_f1", "accuracy")),
    Preset("stsb", ("sentence1", "sentence2", "label"), ("sentence1", "sentence2", "score"),
           ("pearson", "spearman"), problem="regression"),
    # MNLI is scored on both dev sets: matched (dev) and mismatched (test, or `bertkit evaluate` on it).
    Preset("mnli", ("premise", "hypothesis", "label"), ("sentence1", "sentence2", "gold_label"), ("accuracy",),
           dev_split="validation_matched", test_split="validation_mismatched"),
    Preset("qnli", ("question", "sentence", "label"), ("question", "sentence", "label"), ("accuracy",)),
    Preset("rte", ("sentence1", "sentence2", "label"), ("sentence1", "sentence2", "label"), ("accuracy",)),
    Preset("wnli", ("sentence1", "sentence2", "label"), ("sentence1", "sentence2", "label"), ("accuracy",)),
)}
PRESET_NAMES = tuple(f"glue/{task}" for task in PRESETS)


def find_preset(name: str) -> Preset | None:
    """The preset called `name` (`glue/cola`; `cola` alone is accepted too), or None."""
    key = str(name).strip().lower()
    return PRESETS.get(key.removeprefix("glue/"))


def preset_values(preset: Preset, data: str | None, *, text_given: bool = False) -> dict[str, Any]:
    """Option values of `preset` for the data source `data`: hub columns and split names for the hub dataset (or
    no --data: then --data is the hub dataset, unless --text gives the input), the TSV columns for a local file."""
    local = data is not None and is_local_source(data)
    text, pair, label = preset.tsv_columns if local else preset.hub_columns
    values: dict[str, Any] = {"text_column": text, "text_pair_column": pair, "label_column": label,
                              "metric": preset.metrics, "metric_for_best": preset.metrics[0], "task": preset.problem}
    if local:
        values["header"] = preset.tsv_header
        return values
    if data is None and not text_given:
        values["data"] = HUB_DATASET
    if data is None or data in HUB_NAMES:
        values.update(data_config=preset.task, dev=preset.dev_split, test=preset.test_split)
    return values


def is_unset(value: Any) -> bool:
    """Whether an option value leaves the choice open (a preset may fill it): None, `auto`, or an empty list."""
    return value is None or value == "auto" or value == ()


def apply_preset(config: Any) -> list[str]:
    """Fill the unset options of a config (its groups' included) from its --task-preset, in place (configs are
    frozen: this runs in `__post_init__`), and record which options hold the preset's values as the data group's
    `preset_fill` (a `PresetFill`); the problems found (an unknown preset name)."""
    name = value(config, "task_preset", None)
    if name is None and not hasattr(config, "inputs"):
        return []  # a command that reads no dataset
    inputs = holder(config, "task_preset")
    preset = find_preset(name) if name is not None else None
    if preset is None:
        object.__setattr__(inputs, "preset_fill", NO_PRESET)
        return [] if name is None else [f"--task-preset must be one of {', '.join(PRESET_NAMES)}; got {name!r}."]
    values = preset_values(preset, value(config, "data"), text_given=bool(value(config, "text", None)))
    options = {f.name for f in option_fields(type(config))} - set(getattr(config, "NO_PRESET", ()))
    for key, filled in values.items():
        if key in options and filled is not None and is_unset(value(config, key)):
            set_value(config, key, filled)
    object.__setattr__(inputs, "preset_fill", PresetFill(f"glue/{preset.task}", _holding(config, values)))
    return []


def _holding(config: Any, values: dict[str, Any]) -> frozenset[str]:
    """The options of `config` that hold their preset value: those just filled, and those a copy of a filled config
    (`options.replaced` runs `__post_init__` again, on values no longer unset) or the user gave alike."""
    return frozenset(key for key, filled in values.items()
                     if filled is not None and str(value(config, key, None)) == str(filled))
