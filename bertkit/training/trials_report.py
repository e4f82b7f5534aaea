"""What a finished sweep reports: one row per trial (trials.csv), the configurations ranked by the mean of their
seeds' best dev metric with the spread (sweep.json), the figure (sweep.png), and OUT/best: the best trial's best/
model, swapped in whole."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path
from typing import Any

from bertkit.io import atomic, disk, library_files, record
from bertkit.scoring.table import LOWER_IS_BETTER
from bertkit.training.checkpoints import replace_folder
from bertkit.training.space import Dimension, SweepOptions

CSV_FIXED = ("seed", "status", "metric", "best", "best_step", "steps", "epochs_run", "train_seconds",
             "samples_per_second")


def trial_row(name: str, params: dict[str, Any], seed: int, summary: dict[str, Any]) -> dict[str, Any]:
    """A trial's row from its metrics.json: its searched values, seed, status (complete, pruned, early_stopping),
    best dev metric and the step it was reached at, time and throughput. `history` is for the search only."""
    return {"trial": name, **params, "seed": seed, "status": summary.get("stop_reason") or "complete",
            "metric": summary["best_metric_name"], "best": summary["best_metric"], "best_step": summary["best_step"],
            "steps": summary["global_step"], "epochs_run": summary["epochs_run"],
            "train_seconds": summary["train_seconds"], "samples_per_second": summary["train_samples_per_second"],
            "history": summary.get("history", [])}


def rank(rows: list[dict[str, Any]], params: list[str]) -> list[dict[str, Any]]:
    """The configurations, best first by the mean best dev metric over their seeds (pruned ones last)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[p] for p in params), []).append(row)
    metric = rows[0]["metric"] if rows else "accuracy"
    sign = 1.0 if metric in LOWER_IS_BETTER else -1.0
    ranking = []
    for values, members in groups.items():
        scores = [m["best"] for m in members if m["best"] is not None]
        ranking.append({"params": dict(zip(params, values, strict=True)), "trials": [m["trial"] for m in members],
                        "seeds": [m["seed"] for m in members], "values": scores,
                        "mean": statistics.fmean(scores) if scores else None,
                        "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                        "pruned": any(m["status"] == "pruned" for m in members)})
    ranking.sort(key=lambda g: (g["pruned"], g["mean"] is None, sign * (g["mean"] or 0.0)))
    for place, group in enumerate(ranking, start=1):
        group["rank"] = place
    return ranking


def best_trial(ranking: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best seed's trial of the best-ranked configuration (its best/ becomes OUT/best)."""
    if not ranking or ranking[0]["mean"] is None:
        return None
    members = [r for r in rows if r["trial"] in ranking[0]["trials"] and r["best"] is not None]
    sign = 1.0 if members[0]["metric"] in LOWER_IS_BETTER else -1.0
    return min(members, key=lambda r: sign * r["best"])


def write_outputs(cfg: SweepOptions, dims: list[Dimension], root: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """trials.csv, sweep.json, sweep.png and best/ in `root` (main process); returns sweep.json's content."""
    import pandas as pd

    from bertkit import plots

    params = [d.flag[2:] for d in dims]
    table = [{k: v for k, v in row.items() if k != "history"} for row in rows]
    with atomic.atomic_path(root / "trials.csv") as tmp:
        pd.DataFrame(table, columns=["trial", *params, *CSV_FIXED]).to_csv(tmp, index=False)
    ranking = rank(table, params)
    best = best_trial(ranking, table)
    if best is not None:
        copy_model(root / "trials" / best["trial"] / "best", root / "best")
    metric = table[0]["metric"] if table else cfg.metric_for_best
    summary = {"search": cfg.search, "space": [d.to_json() for d in dims], "metric": metric,
               "direction": "min" if metric in LOWER_IS_BETTER else "max", "seeds": cfg.seeds,
               "trials": len(table), "pruned": sum(r["status"] == "pruned" for r in table),
               "best": None if best is None else {**best, "rank": 1, "model": "best"},
               "ranking": ranking, "rows": table,
               "outputs": {"best": "best", "trials.csv": "trials.csv", "sweep.json": "sweep.json",
                           "figure": "sweep.png", "trials": "trials"}}
    atomic.write_json_atomic(root / "sweep.json", summary)
    if table:
        plots.sweep_figure(table, params, metric, root / "sweep.png",
                           f"sweep: dev {metric} ({cfg.search}, {len(table)} trials)")
    return summary


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
