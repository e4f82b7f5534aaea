"""Every value of a sweep's space checked against the model and the data before the first trial (and before --out
is claimed), each problem naming --grid / --space: a value valid for the config (`bertkit.training.space`) can still
be wrong for the model (`max-length=2`, a folder that does not exist) or the data (a column it lacks), and would
otherwise fail only when its trial starts, after earlier trials trained.

What each trial would check before it trains is checked here for every value alone and for every combination of
the values (for --space ranges: their ends): the model's tokenizer and config (not its weights), --max-length
against them, the data and its problem shape (labels, --metric-for-best, --class-weight). Path values (a --model,
--data folder or file) may not be, hold or be inside --out: a sweep replaces what it writes there.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

from bertkit.data.options import TaskOptions
from bertkit.data.splits import load_splits
from bertkit.errors import UserError, raise_if_problems
from bertkit.io import ownership
from bertkit.models import loading
from bertkit.training.finetune import _for_the_shape  # the checks a trial makes once its data is read
from bertkit.training.space import Dimension, SweepOptions, finetune_config

DATA_FIELDS = tuple(f.name for f in dataclasses.fields(TaskOptions))
"""The options that decide what data a trial reads and its problem shape."""


def check_space(cfg: SweepOptions, dims: list[Dimension]) -> None:
    """A UserError listing every value of the space that would fail its trial, before anything runs."""
    where = "--grid" if cfg.search == "grid" else "--space"
    problems = path_problems(cfg, dims, where)
    if not problems:
        problems = TrialCheck(cfg).problems(dims, where)
    raise_if_problems(problems, f"Invalid {where} values for this model and data")


def candidates(dim: Dimension) -> tuple[Any, ...]:
    """The values of `dim` a trial can get: its list, or the ends of its range."""
    if dim.values:
        return dim.values
    return (int(dim.low), int(dim.high)) if dim.integer else (dim.low, dim.high)


def path_problems(cfg: SweepOptions, dims: list[Dimension], where: str) -> list[str]:
    """Path values (what a trial reads: --model, --data, ...) that are, hold or are inside --out."""
    out = Path(cfg.out or "").expanduser().resolve()
    problems = []
    for dim in dims:
        for value in candidates(dim):
            trial = finetune_config(cfg, {dim.name: value}, cfg.seed, cfg.out or "")
            if not isinstance(value, str) or value not in {v for _, v in ownership.input_paths(trial)}:
                continue
            path = Path(value).expanduser().resolve()
            relation = ("is" if path == out else "is inside" if out in path.parents
                        else "holds" if path in out.parents else None)
            if relation is not None:
                problems.append(
                    f"{where} {dim.flag[2:]}={value}: {dim.flag} {value} {relation} --out {cfg.out}, which the sweep "
                    f"writes (and --overwrite replaces) while trials read it. Copy it outside --out first (e.g. "
                    f"`cp -r {value} {out.parent / (path.name + '-copy')}`) and pass the copy, or choose another --out.")
    return problems


class TrialCheck:
    """What a trial checks before it trains, for any values of the space (models and data loaded once each)."""

    def __init__(self, cfg: SweepOptions):
        self.cfg = cfg
        self.splits: dict[tuple[Any, ...], Any] = {}
        self.models: dict[tuple[str, bool], tuple[Any, Any]] = {}

    def problems(self, dims: list[Dimension], where: str) -> list[str]:
        """Each value with the first values of the other dimensions (its message names it), then every combination.
        A reason the sweep's own options give without any value of the space is not the space's: it is raised as
        the trial would say it."""
        first = {d.name: candidates(d)[0] for d in dims}
        refused = [(dim, value, self.why_refused({**first, dim.name: value})) for dim in dims for value in
                   candidates(dim)]
        own = self.why_refused({}) if any(why is not None for _, _, why in refused) else None
        if own is not None and all(why in (None, own) for _, _, why in refused):
            raise UserError(own)
        found = [f"{where} {dim.flag[2:]}={value}: a trial with {dim.flag} {value} would stop before training: {why}"
                 for dim, value, why in refused if why is not None]
        if found or len(dims) < 2:
            return found
        for values in itertools.product(*(candidates(d) for d in dims)):
            why = self.why_refused(dict(zip((d.name for d in dims), values, strict=True)))
            if why is not None:
                shown = ", ".join(f"{d.flag[2:]}={v}" for d, v in zip(dims, values, strict=True))
                found.append(f"{where} values {shown}: a trial with these would stop before training: {why}")
        return found

    def why_refused(self, params: dict[str, Any]) -> str | None:
        """Why a trial with `params` would stop before training (None: it would start)."""
        trial = finetune_config(self.cfg, params, self.cfg.seed, self.cfg.out or "")
        try:
            self.check(trial)
        except UserError as exc:
            return str(exc)
        return None

    def check(self, trial: Any) -> None:
        splits = self._splits(trial)
        _for_the_shape(trial, dataclasses.replace(splits, notes=[]), warn=False)
        tokenizer, config = self._model(trial)
        loading.check_max_length(trial.max_length, tokenizer, config, trial.model,
                                  pair=trial.text_pair_column is not None)

    def _splits(self, trial: Any) -> Any:
        key = tuple(str(getattr(trial, name)) for name in DATA_FIELDS)
        if key not in self.splits:
            self.splits[key] = load_splits(trial, need_labels=True, need_dev=True)
        return self.splits[key]

    def _model(self, trial: Any) -> tuple[Any, Any]:
        key = (trial.model, trial.trust_remote_code)
        if key not in self.models:
            self.models[key] = (loading.load_tokenizer(*key), loading.load_config(*key))
        return self.models[key]
