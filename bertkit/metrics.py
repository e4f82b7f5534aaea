"""Classification metrics from scikit-learn (works offline; the `evaluate` library fetches metric scripts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn import metrics as skm

METRIC_NAMES = ("accuracy", "f1", "mcc", "precision", "recall", "roc_auc")


def classification_metrics(
    y_true: Sequence[int], y_pred: Sequence[int], proba: np.ndarray | None = None, label_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """accuracy, macro-F1, MCC, macro precision/recall, ROC-AUC (binary, with probabilities), per-class report
    and confusion matrix (rows = true, columns = predicted)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    n_labels = len(label_names) if label_names is not None else int(max(y_true.max(), y_pred.max())) + 1
    labels = list(range(n_labels))
    names = [str(n) for n in label_names] if label_names is not None else [str(i) for i in labels]
    result: dict[str, Any] = {
        "n": int(len(y_true)),
        "accuracy": float(skm.accuracy_score(y_true, y_pred)),
        "f1": float(skm.f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
        "mcc": float(skm.matthews_corrcoef(y_true, y_pred)),
        "precision": float(skm.precision_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
        "recall": float(skm.recall_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
    }
    if proba is not None and n_labels == 2 and len(np.unique(y_true)) == 2:
        result["roc_auc"] = float(skm.roc_auc_score(y_true, np.asarray(proba)[:, 1]))
    result["per_class"] = skm.classification_report(
        y_true, y_pred, labels=labels, target_names=names, output_dict=True, zero_division=0
    )
    result["confusion_matrix"] = skm.confusion_matrix(y_true, y_pred, labels=labels).tolist()
    result["labels"] = names
    return result


def headline(metrics: dict[str, Any]) -> dict[str, float]:
    """Just the scalar scores (for tables and comparisons)."""
    return {k: metrics[k] for k in METRIC_NAMES if k in metrics}
