"""What a finished sweep reports: one row per trial (trials.csv), the configurations ranked by the mean of their
seeds' best dev metric with the spread (sweep.json), the figure (sweep.png), and OUT/best: the best trial's best/
model, swapped in whole."""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.io import atomic, disk, library_files, record
from bertkit.io.record_format import FAMILY, RecordKind, checked_version, sealed, upgrade
from bertkit.io.saving import replace_folder
from bertkit.scoring import metrics
from bertkit.scoring.table import LOWER_IS_BETTER
from bertkit.training.resume import run_family
from bertkit.training.space import Dimension, SweepOptions

CSV_FIXED = ("seed", "status", "metric", "best", "best_step", "steps", "epochs_run", "train_seconds",
             "samples_per_second")
OUTPUTS = {"best": "best", "trials.csv": "trials.csv", "sweep.json": "sweep.json", "figure": "sweep.png",
           "trials": "trials"}
"""sweep.json's `outputs`: what the sweep wrote, relative to its folder (`best`: the best trial's model, copied)."""


@dataclass(frozen=True)
class TrialRow:
    """One trial's row of trials.csv: its searched values as used (`params`: option name -> value, `lr=auto`
    resolved), seed, status (complete, pruned, early_stopping), best dev metric, the step it was reached at, time and
    throughput. `history` (the ranked metric at every dev evaluation, in order; None where it was not scored) is for
    the search only, never written."""

    trial: str
    params: Mapping[str, Any]
    seed: int
    status: str
    metric: str
    best: float | None
    best_step: int | None
    steps: int
    epochs_run: float
    train_seconds: float
    samples_per_second: float
    history: tuple[float | None, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The row as trials.csv and sweep.json hold it: `trial`, the searched options, then CSV_FIXED."""
        return {"trial": self.trial, **self.params, **{k: getattr(self, k) for k in CSV_FIXED}}

    @classmethod
    def from_json(cls, record: Mapping[str, Any], params: Sequence[str]) -> TrialRow:
        """A row of sweep.json (`params`: the searched option names, from its `space`)."""
        return cls(record["trial"], {p: record.get(p) for p in params}, **{k: record.get(k) for k in CSV_FIXED})


@dataclass(frozen=True)
class RankedConfiguration:
    """One configuration of the ranking: its values, its seeds' trials and best dev metrics, their mean and spread."""

    rank: int
    params: Mapping[str, Any]
    trials: tuple[str, ...]
    seeds: tuple[int, ...]
    values: tuple[float, ...]
    mean: float | None
    std: float
    pruned: bool

    def to_json(self) -> dict[str, Any]:
        return {"params": dict(self.params), "trials": list(self.trials), "seeds": list(self.seeds),
                "values": list(self.values), "mean": self.mean, "std": self.std, "pruned": self.pruned,
                "rank": self.rank}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> RankedConfiguration:
        return cls(record["rank"], dict(record["params"]), tuple(record["trials"]), tuple(record["seeds"]),
                   tuple(record["values"]), record["mean"], record["std"], record["pruned"])


@dataclass(frozen=True)
class BestTrial:
    """The best seed's trial of the best-ranked configuration, and `model`: its best model folder, relative to the
    sweep folder (`trials/NAME/best`; OUT/best is its copy). Older sweep.json files say `best`: read as written."""

    row: TrialRow
    model: str

    def to_json(self) -> dict[str, Any]:
        """The row's keys, `rank`, `model` (the folder) and `params` (the searched values: a searched --model is
        there, not under `model`)."""
        return {**self.row.to_json(), "rank": 1, "model": self.model, "params": dict(self.row.params)}

    @classmethod
    def from_json(cls, record: Mapping[str, Any], params: Sequence[str]) -> BestTrial:
        values = record.get("params")
        row = TrialRow.from_json({**record, **(values or {})}, params)
        if values is None and "model" in params:  # an older file: its `model` key had replaced the searched one
            row = dataclasses.replace(row, params={**row.params, "model": None})
        return cls(row, str(record.get("model") or OUTPUTS["best"]))


@dataclass(frozen=True)
class SweepSummary:
    """What a finished sweep found (sweep.json): the space, the ranking metric and its direction, the trials'
    rows, the configurations ranked, the best trial, the outputs and the notes of its layout (merged values)."""

    search: str
    space: tuple[Dimension, ...]
    metric: str
    seeds: int
    rows: tuple[TrialRow, ...]
    ranking: tuple[RankedConfiguration, ...]
    best: BestTrial | None
    outputs: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(OUTPUTS))
    notes: tuple[str, ...] = ()

    @property
    def direction(self) -> str:
        return "min" if self.metric in LOWER_IS_BETTER else "max"

    @property
    def pruned(self) -> int:
        return sum(r.status == "pruned" for r in self.rows)

    @property
    def params(self) -> list[str]:
        """The searched option names (trials.csv's columns after `trial`)."""
        return [d.flag[2:] for d in self.space]

    def to_json(self) -> dict[str, Any]:
        return {"search": self.search, "space": [d.to_json() for d in self.space], "metric": self.metric,
                "direction": self.direction, "seeds": self.seeds, "trials": len(self.rows), "pruned": self.pruned,
                "best": None if self.best is None else self.best.to_json(),
                "ranking": [g.to_json() for g in self.ranking], "rows": [r.to_json() for r in self.rows],
                "outputs": dict(self.outputs), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> SweepSummary:
        """sweep.json, this version's or an older one (no `notes`; `best.model` "best", no `best.params`)."""
        params = [d["option"] for d in record["space"]]
        best = record.get("best")
        return cls(record["search"], tuple(Dimension.from_json(d) for d in record["space"]), record["metric"], record["seeds"],
                   tuple(TrialRow.from_json(r, params) for r in record["rows"]),
                   tuple(RankedConfiguration.from_json(g) for g in record["ranking"]),
                   None if best is None else BestTrial.from_json(best, params),
                   dict(record.get("outputs") or OUTPUTS), tuple(record.get("notes") or ()))


SWEEP_RECORD = RecordKind("bertkit-sweep", current=2, sealed_since=2, family_since=2)
"""sweep.json's layouts: 1 (no format) without family and seal, 2 with them (what `SweepSummary.to_json` holds, plus
format, family and seal)."""


def read_sweep_summary(root: Path, family: str | None = None) -> SweepSummary:
    """A finished sweep's sweep.json, checked against its seal (a `RecordProblem` says why not), as typed records:
    `migrated_sweep_record` reads a layout-1 file (of `family`, the sweep's config.json's)."""
    record = json.loads((root / "sweep.json").read_text(encoding="utf-8"))
    return SweepSummary.from_json(migrated_sweep_record(record, family))


def migrated_sweep_record(record: Any, family: str | None = None) -> dict[str, Any]:
    """sweep.json in the current layout from any layout this bertkit reads. Layout 1 does not say which family made
    it: `family` (its config.json's), else sentences; its older keys (`best.model` "best", no `notes`)
    `SweepSummary.from_json` reads as written."""
    return upgrade(record, SWEEP_RECORD, checked_version(record, SWEEP_RECORD),
                   {1: lambda old: {**old, FAMILY: family or "sentences"}})


def trial_row(name: str, params: dict[str, Any], seed: int, summary: Mapping[str, Any]) -> TrialRow:
    """A trial's row from its metrics.json (`summary`)."""
    return TrialRow(name, params, seed, summary.get("stop_reason") or "complete", summary["best_metric_name"],
                    summary["best_metric"], summary["best_step"], summary["global_step"], summary["epochs_run"],
                    summary["train_seconds"], summary["train_samples_per_second"],
                    metric_values(summary.get("history", []), summary["best_metric_name"]))


def metric_values(history: Sequence[Mapping[str, Any]], metric: str) -> tuple[float | None, ...]:
    """--metric-for-best at each evaluation record of metrics.json's history, in order."""
    return tuple(record_value(record, metric) for record in history)


def record_value(record: Mapping[str, Any], metric: str) -> float | None:
    """--metric-for-best in one evaluation record of metrics.json's history (`dev_<name>` keys)."""
    scores = {k[len("dev_"):]: v for k, v in record.items() if k.startswith("dev_")}
    return metrics.best_value({**scores, "external": {k: v for k, v in scores.items() if isinstance(v, (int, float))}},
                              metric)


def rank(rows: Sequence[TrialRow]) -> tuple[RankedConfiguration, ...]:
    """The configurations, best first by the mean best dev metric over their seeds (pruned ones last)."""
    groups: dict[tuple, list[TrialRow]] = {}
    for row in rows:
        groups.setdefault(tuple(row.params.items()), []).append(row)
    sign = 1.0 if rows and rows[0].metric in LOWER_IS_BETTER else -1.0
    ranking = [_configuration(members) for members in groups.values()]
    ranking.sort(key=lambda g: (g.pruned, g.mean is None, sign * (g.mean or 0.0)))
    return tuple(dataclasses.replace(g, rank=place) for place, g in enumerate(ranking, start=1))


def _configuration(members: list[TrialRow]) -> RankedConfiguration:
    scores = tuple(m.best for m in members if m.best is not None)
    return RankedConfiguration(0, dict(members[0].params), tuple(m.trial for m in members),
                               tuple(m.seed for m in members), scores,
                               statistics.fmean(scores) if scores else None,
                               statistics.stdev(scores) if len(scores) > 1 else 0.0,
                               any(m.status == "pruned" for m in members))


def best_trial(ranking: Sequence[RankedConfiguration], rows: Sequence[TrialRow]) -> TrialRow | None:
    """The best seed's trial of the best-ranked configuration (its best/ becomes OUT/best)."""
    if not ranking or ranking[0].mean is None:
        return None
    members = [r for r in rows if r.trial in ranking[0].trials and r.best is not None]
    sign = 1.0 if members[0].metric in LOWER_IS_BETTER else -1.0
    return min(members, key=lambda r: sign * (r.best or 0.0))


def write_outputs(cfg: SweepOptions, dims: list[Dimension], root: Path, rows: Sequence[TrialRow],
                  notes: Sequence[str] = ()) -> SweepSummary:
    """trials.csv, sweep.json, sweep.png and best/ in `root` (main process); returns sweep.json's content."""
    import pandas as pd

    from bertkit import plots

    params = [d.flag[2:] for d in dims]
    table = [row.to_json() for row in rows]
    with atomic.atomic_path(root / "trials.csv") as tmp:
        pd.DataFrame(table, columns=["trial", *params, *CSV_FIXED]).to_csv(tmp, index=False)
    ranking = rank(rows)
    best = best_trial(ranking, rows)
    if best is not None:
        copy_model(root / "trials" / best.trial / "best", root / OUTPUTS["best"])
    metric = rows[0].metric if rows else (cfg.training.metric_for_best or "accuracy")
    summary = SweepSummary(cfg.sweep.search, tuple(dims), metric, cfg.sweep.seeds, tuple(rows), ranking,
                           None if best is None else BestTrial(best, _model_folder(root, best)), notes=tuple(notes))
    atomic.write_json_atomic(root / "sweep.json", sealed(summary.to_json(), SWEEP_RECORD, run_family(cfg)))
    if table:
        plots.sweep_figure(table, params, metric, root / "sweep.png",
                           f"sweep: dev {metric} ({cfg.sweep.search}, {len(table)} trials)")
    return summary


def _model_folder(root: Path, best: TrialRow) -> str:
    """The best trial's model folder relative to the sweep folder (`trials/NAME/best`), or OUT/best where the trial's
    is gone."""
    folder = Path("trials") / best.trial / "best"
    return folder.as_posix() if (root / folder).is_dir() else OUTPUTS["best"]


def copy_model(source: Path, target: Path) -> None:
    """`source` (a saved model folder) into `target`, whole or not at all: hard links (copies where links cannot be
    made) in a temp folder recorded before it is made, swapped in for the previous `target` (checked first: a
    folder bertkit wrote)."""
    tmp = record.temp_name(target, folder=True)
    record.note(record.TEMP, tmp)
    files = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
    library_files.expect(tmp, files)  # before they are linked in: a kill leaves only files the record lists
    shutil.copytree(source, tmp, copy_function=disk.link_or_copy)
    record.seal(tmp)
    replace_folder(tmp, target)
