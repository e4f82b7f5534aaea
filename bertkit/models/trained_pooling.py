"""The pooling a model was trained with, as its sentence-transformers folder records it (`modules.json` naming a
Pooling module, usually `1_Pooling/config.json`): what `probe` adds to `[CLS]` by default. Plain file reads,
without torch or transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.models.folders import OFFLINE_NAME, offline_model_dir

POOLING_MODES = (("pooling_mode_mean_tokens", "mean"), ("pooling_mode_cls_token", "cls"),
                 ("pooling_mode_max_tokens", "max"))
"""sentence-transformers Pooling config keys and the bertkit pooling each one is (in this order of preference)."""
POOLING_TYPE = "sentence_transformers.models.Pooling"


def trained_pooling(name: str) -> tuple[str, str] | None:
    """(pool, the file that says so) for a local sentence-transformers folder whose Pooling module uses mean, cls or
    max pooling; None for any other model (a plain transformers folder, a hub id, an unreadable or other pooling)."""
    folder = offline_model_dir() if name == OFFLINE_NAME else Path(name).expanduser()
    if not folder.is_dir():
        return None
    config = _pooling_config_path(folder)
    if config is None:
        return None
    record = _read_json(config)
    modes = [pool for key, pool in POOLING_MODES if isinstance(record, dict) and record.get(key) is True]
    return (modes[0], str(config.relative_to(folder))) if modes else None


def _pooling_config_path(folder: Path) -> Path | None:
    """The Pooling module's config.json that modules.json names (else the usual 1_Pooling/config.json)."""
    modules = _read_json(folder / "modules.json")
    if isinstance(modules, list):
        for module in modules:
            if isinstance(module, dict) and module.get("type") == POOLING_TYPE and isinstance(module.get("path"), str):
                path = folder / module["path"] / "config.json"
                return path if path.is_file() else None
    path = folder / "1_Pooling" / "config.json"
    return path if path.is_file() else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
