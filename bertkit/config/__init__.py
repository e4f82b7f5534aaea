"""Options and configs: option fields (`fields`), the option groups several commands share (`groups`), one typed
config per command (`commands`), recipes (`recipes`) and `bench --quality-args` (`quality_args`).

`from bertkit.config import FinetuneConfig` (and every other name of those modules) keeps working for users'
scripts: the names resolve lazily, so importing `bertkit.config.fields` from a lower layer does not pull the
command configs (and everything they import) in with it."""

from __future__ import annotations

import importlib
from typing import Any

_SEARCHED = ("commands", "sweep", "registry", "groups", "quality_args", "recipes", "fields")
"""Where a name is looked up, in order (recipes' option_fields and quality_args' command_flags are the ones
`bertkit.config` always gave, not the fields' functions of the same names)."""


def __getattr__(name: str) -> Any:
    # importlib, not `from bertkit.config import commands`: that asks this __getattr__ for `commands` again while
    # it is not imported yet (endless recursion when `from bertkit.config import commands` comes first)
    if name in _SEARCHED:  # a submodule not imported yet: only it, not the others
        return importlib.import_module(f"bertkit.config.{name}")
    for module in _SEARCHED:
        found = importlib.import_module(f"bertkit.config.{module}")
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"module 'bertkit.config' has no attribute {name!r}")
