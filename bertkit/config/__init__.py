"""Options and configs: option fields (`fields`), one typed config per command (`commands`), recipes.

`from bertkit.config import FinetuneConfig` (and every other config class or helper of `commands`) keeps working
for users' scripts: the names resolve lazily, so importing `bertkit.config.fields` from a lower layer does not
pull the command configs (and everything they import) in with it."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # importlib, not `from bertkit.config import commands`: that asks this __getattr__ for `commands` again while
    # it is not imported yet (endless recursion when `from bertkit.config import commands` comes first)
    commands = importlib.import_module("bertkit.config.commands")
    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'bertkit.config' has no attribute {name!r}") from None
