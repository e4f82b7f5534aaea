"""A sweep's trials laid out before any runs: each configuration's values as given (they name its folder) and as
they resolve for its model (`lr=auto` is the number `auto` gives that model: what trials.csv and sweep.json record),
and configurations that resolve to the same settings merged into the first of them, with a note.

A trial's folder is `NNN_option=value..._seed=S`, NNN the configuration's place in the grid as given, so a merged
configuration leaves a gap and an older sweep's folders keep their names. A name too long for a file system (a long
path value) keeps its values' tails and a digest of the whole value instead (`Plan.name`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bertkit.models import loading
from bertkit.options import flag
from bertkit.training.learning_rate import AUTO, resolve_lr
from bertkit.training.space import Dimension, SweepOptions, finetune_config

MAX_NAME_BYTES = 200
"""A trial folder's longest name: 255 bytes (most file systems) less room for bertkit's temp prefixes and suffixes."""
SHORT_VALUE = 24
"""A value shown longer than this is cut in a name that would pass MAX_NAME_BYTES."""


@dataclass(frozen=True)
class Plan:
    """One trial: configuration number, its searched values as given (field -> value), its seed, and the values as
    they resolve for its model (`resolved`: `auto` -> the number; empty: as given)."""

    number: int
    params: dict[str, Any]
    seed: int
    resolved: dict[str, Any] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, Any]:
        """The searched values the trial runs with (resolved)."""
        return self.resolved or self.params

    @property
    def name(self) -> str:
        """`NNN_option=value..._seed=S` from the values as given (an older sweep's folder names stay theirs); cut
        to MAX_NAME_BYTES with a digest of each long value where needed."""
        name = _folder_name(self.number, {k: _short(v) for k, v in self.params.items()}, self.seed)
        if len(name.encode("utf-8")) <= MAX_NAME_BYTES:
            return name
        return _folder_name(self.number, {k: _cut(_short(v)) for k, v in self.params.items()}, self.seed)


@dataclass(frozen=True)
class GridLayout:
    """The grid's trials in order, and a note per merged configuration."""

    plans: tuple[Plan, ...]
    notes: tuple[str, ...] = ()


ConfigOf = Callable[[str, bool], Any]
"""(model, trust_remote_code) -> the model's config (`loading.load_config`)."""


def model_configs() -> ConfigOf:
    """`loading.load_config`, each model read once."""
    return functools.cache(loading.load_config)


def resolved_params(cfg: SweepOptions, params: dict[str, Any], config_of: ConfigOf) -> dict[str, Any]:
    """`params` with a searched `lr=auto` as the number `auto` gives the trial's model (what finetune will use)."""
    if params.get("lr") != AUTO:
        return dict(params)
    trial = finetune_config(cfg, params, cfg.inputs.seed, cfg.output.out or "out")
    _, choice = resolve_lr(trial, lambda: config_of(trial.model, trial.trust_remote_code))
    return {**params, "lr": choice.value}


def grid_plans(cfg: SweepOptions, dims: list[Dimension], config_of: ConfigOf) -> GridLayout:
    """Every combination of the grid's values (first --grid outermost), each with --seeds seeds; a combination
    whose resolved values equal an earlier one's is not run (its note says which)."""
    names = [d.name for d in dims]
    plans, notes, first_with = [], [], {}
    for number, values in enumerate(itertools.product(*(d.values for d in dims))):
        given = dict(zip(names, values, strict=True))
        resolved = resolved_params(cfg, given, config_of)
        key = tuple(resolved.items())
        if key in first_with:
            notes.append(_merged_note(first_with[key], Plan(number, given, cfg.inputs.seed, resolved)))
            continue
        first_with[key] = Plan(number, given, cfg.inputs.seed, resolved)
        plans += [Plan(number, given, cfg.inputs.seed + k, resolved) for k in range(cfg.sweep.seeds)]
    return GridLayout(tuple(plans), tuple(notes))


def _merged_note(kept: Plan, merged: Plan) -> str:
    shown = lambda values: ", ".join(f"{flag(k)[2:]}={_short(v)}" for k, v in values.items())  # noqa: E731
    return (f"configuration {merged.number:03d} ({shown(merged.params)}) resolves to the settings of configuration "
            f"{kept.number:03d} ({shown(kept.params)}: {shown(kept.resolved)}) for this model: it is not run twice; "
            f"its trials are {kept.number:03d}'s.")


def _folder_name(number: int, shown: dict[str, str], seed: int) -> str:
    values = "".join(f"_{flag(k)[2:]}={v}" for k, v in shown.items())
    return re.sub(r"[^\w.=+-]", "-", f"{number:03d}{values}_seed={seed}")


def _cut(text: str) -> str:
    """A long value as its last characters and a digest of the whole (two long paths that end alike differ)."""
    if len(text) <= SHORT_VALUE:
        return text
    return f"{text[-(SHORT_VALUE - 9):]}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
