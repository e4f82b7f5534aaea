"""Which inputs a model takes by name, asked in one place: `accepted_inputs` (DistilBERT has no token_type_ids).
The inference runner (`bertkit.models.infer`), the fast forward's self-check and the training loop ask here."""

from __future__ import annotations

import inspect
from typing import Any

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def accepted_inputs(model: Any) -> frozenset[str]:
    """The inputs the model's forward takes by name (DistilBERT: no token_type_ids); an ONNX runner lists its
    graph's (`accepted_input_names`, `bertkit.models.onnx`)."""
    listed = getattr(model, "accepted_input_names", None)
    if listed is not None:
        return frozenset(n for n in INPUT_NAMES if n in listed)
    forward = getattr(model, "forward", model)
    return frozenset(n for n in INPUT_NAMES if n in inspect.signature(forward).parameters)
