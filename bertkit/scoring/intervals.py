"""Bootstrap 95% intervals of the built-in metrics, for every problem shape.

The dev (or test) rows are resampled with replacement `n_boot` times; each resample is a row of counts (how often
each row was drawn), so every metric is a weighted sum over the rows it already has: a confusion matrix per
resample (single-label), weighted moments (regression), weighted tag counts (multi-label). Spearman and ROC-AUC,
which rank, are computed per resample. The resamples are drawn exactly as `rng.integers(0, n, (n_boot, n))` with
`default_rng(seed)` draws them, in chunks of rows (the same stream: memory stays bounded for large dev sets).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from bertkit.scoring.table import shape_of

CHUNK = 100
"""Resamples per chunk (a chunk of counts is CHUNK x rows)."""


def resample_counts(n: int, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Chunks of (resamples, n) draw counts: row b of all chunks is resample b of `integers(0, n, (n_boot, n))`."""
    rng = np.random.default_rng(seed)
    for start in range(0, n_boot, CHUNK):
        size = min(CHUNK, n_boot - start)
        idx = rng.integers(0, n, size=(size, n))
        offsets = idx + np.arange(size)[:, None] * n
        yield np.bincount(offsets.ravel(), minlength=size * n).reshape(size, n).astype(np.float64)


def bootstrap_interval(task: str, metric: str, y_true: Any, decisions: Any, outputs: Any = None, *,
                       n_boot: int = 1000, seed: int = 42) -> tuple[float, float] | None:
    """Percentile 95% interval of one built-in `metric` of problem shape `task`; None when it is not defined here.

    `decisions`: class ids (single-label), predicted numbers (regression) or the 0/1 tag matrix (multi-label);
    `outputs`: class probabilities, needed by roc_auc only."""
    return _intervals(task, [metric], y_true, decisions, outputs, n_boot, seed).get(metric)


def bootstrap_intervals(task: str, y_true: Any, decisions: Any, outputs: Any = None, *, n_labels: int = 2,
                        n_boot: int = 1000, seed: int = 42) -> dict[str, list[float]]:
    """{metric: [low, high]} for every built-in metric of the shape that can be bootstrapped on these rows (the
    resamples are drawn once and every metric scored on the same ones)."""
    metrics = [m for m in shape_of(task).scored(n_labels) if m != "loss"]
    found = _intervals(task, metrics, y_true, decisions, outputs, n_boot, seed)
    return {m: [round(low, 6), round(high, 6)] for m, (low, high) in found.items()}


def _intervals(task: str, metrics: list[str], y_true: Any, decisions: Any, outputs: Any, n_boot: int,
               seed: int) -> dict[str, tuple[float, float]]:
    """The intervals of `metrics` (those defined here) on one stream of resamples."""
    y, pred = np.asarray(y_true), np.asarray(decisions)
    fns = {m: fn for m in metrics if len(y) and (fn := _score_fn(task, m, y, pred, outputs)) is not None}
    scores: dict[str, list[np.ndarray]] = {m: [] for m in fns}
    for w in resample_counts(len(y), n_boot, seed) if fns else ():
        for metric, fn in fns.items():
            scores[metric].append(fn(w))
    found = {}
    for metric, parts in scores.items():
        values = np.concatenate(parts)
        if len(values):
            low, high = np.percentile(values, [2.5, 97.5])
            found[metric] = (float(low), float(high))
    return found


def _score_fn(task: str, metric: str, y: np.ndarray, pred: np.ndarray, outputs: Any) -> Any:
    """fn(resample counts chunk) -> that chunk's scores of `metric`; None when it is not bootstrapped here."""
    if task == "regression":
        return _regression(metric, y.astype(np.float64).reshape(-1), pred.astype(np.float64).reshape(-1))
    if task == "multi_label":
        return _multilabel(metric, y.astype(bool), pred.astype(bool))
    return _single_label(metric, y.astype(np.int64), pred.astype(np.int64), outputs)


def _single_label(metric: str, y: np.ndarray, pred: np.ndarray, outputs: Any) -> Any:
    """Scores from one confusion matrix per resample (sklearn's definitions: macro over every label, 0 where a
    denominator is 0; MCC 0 where undefined)."""
    if metric == "roc_auc":
        return None if outputs is None or len(np.unique(y)) < 2 else _ranked(y, np.asarray(outputs)[:, 1], "auc")
    k = int(max(y.max(), pred.max(), 1)) + 1
    onehot = np.zeros((len(y), k * k))
    onehot[np.arange(len(y)), y * k + pred] = 1.0

    def fn(w: np.ndarray) -> np.ndarray:
        cm = (w @ onehot).reshape(len(w), k, k)
        diag, true, predicted, n = (np.diagonal(cm, axis1=1, axis2=2), cm.sum(2), cm.sum(1), cm.sum((1, 2)))
        if metric == "accuracy":
            return diag.sum(1) / n
        if metric == "mcc":
            cov = n * diag.sum(1) - (true * predicted).sum(1)
            denom = np.sqrt((n**2 - (predicted**2).sum(1)) * (n**2 - (true**2).sum(1)))
            return np.where(denom > 0, cov / np.where(denom > 0, denom, 1), 0.0)
        per = {"precision": _ratio(diag, predicted), "recall": _ratio(diag, true),
               "f1": _ratio(2 * diag, true + predicted), "binary_f1": _ratio(2 * diag, true + predicted)}[metric]
        return per[:, 1] if metric == "binary_f1" else per.mean(1)

    return fn if metric in ("accuracy", "mcc", "precision", "recall", "f1", "binary_f1") else None


def _regression(metric: str, y: np.ndarray, pred: np.ndarray) -> Any:
    """Weighted Pearson, MSE and MAE per resample; Spearman ranked per resample. A resample with a constant side
    has correlation 0, as the metric says of constant predictions."""
    if metric == "spearman":
        return _ranked(y, pred, "spearman")

    def fn(w: np.ndarray) -> np.ndarray:
        n = w.sum(1)
        if metric in ("mse", "mae"):
            err = (pred - y) ** 2 if metric == "mse" else np.abs(pred - y)
            return (w @ err) / n
        my, mp = (w @ y) / n, (w @ pred) / n
        cov = w @ (y * pred) / n - my * mp
        vy, vp = np.maximum(w @ (y * y) / n - my**2, 0), np.maximum(w @ (pred * pred) / n - mp**2, 0)
        denom = np.sqrt(vy * vp)
        return np.where(denom > 1e-15, cov / np.where(denom > 1e-15, denom, 1), 0.0)

    return fn if metric in ("pearson", "mse", "mae") else None


def _multilabel(metric: str, truth: np.ndarray, pred: np.ndarray) -> Any:
    """Micro/macro F1 from weighted tag counts, subset accuracy and Hamming loss from weighted row facts."""
    tp, fp, fn_ = (truth & pred).astype(float), (~truth & pred).astype(float), (truth & ~pred).astype(float)
    exact = (truth == pred).all(1).astype(float)
    wrong = (truth != pred).mean(1)

    def fn(w: np.ndarray) -> np.ndarray:
        if metric == "subset_accuracy":
            return (w @ exact) / w.sum(1)
        if metric == "hamming_loss":
            return (w @ wrong) / w.sum(1)
        t, f = w @ tp, (w @ fp) + (w @ fn_)
        if metric == "micro_f1":
            return _ratio(2 * t.sum(1), 2 * t.sum(1) + f.sum(1))
        return _ratio(2 * t, 2 * t + f).mean(1)

    return fn if metric in ("micro_f1", "macro_f1", "subset_accuracy", "hamming_loss") else None


def _ranked(y: np.ndarray, score: np.ndarray, kind: str) -> Any:
    """ROC-AUC (Mann-Whitney on midranks) or Spearman (Pearson of midranks) of each resample, from each row's
    midrank in its resample: scipy's and sklearn's definitions with rows repeated as drawn."""
    y_float = np.asarray(y, np.float64)

    def fn(w: np.ndarray) -> np.ndarray:
        n = w.sum(1)
        if kind == "auc":
            ranks, pos = _midranks(w, score), (y_float == y_float.max()).astype(np.float64)
            n_pos = w @ pos
            n_neg = n - n_pos
            u = (w * ranks) @ pos - n_pos * (n_pos + 1) / 2
            both = (n_pos > 0) & (n_neg > 0)  # a resample with one class has no AUC: left out
            return (u / np.maximum(n_pos * n_neg, 1))[both]
        ry, rp = _midranks(w, y_float), _midranks(w, score)
        my, mp = (w * ry).sum(1) / n, (w * rp).sum(1) / n
        cov = (w * ry * rp).sum(1) / n - my * mp
        vy = np.maximum((w * ry * ry).sum(1) / n - my**2, 0)
        vp = np.maximum((w * rp * rp).sum(1) / n - mp**2, 0)
        denom = np.sqrt(vy * vp)
        return np.where(denom > 1e-12, cov / np.where(denom > 1e-12, denom, 1), 0.0)

    return fn


def _midranks(w: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(resamples, rows): each row's average rank among the drawn rows of its resample (ties share their mean)."""
    values = np.asarray(values, np.float64).reshape(-1)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    group = np.cumsum(np.r_[True, sorted_values[1:] != sorted_values[:-1]]) - 1
    counts = np.add.reduceat(w[:, order], starts, axis=1)
    rank = np.cumsum(counts, axis=1) - counts + (counts + 1) / 2
    ranks = np.empty_like(w)
    ranks[:, order] = rank[:, group]
    return ranks


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
