"""The per-problem-shape facts, one record per shape (single-label / regression / multi-label): the built-in metrics
it scores, its headline metric, the columns of its tables, which of its metrics are better lower, and what its
decisions are. Everything that states one of these facts reads it from `SHAPE`.

Plain data with no imports, so that every layer that names a shape's metrics (config's option checks, scoring,
training, probe, cli) can read it. transformers' `problem_type` of each shape is the data layer's
(`bertkit.data.labels`): it is how a saved model's labels are read back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shape:
    """What a problem shape scores and shows."""

    name: str
    """The TASKS name: single_label, regression, multi_label."""
    metrics: tuple[str, ...]
    """Its built-in dev metrics (`bertkit.scoring.metrics`), without `loss` (every shape's)."""
    headline: str
    """The metric that picks the best checkpoint when no --metric-for-best is given, and the probe's best cell."""
    table_metrics: tuple[str, ...]
    """The dev metrics of the per-epoch training table and the summary line."""
    probe_keys: tuple[str, ...]
    """The scores of one probe sweep row (the headline first) and of the probe table's columns."""
    decisions: str
    """What --metric evaluate modules compare (predictions and references alike); {last} and {n} are filled in."""
    lower_is_better: tuple[str, ...] = ()
    """Its metrics that are better lower (errors and losses); `loss` is every shape's."""
    two_class_metrics: tuple[str, ...] = ()
    """Defined for two classes only (binary_f1: the second label's F1; roc_auc: needs the positive probability)."""

    def scored(self, n_labels: int = 2) -> tuple[str, ...]:
        """The dev metrics of this shape, `loss` last (single-label with other than two classes: no binary_f1 and
        no roc_auc)."""
        return tuple(m for m in (*self.metrics, "loss") if n_labels == 2 or m not in self.two_class_metrics)


SHAPE = {
    "single_label": Shape("single_label", ("accuracy", "f1", "binary_f1", "mcc", "precision", "recall", "roc_auc",
                                           "ece"),
                          headline="accuracy", table_metrics=("accuracy", "f1", "mcc"),
                          probe_keys=("accuracy", "f1", "mcc"),
                          decisions="class ids, one int per row, 0..{last}", lower_is_better=("ece",),
                          two_class_metrics=("binary_f1", "roc_auc")),
    "regression": Shape("regression", ("pearson", "spearman", "mse", "mae"),
                        headline="pearson", table_metrics=("pearson", "spearman", "mae"),
                        probe_keys=("pearson", "spearman", "mse", "mae"),
                        decisions="numbers, one float per row", lower_is_better=("mse", "mae")),
    "multi_label": Shape("multi_label", ("micro_f1", "macro_f1", "subset_accuracy", "hamming_loss"),
                         headline="micro_f1", table_metrics=("micro_f1", "macro_f1", "subset_accuracy"),
                         probe_keys=("micro_f1", "macro_f1", "subset_accuracy", "hamming_loss"),
                         decisions="0/1 tag rows, one list of {n} ints per row", lower_is_better=("hamming_loss",)),
}
"""Each problem shape's facts, by its TASKS name."""

SPAN_METRICS = ("exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact", "best_f1")
"""The scores of extractive question answering (the spans family, `bertkit.scoring.answer_objective`), in %: the
official SQuAD scripts' exact match and F1, and for SQuAD v2.0 their answerable (HasAns) and unanswerable (NoAns)
parts and the scores at the best no-answer threshold (best_*)."""

BUILT_IN = tuple(dict.fromkeys([*(name for shape in SHAPE.values() for name in shape.metrics), *SPAN_METRICS]))
"""The built-in metric names, shape by shape, then question answering's; `loss` is every shape's."""
LOWER_IS_BETTER = frozenset({"loss", *(name for shape in SHAPE.values() for name in shape.lower_is_better)})


def shape_of(task: str) -> Shape:
    """The facts of problem shape `task`; single-label's for any other name."""
    return SHAPE.get(task, SHAPE["single_label"])


# ---------------------------------------------------------------- what a shape's logits mean (light: no torch)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a (rows, classes) array, stable for large logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Element-wise logistic function, stable for large |logits|."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, dtype=np.float64)))
