"""K-fold cross-validation of the probes' C, on the engine (`bertkit.probe.engine`): the folds scikit-learn's
`StratifiedKFold(K)` and `KFold(K)` make without shuffling (data order; `stratified_folds`, `plain_folds`), the
standardisation refit inside every fold (no leakage), and per fold the C grid fitted from the smallest C up, each
C starting from the last one's solution (the regularisation path: neighbouring C values have nearby optima).

Scores per fold and C: accuracy and log-loss for one label per row (`logistic_path_scores`), micro-F1 at 0.5 for
tag sets (`tag_path_scores`), the negative mean squared error for numbers (`ridge_path_scores`, every alpha from
one eigendecomposition per fold)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertkit.probe import engine
from bertkit.probe.heads import LogisticHead, sigmoid

Fold = tuple[np.ndarray, np.ndarray]


def plain_folds(n: int, k: int) -> list[Fold]:
    """(train, test) row indexes of K consecutive folds, the first n % K one row larger (KFold(K))."""
    sizes = np.full(k, n // k, dtype=np.int64)
    sizes[: n % k] += 1
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.arange(n)
    return [(np.concatenate([rows[:bounds[i]], rows[bounds[i + 1]:]]), rows[bounds[i]:bounds[i + 1]])
            for i in range(k)]


def stratified_folds(y: np.ndarray, k: int) -> list[Fold]:
    """(train, test) row indexes of K folds that keep every class's share, in data order: StratifiedKFold(K)'s
    round robin over the sorted labels (classes numbered by first appearance), each class's rows given to the folds
    in blocks."""
    _, first, inverse = np.unique(np.asarray(y), return_index=True, return_inverse=True)
    _, by_appearance = np.unique(first, return_inverse=True)
    encoded = by_appearance[inverse.reshape(-1)]
    ordered = np.sort(encoded)
    allocation = np.asarray([np.bincount(ordered[i::k], minlength=len(first)) for i in range(k)])
    test_fold = np.empty(len(encoded), dtype=np.int64)
    for c in range(len(first)):
        test_fold[encoded == c] = np.arange(k).repeat(allocation[:, c])
    rows = np.arange(len(encoded))
    return [(rows[test_fold != i], rows[test_fold == i]) for i in range(k)]


def standardized_fold(X: np.ndarray, fold: Fold) -> tuple[engine.MemoryRows, np.ndarray]:
    """A fold's training rows standardised by their own statistics (as rows for the engine) and its test rows
    standardised the same way."""
    train = np.ascontiguousarray(X[fold[0]], dtype=np.float32)
    scaler = engine.standardizer_of(engine.array_blocks(train))
    return engine.MemoryRows(scaler.transform_in_place(train)), scaler.transform(X[fold[1]])


def ascending(grid: Sequence[float]) -> list[int]:
    """Grid positions from the smallest C up (ties in grid order): the order a warm-started path runs in."""
    return [int(i) for i in np.argsort(np.asarray(grid, dtype=np.float64), kind="stable")]


def logistic_path_scores(X: np.ndarray, ids: np.ndarray, n_classes: int, grid: Sequence[float], folds: Sequence[Fold],
                         class_weight: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(accuracy, log-loss), each (folds, grid), of the logistic probe at every C of `grid` on every fold (`ids`:
    class ids 0..n_classes-1, every class in every fold's training rows)."""
    accuracy, losses = np.zeros((len(folds), len(grid))), np.zeros((len(folds), len(grid)))
    classes = np.arange(n_classes)
    for k, fold in enumerate(folds):
        rows, Z_test = standardized_fold(X, fold)
        targets = engine.Targets.classes(ids[fold[0]], n_classes, class_weight)
        previous, hessian = None, engine.loss_curvature(rows, targets)
        for i in ascending(grid):
            previous = engine.fit_linear(rows, targets, float(grid[i]), init=previous, loss_hessian=hessian)
            proba = LogisticHead(previous.coef, previous.intercept, classes, float(grid[i])).predict_proba(Z_test)
            truth = ids[fold[1]]
            accuracy[k, i] = float((proba.argmax(axis=1) == truth).mean())
            picked = np.clip(proba[np.arange(len(truth)), truth], np.finfo(np.float64).eps, 1.0)
            losses[k, i] = float(-np.log(picked).mean())
    return accuracy, losses


def tag_path_scores(X: np.ndarray, Y: np.ndarray, grid: Sequence[float], folds: Sequence[Fold]) -> np.ndarray:
    """Micro-F1 (folds, grid) of one-vs-rest logistic regression deciding at probability 0.5; a tag constant in a
    fold's training rows is predicted as that constant there."""
    scores = np.zeros((len(folds), len(grid)))
    for k, fold in enumerate(folds):
        rows, Z_test = standardized_fold(X, fold)
        Y_train, Y_test = Y[fold[0]], Y[fold[1]]
        varying = np.flatnonzero(Y_train.min(axis=0) != Y_train.max(axis=0))
        predicted = np.tile(Y_train[0], (len(Z_test), 1)).astype(np.int64)
        targets, previous = engine.Targets.columns(Y_train[:, varying]), None
        hessian = engine.loss_curvature(rows, targets)
        for i in ascending(grid):
            previous = engine.fit_linear(rows, targets, float(grid[i]), init=previous, loss_hessian=hessian)
            decided = sigmoid(Z_test @ previous.coef.T + previous.intercept) > 0.5
            predicted[:, varying] = decided
            scores[k, i] = micro_f1(Y_test, predicted)
    return scores


def micro_f1(truth: np.ndarray, predicted: np.ndarray) -> float:
    """2 TP / (2 TP + FP + FN) over every (row, tag); 0 when there is nothing to find and nothing found."""
    truth, predicted = np.asarray(truth).astype(bool), np.asarray(predicted).astype(bool)
    tp = int((truth & predicted).sum())
    wrong = int((truth ^ predicted).sum())
    return 0.0 if tp == 0 else 2.0 * tp / (2.0 * tp + wrong)


def ridge_path_scores(X: np.ndarray, y: np.ndarray, grid: Sequence[float], folds: Sequence[Fold]) -> np.ndarray:
    """Negative mean squared error (folds, grid) of ridge regression at alpha = 1 / C for every C of `grid`."""
    scores = np.zeros((len(folds), len(grid)))
    for k, fold in enumerate(folds):
        rows, Z_test = standardized_fold(X, fold)
        solutions = engine.ridge_solutions(rows.tensor.numpy(), y[fold[0]], [1.0 / c for c in grid])
        for i, (coef, intercept) in enumerate(solutions):
            scores[k, i] = -float(np.mean((Z_test @ coef + intercept - y[fold[1]]) ** 2))
    return scores
