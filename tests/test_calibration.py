"""Temperature scaling: the fitted temperature undoes a known over-confidence, never changes a prediction, and is
read back from a model folder's record only when it is a positive number."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.scoring.calibration import fit_temperature, recorded_temperature, scaled


def overconfident(n: int = 3000, sharpen: float = 3.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three-class probabilities whose logits are the true ones times `sharpen` (labels drawn from the true ones)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1.5, size=(n, 3))
    true = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = np.array([rng.choice(3, p=row) for row in true])
    sharp = np.exp(logits * sharpen)
    return sharp / sharp.sum(1, keepdims=True), y


def test_the_fitted_temperature_undoes_a_known_sharpening():
    proba, y = overconfident()
    fit = fit_temperature(proba, y)
    assert fit.temperature == pytest.approx(3.0, rel=0.15)
    assert fit.nll_after < fit.nll_before and fit.ece_after < fit.ece_before / 2
    assert fit.rows == len(y) and fit.to_json()["method"] == "temperature"


def test_a_calibrated_model_keeps_its_temperature_near_one():
    proba, y = overconfident(sharpen=1.0, seed=1)
    assert fit_temperature(proba, y).temperature == pytest.approx(1.0, abs=0.15)


def test_scaling_never_changes_a_prediction():
    proba, _ = overconfident(n=500)
    for temperature in (0.2, 1.0, 7.5):
        assert (scaled(proba, temperature).argmax(1) == proba.argmax(1)).all()
        assert np.allclose(scaled(proba, temperature).sum(1), 1.0)


@pytest.mark.parametrize(("record", "expected"), [
    ({"calibration": {"method": "temperature", "temperature": 2.5}}, 2.5),
    ({}, None), ({"calibration": None}, None), ({"calibration": {"method": "temperature", "temperature": 0}}, None),
    ({"calibration": {"method": "temperature", "temperature": "2"}}, None),
    ({"calibration": {"method": "temperature", "temperature": True}}, None),
    ({"calibration": {"method": "platt", "temperature": 2.0}}, None), ([], None),
])
def test_only_a_positive_recorded_temperature_is_read(record, expected):
    assert recorded_temperature(record) == expected
