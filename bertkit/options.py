"""How an option is declared once and checked everywhere: the ground the option groups and command configs stand on.

An option is a field of a command's config dataclass, declared with `option(default, help, ...)`. The field is the
single definition: the CLI flag (`text_column` -> `--text-column`), its default, its help text and panel, its
choices and bounds all come from it. `cli/app.py` turns the fields into Typer options, `recipes.load_recipe` checks
recipe values against the same fields, and `field_problems` validates a built config the same way whether its
values came from the command line, a recipe, or Python code.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Iterator
from dataclasses import field, fields
from typing import Any

DATA, MODEL, RUN, OUTPUT, PROBE, BENCH, TRACKING = "Data", "Model", "Run", "Output", "Probe", "Benchmark", "Tracking"
"""Help panels (`bertkit COMMAND --help` groups options under these titles)."""
ADVANCED = "Advanced"
"""The panel of the options a config class lists in ADVANCED_OPTIONS: rarely changed, shown by --help-all only."""
PANEL_ORDER = (MODEL, DATA, RUN, PROBE, BENCH, TRACKING, OUTPUT, ADVANCED)
"""The order of the panels in --help (a panel not listed comes after Run)."""
LEADING = ("model", "data", "out")
"""Options listed first in their panel."""
SEED_MAX = 2**32 - 1
"""numpy's (and sklearn's random_state's) largest seed."""


def option(default: Any, help: str, *, panel: str = RUN, choices: tuple[str, ...] | None = None,
           minimum: float | None = None, above: float | None = None, aliases: tuple[str, ...] = (),
           short: str | None = None, numbers: bool = False) -> Any:
    """A config field that is a CLI option (and a recipe key).

    `numbers`: a text option whose values may also be numbers (a recipe's `threshold = 0.4` means "0.4").
    `choices`: the allowed values. `minimum`/`above`: inclusive/exclusive lower bound for numbers (None values
    pass: they mean "not set"). `aliases`: other accepted flags, e.g. an older name. `short`: a one-letter flag.
    """
    meta = {"help": help, "panel": panel, "choices": choices, "minimum": minimum, "above": above,
            "aliases": aliases, "short": short, "numbers": numbers}
    return field(default=default, metadata=meta)


def overwrite_option(holds: str, done: str = "is complete") -> Any:
    """--overwrite, worded once for every command: `holds` is what an --out of another run holds, `done` when the new
    output replaces it."""
    return option(False, f"Replace an --out that holds {holds} with other options (swapped in once the new one "
                         f"{done}).", panel=OUTPUT)


def flag(field_name: str) -> str:
    """The CLI flag for a config field: `text_column` -> `--text-column`."""
    return "--" + field_name.replace("_", "-")


def option_fields(config_cls: type) -> list[dataclasses.Field]:
    """The fields of `config_cls` that are options of its command (all but the class's NOT_OPTIONS)."""
    excluded = set(getattr(config_cls, "NOT_OPTIONS", ()))
    return [f for f in fields(config_cls) if f.name not in excluded]


def help_text(config_cls: type, f: dataclasses.Field) -> str:
    """The option's help: the field's, or the command's own wording of a shared option (HELP_OVERRIDES)."""
    text = getattr(config_cls, "HELP_OVERRIDES", {}).get(f.name, f.metadata.get("help", ""))
    choices = f.metadata.get("choices")
    return f"{text} One of: {', '.join(choices)}." if choices and "One of" not in text else text


def advanced_options(config_cls: type) -> frozenset[str]:
    """The options of `config_cls` shown only by --help-all: the ADVANCED_OPTIONS of every class it is made of (an
    option group names its own rarely changed options; a command's config may add more)."""
    names = {name for cls in config_cls.__mro__ for name in vars(cls).get("ADVANCED_OPTIONS", ())}
    return frozenset(names & {f.name for f in option_fields(config_cls)})


def required_options(config_cls: type) -> tuple[str, ...]:
    """The options the command cannot run without (REQUIRED_OPTIONS of the config or a group it is made of; its
    `__post_init__` refuses a config that lacks one). Options of which exactly one must be given are not listed."""
    return next((vars(cls)["REQUIRED_OPTIONS"] for cls in config_cls.__mro__ if "REQUIRED_OPTIONS" in vars(cls)), ())


def help_panel(config_cls: type, f: dataclasses.Field) -> str:
    """The --help panel of an option: ADVANCED for the command's advanced options, else its declared panel."""
    return ADVANCED if f.name in advanced_options(config_cls) else f.metadata.get("panel", RUN)


def help_order(config_cls: type) -> list[dataclasses.Field]:
    """The options of `config_cls` in --help order: by panel (`PANEL_ORDER`); in a panel --model, --data and --out
    first, then the command's own options (those of the class that declares its fields, e.g. predict's --probe),
    then those of the groups it is made of (--truncation), each as declared."""
    own_class = next((cls for cls in config_cls.__mro__ if vars(cls).get("__annotations__")), config_cls)
    own = set(vars(own_class).get("__annotations__", {}))

    def rank(item: tuple[int, dataclasses.Field]) -> tuple[float, bool, bool, int]:
        index, f = item
        panel = help_panel(config_cls, f)
        order = PANEL_ORDER.index(panel) if panel in PANEL_ORDER else PANEL_ORDER.index(RUN) + 0.5
        return order, f.name not in LEADING, f.name not in own, index

    return [f for _, f in sorted(enumerate(option_fields(config_cls)), key=rank)]


def flag_names(f: dataclasses.Field) -> list[str]:
    """Every flag of an option: the main one, its aliases and its short form."""
    names = [flag(f.name), *f.metadata.get("aliases", ())]
    return names + ([f.metadata["short"]] if f.metadata.get("short") else [])


def alias_map(config_cls: type) -> dict[str, str]:
    """Alias flag names (without dashes, as recipe keys) -> field names, e.g. `dtype` -> `precision`."""
    return {alias.lstrip("-").replace("-", "_"): f.name for f in option_fields(config_cls)
            for alias in f.metadata.get("aliases", ())}


# ---------------------------------------------------------------- types


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", tuple: "a list of strings"}
_EXAMPLES = {bool: "true", int: "3", float: "0.5", str: '"text"', tuple: '["first", "second"]'}


def field_type(f: dataclasses.Field) -> tuple[type, bool]:
    """(base type, None allowed) of a config field typed str, int, float, bool or tuple[str, ...] (or `X | None`)."""
    annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    parts = [part.strip() for part in str(annotation).split("|")]
    optional = "None" in parts
    names = [part for part in parts if part != "None"]
    bases = {"str": str, "int": int, "float": float, "bool": bool}
    if len(names) == 1 and names[0] in bases:
        return bases[names[0]], optional
    if len(names) == 1 and names[0].replace(" ", "") == "tuple[str,...]":
        return tuple, optional
    raise TypeError(f"config field {f.name} has a type check_value does not know: {annotation}")


def _kind_of(value: Any) -> str:
    words = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a table"}
    return next((word for kind, word in words.items() if type(value) is kind), type(value).__name__)


def check_value(f: dataclasses.Field, value: Any) -> Any:
    """`value` for config field `f`, converted where lossless (int -> float, int -> str, one string -> a 1-tuple).

    Raises TypeError whose message says what the field takes and what it got (the caller names the key or flag).
    ints are accepted for float fields (and for str fields: a column index); bools are never ints.
    """
    base, optional = field_type(f)
    if value is None and optional:
        return None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if base is bool and isinstance(value, bool):
        return value
    if base is int and is_int:
        return value
    if base is float and (is_int or isinstance(value, float)):
        return float(value)
    if base is str and (isinstance(value, str) or is_int):
        return str(value)
    if base is str and isinstance(value, float) and f.metadata.get("numbers"):
        return repr(value)
    if base is tuple:
        items = [value] if isinstance(value, str) else value
        if isinstance(items, (list, tuple)) and all(isinstance(item, str) for item in items):
            return tuple(items)
    default = f.default if f.default not in (None, dataclasses.MISSING, ()) else None
    example = repr(default).lower() if isinstance(default, bool) else (
        f'"{default}"' if isinstance(default, str) else str(default) if default is not None else _EXAMPLES[base])
    raise TypeError(f"must be {_TYPE_WORDS[base]} (e.g. {example}), not {value!r} ({_kind_of(value)})")


# ---------------------------------------------------------------- validation from the declarations


def field_problems(config: Any) -> list[str]:
    """Every problem the option declarations alone can find: types, finite numbers, choices, bounds, seed range.

    Values are normalised in place where `check_value` converts them (a list of texts -> a tuple, 3 -> 3.0),
    so a config built from Python code gets exactly what the CLI and recipes get.
    """
    problems = []
    for f in fields(config):
        value = getattr(config, f.name)
        try:
            value = check_value(f, value)
        except TypeError as exc:
            problems.append(f"{flag(f.name)} {exc}.")
            continue
        object.__setattr__(config, f.name, value)
        problems += _value_problems(f, value)
    seed = getattr(config, "seed", 0)
    if isinstance(seed, int) and not 0 <= seed <= SEED_MAX:
        problems.append(f"--seed must be between 0 and {SEED_MAX} (the seeds numpy accepts); got {seed}. "
                        f"Pass e.g. --seed 42.")
    return problems


def _value_problems(f: dataclasses.Field, value: Any) -> Iterator[str]:
    name, meta = flag(f.name), f.metadata
    if isinstance(value, float) and not math.isfinite(value):
        example = f.default if isinstance(f.default, float) else 1.0
        yield f"{name} must be a finite number; got {value}. Pass a real number (e.g. {name} {example})."
        return
    choices = meta.get("choices")
    if choices and value is not None and value not in choices:
        yield f"{name} must be one of {', '.join(choices)}; got {value!r}."
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if meta.get("above") is not None and not value > meta["above"]:
        yield (f"{name} must be a positive number, got {value!r}." if meta["above"] == 0
               else f"{name} must be more than {meta['above']}; got {value!r}.")
    if meta.get("minimum") is not None and value < meta["minimum"]:
        yield f"{name} must be at least {meta['minimum']:g}; got {value!r}."


def flag_fields(config_cls: type) -> dict[str, tuple[dataclasses.Field, bool]]:
    """Every flag of the command configured by `config_cls` -> (its field, the value a bare bool flag sets).

    A bool option that defaults to true also has --no-NAME (which sets False).
    """
    by_flag: dict[str, tuple[dataclasses.Field, bool]] = {}
    for f in option_fields(config_cls):
        for name in flag_names(f):
            by_flag[name] = (f, True)
        if field_type(f)[0] is bool and f.default is True:
            by_flag["--no-" + flag(f.name)[2:]] = (f, False)
    return by_flag


def command_flags(config_cls: type, cli_only: dict[str, bool]) -> dict[str, bool]:
    """Every flag of the command configured by `config_cls` -> whether it takes a value (a bool option's flags take
    none); `cli_only` adds the flags that are not config fields."""
    return {**cli_only, **{name: field_type(f)[0] is not bool for name, (f, _) in flag_fields(config_cls).items()}}


# ---------------------------------------------------------------- a config as a record and as a command line


def config_dict(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict (for config.json in a run directory)."""
    return dataclasses.asdict(config)


def command_line(command: str, cfg: Any, *, skip: tuple[str, ...] | frozenset[str] = ()) -> str:
    """`bertkit <command> --flag value ...` for the options of `cfg` that are not at their defaults (`skip`: options
    that do not change what a run produces). A recipe-driven run is expanded to flags (its values are in the
    resolved config), so the line needs no recipe file to run."""
    words = ["bertkit", command]
    for f in option_fields(type(cfg)):
        value = getattr(cfg, f.name)
        if f.name in skip or value == f.default:
            continue
        words += _flag_words(f, value)
    return " ".join(shlex.quote(w) for w in words)


def _flag_words(f: dataclasses.Field, value: Any) -> list[str]:
    base, _ = field_type(f)
    name = flag(f.name)
    if base is bool:
        return [name] if value else [f"--no-{name[2:]}"]
    if base is tuple:
        return [word for item in value for word in (name, str(item))]
    if value is None:  # an option whose default is set, given as unset: only a recipe/API can say that
        return []
    return [name, repr(value) if isinstance(value, float) else str(value)]
