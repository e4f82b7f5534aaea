"""Logistic-regression probes on frozen features: fit, score, per-layer sweep, baselines, variance, saving.

Everything here works on arrays (features `X`, label ids `y`) and returns values; reading stores, extracting
features and writing run directories happen in `cli.py`/`store.py`/`runs.py`. A probe is
`StandardScaler` + `LogisticRegression(lbfgs)`: standardizing makes lbfgs converge in a few dozen iterations
instead of hitting its iteration cap on raw BERT features, which is most of the speed-up over fitting on raw
features (see bench/bench_probe.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import UserError

log = logging.getLogger(__name__)

MAX_ITER = 2000
DEFAULT_C = 1.0
DEFAULT_C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
ALAMMAR_C_GRID = tuple(float(c) for c in np.linspace(0.0001, 100, 20))
PROBE_WEIGHTS = "probe.safetensors"
PROBE_META = "probe.json"
SCORE_KEYS = ("accuracy", "f1", "mcc")


# ---------------------------------------------------------------- fitting and scoring


@dataclass
class ProbeFit:
    """A fitted probe: the scaler + logistic regression pipeline, the C it used, and CV scores if it searched."""

    model: Any
    C: float
    cv_results: list[dict[str, float]] | None = None

    @property
    def scaler(self) -> Any:
        return self.model.named_steps["scaler"]

    @property
    def classifier(self) -> Any:
        return self.model.named_steps["lr"]

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
) -> ProbeFit:
    """Standardize + logistic regression on `X` (n, d) with label ids `y`.

    With `cv`, C is chosen by K-fold cross-validated accuracy over `C_grid` (default `DEFAULT_C_GRID`; the
    scaler is refit inside every fold, no leakage; ties go to the earlier grid value, as in GridSearchCV),
    then the pipeline is refit on all of `X` with that C. Otherwise `C` (default 1.0) is used directly.

    BLAS runs single-threaded here: for a d of a few hundred, multi-threaded OpenBLAS only adds overhead, and
    on a busy machine its spinning threads made a fit 14x slower (25.6 s vs 1.8 s, measured on 2 shared cores).
    """
    from threadpoolctl import threadpool_limits

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
    """Full classification metrics (accuracy, macro-F1, MCC, per class, confusion matrix) of `fit` on (X, y)."""
    from bertkit.metrics import classification_metrics

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
    **fit_kwargs: Any,
) -> Sweep:
    """Fit one probe per (pooling, layer) on `(n, L, d)` train features and score it on dev.

    `layers` are the indexes of the layer axis to probe (default: all of them); `layer_names` label that
    axis (e.g. `embeddings`, `layer 1`, ...). `fit_kwargs` go to `fit_probe` (C, cv, C_grid, class_weight, seed).
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
            metrics = score_probe(fit, np.asarray(dev[:, layer]), y_dev, label_names)
            pred = _predicted_ids(fit, np.asarray(dev[:, layer]))
            ci = bootstrap_ci(y_dev, pred, seed=fit_kwargs.get("seed", 42))
            cells.append(Cell(pool, int(layer), name, fit, metrics, pred, ci))
    return Sweep(cells, metric)


def _predicted_ids(fit: ProbeFit, X: np.ndarray) -> np.ndarray:
    return np.asarray(fit.predict(np.asarray(X, dtype=np.float32)), dtype=np.int64)


def repeat_probe(
    X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray, *, repeats: int,
    fraction: float = 0.8, seed: int = 42, **fit_kwargs: Any,
) -> dict[str, Any]:
    """Refit `repeats` times, each on a random `fraction` of the training rows (without replacement, every
    class kept), and report mean ± std of the dev scores."""
    rng = np.random.default_rng(seed)
    n = len(y_train)
    size = max(2, int(round(fraction * n)))
    scores: dict[str, list[float]] = {k: [] for k in SCORE_KEYS}
    for _ in range(repeats):
        idx = np.sort(rng.choice(n, size=size, replace=False))
        if len(np.unique(y_train[idx])) < len(np.unique(y_train)):
            idx = np.arange(n)  # tiny data: a subset lost a class; refit on all (still a different seed)
        fit = fit_probe(np.asarray(X_train)[idx], y_train[idx], seed=seed, **fit_kwargs)
        pred = _predicted_ids(fit, X_dev)
        from bertkit.metrics import classification_metrics

        m = classification_metrics(y_dev, pred, label_names=[str(i) for i in range(int(max(y_train.max(), y_dev.max())) + 1)])
        for k in SCORE_KEYS:
            scores[k].append(m[k])
    return {"repeats": repeats, "fraction": fraction,
            **{k: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, "values": v}
               for k, v in scores.items()}}


# ---------------------------------------------------------------- baselines


def majority_baseline(y_train: np.ndarray, y_dev: np.ndarray, label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Always predict the most frequent training label (scikit-learn's DummyClassifier, as in Alammar's notebook)."""
    from sklearn.dummy import DummyClassifier

    from bertkit.metrics import classification_metrics

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

    from bertkit.metrics import classification_metrics

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


# ---------------------------------------------------------------- saved probes (safetensors + JSON, no pickle)


@dataclass
class SavedProbe:
    """A probe as plain arrays: scaler statistics, coefficients, intercept, plus how to make its features."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    classes: np.ndarray
    label_map: Any
    meta: dict[str, Any]
    path: Path | None = None

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=np.float64) - self.mean) / self.scale
        return Z @ self.coef.T + self.intercept

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Probabilities, one column per label id of the label map (as LogisticRegression computes them)."""
        scores = self.decision_function(X)
        if self.coef.shape[0] == 1:  # binary: one weight vector for the second class
            p1 = 1.0 / (1.0 + np.exp(-scores[:, 0]))
            proba = np.stack([1.0 - p1, p1], axis=1)
        else:
            scores = scores - scores.max(axis=1, keepdims=True)
            proba = np.exp(scores)
            proba /= proba.sum(axis=1, keepdims=True)
        full = np.zeros((len(proba), len(self.label_map)), dtype=np.float64)
        full[:, self.classes] = proba
        return full

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)


def probe_arrays(fit: ProbeFit) -> dict[str, np.ndarray]:
    """The fitted probe's parameters as named float arrays (what probe.safetensors holds)."""
    scaler, lr = fit.scaler, fit.classifier
    scale = scaler.scale_ if scaler.scale_ is not None else np.ones_like(scaler.mean_)
    # C-contiguous copies: safetensors writes the raw buffer, and lbfgs leaves `coef_` as a transposed view.
    return {
        "scaler_mean": np.ascontiguousarray(scaler.mean_, dtype=np.float64),
        "scaler_scale": np.ascontiguousarray(scale, dtype=np.float64),
        "coef": np.ascontiguousarray(lr.coef_, dtype=np.float64),
        "intercept": np.ascontiguousarray(lr.intercept_, dtype=np.float64),
        "classes": np.ascontiguousarray(lr.classes_, dtype=np.int64),
    }


def save_probe(directory: str | Path, fit: ProbeFit, label_map: Any, meta: dict[str, Any]) -> Path:
    """Write `probe.safetensors` (arrays) and `probe.json` (label map + feature recipe) into `directory`."""
    from safetensors.numpy import save_file

    from bertkit.runs import atomic_path, write_json_atomic

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = probe_arrays(fit)
    with atomic_path(directory / PROBE_WEIGHTS) as tmp:
        save_file(arrays, str(tmp), metadata={"format": "bertkit-probe/1"})
    record = {"format": "bertkit-probe/1", "label_map": label_map.to_json(), "C": fit.C,
              "n_features": int(arrays["coef"].shape[1]), **meta}
    write_json_atomic(directory / PROBE_META, record)
    return directory


def load_probe(path: str | Path) -> SavedProbe:
    """A saved probe from its directory (`OUT/probe`), or from a run directory that contains `probe/`.

    Both files are checked before anything uses them, so a damaged one is named as such (never blamed on an
    option the user did not pass)."""
    root = Path(path).expanduser()
    if not (root / PROBE_META).is_file() and (root / "probe" / PROBE_META).is_file():
        root = root / "probe"
    if not (root / PROBE_META).is_file() or not (root / PROBE_WEIGHTS).is_file():
        raise UserError(
            f"{path} is not a saved probe (no {PROBE_META} + {PROBE_WEIGHTS}). Pass --probe with the run directory "
            f"of a `bertkit probe --out DIR` run (or its probe/ folder)."
        )
    meta, arrays = _read_probe_meta(root), _read_probe_arrays(root)
    n_labels, classes = len(meta["label_map"]["labels"]), arrays["classes"].tolist()
    if min(classes) < 0 or max(classes) >= n_labels:
        raise _damaged_probe(root / PROBE_META, f"its label_map has {n_labels} label(s) but {PROBE_WEIGHTS} "
                                                f"predicts class ids {classes}")
    from bertkit.data import LabelMap

    return SavedProbe(arrays["scaler_mean"], arrays["scaler_scale"], arrays["coef"], arrays["intercept"],
                      arrays["classes"], LabelMap.from_json(meta["label_map"]), meta, root)


PROBE_META_KEYS = ("label_map", "model", "pool", "layers")
PROBE_ARRAYS = ("scaler_mean", "scaler_scale", "coef", "intercept", "classes")


def _damaged_probe(file: Path, reason: str) -> UserError:
    return UserError(f"The saved probe file {file} is damaged ({reason}). Re-run `bertkit probe --out DIR` to write "
                     f"the probe again, then pass --probe DIR.")


def _read_probe_meta(root: Path) -> dict[str, Any]:
    """probe.json, with every key prediction needs present and valid."""
    from bertkit.config import POOLS, layers_problem

    file = root / PROBE_META
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged_probe(file, f"not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise _damaged_probe(file, "not a JSON object")
    missing = [k for k in PROBE_META_KEYS if k not in meta]
    if missing:
        raise _damaged_probe(file, f"missing {', '.join(missing)}")
    problems = [] if meta["pool"] in POOLS else [f"pool {meta['pool']!r} is not one of {', '.join(POOLS)}"]
    problems += [f"layers {meta['layers']!r} is not a layer list" for _ in layers_problem(str(meta["layers"]))]
    if "max_length" in meta and (not isinstance(meta["max_length"], int) or meta["max_length"] <= 0):
        problems.append(f"max_length {meta['max_length']!r} is not a positive integer")
    if not isinstance(meta["label_map"], dict) or not isinstance(meta["label_map"].get("labels"), list):
        problems.append("label_map has no list of labels")
    if problems:
        raise _damaged_probe(file, "; ".join(problems))
    return meta


def _read_probe_arrays(root: Path) -> dict[str, np.ndarray]:
    """probe.safetensors: every array present, with consistent shapes."""
    from safetensors.numpy import load_file

    file = root / PROBE_WEIGHTS
    try:
        arrays = load_file(str(file))
    except Exception as exc:  # SafetensorError (truncated header or data), OSError, ValueError
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise _damaged_probe(file, reason) from None
    missing = [k for k in PROBE_ARRAYS if k not in arrays]
    problem = f"missing arrays {', '.join(missing)}" if missing else _probe_arrays_problem(arrays)
    if problem:
        raise _damaged_probe(file, problem)
    return arrays


def _probe_arrays_problem(arrays: dict[str, np.ndarray]) -> str | None:
    """Why the probe's arrays cannot be a fitted logistic regression (None: they can). Shapes that broadcast anyway
    or NaN/zero scales would otherwise give silently wrong probabilities, bad class ids a traceback."""
    coef, intercept, classes = arrays["coef"], arrays["intercept"], arrays["classes"]
    if coef.ndim != 2:
        return f"coef has shape {coef.shape}, not (classes, features)"
    k, dim = coef.shape
    if arrays["scaler_mean"].shape != (dim,) or arrays["scaler_scale"].shape != (dim,) or intercept.shape != (k,):
        return "the scaler, coefficient and intercept shapes do not match"
    expected = 2 if k == 1 else k  # binary: one weight row for two classes
    if classes.shape != (expected,) or classes.dtype.kind not in "iu" or len(set(classes.tolist())) != expected:
        return f"classes {classes.tolist()} are not {expected} distinct class ids for {k} coefficient row(s)"
    numbers = [arrays[name] for name in ("scaler_mean", "scaler_scale", "coef", "intercept")]
    if not all(np.isfinite(a).all() for a in numbers) or not (arrays["scaler_scale"] > 0).all():
        return "it holds NaN/inf values or non-positive scales"
    return None


def predict_with_probe(
    saved: SavedProbe, dataset: Any, *, batch_size: int = 64, dtype: Any = None, max_length: int | None = None,
    precision: str | None = None, progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Label ids and probabilities for `dataset` (a data.TextDataset): re-extracts features as the probe was
    trained (model, pooling, layer, normalization; max length unless `max_length` is given), then applies the
    saved probe. The extraction precision is `dtype`, or `precision` (auto/fp32/bf16/fp16) resolved for the
    encoder's device, or fp32."""
    import torch

    from bertkit import embed, modeling

    meta = saved.meta
    revision = modeling.model_revision(meta["model"])
    if meta.get("revision") and revision != meta["revision"]:
        log.warning("Model %s has changed since the probe was trained (revision %s, probe trained on %s); "
                    "predictions may be off.", meta["model"], revision, meta["revision"])
    tokenizer = modeling.load_tokenizer(meta["model"], meta.get("trust_remote_code", False))
    encoder = modeling.load_encoder(meta["model"], meta.get("trust_remote_code", False))
    if dtype is None and precision is not None:
        dtype = modeling.choose_dtype(precision, next(encoder.parameters()).device)
    features = embed.extract_features(
        encoder, tokenizer, dataset, pool=meta["pool"], layers=str(meta["layers"]), combine=meta.get("combine", "concat"),
        max_length=int(max_length or meta.get("max_length") or 128), batch_size=batch_size, dtype=dtype or torch.float32,
        normalize=bool(meta.get("normalize", False)), progress=progress,
    )
    features = np.asarray(features, dtype=np.float32).reshape(len(dataset), -1)
    if features.shape[1] != saved.coef.shape[1]:
        raise UserError(
            f"The probe in {saved.path} expects {saved.coef.shape[1]} features but model {meta['model']} gives "
            f"{features.shape[1]}. The model folder changed; re-run `bertkit probe` with it."
        )
    proba = saved.predict_proba(features)
    return proba.argmax(axis=1).astype(np.int64), proba


# ---------------------------------------------------------------- inputs: a store, or text extracted on the fly


@dataclass
class ProbeInputs:
    """Features per split and pooling, `(n, k, d)` with a layer axis of k probed layers, and their labels."""

    train: dict[str, np.ndarray]
    dev: dict[str, np.ndarray]
    y_train: np.ndarray
    y_dev: np.ndarray
    label_map: Any
    layer_indices: list[int | None]
    """Hidden-state index of each position on the layer axis (None: a combination of layers from a store)."""
    layer_names: list[str]
    feature_meta: dict[str, Any]
    """model, revision, max_length, normalize, combine, layers spec of the store: what a saved probe needs."""
    test: dict[str, np.ndarray] | None = None
    y_test: np.ndarray | None = None
    datasets: dict[str, Any] = field(default_factory=dict)
    """The text of each split (for the TF-IDF and random-encoder baselines), when it is available."""
    notes: list[str] = field(default_factory=list)
    source: str = "extracted"


def load_store_inputs(cfg: Any) -> ProbeInputs:
    """Features, labels and layer names from a `bertkit embed` store (--features)."""
    from bertkit import modeling, store

    path = Path(cfg.features).expanduser()
    if not path.exists():
        raise UserError(f"--features {path} does not exist. Pass the --out directory of a `bertkit embed` run.")
    try:
        splits = store.open_splits(path)
    except (ValueError, OSError) as exc:  # a truncated or unreadable features.npy / labels.npy
        raise UserError(
            f"The feature store {path} is damaged: its arrays cannot be read ({exc}). Rebuild it with the same "
            f"`bertkit embed` command plus --overwrite."
        ) from None
    train = splits["train"]
    manifest = train.manifest
    if train.labels is None or train.label_map is None:
        raise UserError(
            f"The feature store {train.path} has no labels, so a probe cannot be trained on it. Re-run `bertkit embed` "
            f"with --label-column (the column holding the labels), or use `bertkit probe --data ... --label-column ...`."
        )
    if cfg.model is not None and modeling.model_revision(cfg.model) != manifest.get("revision"):
        raise UserError(
            f"The feature store {train.path} was made by model {manifest.get('model')!r} "
            f"(revision {manifest.get('revision')}), not by --model {cfg.model} ({modeling.model_revision(cfg.model)}). "
            f"Drop --model to probe the store as it is, or re-embed with `bertkit embed --model {cfg.model}`."
        )
    notes: list[str] = []
    pools = _store_pools(cfg, manifest)
    positions, indices, names = _store_layers(cfg, train)
    X_train = _layer_axis(train.features)[:, positions]
    y_train, y_dev = np.asarray(train.labels), None
    if "dev" in splits:
        dev = splits["dev"]
        X_dev, y_dev = _layer_axis(dev.features)[:, positions], _store_labels(dev, train.label_map, "dev")
    else:
        from bertkit.data import stratified_split

        tr, dv = stratified_split(list(y_train), cfg.dev_fraction, cfg.seed)
        X_train, X_dev, y_train, y_dev = X_train[tr], X_train[dv], y_train[tr], y_train[dv]
        notes.append(f"The store has no dev split: held out {len(dv)} of {len(tr) + len(dv)} rows as dev "
                     f"(stratified, --dev-fraction {cfg.dev_fraction}, seed {cfg.seed}).")
    inputs = ProbeInputs({pools[0]: np.asarray(X_train, np.float32)}, {pools[0]: np.asarray(X_dev, np.float32)},
                         y_train, y_dev, train.label_map, indices, names, _store_meta(manifest), notes=notes, source="store")
    if "test" in splits and splits["test"].labels is not None:
        inputs.test = {pools[0]: np.asarray(_layer_axis(splits["test"].features)[:, positions], np.float32)}
        inputs.y_test = _store_labels(splits["test"], train.label_map, "test")
    if "dev" in splits:
        inputs.datasets = _store_texts({k: v for k, v in splits.items()}, notes)
    return inputs


def _store_pools(cfg: Any, manifest: dict[str, Any]) -> list[str]:
    have = manifest.get("pool", "cls")
    if cfg.pool is not None and cfg.pools != [have]:
        raise UserError(
            f"--pool {cfg.pool} asks for pooling the store does not have: it holds {have!r} features only. "
            f"Drop --pool, or embed again with `bertkit embed --pool ...` (or probe with --data to extract on the fly)."
        )
    return [have]


def _layer_axis(features: np.ndarray) -> np.ndarray:
    """Store features as (n, k, d): a single-layer store gets a layer axis of 1."""
    return features if features.ndim == 3 else features[:, None, :]


def _store_layers(cfg: Any, train: Any) -> tuple[list[int], list[int | None], list[str]]:
    """(positions on the store's layer axis, their hidden-state indices, names) selected by --layers."""
    from bertkit.config import parse_layers
    from bertkit.embed import check_distinct_layers

    manifest = train.manifest
    stored = list(manifest.get("layer_indices") or [])
    names = list(manifest.get("layer_names") or [])
    if train.features.ndim == 2:
        if cfg.layers is not None:
            _check_vector_store_layers(cfg.layers, manifest, stored)
        if len(stored) > 1:  # several layers combined into one vector
            label = f"layers {manifest.get('layers')} ({manifest.get('combine')})"
            return [0], [None], [label]
        return [0], [stored[0] if stored else None], [names[0] if names else str(manifest.get("layers"))]
    n_layers = int(manifest.get("n_layers", len(stored) - 1))
    wanted = parse_layers(cfg.layers) if cfg.layers is not None else None
    if wanted is None:
        return list(range(len(stored))), stored, names
    resolved = [w + n_layers + 1 if w < 0 else w for w in wanted]
    check_distinct_layers(wanted, resolved, n_layers)
    missing = [w for w, r in zip(wanted, resolved, strict=True) if r not in stored]
    if missing:
        raise UserError(
            f"--layers {cfg.layers}: the store has no layer {', '.join(map(str, missing))}; it holds hidden states "
            f"{', '.join(map(str, stored))} (0 = embeddings). Pick from those, or re-embed with --layers all."
        )
    positions = [stored.index(r) for r in resolved]
    return positions, resolved, [names[p] for p in positions]


def _check_vector_store_layers(layers: str, manifest: dict[str, Any], stored: list[int]) -> None:
    """A store with one vector per row (one layer, or layers combined) answers --layers only with what it holds."""
    from bertkit.config import parse_layers
    from bertkit.embed import check_distinct_layers

    wanted = parse_layers(layers)
    n_layers = int(manifest.get("n_layers", max(stored, default=0)))
    if wanted is None:
        same = manifest.get("layers") == "all"
    else:
        resolved = [w + n_layers + 1 if w < 0 else w for w in wanted]
        check_distinct_layers(wanted, resolved, n_layers)
        same = resolved == stored
    if not same:
        raise UserError(
            f"--layers {layers}: the store holds one feature vector per row, made from hidden state(s) "
            f"{', '.join(map(str, stored))} (--layers {manifest.get('layers')}, --combine {manifest.get('combine')}); "
            f"it cannot be split into other layers. Drop --layers, or re-embed with `bertkit embed --layers all`."
        )


def _store_labels(split_store: Any, label_map: Any, name: str) -> np.ndarray:
    """A dev/test store's label ids in the train store's mapping (unseen labels are an error)."""
    if split_store.labels is None or split_store.label_map is None:
        raise UserError(f"The {name} store {split_store.path} has no labels; re-run `bertkit embed` with --label-column.")
    if split_store.label_map == label_map:
        return np.asarray(split_store.labels)
    raw = split_store.label_map.decode(split_store.labels)
    return label_map.encode(raw, f"The {name} store {split_store.path}")


def _store_meta(manifest: dict[str, Any]) -> dict[str, Any]:
    keys = ("model", "revision", "max_length", "normalize", "combine", "layers", "architecture", "dtype")
    meta = {k: manifest.get(k) for k in keys}
    meta["trust_remote_code"] = False
    return meta


def _store_texts(splits: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Re-read each split's text from the file the store was made from (for the text baselines), if unchanged."""
    from bertkit.config import DataOptions
    from bertkit.data import load_dataset_split

    texts = {}
    for name, split_store in splits.items():
        m = split_store.manifest
        source = m.get("data")
        if not source or not Path(str(source)).is_file():
            notes.append(f"TF-IDF and random-encoder baselines skipped: the store's {name} data {source} is not readable here.")
            return {}
        opts = DataOptions(data=source, text_column=m.get("text_column"), text_pair_column=m.get("text_pair_column"),
                           label_column=m.get("label_column"), limit=m.get("limit"))
        ds = load_dataset_split(opts, source, need_labels=False)
        if ds.fingerprint != m.get("data_fingerprint") or len(ds) != len(split_store):
            notes.append(f"TF-IDF and random-encoder baselines skipped: {source} changed since it was embedded.")
            return {}
        texts[name] = ds
    return texts


def load_text_inputs(cfg: Any, cache_dir: Path | Callable[[], Path] | None, progress: bool = False) -> ProbeInputs:
    """Read --data/--dev/--test and extract features for every --pool and --layers in one pass per split,
    cached as `cache_dir/<split>-<pool>-<layers>.npy` (reused by a re-run with the same model and data).

    A callable `cache_dir` is called once the data and the model are validated (it may claim the run directory)."""
    from bertkit import data, embed, modeling
    from bertkit.config import parse_layers

    splits = data.load_splits(cfg, need_labels=True, need_dev=True)
    model = cfg.model or modeling.OFFLINE_NAME
    tokenizer = modeling.load_tokenizer(model, cfg.trust_remote_code)
    modeling.check_max_length(cfg.max_length, tokenizer, modeling.load_config(model, cfg.trust_remote_code), model)
    encoder = modeling.load_encoder(model, cfg.trust_remote_code)
    cache_dir = cache_dir() if callable(cache_dir) else cache_dir
    n_layers, _ = embed.encoder_shape(encoder)
    spec = embed.FeatureSpec(layers=None if parse_layers(cfg.layers or "-1") is None else tuple(parse_layers(cfg.layers or "-1")))
    indices = spec.resolve(n_layers)
    dtype = modeling.choose_dtype(cfg.precision, next(encoder.parameters()).device)
    meta = {"model": model, "revision": modeling.model_revision(model), "max_length": cfg.max_length,
            "normalize": cfg.normalize, "combine": "concat", "layers": cfg.layers or "-1",
            "architecture": type(encoder).__name__, "dtype": modeling.dtype_name(dtype),
            "trust_remote_code": cfg.trust_remote_code}
    named = {"train": splits.train, "dev": splits.dev, **({"test": splits.test} if splits.test is not None else {})}
    features = {
        name: cached_features(cache_dir, name, ds, meta, cfg.pools, indices,
                              lambda ds=ds, pools=cfg.pools: embed.extract_pooled(
                                  encoder, tokenizer, ds, pools=pools, layers=indices, max_length=cfg.max_length,
                                  batch_size=cfg.batch_size, dtype=dtype, normalize=cfg.normalize, progress=progress))
        for name, ds in named.items()
    }
    lm = splits.label_map
    assert splits.dev is not None and lm is not None
    inputs = ProbeInputs(features["train"], features["dev"], lm.encode(splits.train.labels or [], "train"),
                         lm.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}"), lm, list(indices),
                         spec.layer_names(n_layers), meta, datasets=named, notes=list(splits.notes))
    if splits.test is not None and splits.test.labels is not None:
        inputs.test, inputs.y_test = features["test"], lm.encode(splits.test.labels, f"The test data {splits.test.source}")
    return inputs


def cached_features(
    cache_dir: Path | None, split: str, dataset: Any, meta: dict[str, Any], pools: Sequence[str],
    indices: Sequence[int], compute: Callable[[], dict[str, np.ndarray]], prefix: str = "",
) -> dict[str, np.ndarray]:
    """{pool: features} from `cache_dir` when a previous run stored them for the same model, data and settings;
    otherwise `compute()` them and store one .npy per pool (+ a .json key) atomically."""
    from bertkit.runs import atomic_path, write_json_atomic

    layers = "all" if meta.get("layers") == "all" else "_".join(map(str, indices))
    key = {k: meta.get(k) for k in ("model", "revision", "max_length", "normalize", "dtype")}
    key.update(data=dataset.fingerprint, rows=len(dataset), source=dataset.source, layers=list(indices))
    files = {p: cache_dir / f"{prefix}{split}-{p}-{layers}.npy" for p in pools} if cache_dir else {}
    if files and all(f.is_file() and f.with_suffix(".json").is_file() for f in files.values()):
        if all(json.loads(f.with_suffix(".json").read_text(encoding="utf-8")) == key for f in files.values()):
            log.info("reusing cached %s%s features from %s", prefix, split, cache_dir)
            return {p: np.load(f) for p, f in files.items()}
    result = compute()
    for pool, path in files.items():
        with atomic_path(path) as tmp:
            with tmp.open("wb") as handle:
                np.save(handle, result[pool])
        write_json_atomic(path.with_suffix(".json"), key)
    return result


# ---------------------------------------------------------------- the whole `bertkit probe` run


def fit_kwargs_from(cfg: Any) -> dict[str, Any]:
    """fit_probe keyword arguments from a ProbeConfig."""
    return {"C": cfg.C, "cv": cfg.cv, "C_grid": cfg.c_values, "seed": cfg.seed,
            "class_weight": None if cfg.class_weight == "none" else cfg.class_weight}


def run_probe(cfg: Any, progress: bool = False) -> dict[str, Any]:
    """`bertkit probe`: inputs -> per-layer sweep -> baselines -> variance -> test -> run directory. Returns the
    results (what metrics.json holds)."""
    from bertkit import runs
    from bertkit.config import config_dict

    # --out is looked at now (read-only) and claimed once the data and model are validated
    plan = runs.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite,
                                compare=runs.config_compare(config_dict(cfg))) if cfg.out else None
    cache = (lambda: plan.claim().path / "features") if plan is not None else None
    inputs = load_store_inputs(cfg) if cfg.features else load_text_inputs(cfg, cache, progress)
    run_dir = plan.claim() if plan is not None else None
    cache = run_dir.path / "features" if run_dir is not None else None
    names = [str(x) for x in inputs.label_map.labels]
    kwargs = fit_kwargs_from(cfg)
    say = (lambda msg: log.info(msg)) if progress else None
    sweep = sweep_layers(inputs.train, inputs.y_train, inputs.dev, inputs.y_dev, layer_names=inputs.layer_names,
                         label_names=names, progress=say, **kwargs)
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
    if cfg.baselines:
        result["baselines"] = run_baselines(cfg, inputs, best, names, cache, progress)
    if cfg.repeats:
        result["repeats"] = repeat_probe(inputs.train[best.pool][:, best.layer], inputs.y_train,
                                         inputs.dev[best.pool][:, best.layer], inputs.y_dev, repeats=cfg.repeats, **kwargs)
    if inputs.test is not None and inputs.y_test is not None:
        result["best"]["test"] = score_probe(best.fit, inputs.test[best.pool][:, best.layer], inputs.y_test, names)
    if run_dir is not None:
        result["outputs"] = write_probe_run(run_dir.path, cfg, inputs, sweep, result, final_dir=run_dir.out)
        run_dir.commit()  # with --overwrite: the new run replaces the previous one only now
    return result


def run_baselines(cfg: Any, inputs: ProbeInputs, best: Cell, names: list[str], cache: Path | None,
                  progress: bool) -> dict[str, Any]:
    """Majority class, TF-IDF + LR on the raw text, and the random-weights encoder at the best cell."""
    baselines: dict[str, Any] = {"majority": majority_baseline(inputs.y_train, inputs.y_dev, names)}
    train_ds, dev_ds = inputs.datasets.get("train"), inputs.datasets.get("dev")
    if train_ds is None or dev_ds is None:
        return baselines
    baselines["tfidf"] = tfidf_baseline(
        joined_texts(train_ds.texts, train_ds.pairs), inputs.y_train, joined_texts(dev_ds.texts, dev_ds.pairs),
        inputs.y_dev, label_names=names, class_weight=fit_kwargs_from(cfg)["class_weight"], seed=cfg.seed)
    index = inputs.layer_indices[best.layer]
    if index is None or not inputs.feature_meta.get("model"):
        inputs.notes.append("Random-encoder baseline skipped: the best features combine several layers.")
        return baselines
    X = random_encoder_features(cfg, inputs, best.pool, index, cache, progress)
    fit = fit_probe(X["train"], inputs.y_train, **fit_kwargs_from(cfg))
    random = score_probe(fit, X["dev"], inputs.y_dev, names)
    random.update(pool=best.pool, layer=best.layer_name, C=fit.C)
    baselines["random_encoder"] = random
    return baselines


def random_encoder_features(cfg: Any, inputs: ProbeInputs, pool: str, index: int, cache: Path | None,
                            progress: bool) -> dict[str, np.ndarray]:
    """Train/dev features of the same architecture with freshly initialised weights (seeded), one pool, one layer."""
    import torch

    from bertkit import embed, modeling

    meta = dict(inputs.feature_meta)
    model = str(meta["model"])
    state: dict[str, Any] = {}

    def compute(ds: Any) -> dict[str, np.ndarray]:
        if "encoder" not in state:
            torch.manual_seed(cfg.seed)
            state["encoder"] = modeling.load_encoder(model, bool(meta.get("trust_remote_code")), random_init=True)
            state["tokenizer"] = modeling.load_tokenizer(model, bool(meta.get("trust_remote_code")))
        dtype = modeling.DTYPE_NAMES.get(str(meta.get("dtype")), torch.float32)
        return embed.extract_pooled(state["encoder"], state["tokenizer"], ds, pools=[pool], layers=[index],
                              max_length=int(meta["max_length"]), batch_size=cfg.batch_size, dtype=dtype,
                              normalize=bool(meta.get("normalize")), progress=progress)

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
    from bertkit import plots, runs
    from bertkit.config import config_dict

    best = sweep.best
    fingerprints = {name: ds.fingerprint for name, ds in inputs.datasets.items()}
    runs.write_run_config(run_dir, "probe", config_dict(cfg), data_fingerprints=fingerprints,
                          features=inputs.feature_meta)
    baselines = {name: b["accuracy"] for name, b in result.get("baselines", {}).items()}
    label = {"majority": "majority class", "tfidf": "TF-IDF + LR", "random_encoder": "random-init encoder"}
    model = Path(str(inputs.feature_meta.get("model"))).name
    curve = plots.probe_layer_curve(sweep.rows(), {label.get(k, k): v for k, v in baselines.items()},
                                    run_dir / "probe_layers.png", f"Linear probe per layer — {model}")
    confusion = plots.confusion_matrix(best.metrics["confusion_matrix"], best.metrics["labels"],
                                       run_dir / "confusion_matrix.png",
                                       f"Dev confusion — {best.pool} {best.layer_name}")
    index = inputs.layer_indices[best.layer]
    meta = {**inputs.feature_meta, "pool": best.pool, "layers": str(index) if index is not None else inputs.feature_meta["layers"],
            "layer_name": best.layer_name, "dev_accuracy": best.metrics["accuracy"]}
    save_probe(run_dir / "probe", best.fit, inputs.label_map, meta)
    final = final_dir or run_dir
    outputs = {"config": str(final / "config.json"), "metrics": str(final / "metrics.json"),
               "layer_curve": str(final / curve.name), "confusion_matrix": str(final / confusion.name),
               "probe": str(final / "probe")}
    runs.write_json_atomic(run_dir / "metrics.json", {**result, "outputs": outputs})
    return outputs
