"""Probes for the problem shapes beyond one class per row, on arrays: the outputs, decisions and scores of ridge
regression for numbers and one-vs-rest logistic regression for tag sets (fitted by `bertkit.probe.fit`), their
bootstrap intervals, no-BERT baselines and saved form.

`bertkit.commands.probe` runs the search, baselines and saved probe for every shape and calls these where the shape
matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bertkit.probe.fit import MAX_ITER, ProbeFit, constant_tags_allowed
from bertkit.scoring import metrics
from bertkit.scoring.intervals import bootstrap_interval

CONSTANT_LOGIT = 30.0
"""The saved logit of a tag that is always (or never) on in training: sigmoid(+-30) is 1 (or 0) to 13 digits."""


def shaped_outputs(fit: ProbeFit, X: np.ndarray) -> np.ndarray:
    """The probe's outputs: predicted numbers as one column (regression), or one probability per tag."""
    X = np.asarray(X, dtype=np.float32)
    if fit.task == "regression":
        return np.asarray(fit.model.predict(X), dtype=np.float64).reshape(len(X), 1)
    return np.asarray(fit.model.predict_proba(X), dtype=np.float64)


def tune_threshold(fit: ProbeFit, X_dev: np.ndarray, y_dev: np.ndarray, label_names: Sequence[str],
                   mode: str) -> None:
    """Set a tag probe's decision threshold: --threshold as given, or tuned on dev (objectives.MultiLabel's grid
    and rule, as fine-tuning tunes it)."""
    from bertkit.scoring.shapes import MultiLabel

    threshold = MultiLabel(None, y_dev, list(label_names), mode).tuned_threshold(shaped_outputs(fit, X_dev))
    fit.threshold = threshold.tolist() if isinstance(threshold, np.ndarray) else float(threshold)


def decisions(fit: ProbeFit, outputs: np.ndarray) -> np.ndarray:
    """Numbers (regression, one per row) or the 0/1 tag matrix at the probe's threshold."""
    if fit.task == "regression":
        return outputs[:, 0]
    return (outputs >= np.asarray(0.5 if fit.threshold is None else fit.threshold)).astype(np.int64)


def score_shaped(fit: ProbeFit, X: np.ndarray, y: np.ndarray, label_names: Sequence[str]) -> dict[str, Any]:
    """Regression (Pearson, Spearman, MSE, MAE) or multi-label metrics (micro/macro F1, subset accuracy, Hamming
    loss, per tag; at the probe's threshold, which the result records) of `fit` on (X, y)."""
    predicted = decisions(fit, shaped_outputs(fit, X))
    if fit.task == "regression":
        return metrics.regression_metrics(y, predicted)
    return {**metrics.multilabel_metrics(y, predicted, label_names), "threshold": fit.threshold}


def bootstrap_shaped_ci(task: str, y_true: np.ndarray, predicted: np.ndarray, *, n_boot: int = 1000,
                        seed: int = 42) -> tuple[float, float]:
    """Percentile 95% interval of dev Pearson (numbers) or micro-F1 (tags), resampling dev rows `n_boot` times
    (`bertkit.scoring.intervals`)."""
    metric = "pearson" if task == "regression" else "micro_f1"
    interval = bootstrap_interval(task, metric, y_true, predicted, n_boot=n_boot, seed=seed)
    return interval if interval is not None else (0.0, 0.0)


# ---------------------------------------------------------------- baselines


def trivial_baseline(task: str, y_train: np.ndarray, y_dev: np.ndarray, label_names: Sequence[str]) -> dict[str, Any]:
    """The no-feature yardstick: the training mean for every row (numbers), or each tag's majority value in
    training (tags: on for every row where more than half the training rows have it, else off)."""
    if task == "regression":
        return metrics.regression_metrics(y_dev, np.full(len(y_dev), float(np.mean(y_train))))
    majority = (np.asarray(y_train).mean(axis=0) > 0.5).astype(np.int64)
    return metrics.multilabel_metrics(y_dev, np.tile(majority, (len(y_dev), 1)), label_names)


def tfidf_shaped_baseline(task: str, train_texts: Sequence[str], y_train: np.ndarray, dev_texts: Sequence[str],
                          y_dev: np.ndarray, label_names: Sequence[str], seed: int = 42) -> dict[str, Any]:
    """TF-IDF (word 1-2 grams, sublinear tf) + ridge (numbers) or one-vs-rest logistic regression at threshold 0.5
    (tags) on the raw text: the no-BERT yardstick, with the classifier baseline's settings."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.multiclass import OneVsRestClassifier

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    X_train, X_dev = vectorizer.fit_transform(train_texts), vectorizer.transform(dev_texts)
    if task == "regression":
        return metrics.regression_metrics(y_dev, Ridge(alpha=1.0).fit(X_train, y_train).predict(X_dev))
    with constant_tags_allowed():
        ovr = OneVsRestClassifier(LogisticRegression(C=10.0, max_iter=MAX_ITER, random_state=seed)).fit(X_train, y_train)
    return metrics.multilabel_metrics(y_dev, ovr.predict_proba(X_dev) >= 0.5, label_names)


# ---------------------------------------------------------------- saved form


def shaped_arrays(fit: ProbeFit) -> tuple[np.ndarray, np.ndarray]:
    """(coef (outputs, d), intercept (outputs,)) of a fitted regression or tag probe: one row per output. A tag that
    is constant in training (sklearn keeps a constant predictor for it) gets zero weights and a +-30 logit."""
    head = fit.model.steps[-1][1]
    if fit.task == "regression":
        return np.asarray(head.coef_, np.float64).reshape(1, -1), np.asarray([float(head.intercept_)])
    d = int(fit.scaler.mean_.shape[0])
    coefs, intercepts = [], []
    for est in head.estimators_:
        if hasattr(est, "coef_"):
            coefs.append(np.asarray(est.coef_, np.float64).reshape(-1))
            intercepts.append(float(np.asarray(est.intercept_).reshape(-1)[0]))
        else:
            coefs.append(np.zeros(d))
            intercepts.append(CONSTANT_LOGIT if float(np.asarray(est.y_).reshape(-1)[0]) > 0.5 else -CONSTANT_LOGIT)
    return np.stack(coefs), np.asarray(intercepts)
