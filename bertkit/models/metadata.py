"""The saved-model metadata file, `bertkit_model.json`: what a fine-tuned folder (best/, final/) needs besides its
weights (the step it was saved at; for tags and numbers the task; for tags the decision threshold). Written by
training's model saves and read by predict/evaluate, both through here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.io import atomic
from bertkit.models import loading as modeling

MODEL_INFO = "bertkit_model.json"


def write_model_info(folder: str | Path, info: dict[str, Any]) -> None:
    """`info` as the folder's bertkit_model.json (written atomically)."""
    atomic.write_json_atomic(Path(folder) / MODEL_INFO, info)


def read_model_info(folder: str | Path) -> dict[str, Any]:
    """The folder's bertkit_model.json; {} for a folder bertkit did not write (no such file, or not a JSON object)."""
    try:
        info = json.loads((Path(folder) / MODEL_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def saved_threshold(model_dir: str) -> float | list[float]:
    """The multi-label decision threshold saved with a fine-tuned folder (bertkit_model.json), else 0.5 (what a
    sigmoid head means without one)."""
    saved = read_model_info(modeling.resolve_model_name(model_dir)).get("threshold", 0.5)
    return saved if isinstance(saved, (int, float, list)) else 0.5
