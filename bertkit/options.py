"""How an option is declared once and checked everywhere: the ground the option groups and command configs stand on.

An option is a field of an option group (a small frozen dataclass declared beside the settings object it builds:
`DataOptions` in `data/`, `ReadingOptions` beside `Reading`, `TrainingOptions` in `training/`) or of a command's
config itself, declared with `option(default, help, ...)`. The field is the single definition: the CLI flag
(`text_column` -> `--text-column`), its default, its help text and panel, its choices and bounds all come from it.

A command's config (a `Config`) is a few nested groups (`group(DataOptions)`: read as `cfg.inputs.text_column`) and
the command's own options. Flags, recipe keys and config.json stay flat (`--text-column`, `text_column = ...`): an
option's name is unique in its command, so `build` puts a flat value into its group and `flat_values` reads it back.
`cli/app.py` turns the options into Typer options, `recipes.load_recipe` checks recipe values against the same
fields, and `field_problems` validates a built config the same way whether its values came from the command line, a
recipe, or Python code.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import field, fields
from typing import Any, ClassVar

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
           short: str | None = None, numbers: bool = False, families: tuple[str, ...] = ()) -> Any:
    """A config field that is a CLI option (and a recipe key).

    `numbers`: a text option whose values may also be numbers (a recipe's `threshold = 0.4` means "0.4").
    `choices`: the allowed values. `minimum`/`above`: inclusive/exclusive lower bound for numbers (None values
    pass: they mean "not set"). `aliases`: other accepted flags, e.g. an older name. `short`: a one-letter flag.
    `families`: the problem families (`bertkit.families`: sentences, words, spans) whose data the option means
    something for; empty: every family. Given for another family's data, the family refuses it, naming it.
    """
    meta = {"help": help, "panel": panel, "choices": choices, "minimum": minimum, "above": above,
            "aliases": aliases, "short": short, "numbers": numbers, "families": families}
    return field(default=default, metadata=meta)


def overwrite_option(holds: str, done: str = "is complete") -> Any:
    """--overwrite, worded once for every command: `holds` is what an --out of another run holds, `done` when the new
    output replaces it."""
    return option(False, f"Replace an --out that holds {holds} with other options (swapped in once the new one "
                         f"{done}).", panel=OUTPUT)


def flag(field_name: str) -> str:
    """The CLI flag for a config field: `text_column` -> `--text-column`."""
    return "--" + field_name.replace("_", "-")


# ---------------------------------------------------------------- option groups nested in a config


def group(group_cls: type) -> Any:
    """A config field holding an option group (`inputs: DataOptions = group(DataOptions)`): the group's options are
    the command's flags, flat (--text-column, not --inputs-text-column), read as `cfg.inputs.text_column`."""
    return field(default_factory=group_cls, metadata={"group": group_cls})


def group_class(f: dataclasses.Field) -> type | None:
    """The option group a config field holds (`group`), or None for an option."""
    return f.metadata.get("group")


def all_fields(config_cls: type) -> list[dataclasses.Field]:
    """Every option field of `config_cls`, its groups' flattened in declaration order (NOT_OPTIONS included)."""
    found: list[dataclasses.Field] = []
    for f in fields(config_cls):
        inner = group_class(f)
        found += fields(inner) if inner is not None else [f]
    return found


@functools.cache  # a class's layout never changes; every option lookup of a config asks it
def group_names(config_cls: type) -> dict[str, str | None]:
    """Each option of `config_cls` -> the config field of the group holding it (None: the config's own). A group's
    own class answers too: its options, each its own."""
    names: dict[str, str | None] = {}
    for f in fields(config_cls):
        inner = group_class(f)
        names.update({g.name: f.name for g in fields(inner)} if inner is not None else {f.name: None})
    clash = {f.name for f in fields(config_cls) if group_class(f) is not None} & set(names)
    if clash:  # `cfg.search` would be the group, never the option: a group is named apart from every option
        raise TypeError(f"{config_cls.__name__}: the group {', '.join(sorted(clash))} is named as an option")
    return names


def holder(config: Any, name: str) -> Any:
    """The object holding option `name` of `config`: the config, or the group it is in."""
    names = group_names(type(config))
    if name not in names:
        raise AttributeError(f"{type(config).__name__} has no option {name!r}")
    return config if names[name] is None else getattr(config, names[name])


def value(config: Any, name: str, default: Any = dataclasses.MISSING) -> Any:
    """Option `name` of `config`, wherever it is (`default`, if given, for a config without it)."""
    try:
        return getattr(holder(config, name), name)
    except AttributeError:
        if default is dataclasses.MISSING:
            raise
        return default


def is_given(config: Any, name: str) -> bool:
    """Whether option `name` of `config` differs from its default (an empty list or text given for an empty or
    unset default is not given)."""
    default = next(f.default for f in all_fields(type(config)) if f.name == name)
    given = value(config, name)
    return given != default and bool(given or default)


def given_options(config: Any) -> list[str]:
    """The options of `config` (its command's: NOT_OPTIONS left out) that differ from their defaults (`is_given`)."""
    return [f.name for f in option_fields(type(config)) if is_given(config, f.name)]


def set_value(config: Any, name: str, new: Any) -> None:
    """Set option `name` of a frozen config in place: only while it is being built (`__post_init__`'s own
    normalisation, a --task-preset filling unset options)."""
    object.__setattr__(holder(config, name), name, new)


def flat_values(config: Any) -> dict[str, Any]:
    """Every option of `config` -> its value, flat (config.json's keys, a recipe's, the resume key's)."""
    return {f.name: value(config, f.name) for f in all_fields(type(config))}


def family_values(config: Any, family: str) -> dict[str, Any]:
    """The options of `config` a problem family reads, flat: those declared for other families
    (`option(families=...)`) left out."""
    return {f.name: value(config, f.name) for f in all_fields(type(config))
            if not f.metadata.get("families") or family in f.metadata["families"]}


def build(config_cls: type, values: Mapping[str, Any]) -> Any:
    """`config_cls` from flat option values (the CLI's, a recipe's, config.json's): each value goes into the group
    that holds it; an option not given keeps its default. An unknown name is a TypeError, as for a dataclass."""
    where = group_names(config_cls)
    unknown = sorted(set(values) - set(where))
    if unknown:
        raise TypeError(f"{config_cls.__name__} has no option {', '.join(map(repr, unknown))}")
    kwargs: dict[str, Any] = {}
    for f in fields(config_cls):
        inner = group_class(f)
        if inner is not None:
            kwargs[f.name] = inner(**{g.name: values[g.name] for g in fields(inner) if g.name in values})
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return config_cls(**kwargs)


def replaced(config: Any, **changes: Any) -> Any:
    """A copy of `config` with `changes` (flat option names), checked again as a new config is."""
    return build(type(config), {**flat_values(config), **changes})


class Config:
    """A command's config: its option groups (`group`) and its own options. `of(**flat)` builds one from flat option
    values, as the CLI and recipes do."""

    NOT_OPTIONS: ClassVar[tuple[str, ...]] = ()
    """Options of its groups that are not the command's (no flag, no recipe key): they keep their defaults."""

    @classmethod
    def of(cls, **values: Any) -> Any:
        """The config for flat option values (`FinetuneConfig.of(data="train.csv", out="runs/a", epochs=1)`)."""
        return build(cls, values)


def option_fields(config_cls: type) -> list[dataclasses.Field]:
    """The fields of `config_cls` that are options of its command, its groups' included (all but the class's
    NOT_OPTIONS)."""
    excluded = set(getattr(config_cls, "NOT_OPTIONS", ()))
    return [f for f in all_fields(config_cls) if f.name not in excluded]


def help_text(config_cls: type, f: dataclasses.Field) -> str:
    """The option's help: the field's, or the command's own wording of a shared option (HELP_OVERRIDES)."""
    text = getattr(config_cls, "HELP_OVERRIDES", {}).get(f.name, f.metadata.get("help", ""))
    choices = f.metadata.get("choices")
    return f"{text} One of: {', '.join(choices)}." if choices and "One of" not in text else text


def _made_of(config_cls: type) -> list[type]:
    """The classes `config_cls` is made of: its own (and those it extends), then its groups' (and theirs)."""
    groups = [inner for f in fields(config_cls) if (inner := group_class(f)) is not None]
    return [cls for owner in (config_cls, *groups) for cls in owner.__mro__]


def advanced_options(config_cls: type) -> frozenset[str]:
    """The options of `config_cls` shown only by --help-all: the ADVANCED_OPTIONS of the config and of every group
    it holds (a group names its own rarely changed options; a command's config may add more)."""
    names = {name for cls in _made_of(config_cls) for name in vars(cls).get("ADVANCED_OPTIONS", ())}
    return frozenset(names & {f.name for f in option_fields(config_cls)})


def required_options(config_cls: type) -> tuple[str, ...]:
    """The options the command cannot run without (the config's REQUIRED_OPTIONS; its `__post_init__` refuses a
    config that lacks one). Options of which exactly one must be given are not listed."""
    return next((vars(cls)["REQUIRED_OPTIONS"] for cls in config_cls.__mro__ if "REQUIRED_OPTIONS" in vars(cls)), ())


def help_panel(config_cls: type, f: dataclasses.Field) -> str:
    """The --help panel of an option: ADVANCED for the command's advanced options, else its declared panel."""
    return ADVANCED if f.name in advanced_options(config_cls) else f.metadata.get("panel", RUN)


def help_order(config_cls: type) -> list[dataclasses.Field]:
    """The options of `config_cls` in --help order: by panel (`PANEL_ORDER`); in a panel --model, --data and --out
    first, then the command's own options (the config's, e.g. predict's --probe), then those of its groups
    (--truncation), each as declared."""
    own = {name for name, where in group_names(config_cls).items() if where is None}

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
    for f in all_fields(type(config)):
        given = value(config, f.name)
        if given is None and f.default == () and field_type(f)[0] is tuple:  # a repeatable option not given (CLI)
            given = ()
        try:
            given = check_value(f, given)
        except TypeError as exc:
            problems.append(f"{flag(f.name)} {exc}.")
            continue
        set_value(config, f.name, given)
        problems += _value_problems(f, given)
    seed = value(config, "seed", 0)
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
    """The resolved config as a plain dict of its options, flat (config.json in a run directory: the keys are the
    option names, as a recipe's, so older runs' records read the same)."""
    return flat_values(config)


def command_line(command: str, cfg: Any, *, skip: tuple[str, ...] | frozenset[str] = ()) -> str:
    """`bertkit <command> --flag value ...` for the options of `cfg` that are not at their defaults (`skip`: options
    that do not change what a run produces). A recipe-driven run is expanded to flags (its values are in the
    resolved config), so the line needs no recipe file to run."""
    words = ["bertkit", command]
    for f in option_fields(type(cfg)):
        given = value(cfg, f.name)
        if f.name in skip or given == f.default:
            continue
        words += _flag_words(f, given)
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
