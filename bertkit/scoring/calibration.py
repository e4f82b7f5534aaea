"""Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks"): one number T that divides a
classifier's logits before the softmax, fitted on held-out rows by minimising their negative log-likelihood. It
changes no prediction (the arg-max is the same for any T > 0), only how sure the probabilities say the model is: a
fine-tuned BERT is usually over-confident (T > 1 softens it).

`fit_temperature` works from class probabilities: log p is the logits up to a per-row constant, which the softmax
ignores, so the best model's saved dev probabilities (`best_dev_proba.npy`) are all it needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.scoring.metrics import expected_calibration_error
from bertkit.scoring.options import CALIBRATIONS as METHODS  # noqa: F401 - --calibrate's values, declared light
from bertkit.scoring.table import softmax

BOUNDS = (0.05, 20.0)
"""The temperatures searched: far beyond what a trained classifier needs either way."""


@dataclass(frozen=True)
class TemperatureFit:
    """A fitted temperature and what it did on the rows it was fitted on (their NLL and top-label ECE before and
    after). Those rows are the fit's own: the held-out effect is what `evaluate` on other rows shows."""

    temperature: float
    rows: int
    nll_before: float
    nll_after: float
    ece_before: float
    ece_after: float

    @classmethod
    def from_json(cls, record: Any) -> TemperatureFit | None:
        """A `calibration` record as `to_json` writes it; None for anything else."""
        if not isinstance(record, dict) or record.get("method") != "temperature":
            return None
        keys = ("temperature", "rows", "dev_nll_before", "dev_nll_after", "dev_ece_before", "dev_ece_after")
        if not all(isinstance(record.get(k), (int, float)) for k in keys):
            return None
        return cls(*(record[k] for k in keys))

    def to_json(self) -> dict[str, Any]:
        """The record in bertkit_model.json and metrics.json (`calibration`)."""
        return {"method": "temperature", "temperature": self.temperature, "fitted_on": "dev", "rows": self.rows,
                "dev_nll_before": self.nll_before, "dev_nll_after": self.nll_after,
                "dev_ece_before": self.ece_before, "dev_ece_after": self.ece_after}


def scaled(proba: np.ndarray, temperature: float) -> np.ndarray:
    """Class probabilities with their logits divided by `temperature` (log p stands for the logits)."""
    return softmax(np.log(np.clip(np.asarray(proba, dtype=np.float64), 1e-12, 1.0)) / temperature)


def fit_temperature(proba: np.ndarray, y_true: np.ndarray) -> TemperatureFit:
    """The temperature minimising the negative log-likelihood of `y_true` (label ids) under the scaled
    probabilities of `proba` (rows x classes), searched on a log scale within `BOUNDS`."""
    from scipy.optimize import minimize_scalar

    proba, y_true = np.asarray(proba, dtype=np.float64), np.asarray(y_true, dtype=np.int64)
    rows = np.arange(len(y_true))

    def nll(temperature: float) -> float:
        return float(-np.log(np.clip(scaled(proba, temperature)[rows, y_true], 1e-12, 1.0)).mean())

    low, high = np.log(BOUNDS[0]), np.log(BOUNDS[1])
    found = minimize_scalar(lambda log_t: nll(float(np.exp(log_t))), bounds=(low, high), method="bounded",
                            options={"xatol": 1e-4})
    temperature = float(np.exp(found.x))
    return TemperatureFit(round(temperature, 4), len(y_true), round(nll(1.0), 4), round(nll(temperature), 4),
                          round(expected_calibration_error(y_true, proba), 4),
                          round(expected_calibration_error(y_true, scaled(proba, temperature)), 4))
