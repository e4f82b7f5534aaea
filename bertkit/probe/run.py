"""Logistic-regression probes on frozen features: fit, score, per-layer sweep, bootstrap intervals, repeated
fits, baselines (majority class, TF-IDF, random-weights encoder), and the whole `bertkit probe` run.

The fitting and scoring functions work on arrays (features `X`, label ids `y`) and return values. `run_probe`
ties the run together: its inputs come from `probe_inputs` (a store, or features extracted from text), the best
probe is saved in the `probe_io` format, and the run directory (config, metrics, figures) is written through
`runs`/`plots`. A probe is `StandardScaler` + `LogisticRegression(lbfgs)`: standardizing makes lbfgs converge in
a few dozen iterations instead of running into its iteration cap on raw BERT features (bench/bench_probe.py
measures the difference).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import UserError
from bertkit.probe.inputs import ProbeInputs, cached_features, load_store_inputs, load_text_inputs
from bertkit.probe.saved import save_probe

log = logging.getLogger(__name__)

MAX_ITER = 2000
DEFAULT_C = 1.0
DEFAULT_C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
SCORE_KEYS = ("accuracy", "f1", "mcc")


# ---------------------------------------------------------------- fitting and scoring


@dataclass
class ProbeFit:
    """A fitted probe: the scaler + logistic regression pipeline, the C it used, and CV scores if it searched."""

    model: Any
    C: float
    cv_results: list[dict[str, float]] | None = None
    task: str = "single_label"
    """single_label (logistic regression), regression (ridge) or multi_label (one-vs-rest; see probe_shapes)."""
    threshold: float | list[float] | None = None
    """multi_label: the decision threshold on each tag's probability (set on dev by the sweep)."""

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


def make_pipeline(C: float, class_weight: str | None, seed: int) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    lr = LogisticRegression(C=C, solver="lbfgs", max_iter=MAX_ITER, class_weight=class_weight, random_state=seed)
    return Pipeline([("scaler", StandardScaler()), ("lr", lr)])


def cv_folds(y: np.ndarray, cv: int) -> Any:
    """Stratified K folds in data order (no shuffle): the same folds `GridSearchCV(cv=K)` uses for a classifier."""
    from sklearn.model_selection import StratifiedKFold

    present = np.bincount(y)
    smallest = int(present[present > 0].min()) if len(present) else 0
    if smallest < cv:
        raise UserError(
            f"--cv {cv} needs at least {cv} training rows of every class; the rarest class has {smallest}. "
            f"Pass a smaller --cv (or --C with a fixed value)."
        )
    return StratifiedKFold(n_splits=cv)


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
) -> ProbeFit:
    """Standardize + logistic regression on `X` (n, d) with label ids `y` (another `task`: ridge on numbers or
    one-vs-rest logistic regression on a 0/1 tag matrix, see `probe_shapes.fit_shaped`).

    With `cv`, C is chosen by K-fold cross-validated accuracy over `C_grid` (default `DEFAULT_C_GRID`; the
    scaler is refit inside every fold, no leakage; ties go to the earlier grid value, as in GridSearchCV),
    then the pipeline is refit on all of `X` with that C. Otherwise `C` (default 1.0) is used directly.

    BLAS runs single-threaded here: for a d of a few hundred, multi-threaded OpenBLAS only adds overhead, and on
    a busy machine its spinning threads slow a fit down many times over.
    """
    from threadpoolctl import threadpool_limits

    if task != "single_label":
        from bertkit.probe.shapes import fit_shaped

        return fit_shaped(X, y, task, C=C, cv=cv, C_grid=C_grid, seed=seed)
    X, y = _check_xy(X, y)
    with threadpool_limits(limits=1, user_api="blas"):
        results = None
        if cv is not None:
            grid = [float(c) for c in (C_grid or DEFAULT_C_GRID)]
            results = cross_validate_C(X, y, grid, cv, class_weight, seed)
            best = max(range(len(grid)), key=lambda i: (round(results[i]["mean"], 12), -i))
            C = grid[best]
        model = make_pipeline(DEFAULT_C if C is None else float(C), class_weight, seed).fit(X, y)
    return ProbeFit(model, float(model.named_steps["lr"].C), results)


def cross_validate_C(
    X: np.ndarray, y: np.ndarray, grid: Sequence[float], cv: int, class_weight: str | None, seed: int
) -> list[dict[str, float]]:
    """Mean/std K-fold accuracy for every C of `grid` (same folds as `GridSearchCV(cv=K)`).

    Per fold, the C values are fitted in increasing order, each warm-started from the previous solution (the
    regularisation path): neighbouring C values have nearby optima, so lbfgs needs few iterations for each.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    order = np.argsort(grid, kind="stable")
    scores = np.zeros((cv, len(grid)))
    for k, (tr, te) in enumerate(cv_folds(y, cv).split(X, y)):
        scaler = StandardScaler().fit(X[tr])
        X_tr, X_te = scaler.transform(X[tr]), scaler.transform(X[te])
        lr = LogisticRegression(solver="lbfgs", max_iter=MAX_ITER, class_weight=class_weight, random_state=seed,
                                warm_start=True)
        for i in order:
            lr.set_params(C=float(grid[i])).fit(X_tr, y[tr])
            scores[k, i] = float((lr.predict(X_te) == y[te]).mean())
    return [{"C": float(c), "mean": float(scores[:, i].mean()), "std": float(scores[:, i].std())}
            for i, c in enumerate(grid)]


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


def score_probe(fit: ProbeFit, X: np.ndarray, y: np.ndarray, label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Full classification metrics (accuracy, macro-F1, MCC, per class, confusion matrix) of `fit` on (X, y); the
    regression or multi-label metrics for probes of those shapes."""
    from bertkit.scoring.metrics import classification_metrics

    if fit.task != "single_label":
        from bertkit.probe.shapes import score_shaped

        return score_shaped(fit, X, y, label_names or [])

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
    """Percentile 95% interval of a dev score, resampling dev rows with replacement `n_boot` times."""
    from sklearn.metrics import f1_score, matthews_corrcoef

    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(y_true), size=(n_boot, len(y_true)))
    if metric == "accuracy":
        scores = (y_true[idx] == y_pred[idx]).mean(axis=1)
    else:
        fn = {"f1": lambda t, p: f1_score(t, p, average="macro", zero_division=0), "mcc": matthews_corrcoef}[metric]
        scores = np.array([fn(y_true[i], y_pred[i]) for i in idx])
    low, high = np.percentile(scores, [2.5, 97.5])
    return float(low), float(high)


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

    def row(self) -> dict[str, Any]:
        if self.fit.task != "single_label":
            from bertkit.probe.shapes import HEADLINE
            from bertkit.probe.shapes import SCORE_KEYS as SHAPE_KEYS

            extra = {"alpha": 1.0 / self.fit.C} if self.fit.task == "regression" else {"threshold": self.fit.threshold}
            return {"pool": self.pool, "layer": self.layer, "layer_name": self.layer_name,
                    **{k: self.metrics[k] for k in SHAPE_KEYS[self.fit.task]},
                    f"{HEADLINE[self.fit.task]}_ci95": list(self.ci), "C": self.fit.C, **extra, "cv": self.fit.cv_results}
        return {"pool": self.pool, "layer": self.layer, "layer_name": self.layer_name,
                **{k: self.metrics[k] for k in SCORE_KEYS}, "accuracy_ci95": list(self.ci), "C": self.fit.C,
                "cv": self.fit.cv_results}


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

    def rows(self) -> list[dict[str, Any]]:
        return [{**c.row(), "best": i == self.best_index} for i, c in enumerate(self.cells)]


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
    task). Tag probes decide at `threshold` (--threshold: a number, or tuned on dev per cell).
    """
    cells = []
    for pool, train in train_by_pool.items():
        dev = dev_by_pool[pool]
        if train.ndim == 2:
            train, dev = train[:, None, :], dev[:, None, :]
        for layer in layers if layers is not None else range(train.shape[1]):
            name = layer_names[layer] if layer_names is not None else str(layer)
            if progress:
                progress(f"probing {pool} {name}")
            fit = fit_probe(np.asarray(train[:, layer]), y_train, **fit_kwargs)
            if fit.task != "single_label":
                cells.append(_shaped_cell(fit, pool, int(layer), name, np.asarray(dev[:, layer]), y_dev,
                                          label_names or [], threshold, fit_kwargs.get("seed", 42)))
                continue
            metrics = score_probe(fit, np.asarray(dev[:, layer]), y_dev, label_names)
            pred = _predicted_ids(fit, np.asarray(dev[:, layer]))
            ci = bootstrap_ci(y_dev, pred, seed=fit_kwargs.get("seed", 42))
            cells.append(Cell(pool, int(layer), name, fit, metrics, pred, ci))
    return Sweep(cells, metric)


def _shaped_cell(fit: ProbeFit, pool: str, layer: int, name: str, X_dev: np.ndarray, y_dev: np.ndarray,
                 label_names: Sequence[str], threshold: str, seed: int) -> Cell:
    """A regression or tag probe's cell: its threshold set on dev (tags), its dev scores and the 95% interval of
    the shape's headline metric; `pred` holds the dev numbers or the 0/1 tag matrix."""
    from bertkit.probe import shapes as probe_shapes

    if fit.task == "multi_label":
        probe_shapes.tune_threshold(fit, X_dev, y_dev, label_names, threshold)
    metrics = probe_shapes.score_shaped(fit, X_dev, y_dev, label_names)
    pred = probe_shapes.decisions(fit, probe_shapes.shaped_outputs(fit, X_dev))
    ci = probe_shapes.bootstrap_shaped_ci(fit.task, y_dev, pred, seed=seed)
    return Cell(pool, layer, name, fit, metrics, pred, ci)


def _predicted_ids(fit: ProbeFit, X: np.ndarray) -> np.ndarray:
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
    scores: dict[str, list[float]] = {k: [] for k in SCORE_KEYS}
    for _ in range(repeats):
        idx = np.sort(rng.choice(n, size=size, replace=False))
        if len(np.unique(y_train[idx])) < len(np.unique(y_train)):
            idx = np.arange(n)  # tiny data: a subset lost a class; refit on all (still a different seed)
        fit = fit_probe(np.asarray(X_train)[idx], y_train[idx], seed=seed, **fit_kwargs)
        pred = _predicted_ids(fit, X_dev)
        from bertkit.scoring.metrics import classification_metrics

        m = classification_metrics(y_dev, pred, label_names=[str(i) for i in range(int(max(y_train.max(), y_dev.max())) + 1)])
        for k in SCORE_KEYS:
            scores[k].append(m[k])
    return {"repeats": repeats, "fraction": fraction,
            **{k: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "values": v}
               for k, v in scores.items()}}


def _repeat_shaped(X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray,
                   subsets: list[np.ndarray], fraction: float, label_names: Sequence[str], threshold: str,
                   **fit_kwargs: Any) -> dict[str, Any]:
    """repeat_probe for regression and tag probes: one refit per subset of training rows, scored as the sweep
    scores (tag thresholds set on dev each time)."""
    from bertkit.probe.shapes import SCORE_KEYS as SHAPE_KEYS

    keys = SHAPE_KEYS[fit_kwargs["task"]]
    scores: dict[str, list[float]] = {k: [] for k in keys}
    for idx in subsets:
        fit = fit_probe(np.asarray(X_train)[idx], np.asarray(y_train)[idx], **fit_kwargs)
        cell = _shaped_cell(fit, "", 0, "", np.asarray(X_dev), y_dev, label_names, threshold, fit_kwargs["seed"])
        for k in keys:
            scores[k].append(cell.metrics[k])
    return {"repeats": len(subsets), "fraction": fraction,
            **{k: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "values": v}
               for k, v in scores.items()}}


# ---------------------------------------------------------------- baselines


def majority_baseline(y_train: np.ndarray, y_dev: np.ndarray, label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Always predict the most frequent training label (scikit-learn's DummyClassifier, as in Alammar's notebook)."""
    from sklearn.dummy import DummyClassifier

    from bertkit.scoring.metrics import classification_metrics

    dummy = DummyClassifier(strategy="most_frequent").fit(np.zeros((len(y_train), 1)), y_train)
    pred = dummy.predict(np.zeros((len(y_dev), 1)))
    return classification_metrics(y_dev, pred, label_names=label_names)


def tfidf_baseline(
    train_texts: Sequence[str], y_train: np.ndarray, dev_texts: Sequence[str], y_dev: np.ndarray, *,
    label_names: Sequence[str] | None = None, class_weight: str | None = None, seed: int = 42,
) -> dict[str, Any]:
    """TF-IDF (word 1-2 grams, sublinear tf) + logistic regression on the raw text: the no-BERT yardstick."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from bertkit.scoring.metrics import classification_metrics

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    X_train = vectorizer.fit_transform(train_texts)
    lr = LogisticRegression(C=10.0, max_iter=MAX_ITER, class_weight=class_weight, random_state=seed)
    lr.fit(X_train, y_train)
    return classification_metrics(y_dev, lr.predict(vectorizer.transform(dev_texts)), label_names=label_names)


def joined_texts(texts: Sequence[str], pairs: Sequence[str] | None) -> list[str]:
    """Text (and its pair, if any) as one string for the TF-IDF baseline."""
    if pairs is None:
        return list(texts)
    return [f"{a} [SEP] {b}" for a, b in zip(texts, pairs, strict=True)]


# ---------------------------------------------------------------- the whole `bertkit probe` run


def fit_kwargs_from(cfg: Any) -> dict[str, Any]:
    """fit_probe keyword arguments from a ProbeConfig."""
    return {"C": cfg.C, "cv": cfg.cv, "C_grid": cfg.c_values, "seed": cfg.seed,
            "class_weight": None if cfg.class_weight == "none" else cfg.class_weight}


def shape_kwargs(cfg: Any, task: str) -> tuple[dict[str, Any], str]:
    """(fit_probe keyword arguments, the dev metric that picks the best cell) for labels of `task`; single-label
    runs keep their arguments as they were (no `task` key)."""
    from bertkit.probe.shapes import HEADLINE

    kwargs = fit_kwargs_from(cfg)
    if task == "single_label":
        return kwargs, "accuracy"
    if cfg.class_weight != "none":
        raise UserError(f"--class-weight {cfg.class_weight} weighs classes of single-label data; this is {task} data. "
                        f"Drop --class-weight.")
    return {**kwargs, "task": task}, HEADLINE[task]


def run_probe(cfg: Any, progress: bool = False) -> dict[str, Any]:
    """`bertkit probe`: inputs -> per-layer sweep -> baselines -> variance -> test -> run directory. Returns the
    results (what metrics.json holds)."""
    from bertkit.config.commands import config_dict
    from bertkit.io import ownership, rundir, trail
    from bertkit.scoring.metrics import load_metrics

    # --out is looked at now (read-only) and claimed once the data and model are validated
    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None
    external = load_metrics(tuple(cfg.external_metrics))  # a --metric that cannot load stops before any work
    cache = (lambda: plan.claim().path / "features") if plan is not None else None
    check = functools.partial(check_shape_options, cfg, external)
    inputs = load_store_inputs(cfg) if cfg.features else load_text_inputs(cfg, cache, progress, on_labels=check)
    if cfg.features:  # a store's features are made already: checked once its labels are read
        check(inputs.label_map)
    run_dir = plan.claim() if plan is not None else None
    cache = run_dir.path / "features" if run_dir is not None else None
    names = [str(x) for x in inputs.label_map.labels]
    kwargs, metric = shape_kwargs(cfg, inputs.label_map.task)
    say = (lambda msg: log.info(msg)) if progress else None
    sweep = sweep_layers(inputs.train, inputs.y_train, inputs.dev, inputs.y_dev, layer_names=inputs.layer_names,
                         label_names=names, progress=say, metric=metric, threshold=cfg.threshold, **kwargs)
    best = sweep.best
    result: dict[str, Any] = {
        "model": inputs.feature_meta.get("model"), "revision": inputs.feature_meta.get("revision"),
        "source": inputs.source, "features": cfg.features,
        "rows": {"train": len(inputs.y_train), "dev": len(inputs.y_dev),
                 **({"test": len(inputs.y_test)} if inputs.y_test is not None else {})},
        "labels": names, "probe": {k: v for k, v in kwargs.items()},
        "sweep": sweep.rows(),
        "best": {"pool": best.pool, "layer": best.layer_name, "hidden_state": inputs.layer_indices[best.layer],
                 "C": best.fit.C, "dev": best.metrics, "accuracy_ci95": list(best.ci)},
        "notes": inputs.notes,
    }
    if "task" in kwargs:  # regression / tags: the shape, its interval, ridge alpha or tag threshold
        result["task"] = kwargs["task"]
        result["best"].update({f"{metric}_ci95": result["best"].pop("accuracy_ci95")},
                              **{k: v for k, v in best.row().items() if k in ("alpha", "threshold")})
    if cfg.baselines:
        result["baselines"] = run_baselines(cfg, inputs, best, names, cache, progress)
    if cfg.repeats:
        result["repeats"] = repeat_probe(inputs.train[best.pool][:, best.layer], inputs.y_train,
                                         inputs.dev[best.pool][:, best.layer], inputs.y_dev, repeats=cfg.repeats,
                                         label_names=names, threshold=cfg.threshold, **kwargs)
    if inputs.test is not None and inputs.y_test is not None:
        result["best"]["test"] = score_probe(best.fit, inputs.test[best.pool][:, best.layer], inputs.y_test, names)
    failed = requested_metrics_or_failure(cfg, result, best, inputs, external)
    if run_dir is not None:  # a --metric that failed on the real predictions: the rest is saved first
        result["outputs"] = write_probe_run(run_dir.path, cfg, inputs, sweep, result, final_dir=run_dir.out)
        run_dir.commit()  # with --overwrite: the new run replaces the previous one only now
    if failed is not None:
        saved = (f"The probe run is saved, not lost, without those scores: {run_dir.out} (saved probe "
                 f"{result['outputs']['probe']}). " if run_dir is not None else "")
        raise UserError(f"--metric {failed.spec} failed on the best probe's predictions: {failed.reason}. {saved}Fix "
                        f"the metric script and re-run this command, or drop --metric {failed.spec}.")
    return result


def check_shape_options(cfg: Any, external: Sequence[Any], labels: Any) -> None:
    """Once the labels (`data.LabelMap`: the problem shape) are read, before any model work: warnings for options
    the shape ignores (a built-in --metric it lacks, --threshold), and every --metric module tried on a synthetic
    input of the shape (a failure stops here)."""
    from bertkit.scoring.metrics import check_external
    from bertkit.scoring.shapes import inapplicable_options

    for note in inapplicable_options(labels.task, len(labels.labels), cfg.metric_list, cfg.threshold):
        log.warning("%s", note)
    check_external(external, labels.task, len(labels.labels))


def requested_metrics_or_failure(cfg: Any, result: dict[str, Any], best: Cell, inputs: ProbeInputs,
                                 external: Sequence[Any]) -> Any:
    """`add_requested_metrics`; a module that fails on the real predictions is returned (and noted in the result)
    instead of raised, so the run can be saved before the failure is reported. None: every module scored."""
    from bertkit.scoring.metrics import MetricFailed

    try:
        add_requested_metrics(cfg, result["best"], best, inputs, external)
    except MetricFailed as exc:
        result["notes"].append(f"--metric {exc.spec} failed on the best probe's predictions: {exc.reason}.")
        return exc
    return None


def add_requested_metrics(cfg: Any, best_result: dict[str, Any], best: Cell, inputs: ProbeInputs,
                          external: Sequence[Any]) -> None:
    """The --metric scores of the best cell: each evaluate module on its dev (and test) predictions, as label ids
    against the true ids (as `bertkit evaluate` passes them), and the names asked for under `requested`."""
    from bertkit.scoring.metrics import add_requested

    if not cfg.metric_list:
        return
    add_requested(best_result["dev"], cfg.metric_list, external, best.pred, inputs.y_dev)
    if "test" in best_result and inputs.test is not None and inputs.y_test is not None:
        test_pred = _predicted_ids(best.fit, inputs.test[best.pool][:, best.layer])
        add_requested(best_result["test"], cfg.metric_list, external, test_pred, inputs.y_test)


def run_baselines(cfg: Any, inputs: ProbeInputs, best: Cell, names: list[str], cache: Path | None,
                  progress: bool) -> dict[str, Any]:
    """Majority class, TF-IDF + LR on the raw text, and the random-weights encoder at the best cell (numbers: the
    training mean, TF-IDF + ridge; tags: each tag's majority value, TF-IDF + one-vs-rest LR)."""
    from bertkit.probe import shapes as probe_shapes

    task = best.fit.task
    if task == "single_label":
        baselines: dict[str, Any] = {"majority": majority_baseline(inputs.y_train, inputs.y_dev, names)}
    else:
        key = "mean" if task == "regression" else "majority"
        baselines = {key: probe_shapes.trivial_baseline(task, inputs.y_train, inputs.y_dev, names)}
    train_ds, dev_ds = inputs.datasets.get("train"), inputs.datasets.get("dev")
    if train_ds is None or dev_ds is None:
        return baselines
    texts = joined_texts(train_ds.texts, train_ds.pairs), joined_texts(dev_ds.texts, dev_ds.pairs)
    if task == "single_label":
        baselines["tfidf"] = tfidf_baseline(
            texts[0], inputs.y_train, texts[1], inputs.y_dev, label_names=names,
            class_weight=fit_kwargs_from(cfg)["class_weight"], seed=cfg.seed)
    else:
        baselines["tfidf"] = probe_shapes.tfidf_shaped_baseline(task, texts[0], inputs.y_train, texts[1],
                                                                 inputs.y_dev, names, seed=cfg.seed)
    index = inputs.layer_indices[best.layer]
    if index is None or not inputs.feature_meta.get("model"):
        inputs.notes.append("Random-encoder baseline skipped: the best features combine several layers.")
        return baselines
    X = random_encoder_features(cfg, inputs, best.pool, index, cache, progress)
    fit = fit_probe(X["train"], inputs.y_train, **shape_kwargs(cfg, task)[0])
    if task == "single_label":
        random = score_probe(fit, X["dev"], inputs.y_dev, names)
    else:
        random = _shaped_cell(fit, best.pool, best.layer, best.layer_name, X["dev"], inputs.y_dev, names,
                              cfg.threshold, cfg.seed).metrics
    random.update(pool=best.pool, layer=best.layer_name, C=fit.C)
    baselines["random_encoder"] = random
    return baselines


def random_encoder_features(cfg: Any, inputs: ProbeInputs, pool: str, index: int, cache: Path | None,
                            progress: bool) -> dict[str, np.ndarray]:
    """Train/dev features of the same architecture with freshly initialised weights (seeded), one pool, one layer."""
    import torch

    from bertkit.features import extract
    from bertkit.models import loading as modeling

    meta = dict(inputs.feature_meta)
    model = str(meta["model"])
    state: dict[str, Any] = {}

    def compute(ds: Any) -> dict[str, np.ndarray]:
        if "encoder" not in state:
            torch.manual_seed(cfg.seed)
            state["encoder"] = modeling.load_encoder(model, bool(meta.get("trust_remote_code")), random_init=True)
            state["tokenizer"] = modeling.load_tokenizer(model, bool(meta.get("trust_remote_code")))
        dtype = modeling.DTYPE_NAMES.get(str(meta.get("dtype")), torch.float32)
        return extract.extract_pooled(state["encoder"], state["tokenizer"], ds, pools=[pool], layers=[index],
                              max_length=int(meta["max_length"]), batch_size=cfg.batch_size, dtype=dtype,
                              normalize=bool(meta.get("normalize")), progress=progress,
                              long_text=extract.LongText(meta.get("truncation", "head"), meta.get("long_text", "cut"),
                                                        meta.get("stride")))

    key = {**meta, "revision": f"random-init(seed={cfg.seed})/{meta.get('revision')}", "layers": str(index)}
    return {
        split: cached_features(cache, split, inputs.datasets[split], key, [pool], [index],
                               lambda ds=inputs.datasets[split]: compute(ds), prefix="random-")[pool][:, 0]
        for split in ("train", "dev")
    }


def write_probe_run(run_dir: Path, cfg: Any, inputs: ProbeInputs, sweep: Sweep, result: dict[str, Any],
                    final_dir: Path | None = None) -> dict[str, str]:
    """config.json, metrics.json, the layer-curve and confusion-matrix PNGs and the saved probe (probe/), written
    into `run_dir`; the paths reported are those in `final_dir` (where a staged run ends up)."""
    from bertkit import plots
    from bertkit.config.commands import config_dict
    from bertkit.io import atomic, trail

    best = sweep.best
    fingerprints = {name: ds.fingerprint for name, ds in inputs.datasets.items()}
    trail.write_run_config(run_dir, "probe", config_dict(cfg), data_fingerprints=fingerprints,
                           features=inputs.feature_meta)
    baselines = {name: b[sweep.metric] for name, b in result.get("baselines", {}).items()}
    label = BASELINE_NAMES.get(best.fit.task, BASELINE_NAMES["single_label"])
    model = Path(str(inputs.feature_meta.get("model"))).name
    curve = plots.probe_layer_curve(sweep.rows(), {label.get(k, k): v for k, v in baselines.items()},
                                    run_dir / "probe_layers.png", f"Linear probe per layer — {model}",
                                    metric=sweep.metric)
    figure_key, figure = best_cell_figure(run_dir, best, inputs.y_dev)
    index = inputs.layer_indices[best.layer]
    meta = {**inputs.feature_meta, "pool": best.pool, "layers": str(index) if index is not None else inputs.feature_meta["layers"],
            "layer_name": best.layer_name, f"dev_{sweep.metric}": best.metrics[sweep.metric]}
    save_probe(run_dir / "probe", best.fit, inputs.label_map, meta)
    final = final_dir or run_dir
    outputs = {"config": str(final / "config.json"), "metrics": str(final / "metrics.json"),
               "layer_curve": str(final / curve.name), figure_key: str(final / figure.name),
               "probe": str(final / "probe")}
    atomic.write_json_atomic(run_dir / "metrics.json", {**result, "outputs": outputs})
    return outputs


BASELINE_NAMES = {
    "single_label": {"majority": "majority class", "tfidf": "TF-IDF + LR", "random_encoder": "random-init encoder"},
    "regression": {"mean": "mean predictor", "tfidf": "TF-IDF + ridge", "random_encoder": "random-init encoder"},
    "multi_label": {"majority": "per-label majority", "tfidf": "TF-IDF + OvR LR", "random_encoder": "random-init encoder"},
}
"""How the baselines are named in the layer-curve legend, per problem shape."""


def best_cell_figure(run_dir: Path, best: Cell, y_dev: np.ndarray) -> tuple[str, Path]:
    """(outputs key, path) of the best cell's dev figure: confusion matrix, true-vs-predicted scatter (numbers) or
    per-tag F1 bars (tags)."""
    from bertkit import plots

    title = f"{best.pool} {best.layer_name}"
    if best.fit.task == "regression":
        return "scatter", plots.regression_scatter(y_dev, best.pred, run_dir / "scatter.png", f"Dev — {title}")
    if best.fit.task == "multi_label":
        return "per_label_f1", plots.per_label_f1(best.metrics["per_label"], run_dir / "per_label_f1.png",
                                                  f"Dev per-tag F1 — {title}")
    return "confusion_matrix", plots.confusion_matrix(best.metrics["confusion_matrix"], best.metrics["labels"],
                                                      run_dir / "confusion_matrix.png", f"Dev confusion — {title}")
