"""What a finished fine-tuning run reports (`summary`: metrics.json, typed) and leaves on disk
(`write_finished_run`: curves.png and the best model's dev plots, dev_errors.csv, training_table.csv, metrics.json; its
checkpoints removed unless kept; an --overwrite run's output in place of the previous one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertkit.io import atomic, checkpoint_folders
from bertkit.scoring.calibration import TemperatureFit
from bertkit.scoring.predictions import write_errors_csv
from bertkit.training.cards import test_summary
from bertkit.training.loop import Session, TrainState
from bertkit.training.outcome import RunSummary, TrainingRun


def summary(session: Session, state: TrainState, restored: dict[str, Any] | None, *, notes: list[str],
            same_as_best: bool, calibration: TemperatureFit | None, test: Any) -> RunSummary:
    """metrics.json, typed: the best and final dev scores, history, throughput, outputs, how --lr was chosen,
    whether final/ holds the best weights, the `notes`; --calibrate's fit and the --test scores when there are."""
    record = _summary(session, state, restored)
    record.update(learning_rate=session.learning_rate, final_same_as_best=same_as_best,
                  checkpoints_kept=session.cfg.output.keep_checkpoints, notes=notes)
    if calibration is not None:
        record.update(calibration=calibration.to_json())
    if session.card is not None and session.card.test is not None:
        record.update(best_test=state.best_test, final_test=test_summary(test))
    return RunSummary.of(record, calibration)


def _summary(session: Session, state: TrainState, restored: dict[str, Any] | None) -> dict[str, Any]:
    cfg, accelerator = session.cfg, session.accelerator
    forward = "fast" if accelerator.unwrap_model(session.net).fast else "transformers"
    return {
        "finished": True, "task": session.label_map.task, "best_metric_name": cfg.training.metric_for_best,
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
        "outputs": {name: str(Path(cfg.output.out or session.out) / name) for name in
                    ("best", "final", "metrics.jsonl", "training_table.csv", "curves.png",
                     *REPORT_PLOTS.get(session.label_map.task, ()), "dev_errors.csv")},
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
                "multi_label": (), "tags": ()}
"""The plots of the best model's dev predictions, per problem shape (multi-label and tags: the per-tag or per-type
table is in metrics.json)."""


def write_finished_run(session: Session, state: TrainState, run: TrainingRun) -> None:
    """What the finished `run` leaves (main process): its figures (curves.png, the best model's dev plots),
    dev_errors.csv and training_table.csv, then metrics.json - the run is finished once it is there -, its
    checkpoints/ removed unless --keep-checkpoints, and an --overwrite run's output put in place of the previous one."""
    import pandas as pd

    from bertkit import plots

    out, names, task = session.out, session.objective.label_names, session.label_map.task
    proba = np.load(out / "best_dev_proba.npy")
    plots.training_figures(out, state.history, session.cfg.training.metric_for_best,
                           f"{session.run.command} {getattr(session.cfg, 'model', '')}", state.train_log,
                           state.best_dev, session.objective.y_dev, proba, names, task, state.best_step)
    if hasattr(session.objective, "write_errors"):  # tags: one row per wrong word (`scoring.tags`)
        session.objective.write_errors(out / "dev_errors.csv", proba)
    else:
        write_errors_csv(out / "dev_errors.csv", session.dev, proba, names, y_true=session.objective.y_dev, task=task,
                         threshold=(state.best_dev or {}).get("threshold", 0.5))
    with atomic.atomic_path(out / "training_table.csv") as tmp:
        pd.DataFrame(state.epoch_table).to_csv(tmp, index=False)
    atomic.write_json_atomic(out / "metrics.json", run.summary.to_json())
    if not run.summary.checkpoints_kept:  # after metrics.json says finished: a kill before leaves a resumable run
        checkpoint_folders.remove_finished_checkpoints(out)
    session.run.commit()  # an --overwrite run: the new output replaces the previous one only now
