"""The exact command line that reproduces a run: `bertkit <command>` with every option whose resolved value differs
from its default, shell-quoted. A recipe-driven run is expanded to flags (its values are in the resolved config),
so the line needs no recipe file to run."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from bertkit.config.fields import field_type, flag, option_fields
from bertkit.config.tracking import TRACKING_FIELDS

NOT_REPRODUCED = ("overwrite", *TRACKING_FIELDS)
"""Options that do not change what a run produces: --overwrite, and where the run was logged (--report-to, ...)."""


def command_line(command: str, cfg: Any, *, skip: tuple[str, ...] = NOT_REPRODUCED) -> str:
    """`bertkit <command> --flag value ...` for the options of `cfg` that are not at their defaults (`skip`: options
    that do not change what a run produces)."""
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
