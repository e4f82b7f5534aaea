"""What a finished fine-tuning run reports: the metrics.json summary, and training_table.csv, dev_errors.csv,
curves.png and the best model's dev plot (confusion matrix or true-vs-predicted scatter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertkit.io import atomic
from bertkit.scoring.predictions import write_errors_csv
from bertkit.training.loop import Session, TrainState


def summary(session: Session, state: TrainState, restored: dict[str, Any] | None) -> dict[str, Any]:
    cfg, accelerator = session.cfg, session.accelerator
    forward = "fast" if accelerator.unwrap_model(session.net).fast else "transformers"
    return {
        "finished": True, "task": session.label_map.task, "best_metric_name": cfg.metric_for_best,
        "best_metric": state.best_metric,
        "best_step": state.best_step, "best_dev": state.best_dev,
        "final_dev": state.history[-1] if state.history else None, "global_step": state.global_step,
        "steps_per_epoch": session.steps_per_epoch, "epochs_run": state.epoch, "stopped_early": state.stopped_early,
        "stop_reason": state.stop_reason,
        "train_rows_seen": state.train_rows, "train_seconds": round(state.train_seconds, 2),
        "train_samples_per_second": round(state.train_rows / max(state.train_seconds, 1e-9), 2),
        "processes": accelerator.num_processes, "mixed_precision": accelerator.mixed_precision, "forward": forward,
        "step_launch": _step_launch(session),
        "history": state.history, "train_log": state.train_log, "epoch_table": state.epoch_table, "resumed_from": restored,
        "trackers": session.tracker.where if session.tracker is not None else {},  # where the run is logged
        "baseline": session.baseline.to_json() if session.baseline is not None else None,
        "outputs": {name: str(Path(cfg.out or session.out) / name) for name in
                    ("best", "final", "metrics.jsonl", "training_table.csv", "curves.png",
                     *REPORT_PLOTS[session.label_map.task], "dev_errors.csv")},
    }


def _step_launch(session: Session) -> dict[str, Any]:
    """How the optimizer steps were launched: eagerly, or replayed as CUDA graphs (shapes captured, micro-batches
    of rarer shapes that ran eagerly, the capture's seconds - with `compiled_layers` the compile time too)."""
    runner = session.graphs
    if runner is None:
        return {"mode": "eager"}
    return {"mode": "cuda_graphs", "captured_shapes": runner.captured_shapes,
            "eager_micro_batches": runner.eager_steps, "capture_seconds": round(runner.capture_seconds, 2),
            "compiled_layers": getattr(runner.net, "layer", None) is not None}


REPORT_PLOTS = {"single_label": ("confusion_matrix.png", "reliability.png"), "regression": ("dev_scatter.png",),
                "multi_label": ()}
"""The plots of the best model's dev predictions, per problem shape (multi-label: the per-tag table is in
metrics.json)."""


def write_reports(session: Session, state: TrainState) -> None:
    """dev_errors.csv, the run's figures (curves.png, the best model's dev plots) and training_table.csv (main
    process)."""
    import pandas as pd

    from bertkit import plots

    out, names, task = session.out, session.objective.label_names, session.label_map.task
    proba = np.load(out / "best_dev_proba.npy")
    write_errors_csv(out / "dev_errors.csv", session.dev, proba, names, y_true=session.objective.y_dev, task=task,
                     threshold=(state.best_dev or {}).get("threshold", 0.5))
    plots.training_figures(out, state.history, session.cfg.metric_for_best,
                           f"{session.run.command} {getattr(session.cfg, 'model', '')}", state.train_log,
                           state.best_dev, session.objective.y_dev, proba, names, task, state.best_step)
    with atomic.atomic_path(out / "training_table.csv") as tmp:
        pd.DataFrame(state.epoch_table).to_csv(tmp, index=False)
