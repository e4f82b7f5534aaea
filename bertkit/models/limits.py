"""What a model accepts, told from its numbers: the longest input (position embeddings, and the tokenizer's
declared `model_max_length`) and how deep it is. One owner for the length refusal, used two ways: by the loaders on
loaded objects (`loading.check_max_length`) and, before torch is imported and before any data is read or cached, on
a local model folder's own files (`saved_limits`, read by `models.preflight.check_model_limits` and, for --layers,
`features.settings.check_layers_exist`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.models import metadata

DEFAULT_POSITIONS = 512
"""What a config that names no `max_position_embeddings` is taken to accept (BERT's)."""


def accepted_length(positions: Any, declared: Any) -> int:
    """The longest input a model accepts: its position embeddings bound it (`positions`), the tokenizer's declared
    `model_max_length` may say less (a huge value there means "not set")."""
    limit = positions if isinstance(positions, int) and positions > 0 else DEFAULT_POSITIONS
    if isinstance(declared, int) and 0 < declared < 1_000_000:
        limit = min(limit, declared)
    return int(limit)


def check_length_accepted(max_length: int, limit: int, model_name: str) -> None:
    """--max-length above what the model accepts (`limit` tokens) is an error, not a crash mid-run."""
    if max_length > limit:
        raise UserError(
            f"--max-length {max_length} is more than model {model_name} accepts ({limit} tokens). "
            f"Pass --max-length {limit} or less; longer texts are truncated and counted in the report."
        )


@dataclass(frozen=True)
class SavedLimits:
    """A local model folder's limits as its files state them (config.json, tokenizer_config.json)."""

    length: int
    """The longest input it accepts (`accepted_length`)."""
    layers: int | None
    """Its encoder layers (BERT's num_hidden_layers, DistilBERT's n_layers); None: the config does not say."""


def saved_limits(folder: Path) -> SavedLimits | None:
    """The limits a local model folder's files state, read as JSON (no torch, no transformers); None when the folder
    has no readable config.json (the loader then says what is wrong)."""
    config = _json_object(folder / "config.json")
    if config is None:
        return None
    tokenizer = _json_object(folder / "tokenizer_config.json") or {}
    # a folder bertkit saved carries its recorded reading there: the window it was trained at, not a limit
    declared = None if metadata.declares_reading(folder) else tokenizer.get("model_max_length")
    layers = config.get("num_hidden_layers", config.get("n_layers"))
    return SavedLimits(accepted_length(config.get("max_position_embeddings"), declared),
                       layers if isinstance(layers, int) and not isinstance(layers, bool) else None)


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
