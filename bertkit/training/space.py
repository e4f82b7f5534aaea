"""A sweep's options: every fine-tuning option (`SweepOptions` extends `FinetuneOptions`: on tagged data the trials
are taggers) plus the search group (`SearchOptions`: the space, parsed and checked here into `Dimension`s, each value
through the `FinetuneOptions` of a trial, so a bad value is refused before anything runs, naming its flag).

Space syntax (keys are `finetune` option names, dashes or underscores):
    --grid "lr=5e-5,3e-5,2e-5"          a grid dimension: every value (repeat --grid for more dimensions)
    --grid "lr=auto,2e-4"               --lr's values are numbers or auto (resolved per trial from the model's width)
    --space "lr=1e-5:1e-4:log"          --search optuna: a float range on a log scale
    --space "warmup-ratio=0:0.2"        --search optuna: a uniform range (int options: integers from low to high)
    --space "batch-size=16,32"          --search optuna: a choice among values
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bertkit.data.tagged_splits import TAGGED_TRAINING_OPTIONS
from bertkit.errors import UserError, raise_if_problems
from bertkit.options import all_fields, build, field_type, flag, flat_values, group, option
from bertkit.training.learning_rate import AUTO
from bertkit.training.options import FinetuneOptions

SWEEP = "Sweep"
"""The help panel of the search-space options."""
SEARCHES = ("grid", "optuna")
NOT_SEARCHABLE = frozenset({"out", "overwrite", "seed", "keep_checkpoints"})
"""Options a space may not vary: where trials go is the sweep's business, and seeds come from --seed and --seeds."""
CHANGES_THE_RANKING = {
    "metric_for_best": "which dev score ranks the trials", "metric": "which dev scores there are to rank by",
    "task": "the kind of labels the dev score compares with", "task_preset": "the data's columns, labels and task",
    "label_column": "the labels the dev score compares with", "label_sep": "the labels the dev score compares with",
    "dev": "the dev rows the score is computed on", "dev_fraction": "the dev rows the score is computed on",
    "tag_scheme": "the entities the dev tags are read into",
}
"""Options whose values change what the ranking metric means (option -> what it changes): trials run with two of
their values would be ranked by numbers that cannot be compared (a loss against an accuracy, a Pearson r against an
accuracy, scores on two dev sets), so a space may not vary them."""
READS_WORDS_FROM = ("data", "data_config", "train_split")
"""Searchable options that decide whether a trial reads tagged data (a tagger) or rows of text (a classifier)."""


@dataclass(frozen=True)
class Dimension:
    """One searched option: a list of `values`, or (optuna) a range `low`..`high`, on a log scale if `log`."""

    name: str
    """The FinetuneOptions field (`batch_size`)."""
    values: tuple[str | int | float | bool, ...] = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False

    @property
    def flag(self) -> str:
        return flag(self.name)

    def to_json(self) -> dict[str, Any]:
        if self.values:
            return {"option": self.flag[2:], "values": list(self.values)}
        return {"option": self.flag[2:], "low": self.low, "high": self.high, "log": self.log, "int": self.integer}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Dimension:
        """A dimension as sweep.json's `space` records it (`to_json`)."""
        name = str(record["option"]).replace("-", "_")
        if "values" in record:
            return cls(name, tuple(record["values"]))
        return cls(name, low=record.get("low"), high=record.get("high"), log=bool(record.get("log")),
                   integer=bool(record.get("int")))


@dataclass(frozen=True)
class SearchOptions:
    """What a sweep searches: the space (--grid, or --search optuna's --space and --trials), the seeds every
    configuration runs with, and Optuna's pruning."""

    grid: tuple[str, ...] = option((), "A grid dimension, repeatable: OPTION=V1,V2,... with a finetune option name, "
                                   "e.g. --grid lr=5e-5,3e-5,2e-5 --grid batch-size=16,32 (every combination runs).",
                                   panel=SWEEP)
    search: str = option("grid", "grid: every combination of --grid; optuna: --trials configurations drawn by "
                         "Optuna (TPE) from --space, pruning hopeless ones at dev evaluations.", panel=SWEEP,
                         choices=SEARCHES)
    space: tuple[str, ...] = option((), "An Optuna dimension, repeatable: OPTION=LOW:HIGH (uniform; integers for "
                                    "integer options), OPTION=LOW:HIGH:log, or OPTION=V1,V2 (a choice).", panel=SWEEP)
    trials: int = option(20, "--search optuna: how many configurations to try (a re-run with more continues the "
                         "study).", panel=SWEEP, above=0)
    seeds: int = option(1, "Run every configuration with this many seeds (--seed, --seed+1, ...) and rank by the "
                        "mean; the spread is shown.", panel=SWEEP, above=0)
    prune: bool = option(True, "--search optuna: stop trials whose dev metric falls below the median of earlier "
                         "trials at the same evaluation (Optuna's MedianPruner).", panel=SWEEP)


@dataclass(frozen=True)
class SweepOptions(FinetuneOptions):
    """A sweep: many fine-tuning runs over a grid or an Optuna search, ranked by --metric-for-best (on tagged data:
    taggers, ranked by what the tags score: entity F1, or word accuracy for plain tags)."""

    HELP_OVERRIDES = {"keep_checkpoints": "Keep every trial's checkpoints/ and final/ (by default a finished trial "
                                          "keeps only its best/ model, so a large grid does not fill the disk)."}

    sweep: SearchOptions = group(SearchOptions)

    def problems(self) -> list[str]:
        """A fine-tuning run's problems; then (the values are checked through a trial's `FinetuneOptions`, built
        from valid options) the space's."""
        problems = super().problems()
        return problems or space_problems(self)

    @property
    def dimensions(self) -> list[Dimension]:
        """The parsed --grid (or --space) dimensions, in the order given."""
        return parse_space(self)


FINETUNE_FIELDS = {f.name: f for f in all_fields(FinetuneOptions)}


def finetune_config(cfg: SweepOptions, params: dict[str, Any], seed: int, out: str) -> FinetuneOptions:
    """The `FinetuneOptions` of one trial: the sweep's finetune options with `params`, `seed` and `out`."""
    values = {name: given for name, given in flat_values(cfg).items() if name in FINETUNE_FIELDS}
    return build(FinetuneOptions, {**values, **params, "seed": seed, "out": out, "overwrite": False})


def space_problems(cfg: SweepOptions) -> list[str]:
    """Every problem of --grid / --space / --search, each naming its flag."""
    problems: list[str] = []
    if cfg.sweep.search == "grid" and cfg.sweep.space:
        problems.append("--space is for --search optuna; a grid sweep takes --grid OPTION=V1,V2,... "
                        "Pass --search optuna, or turn each --space into a --grid.")
    if cfg.sweep.search == "optuna" and cfg.sweep.grid:
        problems.append("--grid is for --search grid; an Optuna search takes --space OPTION=LOW:HIGH[:log] or "
                        "OPTION=V1,V2. Drop --search optuna, or turn each --grid into a --space.")
    if cfg.sweep.search == "optuna" and not cfg.sweep.space:
        problems.append("--search optuna needs at least one --space, e.g. --space lr=1e-5:1e-4:log.")
    if problems:
        return problems
    try:
        parse_space(cfg)
    except UserError as exc:
        problems.append(str(exc))
    return problems


def parse_space(cfg: SweepOptions) -> list[Dimension]:
    """The dimensions of --grid (grid) or --space (optuna); a UserError listing every bad one."""
    texts, where = (cfg.sweep.grid, "--grid") if cfg.sweep.search == "grid" else (cfg.sweep.space, "--space")
    dims, problems, seen = [], [], set()
    for text in texts:
        try:
            dim = _parse_one(cfg, text, where)
        except UserError as exc:
            problems.append(str(exc))
            continue
        if dim.name in seen:
            problems.append(f"{where} {text!r}: {dim.flag} is given twice. Give each option once, with all its values.")
        seen.add(dim.name)
        dims.append(dim)
    raise_if_problems(problems, f"Invalid {where}")
    return dims


def _parse_one(cfg: SweepOptions, text: str, where: str) -> Dimension:
    key, sep, rest = text.partition("=")
    name = key.strip().lstrip("-").replace("-", "_")
    valid = ", ".join(sorted(flag(n)[2:] for n in FINETUNE_FIELDS if n not in NOT_SEARCHABLE | set(CHANGES_THE_RANKING)))
    if not sep or not rest.strip():
        raise UserError(f"{where} {text!r} is not OPTION=VALUES. Write it like {where} lr=5e-5,3e-5"
                        f"{':log' if where == '--space' else ''}.")
    if name not in FINETUNE_FIELDS or name in NOT_SEARCHABLE:
        raise UserError(f"{where} {text!r}: {key.strip()!r} is not an option a sweep can vary. Options: {valid}"
                        f" (seeds: --seed and --seeds).")
    if name in CHANGES_THE_RANKING:
        raise UserError(f"{where} {text!r}: {flag(name)} changes {CHANGES_THE_RANKING[name]}, so its trials would be "
                        f"ranked by numbers that mean different things. Give {flag(name)} once as an option of the "
                        f"sweep (every trial the same), or run one sweep per value.")
    if name in TAGGED_TRAINING_OPTIONS and cfg.reads_words:
        raise UserError(f"{where} {text!r}: {flag(name)} decides which tagged sentences and tags the trials read, and "
                        f"a tagger sweep reads its tagged --data and --dev once, before the trials. Give "
                        f"{flag(name)} once as an option of the sweep, or run one sweep per value.")
    base = _base(name)
    if base is tuple:
        raise UserError(f"{where} {text!r}: {flag(name)} is a list option; a sweep varies single values. "
                        f"Give it as a finetune option of the sweep instead.")
    if where == "--space" and ":" in rest:
        return _range(cfg, name, base, text, rest)
    values = tuple(_check(cfg, name, _typed(base, v.strip(), text, where), text, where) for v in rest.split(","))
    if len(set(values)) != len(values):
        raise UserError(f"{where} {text!r} repeats a value. Give each value once.")
    return Dimension(name, values=values)


def _range(cfg: SweepOptions, name: str, base: type, text: str, rest: str) -> Dimension:
    parts = [p.strip() for p in rest.split(":")]
    log = len(parts) == 3 and parts[2] == "log"
    if len(parts) not in (2, 3) or (len(parts) == 3 and not log) or base not in (int, float):
        raise UserError(f"--space {text!r}: a range is LOW:HIGH or LOW:HIGH:log of a numeric option. Write it like "
                        f"--space lr=1e-5:1e-4:log, or list values: --space {flag(name)[2:]}=A,B.")
    low, high = (_check(cfg, name, _typed(base, p, text, "--space"), text, "--space") for p in parts[:2])
    if not low < high or (log and low <= 0):
        raise UserError(f"--space {text!r}: LOW must be below HIGH{' and above 0 on a log scale' if log else ''}; "
                        f"got {low} and {high}. Swap or fix the bounds.")
    return Dimension(name, low=low, high=high, log=log, integer=base is int)


def _base(name: str) -> type:
    """The type a space's values of option `name` take: the option's, but numbers for --lr (a text option: a number
    or `auto`), so lr ranges and ordered grids work."""
    base, _ = field_type(FINETUNE_FIELDS[name])
    return float if name == "lr" else base


def _typed(base: type, value: str, text: str, where: str) -> Any:
    """A value of the space, as the option's type (what its flag would give)."""
    try:
        if base is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if base is float and value.lower() == AUTO:  # --lr auto: the value resolved for the model, as a grid value
            return AUTO
        return base(value)
    except ValueError:
        word = {int: "an integer", float: "a number", bool: "true or false"}.get(base, "a value")
        raise UserError(f"{where} {text!r}: {value!r} is not {word}. Fix the value.") from None


def _check(cfg: SweepOptions, name: str, value: Any, text: str, where: str) -> Any:
    """`value` if a trial's FinetuneOptions takes it and trains what the sweep's options do (a tagger on tagged
    data, else a classifier); else a UserError naming the flag and the finetune rule."""
    try:
        trial = finetune_config(cfg, {name: value}, cfg.inputs.seed, cfg.output.out or "out")
    except UserError as exc:
        raise UserError(f"{where} {text!r}: {flag(name)} {value!r} is refused by finetune: {exc}") from None
    if name in READS_WORDS_FROM and trial.reads_words != cfg.reads_words:
        kinds = ("a tagger (tagged data)", "a classifier (rows of text)")
        trained, swept = kinds if trial.reads_words else kinds[::-1]
        raise UserError(f"{where} {text!r}: with {flag(name)} {value!r} a trial would train {trained}, but the "
                        f"sweep's options train {swept}, and their dev scores cannot be ranked together. Run one "
                        f"sweep per kind of data.")
    return value
