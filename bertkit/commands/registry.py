"""Which command is which module and takes which config: the one table the CLI, `--recipe`, `recipes show` and the
config tests read."""

from __future__ import annotations

import importlib
from types import ModuleType

from bertkit.errors import UserError

COMMANDS: dict[str, str] = {
    "tokens": "TokensConfig", "embed": "EmbedConfig", "probe": "ProbeConfig", "finetune": "FinetuneConfig",
    "distill": "DistillConfig", "sweep": "SweepConfig", "predict": "PredictConfig", "evaluate": "EvaluateConfig",
    "export": "ExportConfig", "push": "PushConfig", "bench": "BenchConfig",
}
"""Command name -> its config class's name in `bertkit.commands.<name>`."""


def command_module(command: str) -> ModuleType:
    """`bertkit.commands.<command>` (a light import: configs and results, the library loads when it runs)."""
    if command not in COMMANDS:
        raise UserError(f"No command named {command!r} takes recipes. Commands: {', '.join(recipe_commands())}.")
    return importlib.import_module(f"bertkit.commands.{command}")


def config_for_command(command: str) -> type:
    """The config class of a command (`finetune` -> `FinetuneConfig`)."""
    return getattr(command_module(command), COMMANDS[command])


def recipe_commands() -> list[str]:
    """Commands that have a config class (and therefore accept --recipe)."""
    return sorted(COMMANDS)
