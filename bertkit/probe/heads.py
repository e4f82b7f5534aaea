"""Fitted probes as plain arrays: the standardisation (`Standardizer`) and the linear heads the engine
(`bertkit.probe.engine`) fits on standardised features - multinomial or binary logistic regression
(`LogisticHead`), one logistic regression per tag (`OneVsRestHead`, a tag constant in training kept as a
`ConstantTag`), ridge regression (`RidgeHead`) - and `ProbeModel`, the two in a row.

They carry the attributes and layout scikit-learn's `StandardScaler`, `LogisticRegression`, `OneVsRestClassifier`
and `Ridge` have (`mean_`, `scale_`, `coef_`, `intercept_`, `classes_`, `estimators_`; steps named `scaler`, `lr`,
`ovr`, `ridge`), because the saved probe formats (`probe.saved`, `probe.word_saved`) and `probe.shapes` read those
arrays: a probe fitted here is saved byte for byte as one fitted by scikit-learn was. Predictions are computed in
float64 from the float32 standardised features, as `probe.saved.SavedProbe` computes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Standardizer:
    """Per-feature mean and scale (population standard deviation; 1 for a constant feature), as StandardScaler's."""

    mean_: np.ndarray
    var_: np.ndarray
    scale_: np.ndarray
    n_samples_seen_: int

    @property
    def n_features_in_(self) -> int:
        return int(self.mean_.shape[0])

    def transform(self, X: np.ndarray) -> np.ndarray:
        """`X` standardised (a new array), float32 for float32 features and float64 otherwise, as StandardScaler
        gives it (so a probe's predictions on float64 features are the saved probe's, which computes in float64)."""
        X = np.asarray(X)
        Z = np.array(X, dtype=np.float32 if X.dtype == np.float32 else np.float64)
        np.subtract(Z, self.mean_, out=Z, casting="same_kind")  # in float64, in buffered chunks: no wide copy
        np.divide(Z, self.scale_, out=Z, casting="same_kind")
        return Z

    def transform_in_place(self, X: np.ndarray, block_rows: int = 8192) -> np.ndarray:
        """A float32 `X` standardised where it lies (block by block: no temporary the size of `X`)."""
        mean, inverse = self.mean_.astype(np.float32), (1.0 / self.scale_).astype(np.float32)
        for start in range(0, len(X), block_rows):
            block = X[start:start + block_rows]
            block -= mean
            block *= inverse
        return X


@dataclass(frozen=True)
class LogisticHead:
    """Logistic regression on standardised features: `coef_` (classes, d) and `intercept_` (classes,) over
    `classes_`; two classes keep one row, the second class's (as LogisticRegression does)."""

    coef_: np.ndarray
    intercept_: np.ndarray
    classes_: np.ndarray
    C: float
    class_weight: str | None = None
    n_iter_: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int32))

    def decision_function(self, Z: np.ndarray) -> np.ndarray:
        scores = blockwise_scores(Z, self.coef_, self.intercept_)
        return scores[:, 0] if self.coef_.shape[0] == 1 else scores

    def predict_proba(self, Z: np.ndarray) -> np.ndarray:
        scores = self.decision_function(Z)
        if scores.ndim == 1:
            p1 = sigmoid(scores)
            return np.stack([1.0 - p1, p1], axis=1)
        scores = scores - scores.max(axis=1, keepdims=True)
        proba = np.exp(scores)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict(self, Z: np.ndarray) -> np.ndarray:
        scores = self.decision_function(Z)
        return self.classes_[(scores > 0).astype(np.int64) if scores.ndim == 1 else scores.argmax(axis=1)]


@dataclass(frozen=True)
class ConstantTag:
    """A tag on in every training row (`y_` 1) or in none (0): predicted as that constant."""

    y_: np.ndarray


@dataclass(frozen=True)
class OneVsRestHead:
    """One binary logistic regression per tag (a `ConstantTag` for a tag constant in training)."""

    estimators_: Sequence[LogisticHead | ConstantTag]
    C: float

    def predict_proba(self, Z: np.ndarray) -> np.ndarray:
        columns = [np.full(len(Z), float(est.y_[0])) if isinstance(est, ConstantTag)
                   else est.predict_proba(Z)[:, 1] for est in self.estimators_]
        return np.stack(columns, axis=1)

    def predict(self, Z: np.ndarray) -> np.ndarray:
        return (self.predict_proba(Z) > 0.5).astype(np.int64)


@dataclass(frozen=True)
class RidgeHead:
    """Ridge regression on standardised features: `coef_` (d,), `intercept_` a number, penalty `alpha`."""

    coef_: np.ndarray
    intercept_: float
    alpha: float

    def predict(self, Z: np.ndarray) -> np.ndarray:
        return blockwise_scores(Z, self.coef_.reshape(1, -1), np.asarray([self.intercept_]))[:, 0]


@dataclass(frozen=True)
class ProbeModel:
    """A standardiser and a head, in a row: `steps` (name, part) and `named_steps` as a scikit-learn Pipeline's."""

    steps: list[tuple[str, Any]]

    @classmethod
    def of(cls, scaler: Standardizer, head: Any) -> ProbeModel:
        name = {LogisticHead: "lr", OneVsRestHead: "ovr", RidgeHead: "ridge"}[type(head)]
        return cls([("scaler", scaler), (name, head)])

    @property
    def named_steps(self) -> dict[str, Any]:
        return dict(self.steps)

    @property
    def head(self) -> Any:
        return self.steps[-1][1]

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.head.predict(self.steps[0][1].transform(X))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.head.predict_proba(self.steps[0][1].transform(X))


def blockwise_scores(Z: np.ndarray, coef: np.ndarray, intercept: np.ndarray, block_rows: int = 8192) -> np.ndarray:
    """Z @ coef.T + intercept in float64, `block_rows` rows at a time: float32 features are widened a block at a
    time, never as a whole (a 25k x 1536 dev matrix would take 300 MB more)."""
    out = np.empty((len(Z), len(intercept)), dtype=np.float64)
    for start in range(0, len(Z), block_rows):
        out[start:start + block_rows] = np.asarray(Z[start:start + block_rows], dtype=np.float64) @ coef.T + intercept
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow warnings for large |x|."""
    out = np.empty_like(x, dtype=np.float64)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    e = np.exp(x[~positive])
    out[~positive] = e / (1.0 + e)
    return out
