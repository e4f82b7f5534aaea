"""What a run tells its user when training goes wrong, in one message each: a dev metric not above the constant
(majority-class) baseline after an evaluation (logged as a warning; the run goes on), and a NaN/inf loss, gradient,
weight or logit (the run stops). Both name the likely cause and the fix. `session` and `state` are the loop's
(`bertkit.training.loop.Session`, `TrainState`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bertkit.io import checkpoint_folders
from bertkit.training.learning_rate import lr_text


def baseline_warning(session: Any, state: Any, value: float, train_loss: float) -> str:
    """One line: the dev metric is not above the constant baseline; the likely cause (the training loss still at the
    constant predictor's: --lr too low or too few steps; fallen: --lr too high, or too few rows) and the fix."""
    cfg, base = session.cfg, session.baseline
    assert base is not None
    lr, metric = float(cfg.training.lr), cfg.training.metric_for_best
    name = "majority-class baseline" if session.label_map.task == "single_label" else "constant baseline"
    head = (f"dev {metric} {value:.4f} at step {state.global_step} is not above the {name} {base.value:.4f} "
            f"({base.predicts}): the model has learnt nothing beyond the label counts.")
    comparable = base.loss is not None and not hasattr(session.objective, "hard") and math.isfinite(train_loss)
    if comparable and train_loss < 0.9 * base.loss:
        return (f"{head} The training loss fell to {train_loss:.3f} (constant predictor: {base.loss:.3f}) but dev did "
                f"not follow: --lr {lr_text(lr)} may be too high for this model, or {state.train_rows} training rows seen are "
                f"too few. Fix: --lr {lr_text(lr / 2)}, or more training rows (--limit) and --epochs.")
    loss = f"The training loss {train_loss:.3f} is still near the constant predictor's {base.loss:.3f}: " if comparable \
        else ""
    return (f"{head} {loss}--lr {lr_text(lr)} is likely too low for this model, or {state.global_step} optimizer steps are "
            f"too few. Fix: --lr {lr_text(lr * 2)}, or more --epochs (now {cfg.training.epochs}) or training rows "
            f"(--limit).")


def not_finite_message(session: Any, what: str, step: int | None, epoch: int | None) -> str:
    """`step`: the optimizer step (1-based) after which `what` was found NaN/inf; `epoch`: 0-based."""
    cfg = session.cfg
    where = f" at step {step} (epoch {(epoch or 0) + 1})" if step is not None else ""
    last = checkpoint_folders.latest_checkpoint(session.out)
    kept = f"The last good checkpoint, {last}, is kept." if last else "No checkpoint was saved before it."
    causes = " or fp16 overflow (use --precision bf16 or fp32)" if cfg.compute.precision == "fp16" else ""
    if session.label_map.task == "regression":  # huge targets are refused before training; say what these span
        y = np.asarray(getattr(getattr(session.objective, "hard", session.objective), "y_train", []), np.float64)
        causes += f" (the regression targets span {y.min():g} to {y.max():g}: if that is wide, scale them)" if y.size else ""
    return (f"{what[0].upper() + what[1:]} became NaN/inf{where}: the run diverged, most likely because --lr "
            f"{float(cfg.training.lr):g} is too high{causes}. {kept} Re-run with a smaller --lr (the BERT paper uses "
            f"2e-5 to 5e-5) and --overwrite, or a new --out.")
