"""`bench --quality-args`: flags for the quality commands (probe, finetune) given as one string, read with the
command's own option declarations (the config fields its CLI flags come from).

One reader (`read_quality_args`) walks the arguments. Building a BenchConfig reports what it finds wrong
(`quality_args_problems`), before any benchmark runs; the bench turns the same reading into the quality command's
config values (`parse_quality_args`), typed as the CLI types them, after those of a `--recipe` given there.
"""

from __future__ import annotations

import dataclasses
import difflib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bertkit.config.fields import command_flags as _command_flags
from bertkit.config.fields import field_type, flag_fields
from bertkit.config.recipes import load_recipe
from bertkit.errors import UserError

CLI_ONLY_FLAGS = {"--quiet": False, "-q": False, "--json": False, "--recipe": True}
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
