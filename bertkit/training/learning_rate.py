"""--lr: a number, or `auto` (the default): a peak learning rate chosen once from the encoder's size.

The BERT paper's grid (5e-5, 3e-5, 2e-5) was tuned for BERT-base and -large over thousands of steps. A small encoder
such as MiniLM-L6 (hidden 384, ~22M parameters) barely moves at those rates in a short run, ending below a
frozen-feature probe (measured in benchmarks/results/first-hour-defaults.json).
So `auto` scales the base rate by width, lr = 5e-5 x 768 / hidden (narrower models take larger steps), at most
3e-4, and keeps the paper's range at base and above (hidden 768: 5e-5, hidden >= 1024: 2e-5, large models being
the unstable ones):

    hidden 128 -> 3e-4    256 -> 1.5e-4    384 -> 1e-4    512 -> 7.5e-5    768 -> 5e-5    1024 -> 2e-5

It is resolved before the run is keyed, so config.json, the resume key, metrics.json, the model cards and the
reproduce line hold the number; a re-run with `--lr auto` or with that number continues the same run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

AUTO = "auto"
BASE_HIDDEN, BASE_LR = 768, 5e-5
"""BERT-base's width and the BERT paper's largest grid rate: the anchor of the width rule."""
LARGE_HIDDEN, LARGE_LR = 1024, 2e-5
MAX_LR = 3e-4
"""The rule's ceiling (tiny encoders, hidden 128 and below)."""


def parse_lr(value: Any) -> float | None:
    """The number of an --lr value, None for `auto`; ValueError for anything else (a text that is not a number)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


def canonical_lr(value: Any) -> Any:
    """`auto`, or the number as its shortest float text (`1e-4` and `0.0001` are the same run); anything else as
    given (its problem is `lr_problems`')."""
    try:
        number = parse_lr(value)
    except (TypeError, ValueError):
        return value
    return AUTO if number is None else repr(number)


def lr_problems(value: Any) -> list[str]:
    """Why --lr `value` is refused: not a number or auto, not finite, not above 0."""
    try:
        number = parse_lr(value)
    except (TypeError, ValueError):
        return [f"--lr must be a number or auto; got {value!r}. Pass e.g. --lr 5e-5, or --lr auto (the default: "
                f"chosen from the model's size)."]
    if number is None:
        return []
    if not math.isfinite(number):
        return [f"--lr must be a finite number; got {number}. Pass a real number (e.g. --lr 5e-05), or --lr auto."]
    if not number > 0:
        return [f"--lr must be a positive number, got {number!r}. Pass e.g. --lr 5e-05, or --lr auto."]
    return []


def lr_text(value: float) -> str:
    """A learning rate as people write it: 1e-4, 7.5e-5, 0.01."""
    if not 0 < value < 1e-2:
        return f"{value:g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def lr_for_width(hidden: int) -> float:
    """The `auto` learning rate of an encoder `hidden` wide (see the module docstring), to two significant digits."""
    if hidden >= LARGE_HIDDEN:
        return LARGE_LR
    return float(f"{min(MAX_LR, BASE_LR * BASE_HIDDEN / max(hidden, 1)):.2g}")


def estimated_parameters(config: Any) -> int | None:
    """About how many parameters a BERT-style encoder of `config` has (embeddings, layers, pooler), from its
    config alone (no weights are loaded to choose a learning rate); None where the config lacks the sizes."""
    hidden = getattr(config, "hidden_size", None)
    layers = getattr(config, "num_hidden_layers", None)
    vocab = getattr(config, "vocab_size", None)
    if not all(isinstance(x, int) and x > 0 for x in (hidden, layers, vocab)):
        return None
    inner = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", None) or 4 * hidden
    positions = getattr(config, "max_position_embeddings", 512) or 512
    per_layer = 4 * hidden * hidden + 2 * hidden * inner + 9 * hidden + inner
    return int((vocab + positions + 2) * hidden + layers * per_layer + hidden * hidden)


@dataclass(frozen=True)
class LrChoice:
    """The run's peak learning rate and where it came from: `auto` (the width rule) or `given` (--lr, a recipe)."""

    value: float
    source: str
    hidden_size: int | None = None
    parameters: int | None = None

    @property
    def line(self) -> str:
        """One line for the log and the run's notes."""
        if self.source != AUTO:
            return f"lr {lr_text(self.value)} (given)"
        size = f"~{self.parameters / 1e6:.0f}M-parameter" if self.parameters else "this"
        width = f", hidden {self.hidden_size}" if self.hidden_size else ""
        return (f"lr auto -> {lr_text(self.value)} for a {size} encoder{width} (pass --lr to choose another; "
                f"the BERT paper's 2e-5..5e-5 suit BERT-base and larger)")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def resolve_lr(cfg: Any, load_config: Any) -> tuple[Any, LrChoice]:
    """`cfg` with --lr as a number (an explicit one wins; `auto` from the width of `load_config()`'s encoder, read
    only then), and what was chosen."""
    given = parse_lr(cfg.training.lr)
    if given is not None:
        return cfg, LrChoice(given, "given")
    config = load_config()
    hidden = getattr(config, "hidden_size", None)
    if not isinstance(hidden, int) or hidden <= 0:  # not a BERT-style config: the paper's base rate
        choice = LrChoice(BASE_LR, AUTO, None, estimated_parameters(config))
    else:
        choice = LrChoice(lr_for_width(hidden), AUTO, hidden, estimated_parameters(config))
    return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, lr=repr(choice.value))), choice
