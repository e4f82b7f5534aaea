"""Scoring probes and the per-layer sweep: `score_probe` (every shape), bootstrap intervals, one probe per
(pooling, layer) cell scored on dev (`sweep_layers`), repeated fits on subsets of the training rows
(`repeat_probe`), and the keyword arguments and picking metric a `bertkit probe` config asks for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertkit.errors import UserError
from bertkit.probe import shapes as probe_shapes
from bertkit.probe.fit import DEFAULT_C_GRID, DEFAULT_CV, ProbeFit, fit_probe
from bertkit.scoring.intervals import bootstrap_interval
from bertkit.scoring.metrics import classification_metrics
from bertkit.scoring.table import SHAPE


def score_probe(fit: ProbeFit, X: np.ndarray, y: np.ndarray, label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Full classification metrics (accuracy, macro-F1, MCC, per class, confusion matrix) of `fit` on (X, y); the
    regression or multi-label metrics for probes of those shapes."""

    if fit.task != "single_label":
        return probe_shapes.score_shaped(fit, X, y, label_names or [])

    X = np.asarray(X, dtype=np.float32)
    proba = fit.predict_proba(X)
    pred = fit.classifier.classes_[proba.argmax(axis=1)]
    return classification_metrics(y, pred, proba=_full_proba(fit, proba, label_names), label_names=label_names)


def _full_proba(fit: ProbeFit, proba: np.ndarray, label_names: Sequence[str] | None) -> np.ndarray:
    """Probabilities with one column per label id (a class absent from train gets a zero column)."""
    n_labels = len(label_names) if label_names is not None else int(fit.classifier.classes_.max()) + 1
    full = np.zeros((len(proba), n_labels), dtype=np.float64)
    full[:, fit.classifier.classes_] = proba
    return full


def bootstrap_ci(
    y_true: np.ndarray, y_pred: np.ndarray, *, metric: str = "accuracy", n_boot: int = 1000, seed: int = 42
) -> tuple[float, float]:
    """Percentile 95% interval of a dev score (accuracy, f1 = macro-F1, mcc), resampling dev rows with replacement
    `n_boot` times (`bertkit.scoring.intervals`)."""
    interval = bootstrap_interval("single_label", metric, y_true, y_pred, n_boot=n_boot, seed=seed)
    assert interval is not None, metric
    return interval


# ---------------------------------------------------------------- layer sweep


@dataclass
class Cell:
    """One probed (pooling, layer) cell: its fit, dev predictions and scores."""

    pool: str
    layer: int
    layer_name: str
    fit: ProbeFit
    metrics: dict[str, Any]
    pred: np.ndarray
    ci: tuple[float, float]

    def row(self, hidden_state: int | None = None) -> dict[str, Any]:
        """probe.json's `sweep[]` entry: `layer` is the layer's name, as in `best.layer` (`layer_name` too, as older
        files have it), `hidden_state` the model's hidden-state index where known (None: a store that lacks it)."""
        shape = SHAPE[self.fit.task]
        extra = {} if self.fit.task == "single_label" else \
            {"alpha": 1.0 / self.fit.C} if self.fit.task == "regression" else {"threshold": self.fit.threshold}
        return {"pool": self.pool, "layer": self.layer_name, "layer_name": self.layer_name,
                "hidden_state": hidden_state,
                **{k: self.metrics[k] for k in shape.probe_keys}, f"{shape.headline}_ci95": list(self.ci),
                "C": self.fit.C, **extra, "cv": self.fit.cv_results}


@dataclass
class Sweep:
    """Every probed cell (in pool, layer order) and the best one by dev `metric`."""

    cells: list[Cell]
    metric: str = "accuracy"
    best_index: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        scores = [c.metrics[self.metric] for c in self.cells]
        self.best_index = int(np.argmax(scores))  # first of equal scores: the earliest pooling/layer

    @property
    def best(self) -> Cell:
        return self.cells[self.best_index]

    def rows(self, hidden_states: Sequence[int | None] = ()) -> list[dict[str, Any]]:
        """The cells' records; `hidden_states`: the model's hidden-state index of each position of the layer axis."""
        return [{**c.row(hidden_states[c.layer] if c.layer < len(hidden_states) else None),
                 "best": i == self.best_index} for i, c in enumerate(self.cells)]


def sweep_layers(
    train_by_pool: dict[str, np.ndarray],
    y_train: np.ndarray,
    dev_by_pool: dict[str, np.ndarray],
    y_dev: np.ndarray,
    *,
    layers: Sequence[int] | None = None,
    layer_names: Sequence[str] | None = None,
    label_names: Sequence[str] | None = None,
    metric: str = "accuracy",
    progress: Callable[[str], None] | None = None,
    threshold: str = "tune",
    **fit_kwargs: Any,
) -> Sweep:
    """Fit one probe per (pooling, layer) on `(n, L, d)` train features and score it on dev.

    `layers` are the indexes of the layer axis to probe (default: all of them); `layer_names` label that
    axis (e.g. `embeddings`, `layer 1`, ...). `fit_kwargs` go to `fit_probe` (C, cv, C_grid, class_weight, seed,
    task). Tag probes decide at `threshold` (--threshold: a number, or tuned on dev per cell). Within a pooling,
    each layer's fit starts from the layer before's solution (neighbouring layers' standardised features are alike).
    """
    cells = []
    for pool, train in train_by_pool.items():
        dev, previous = dev_by_pool[pool], None
        if train.ndim == 2:
            train, dev = train[:, None, :], dev[:, None, :]
        for layer in layers if layers is not None else range(train.shape[1]):
            name = layer_names[layer] if layer_names is not None else str(layer)
            if progress:
                progress(f"probing {pool} {name}")
            fit = fit_probe(np.asarray(train[:, layer]), y_train, init=previous, **fit_kwargs)
            previous = fit.solution  # the next layer's fit starts here: the same optimum, fewer iterations
            if fit.task != "single_label":
                cells.append(shaped_cell(fit, pool, int(layer), name, np.asarray(dev[:, layer]), y_dev,
                                          label_names or [], threshold, fit_kwargs.get("seed", 42)))
                continue
            metrics = score_probe(fit, np.asarray(dev[:, layer]), y_dev, label_names)
            pred = predicted_ids(fit, np.asarray(dev[:, layer]))
            ci = bootstrap_ci(y_dev, pred, seed=fit_kwargs.get("seed", 42))
            cells.append(Cell(pool, int(layer), name, fit, metrics, pred, ci))
    sweep = Sweep(cells, metric)
    if fit_kwargs.get("C") is None and fit_kwargs.get("cv") is None and sweep.best.fit.task == "single_label":
        best = sweep.best
        sweep.cells[sweep.best_index] = cross_validated_cell(best, _cell_features(train_by_pool, best), y_train,
                                                             _cell_features(dev_by_pool, best), y_dev, label_names,
                                                             **fit_kwargs)
    return sweep


def _cell_features(by_pool: dict[str, np.ndarray], cell: Cell) -> np.ndarray:
    """A cell's (n, d) features out of a pool's (n, L, d) layers, or its (n, d) when the pool has one layer."""
    features = by_pool[cell.pool]
    return np.asarray(features if features.ndim == 2 else features[:, cell.layer])


def cross_validated_cell(cell: Cell, X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray,
                         label_names: Sequence[str] | None, **fit_kwargs: Any) -> Cell:
    """The best cell refit with its C chosen by `DEFAULT_CV`-fold cross-validation on log-loss over `DEFAULT_C_GRID`
    (the default probe: cells are compared at C = 1, one search for the one that is kept, so the cost is one cell's
    fits). Training rows too few for the folds (a class with fewer rows than folds) keep C = 1."""
    counts = np.bincount(np.asarray(y_train, dtype=np.int64))
    if counts[counts > 0].min() < DEFAULT_CV:
        return cell
    fit = fit_probe(X_train, y_train, **{**fit_kwargs, "cv": DEFAULT_CV, "C_grid": DEFAULT_C_GRID})
    pred = predicted_ids(fit, X_dev)
    return Cell(cell.pool, cell.layer, cell.layer_name, fit, score_probe(fit, X_dev, y_dev, label_names), pred,
                bootstrap_ci(y_dev, pred, seed=fit_kwargs.get("seed", 42)))


def shaped_cell(fit: ProbeFit, pool: str, layer: int, name: str, X_dev: np.ndarray, y_dev: np.ndarray,
                 label_names: Sequence[str], threshold: str, seed: int) -> Cell:
    """A regression or tag probe's cell: its threshold set on dev (tags), its dev scores and the 95% interval of
    the shape's headline metric; `pred` holds the dev numbers or the 0/1 tag matrix."""

    if fit.task == "multi_label":
        probe_shapes.tune_threshold(fit, X_dev, y_dev, label_names, threshold)
    metrics = probe_shapes.score_shaped(fit, X_dev, y_dev, label_names)
    pred = probe_shapes.decisions(fit, probe_shapes.shaped_outputs(fit, X_dev))
    ci = probe_shapes.bootstrap_shaped_ci(fit.task, y_dev, pred, seed=seed)
    return Cell(pool, layer, name, fit, metrics, pred, ci)


def predicted_ids(fit: ProbeFit, X: np.ndarray) -> np.ndarray:
    return np.asarray(fit.predict(np.asarray(X, dtype=np.float32)), dtype=np.int64)


def repeat_probe(
    X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray, *, repeats: int,
    fraction: float = 0.8, seed: int = 42, label_names: Sequence[str] | None = None, threshold: str = "tune",
    **fit_kwargs: Any,
) -> dict[str, Any]:
    """Refit `repeats` times, each on a random `fraction` of the training rows (without replacement, every
    class kept), and report mean ± std of the dev scores (of the shape's metrics for regression and tag probes)."""
    rng = np.random.default_rng(seed)
    n = len(y_train)
    size = max(2, int(round(fraction * n)))
    if fit_kwargs.get("task", "single_label") != "single_label":
        subsets = [np.sort(rng.choice(n, size=size, replace=False)) for _ in range(repeats)]
        return _repeat_shaped(X_train, y_train, X_dev, y_dev, subsets, fraction, label_names or [], threshold,
                              seed=seed, **fit_kwargs)
    scores: dict[str, list[float]] = {k: [] for k in SHAPE["single_label"].probe_keys}
    for _ in range(repeats):
        idx = np.sort(rng.choice(n, size=size, replace=False))
        if len(np.unique(y_train[idx])) < len(np.unique(y_train)):
            idx = np.arange(n)  # tiny data: a subset lost a class; refit on all (still a different seed)
        fit = fit_probe(np.asarray(X_train)[idx], y_train[idx], seed=seed, **fit_kwargs)
        pred = predicted_ids(fit, X_dev)

        m = classification_metrics(y_dev, pred, label_names=[str(i) for i in range(int(max(y_train.max(), y_dev.max())) + 1)])
        for k in scores:
            scores[k].append(m[k])
    return {"repeats": repeats, "fraction": fraction,
            **{k: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "values": v}
               for k, v in scores.items()}}


def _repeat_shaped(X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray,
                   subsets: list[np.ndarray], fraction: float, label_names: Sequence[str], threshold: str,
                   **fit_kwargs: Any) -> dict[str, Any]:
    """repeat_probe for regression and tag probes: one refit per subset of training rows, scored as the sweep
    scores (tag thresholds set on dev each time)."""
    keys = SHAPE[fit_kwargs["task"]].probe_keys
    scores: dict[str, list[float]] = {k: [] for k in keys}
    for idx in subsets:
        fit = fit_probe(np.asarray(X_train)[idx], np.asarray(y_train)[idx], **fit_kwargs)
        cell = shaped_cell(fit, "", 0, "", np.asarray(X_dev), y_dev, label_names, threshold, fit_kwargs["seed"])
        for k in keys:
            scores[k].append(cell.metrics[k])
    return {"repeats": len(subsets), "fraction": fraction,
            **{k: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "values": v}
               for k, v in scores.items()}}


# ---------------------------------------------------------------- from a `bertkit probe` config


def fit_kwargs_from(cfg: Any) -> dict[str, Any]:
    """fit_probe keyword arguments from a ProbeConfig (its fit group and --seed)."""
    return cfg.fit.fit_kwargs(cfg.inputs.seed)


def shape_kwargs(cfg: Any, task: str) -> tuple[dict[str, Any], str]:
    """(fit_probe keyword arguments, the dev metric that picks the best cell) for labels of `task`; single-label
    runs keep their arguments as they were (no `task` key)."""
    kwargs = fit_kwargs_from(cfg)
    if task == "single_label":
        return kwargs, SHAPE[task].headline
    if cfg.fit.class_weight != "none":
        raise UserError(f"--class-weight {cfg.fit.class_weight} weighs classes of single-label data; this is {task} "
                        f"data. Drop --class-weight.")
    return {**kwargs, "task": task}, SHAPE[task].headline
