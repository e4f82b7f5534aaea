"""Every value of a sweep's space checked against the model and the data before the first trial (and before --out
is claimed), each problem naming --grid / --space: a value valid for the config (`bertkit.training.space`) can still
be wrong for the model (`max-length=2`, a folder that does not exist) or the data (a column it lacks), and would
otherwise fail only when its trial starts, after earlier trials trained.

What each trial would check before it trains is checked here for every value alone and for every combination of
the values (for --space ranges: their ends): the model's tokenizer and config (not its weights), --max-length
against them, and what the problem family checks (`plans.Training`: rows of text, their problem shape - labels,
--metric-for-best, --class-weight; a tagger sweep's tagged data, read once by the command, and --metric-for-best
checked against what its tags score before the values).
Path values (a --model, --data folder or file) may not be, hold or be inside --out: a sweep replaces what it writes
there.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertkit.data.options import TaskOptions
from bertkit.data.splits import load_splits
from bertkit.encoding.run_tokens import too_few_rows
from bertkit.errors import UserError, raise_if_problems
from bertkit.io import ownership
from bertkit.models import loading
from bertkit.training.finetune import _for_the_shape  # a trial's own checks
from bertkit.training.plans import Training
from bertkit.training.space import Dimension, SweepOptions, finetune_config

NAME_MAX, PATH_MAX = 255, 4096
"""The longest name in a path (bytes; ext4, xfs, btrfs, APFS, NTFS) and the longest path (Linux, with its NUL)."""
DATA_FIELDS = tuple(f.name for f in dataclasses.fields(TaskOptions))
"""The options that decide what data a trial reads and its problem shape."""


def check_space(cfg: SweepOptions, dims: list[Dimension], compute_for: Callable[[str], Any], training: Training,
                processes: int = 1) -> TrialCheck:
    """A UserError listing every value of the space that would fail its trial, before anything runs; else the
    checker, whose models' configs (`config_of`) the trials' layout reads again. `training`: the family's runs (what
    the sweep's own options must satisfy is refused first, alone: no value of the space changes it)."""
    where = "--grid" if cfg.sweep.search == "grid" else "--space"
    training.check_sweep(cfg)
    checker = TrialCheck(cfg, compute_for, training, processes)
    problems = path_problems(cfg, dims, where)
    if not problems:
        problems = checker.problems(dims, where)
    raise_if_problems(problems, f"Invalid {where} values for this model, data and machine")
    return checker


def candidates(dim: Dimension) -> tuple[Any, ...]:
    """The values of `dim` a trial can get: its list, or the ends of its range."""
    if dim.values:
        return dim.values
    return (int(dim.low), int(dim.high)) if dim.integer else (dim.low, dim.high)


def path_problems(cfg: SweepOptions, dims: list[Dimension], where: str) -> list[str]:
    """Path values (what a trial reads: --model, --data, ...) too long for the file system, or that are, hold or are
    inside --out."""
    out = Path(cfg.output.out or "").expanduser().resolve()
    problems = []
    for dim in dims:
        for value in candidates(dim):
            trial = finetune_config(cfg, {dim.name: value}, cfg.inputs.seed, cfg.output.out or "")
            if isinstance(value, str) and value in {v for _, v in ownership.input_paths(trial)}:
                problems += [p for p in (_too_long(dim, value, where) or _out_problem(cfg, out, dim, value, where),)
                             if p is not None]
    return problems


def _too_long(dim: Dimension, value: str, where: str) -> str | None:
    """A path no file system here can name: one of its names over NAME_MAX bytes, or the whole over PATH_MAX."""
    names = [part for part in Path(value).expanduser().parts if len(part.encode("utf-8")) > NAME_MAX]
    if not names and len(os.fsencode(value)) < PATH_MAX:
        return None
    what = (f"its name {names[0][:24]}... is {len(names[0].encode('utf-8'))} bytes long" if names
            else f"it is {len(os.fsencode(value))} bytes long")
    limit = f"file systems allow {NAME_MAX} bytes per name" if names else f"paths are at most {PATH_MAX - 1} bytes"
    return (f"{where} {dim.flag[2:]}={value[:60]}...: {dim.flag} is not a path this machine can open: {what}, and "
            f"{limit}. Fix the value (e.g. move or link the folder to a shorter path, and pass that).")


def _out_problem(cfg: SweepOptions, out: Path, dim: Dimension, value: str, where: str) -> str | None:
    """A path value that is, holds or is inside --out (which the sweep writes)."""
    path = Path(value).expanduser().resolve()
    relation = ("is" if path == out else "is inside" if out in path.parents
                else "holds" if path in out.parents else None)
    if relation is None:
        return None
    head = (f"{where} {dim.flag[2:]}={value}: {dim.flag} {value} {relation} --out {cfg.output.out}, which the sweep "
            f"writes (and --overwrite replaces) while trials read it.")
    if relation == "holds":  # a copy of it would hold the sweep too: the sweep's folder has to move instead
        return f"{head} Pass an --out outside {value} (e.g. --out {path.parent / (path.name + '-sweep')})."
    return (f"{head} Copy it outside --out first (e.g. `cp -r {value} {out.parent / (path.name + '-copy')}`) and "
            f"pass the copy, or choose another --out.")


class TrialCheck:
    """What a trial checks before it trains, for any values of the space (models and data loaded once each)."""

    def __init__(self, cfg: SweepOptions, compute_for: Callable[[str], Any], training: Training, processes: int = 1):
        """`compute_for`: the command's resolution of a --precision value (it raises the refusal for this machine);
        `training`: how the family's runs train (its checks of a trial)."""
        self.cfg, self.compute_for, self.training, self.processes = cfg, compute_for, training, processes
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
        trial = finetune_config(self.cfg, params, self.cfg.inputs.seed, self.cfg.output.out or "")
        try:
            self.check(trial)
        except UserError as exc:
            return str(exc)
        return None

    def check(self, trial: Any) -> None:
        """The trial's own checks before training: its --precision on this machine, its family's checks of its
        options and data (`plans.Training.check_trial`: the rows' problem shape and one optimizer step's rows, a
        tagger's windows), its model and --max-length."""
        self.compute_for(trial.compute.precision)
        self.training.check_trial(self, trial)
        tokenizer, config = self._model(trial)
        loading.check_max_length(trial.reading.max_length, tokenizer, config, trial.model,
                                  pair=trial.inputs.text_pair_column is not None)

    def check_rows(self, trial: Any) -> None:
        """A trial on rows of text: its data and problem shape, and one optimizer step's rows (processes x
        --grad-accum)."""
        splits = self._splits(trial)
        _for_the_shape(trial, dataclasses.replace(splits, notes=[]), warn=False)
        if len(splits.train) < self.processes * trial.training.grad_accum:  # setup's check: no step fits the rows
            raise too_few_rows(len(splits.train), self.processes * trial.training.grad_accum)

    def config_of(self, model: str, trust_remote_code: bool) -> Any:
        """A model's config, read once for the checks and the layout."""
        return self._model_of(model, trust_remote_code)[1]

    def _splits(self, trial: Any) -> Any:
        key = tuple(str(getattr(trial.inputs, name)) for name in DATA_FIELDS)
        if key not in self.splits:
            self.splits[key] = load_splits(trial.inputs, need_labels=True, need_dev=True)
        return self.splits[key]

    def _model(self, trial: Any) -> tuple[Any, Any]:
        return self._model_of(trial.model, trial.trust_remote_code)

    def _model_of(self, *key: Any) -> tuple[Any, Any]:
        if key not in self.models:
            self.models[key] = (loading.load_tokenizer(*key), loading.load_config(*key))
        return self.models[key]
