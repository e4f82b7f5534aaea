"""The constant baseline of a dev split: what a model that learnt nothing but the label counts scores.

Single-label: always the dev split's most frequent class (its class shares as the probabilities, so the dev loss is
their entropy, MCC 0, ROC-AUC 0.5); regression: always the mean dev target (correlations 0, mse its variance);
multi-label: each tag's dev share (the tuned threshold then picks the best constant decision). The baseline is
scored by the objective's own `score`, so it is the same metric, computed the same way, as the run's dev metric.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bertkit.scoring import metrics

EPS = 1e-6


def constant_logits(task: str, y_dev: np.ndarray, n_outputs: int) -> np.ndarray:
    """Logits of the constant predictor of `y_dev` (one row per dev row, all the same; see the module docstring)."""
    y = np.asarray(y_dev)
    n = len(y)
    if task == "regression":
        return np.full((n, 1), float(np.mean(y)) if n else 0.0)
    if task == "multi_label":
        share = np.clip(y.astype(np.float64).mean(axis=0), EPS, 1 - EPS)
        return np.tile(np.log(share / (1 - share)), (n, 1))
    counts = np.bincount(y.astype(int), minlength=n_outputs)[:n_outputs].astype(np.float64)
    return np.tile(np.log(np.clip(counts / max(n, 1), EPS, None)), (n, 1))


@dataclass(frozen=True)
class Baseline:
    """The constant predictor's dev `metric` (`value`), its dev loss, and what it predicts (`predicts`)."""

    metric: str
    value: float
    loss: float | None
    predicts: str

    def beaten_by(self, value: float) -> bool:
        """Whether a dev score `value` is strictly better than the baseline (lower for losses and errors)."""
        return metrics.is_better(value, self.value, self.metric)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def majority_baseline(objective: Any, task: str, metric: str) -> Baseline | None:
    """The constant baseline of the objective's dev split for --metric-for-best `metric` (None where the metric is
    not a built-in score of a constant prediction, e.g. an evaluate module's, or the dev split is empty)."""
    scorer = getattr(objective, "hard", objective)  # distillation: scored against the hard labels
    y_dev = np.asarray(scorer.y_dev)
    if not len(y_dev):
        return None
    names = list(scorer.label_names)
    scored = scorer.score(constant_logits(task, y_dev, scorer.num_outputs)).metrics
    value = metrics.best_value(scored, metric)
    if value is None or metric not in scored:
        return None
    if task == "regression":
        predicts = f"always the mean dev target {float(np.mean(y_dev)):.4g}"
    elif task == "multi_label":
        predicts = "each tag's dev share"
    else:
        counts = np.bincount(y_dev.astype(int), minlength=len(names))
        top = int(np.argmax(counts))
        predicts = f"always {names[top]!r}, {counts[top]} of {len(y_dev)} dev rows"
    loss = scored.get("loss")
    return Baseline(metric, float(value), None if loss is None else float(loss), predicts)
