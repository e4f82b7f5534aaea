"""`bench --quality`: each model scored by the probe or finetune command's own `run`, in this process, with the
same data settings for every model. The bench command hands in the commands' configs and runs (from the command
table, `bertkit.commands.registry`): what is measured here is the plan, the arguments and the score, not the
commands themselves, so no command module imports another.

`--quality-args` (flags for the quality commands given as one string) is read with the quality command's option
declarations (the config fields its CLI flags come from): one reader (`read_quality_args`) walks the arguments,
building a BenchConfig reports what it finds wrong (`quality_args_problems`), and the bench turns the same reading
into the quality command's config values (`parse_quality_args`), typed as the CLI types them, after those of a
`--recipe` given there. Each command's config is built - and so validated - before any benchmark runs. The score is the command's primary dev metric: the probe's best cell's dev accuracy (the metric its layer
sweep picks the best cell by), fine-tuning's --metric-for-best at its best evaluation. On tagged data (bench
benchmarks taggers) the commands read the same corpus as tagged (`--task tags` and bench's --tag-scheme): fine-tuning
trains a tagger, scored by its dev entity F1 (word accuracy for plain tags), the probe its word probes.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.options import DataOptions
from bertkit.errors import UserError
from bertkit.options import build, field_type, flag, flag_fields, replaced, value
from bertkit.options import command_flags as _command_flags
from bertkit.recipes import load_recipe

log = logging.getLogger(__name__)

QUALITY_COMMANDS = ("probe", "finetune")
"""The commands `bench --quality` runs for each model, in the report's order."""
PROBE_METRIC = "accuracy"
"""The dev metric the probe's layer sweep picks its best cell by."""
SHARED_FIELDS = (*(f.name for f in dataclasses.fields(DataOptions)), "max_length")
"""bench options every quality run gets from bench itself: the data settings and the truncation length."""
EACH_MODEL = "(set for each model)"
"""--model and --out of the plan's config: replaced per model by `measure_quality`."""


@dataclass(frozen=True)
class QualityPlan:
    """One --quality command: its validated config (model and out set per model) and the --quality-args given."""

    kind: str
    config: Any
    extra: tuple[str, ...] = ()
    reading: tuple[tuple[str, Any], ...] = ()
    """The options the run reads the data with as bench's problem family does (`plan_quality`'s `reading`)."""


def plan_quality(cfg: Any, configs: dict[str, type], reading: dict[str, Any] | None = None) -> list[QualityPlan]:
    """The --quality commands of a BenchConfig (`configs`: command -> its config class), their configs built (so
    every value checked) before benchmarking. `reading`: the options every quality run gets so that it reads the
    data as bench's problem family does (tagged data: `--task tags` and bench's --tag-scheme)."""
    extra = tuple(shlex.split(cfg.quality_args or ""))
    return [QualityPlan(kind, quality_config(kind, configs[kind], cfg, extra, reading or {}), extra,
                        tuple((reading or {}).items())) for kind in cfg.quality_kinds]


def quality_config(kind: str, config_cls: type, cfg: Any, extra: tuple[str, ...],
                   reading: dict[str, Any] | None = None) -> Any:
    """`kind`'s config (of class `config_cls`): a --recipe in --quality-args < bench's data settings (and `reading`,
    the family's) < the other --quality-args."""
    recipe, values = parse_quality_args(kind, config_cls, extra)
    # unset (None) bench options leave a recipe's value alone, as omitted flags did on the command line
    shared = {name: value(cfg, name) for name in SHARED_FIELDS if value(cfg, name) is not None}
    shared.update(reading or {})
    try:
        config = build(config_cls, {**recipe, **shared, "model": EACH_MODEL, "out": EACH_MODEL, **values})
    except UserError as exc:
        raise UserError(f"--quality {kind} with --quality-args {cfg.quality_args!r}: {exc}") from None
    if kind == "finetune" and value(config, "metric_for_best") == "loss":
        raise UserError("--quality-args --metric-for-best loss: the quality score is compared as a share of the "
                        "baseline's (higher is better), which a loss is not. Pick accuracy, f1 or mcc.")
    return config


# ---------------------------------------------------------------- running


def measure_quality(plan: QualityPlan, models: dict[str, str], out_dir: Path,
                    run: Callable[[Any], Any]) -> dict[str, dict[str, Any]]:
    """Run `plan`'s command (`run`: its config -> its result) for each model (label -> hub id or folder); model i
    writes into `out_dir/<kind>-<i>`.

    A model whose run fails gets status "failed" and the message; the other models and the benchmark go on.
    """
    out = {}
    for i, (label, source) in enumerate(models.items()):
        config = replaced(plan.config, model=source, out=str(out_dir / f"{plan.kind}-{i}"))
        record: dict[str, Any] = {"command": command_line(plan, config)}
        log.info("quality (%s): %s", plan.kind, record["command"])
        try:
            metric, score = SCORES[plan.kind](run(config))
        except UserError as exc:
            out[label] = {**record, "status": "failed", "message": str(exc)[:500]}
            continue
        except Exception as exc:  # a crash in one model's run must not lose the benchmark already measured
            log.exception("quality (%s) of %s failed", plan.kind, label)
            out[label] = {**record, "status": "failed", "message": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        out[label] = {**record, "status": "ok", "metric": metric, "score": score}
    return out


def command_line(plan: QualityPlan, config: Any) -> str:
    """The `bertkit <kind> ...` command that runs the same as this in-process run (for the report)."""
    args = ["bertkit", plan.kind, "--model", config.model]
    for name in SHARED_FIELDS:
        given = value(config, name)
        if given is not None:
            args += [flag(name), str(given)]
    args += [part for name, given in plan.reading if name not in SHARED_FIELDS for part in (flag(name), str(given))]
    return shlex.join([*args, "--out", value(config, "out"), *plan.extra])


def probe_score(result: Any) -> tuple[str, float]:
    """`bertkit probe`'s best cell (of its ProbeResult): (where in its results, dev accuracy; tagged data: the one
    dev score of its best word probe, entity F1 or word accuracy)."""
    dev = result.best.dev
    name = PROBE_METRIC if PROBE_METRIC in dev else next(iter(dev))
    return f"best.dev.{name}", float(dev[name])


def finetune_score(result: Any) -> tuple[str, float]:
    """`bertkit finetune`'s best evaluation (of its FinetuneResult's summary): (where in its metrics, its
    --metric-for-best value)."""
    summary = result.summary
    name = summary.best_metric_name
    return f"best_dev.{name}", float(summary.best_dev.value(name))


SCORES = {"probe": probe_score, "finetune": finetune_score}
"""Each quality command's result -> (where its score is, the score)."""


# ---------------------------------------------------------------- --quality-args


CLI_ONLY_FLAGS = {"--quiet": False, "-q": False, "--json": False, "--recipe": True, "--help-all": False}
"""Options every command has that are not config fields -> whether they take a value."""
SET_BY_BENCH = ("--model", "--out", "--features", "--data", "--dev", "--test")
"""Quality-command options `bertkit bench` sets itself, per model (a --quality-args copy would override them)."""


def command_flags(config_cls: type) -> dict[str, bool]:
    """Every option of the command configured by `config_cls` -> whether it takes a value (tests check this
    against the real Typer command)."""
    return _command_flags(config_cls, CLI_ONLY_FLAGS)


@dataclass(frozen=True)
class QualityArg:
    """One option read from --quality-args."""

    name: str
    """The flag as given (an alias or short form included), without an inline `=value`."""
    field: dataclasses.Field | None
    """The config field it sets; None for a flag every command has (CLI_ONLY_FLAGS)."""
    value: str | bool | None
    """A bool option: the value its flag sets; else the text given (None: missing)."""


def quality_args_problems(configs: dict[str, type], kinds: list[str], quality_args: str | None) -> list[str]:
    """Problems of `bench --quality-args` for the quality commands `kinds` (those of `configs`: name -> config
    class), found before any benchmark runs."""
    kinds = [kind for kind in kinds if kind in configs]
    if quality_args is None:
        return []
    if not kinds:
        return ["--quality-args is passed to the --quality commands, but --quality is none, so it would be ignored. "
                "Add --quality probe (or finetune), or drop --quality-args."]
    try:
        args = shlex.split(quality_args)
    except ValueError as exc:
        return [f"--quality-args {quality_args!r} cannot be split into arguments ({exc}). Balance the quotes, e.g. "
                f"--quality-args \"--epochs 1 --lr 3e-5\"."]
    problems: list[str] = []
    for kind in kinds:
        problems += read_quality_args(kind, configs[kind], args)[1]
    return problems


def read_quality_args(kind: str, config_cls: type, args: Sequence[str]) -> tuple[list[QualityArg], list[str]]:
    """(the options read, the problems found) of --quality-args for `bertkit <kind>`, configured by `config_cls`."""
    options, by_flag = command_flags(config_cls), flag_fields(config_cls)
    read: list[QualityArg] = []
    problems, unknown, i = [], [], 0
    while i < len(args):
        token = args[i]
        name, has_inline, inline = token.partition("=")
        if name not in options:
            close = difflib.get_close_matches(name, options, n=1)
            unknown.append(f"{token!r}" + (f" (did you mean {close[0]}?)" if close else ""))
            if token.startswith("-") and not has_inline and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1  # an unknown option's value is not a second problem
        elif name in SET_BY_BENCH:
            problems.append(f"--quality-args: {name} is set by `bertkit bench` itself for each model; pass the "
                            f"data options to bench directly and drop {name} from --quality-args.")
        elif options[name] and not has_inline:
            if i + 1 >= len(args):
                problems.append(f"--quality-args: {name} needs a value (e.g. {name} 1).")
            read.append(QualityArg(name, by_flag.get(name, (None,))[0], args[i + 1] if i + 1 < len(args) else None))
            i += 1
        else:
            field, flag_value = by_flag.get(name, (None, True))
            read.append(QualityArg(name, field, inline if options[name] else flag_value))
        i += 1
    if unknown:
        listed = ", ".join(sorted(o for o in options if o.startswith("--")))
        problems.insert(0, f"--quality-args: `bertkit {kind}` has no option {', '.join(unknown)} (the arguments go "
                           f"to every --quality command). Its options: {listed}.")
    return read, problems


def parse_quality_args(kind: str, config_cls: type, args: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(recipe values, flag values) of --quality-args for `bertkit <kind>`, typed by its option fields.

    The arguments were already checked when the BenchConfig was built (`quality_args_problems`); a value that is
    not of its field's type is refused here, naming the flag.
    """
    read, problems = read_quality_args(kind, config_cls, args)
    if problems:
        raise UserError(problems[0])
    recipe: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for arg in read:
        if arg.name == "--recipe":
            recipe = load_recipe(str(arg.value), kind, config_cls)
        elif arg.field is not None:  # the other flags every command has only change what it prints
            base = field_type(arg.field)[0]
            typed = arg.value if base is bool else _typed(base, str(arg.value), arg.name)
            values[arg.field.name] = (*values.get(arg.field.name, ()), typed) if base is tuple else typed
    return recipe, values


def _typed(base: type, raw: str, name: str) -> Any:
    """`raw` as the field's type, like the CLI converts it."""
    if base in (int, float):
        try:
            return base(raw)
        except ValueError:
            word = "an integer" if base is int else "a number"
            raise UserError(f"--quality-args: {name} takes {word}; got {raw!r}.") from None
    return raw
