"""Fitting probes on frozen features, every problem shape: `fit_probe` takes features `X` (n, d) and targets `y`
and returns a `ProbeFit`. Every probe is standardised features + a linear head fitted by one engine
(`bertkit.probe.engine`: torch, float32, all threads, L-BFGS, scikit-learn's objective and tolerance), so its
scores are those of scikit-learn's `StandardScaler` + `LogisticRegression(lbfgs)` at the same C. Standardizing
makes L-BFGS converge in a few dozen iterations instead of running into its iteration cap on raw BERT features
(benchmarks/bench_probe.py measures the difference). One label per row: multinomial logistic regression (binary for
two classes); numbers: ridge regression, closed-form; tag sets: one logistic regression per tag (`fit_shaped`).
Ridge always chooses its alpha by K-fold cross-validation (--cv, default 5 folds in data order; alpha = 1/C, so --C
and --C-grid mean what they mean for the classifier: larger C, weaker penalty); the tag probe uses C = 1 unless
--cv searches --C-grid. A fit can start from a neighbouring one's solution (`init`: the layer before, in a sweep).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.errors import UserError
from bertkit.options import PROBE, option
from bertkit.probe import cv as folds_cv
from bertkit.probe import engine
from bertkit.probe.heads import ConstantTag, LogisticHead, OneVsRestHead, ProbeModel, RidgeHead, Standardizer
from bertkit.scoring.options import CLASS_WEIGHTS

MAX_ITER = engine.MAX_ITER
DEFAULT_C = 1.0
DEFAULT_C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
ALPHA_GRID = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
DEFAULT_CV = 5


@dataclass(frozen=True)
class FitOptions:
    """The fit group of `bertkit probe`: how each probe is regularised and fitted (`fit_kwargs`: `fit_probe`'s
    keyword arguments), refitted on subsets, and compared with baselines."""

    C: float | None = option(None, "Inverse regularisation strength. Default: cells compared at 1.0, the best one's "
                             "chosen by 5-fold CV on log-loss (regression: ridge alpha = 1/C, chosen by --cv 5 unless "
                             "given).", panel=PROBE, above=0)
    cv: int | None = option(None, "Choose C by K-fold cross-validation (data order; stratified for one label per "
                            "row): the lowest held-out log-loss (the C whose probabilities are honest).", panel=PROBE,
                            minimum=2)
    C_grid: str | None = option(None, "C values for --cv, comma-separated, or `alammar` (linspace(0.0001, 100, 20)). "
                                "Default: 0.001..10.", panel=PROBE)
    class_weight: str = option("none", "balanced weighs classes by inverse frequency (imbalanced data).",
                               panel=PROBE, choices=CLASS_WEIGHTS)
    repeats: int = option(0, "Refit the best cell N times on random 80% train subsets (mean ± std).", panel=PROBE,
                          minimum=0)
    baselines: bool = option(True, "Also score majority class, TF-IDF + LR on the raw text, and the same encoder with "
                             "random weights.", panel=PROBE)

    def fit_problems(self) -> list[str]:
        """--C or --cv, not both; --C-grid only with --cv, and positive finite numbers (or alammar)."""
        problems = []
        if self.C is not None and self.cv is not None:
            problems.append("--C fixes the regularisation and --cv searches for it; give one of them.")
        if self.C_grid is not None:
            if self.cv is None:
                problems.append("--C-grid is searched with cross-validation; add --cv K (e.g. --cv 5).")
            try:
                _ = self.c_values
            except ValueError:
                problems.append(f"--C-grid must be positive finite numbers separated by commas (e.g. 0.01,0.1,1), or "
                                f"alammar; got {self.C_grid!r}.")
        return problems

    @property
    def c_values(self) -> list[float] | None:
        """--C-grid as numbers (None: the default grid). Raises ValueError on a bad grid."""
        if self.C_grid is None:
            return None
        if self.C_grid.strip().lower() == "alammar":
            return [0.0001 + i * (100 - 0.0001) / 19 for i in range(20)]
        values = [float(v) for v in self.C_grid.split(",") if v.strip()]
        if not values or any(not math.isfinite(v) or v <= 0 for v in values):
            raise ValueError(self.C_grid)
        return values

    def fit_kwargs(self, seed: int) -> dict[str, Any]:
        """`fit_probe`'s keyword arguments for these options and `seed` (--seed)."""
        return {"C": self.C, "cv": self.cv, "C_grid": self.c_values, "seed": seed,
                "class_weight": None if self.class_weight == "none" else self.class_weight}


@dataclass
class ProbeFit:
    """A fitted probe: the standardiser + linear head (`model`, a `heads.ProbeModel`), the C it used, and CV scores
    if it searched."""

    model: ProbeModel
    C: float
    cv_results: list[dict[str, float]] | None = None
    task: str = "single_label"
    """single_label (logistic regression), regression (ridge) or multi_label (one-vs-rest; see probe_shapes)."""
    threshold: float | list[float] | None = None
    """multi_label: the decision threshold on each tag's probability (set on dev by the sweep)."""
    solution: engine.LinearSolution | None = None
    """The logistic head's solution on standardised features, where a neighbouring fit can start (None: ridge)."""

    @property
    def scaler(self) -> Any:
        return self.model.named_steps["scaler"]

    @property
    def classifier(self) -> Any:
        return self.model.steps[-1][1]

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(X)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict_proba(X)


def standardized(X: np.ndarray) -> tuple[Standardizer, engine.MemoryRows]:
    """The standardiser of `X` (n, d) and `X` standardised by it, as the engine's rows (a float32 copy: `X` stays)."""
    scaler = engine.standardizer_of(engine.array_blocks(X))
    return scaler, engine.MemoryRows(scaler.transform_in_place(np.array(X, dtype=np.float32, order="C")))


def fit_logistic(X: np.ndarray, y: np.ndarray, C: float, class_weight: str | None = None,
                 init: engine.LinearSolution | None = None) -> tuple[ProbeModel, engine.LinearSolution]:
    """Standardised `X` + logistic regression on labels `y` (any sortable values: the head's `classes_`) at `C`,
    from `init` or zero; the fitted model and the engine's solution."""
    classes, ids = np.unique(np.asarray(y), return_inverse=True)
    scaler, rows = standardized(X)
    solution = engine.fit_linear(rows, engine.Targets.classes(ids.reshape(-1), len(classes), class_weight), C,
                                 init=init)
    head = LogisticHead(solution.coef, solution.intercept, classes, float(C), class_weight,
                        np.asarray([solution.n_iter], dtype=np.int32))
    return ProbeModel.of(scaler, head), solution


def cv_folds(y: np.ndarray, cv: int) -> list[folds_cv.Fold]:
    """Stratified K folds in data order (no shuffle): the same folds `GridSearchCV(cv=K)` uses for a classifier."""
    check_folds(y, cv, "single_label")
    return folds_cv.stratified_folds(np.asarray(y), cv)


def folds_for(task: str, C: float | None, cv: int | None) -> int | None:
    """The K of the K-fold search a fit runs: --cv, or `DEFAULT_CV` for numbers without --C; None: no search."""
    return DEFAULT_CV if task == "regression" and C is None and cv is None else cv


def check_folds(y: np.ndarray, cv: int, task: str) -> None:
    """K-fold CV needs K training rows (of every class, for one label per row: the folds are stratified). Checked
    by the fits, and by `bertkit probe` as soon as the labels are read (before --out is made)."""
    if task != "single_label":
        if len(y) < cv:
            raise UserError(f"--cv {cv} needs at least {cv} training rows; there are {len(y)}. Pass a smaller --cv.")
        return
    present = np.bincount(np.asarray(y, dtype=np.int64))
    smallest = int(present[present > 0].min()) if len(present) else 0
    if smallest < cv:
        raise UserError(
            f"--cv {cv} needs at least {cv} training rows of every class; the rarest class has {smallest}. "
            f"Pass a smaller --cv (or --C with a fixed value)."
        )


def fit_probe(
    X: np.ndarray,
    y: np.ndarray,
    *,
    C: float | None = None,
    cv: int | None = None,
    C_grid: Sequence[float] | None = None,
    class_weight: str | None = None,
    seed: int = 42,
    task: str = "single_label",
    criterion: str = "log_loss",
    init: engine.LinearSolution | None = None,
) -> ProbeFit:
    """Standardize + logistic regression on `X` (n, d) with label ids `y` (another `task`: ridge on numbers or
    one-vs-rest logistic regression on a 0/1 tag matrix, see `fit_shaped`).

    With `cv`, C is chosen over `C_grid` (default `DEFAULT_C_GRID`) by K-fold cross-validation (the scaler is refit
    inside every fold, no leakage; ties go to the earlier grid value, as in GridSearchCV): by the lowest mean
    log-loss (`criterion="log_loss"`, the default) or the highest mean accuracy (`"accuracy"`, GridSearchCV's
    default scoring). Then the probe is refit on all of `X` with that C. Otherwise `C` (default 1.0) is used.
    `init`: a solution to start from (a neighbouring layer's, of the same shape); the optimum is the same.

    Why log-loss: accuracy is a step function of C that often ties across half the grid and says nothing about the
    probabilities; the C with the best held-out log-loss is the one whose probabilities are honest, which is what the
    reported calibration (ECE) and every threshold read downstream depend on. `seed` is kept for the callers: the
    fit is deterministic (L-BFGS from zero or from `init`), as lbfgs was.
    """
    if task != "single_label":
        return fit_shaped(X, y, task, C=C, cv=cv, C_grid=C_grid, seed=seed, init=init)
    X, y = _check_xy(X, y)
    results = None
    if cv is not None:
        grid = [float(c) for c in (C_grid or DEFAULT_C_GRID)]
        results = cross_validate_C(X, y, grid, cv, class_weight, seed)
        C = grid[best_C_index(results, criterion)]
    model, solution = fit_logistic(X, y, DEFAULT_C if C is None else float(C), class_weight, init)
    return ProbeFit(model, float(model.head.C), results, solution=solution)


def cross_validate_C(
    X: np.ndarray, y: np.ndarray, grid: Sequence[float], cv: int, class_weight: str | None, seed: int
) -> list[dict[str, float]]:
    """Mean/std K-fold accuracy (`mean`, `std`) and mean log-loss (`log_loss`) for every C of `grid` (same folds as
    `GridSearchCV(cv=K)`; per fold the C values fitted from the smallest up, each from the last one's solution:
    `probe.cv.logistic_path_scores`). `seed` is unused: the folds keep the data order."""
    classes, ids = np.unique(np.asarray(y), return_inverse=True)
    scores, losses = folds_cv.logistic_path_scores(np.asarray(X, dtype=np.float32), ids.reshape(-1), len(classes),
                                                   grid, cv_folds(y, cv), class_weight)
    return [{"C": float(c), "mean": float(scores[:, i].mean()), "std": float(scores[:, i].std()),
             "log_loss": float(losses[:, i].mean())} for i, c in enumerate(grid)]


CV_CRITERIA = ("log_loss", "accuracy")


def best_C_index(results: Sequence[dict[str, float]], criterion: str = "log_loss") -> int:
    """The grid position of the best C in `cross_validate_C`'s results: the lowest mean log-loss, or the highest mean
    accuracy; ties (to 12 digits) go to the earlier grid value."""
    if criterion not in CV_CRITERIA:
        raise ValueError(f"criterion must be one of {CV_CRITERIA}; got {criterion!r}")
    if criterion == "accuracy":
        return max(range(len(results)), key=lambda i: (round(results[i]["mean"], 12), -i))
    return min(range(len(results)), key=lambda i: (round(results[i]["log_loss"], 12), i))


def _check_xy(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"features must be (n, d) with n == len(labels); got {X.shape} and {len(y)} labels")
    if not np.isfinite(X).all():
        raise UserError("The features contain NaN or infinite values; re-extract them (e.g. with --precision fp32).")
    if len(np.unique(y)) < 2:
        raise UserError("The training labels hold a single class; a probe needs at least two. Check --label-column.")
    return X, y


def fit_shaped(X: np.ndarray, y: np.ndarray, task: str, *, C: float | None = None, cv: int | None = None,
               C_grid: Sequence[float] | None = None, seed: int = 42, class_weight: str | None = None,
               init: engine.LinearSolution | None = None) -> ProbeFit:
    """A fitted regression or tag probe on features `X` (n, d) and targets `y` (numbers, or an (n, tags) 0/1
    matrix). With `cv` (always for regression, default 5 folds) C is chosen over the grid by K-fold CV in data
    order - mean squared error for numbers, micro-F1 for tags - with the scaler refit inside every fold."""
    X, y = _check_shaped(X, y, task)
    cv = folds_for(task, C, cv)
    default_grid = [1.0 / a for a in ALPHA_GRID] if task == "regression" else list(DEFAULT_C_GRID)
    results = None
    if cv is not None:
        grid = [float(c) for c in C_grid] if C_grid else default_grid
        results = cross_validate_shaped(X, y, task, grid, cv, seed)
        best = max(range(len(results)), key=lambda i: (round(results[i]["mean"], 12), -i))  # ties: earlier C
        C = results[best]["C"]
    C = DEFAULT_C if C is None else float(C)
    if task == "regression":
        scaler, rows = standardized(X)
        coef, intercept = engine.ridge_solutions(rows.tensor.numpy(), y, [1.0 / C])[0]
        return ProbeFit(ProbeModel.of(scaler, RidgeHead(coef, intercept, 1.0 / C)), C, results, task=task)
    model, solution = fit_tags(X, y, C, init)
    return ProbeFit(model, C, results, task=task, solution=solution)


def fit_tags(X: np.ndarray, Y: np.ndarray, C: float,
             init: engine.LinearSolution | None = None) -> tuple[ProbeModel, engine.LinearSolution]:
    """Standardised `X` + one logistic regression per tag of the 0/1 matrix `Y` (their sum solved as one problem);
    a tag on in every training row, or in none, is kept as that constant (`heads.ConstantTag`)."""
    scaler, rows = standardized(X)
    varying = np.flatnonzero(Y.min(axis=0) != Y.max(axis=0))
    solution = engine.fit_linear(rows, engine.Targets.columns(Y[:, varying]), C, init=init)
    estimators: list[LogisticHead | ConstantTag] = [ConstantTag(Y[:1, j].copy()) for j in range(Y.shape[1])]
    for row, j in enumerate(varying):
        estimators[j] = LogisticHead(solution.coef[row:row + 1], solution.intercept[row:row + 1],
                                     np.array([0, 1]), C)
    return ProbeModel.of(scaler, OneVsRestHead(estimators, C)), solution


@contextmanager
def constant_tags_allowed() -> Iterator[None]:
    """Silence sklearn's warning about a tag on in every (or no) training row: one-vs-rest then predicts it as a
    constant, which is right, and the saved probe keeps it as such (`shaped_arrays`). (The TF-IDF baseline's
    one-vs-rest is scikit-learn's.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Label .* is present in all training examples")
        yield


def cross_validate_shaped(X: np.ndarray, y: np.ndarray, task: str, grid: Sequence[float], cv: int,
                          seed: int) -> list[dict[str, Any]]:
    """Mean/std K-fold score (negative MSE for numbers, micro-F1 for tags) for every C of `grid`, on
    `KFold(cv)`'s folds (`probe.cv`)."""
    check_folds(y, cv, task)
    folds = folds_cv.plain_folds(len(y), cv)
    if task == "regression":
        scores = folds_cv.ridge_path_scores(X, y, grid, folds)
    else:
        scores = folds_cv.tag_path_scores(X, y, grid, folds)
    return [{"C": float(c), **({"alpha": float(1.0 / c)} if task == "regression" else {}),
             "mean": float(scores[:, i].mean()), "std": float(scores[:, i].std())} for i, c in enumerate(grid)]


def _check_shaped(X: np.ndarray, y: np.ndarray, task: str) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.float64 if task == "regression" else np.int64)
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"features must be (n, d) with n == len(targets); got {X.shape} and {len(y)} targets")
    if not np.isfinite(X).all():
        raise UserError("The features contain NaN or infinite values; re-extract them (e.g. with --precision fp32).")
    if task == "regression" and np.ptp(y) == 0:
        raise UserError("The training targets are all the same number; a regression probe needs targets that vary. "
                        "Check --label-column.")
    if task == "multi_label" and (y.ndim != 2 or y.shape[1] < 2):
        raise UserError("A tag probe needs at least two tags (one 0/1 column each); a single tag is a yes/no "
                        "question: probe it with --task single_label.")
    return X, y
