"""Which command takes which config class: the one list `--recipe`, `recipes show` and the config tests read.

A command's config may live in its own module (a new command need not grow `commands`); register it here."""

from __future__ import annotations

import dataclasses

from bertkit.config import commands, sweep
from bertkit.config.export import ExportConfig
from bertkit.config.push import PushConfig
from bertkit.errors import UserError

COMMAND_CONFIGS: dict[str, type] = {
    name[: -len("Config")].lower(): value
    for name, value in vars(commands).items()
    if name.endswith("Config") and dataclasses.is_dataclass(value) and value.__module__ == commands.__name__
} | {"export": ExportConfig, "sweep": sweep.SweepConfig, "push": PushConfig}
"""Command name -> config class (`finetune` -> `FinetuneConfig`)."""


def config_for_command(command: str) -> type:
    """The config class of a command (`finetune` -> `FinetuneConfig`)."""
    cls = COMMAND_CONFIGS.get(command)
    if cls is None:
        raise UserError(f"No command named {command!r} takes recipes. Commands: {', '.join(recipe_commands())}.")
    return cls


def recipe_commands() -> list[str]:
    """Commands that have a config class (and therefore accept --recipe)."""
    return sorted(COMMAND_CONFIGS)
