"""Temperature scaling: the fitted temperature undoes a known over-confidence, never changes a prediction, and is
read back from a model folder's record only when it is a positive number."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.models import metadata
from bertkit.scoring.calibration import fit_temperature, scaled


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
def test_only_a_positive_recorded_temperature_is_read(record, expected, tmp_path):
    (tmp_path / metadata.MODEL_INFO).write_text(json.dumps(record), encoding="utf-8")
    assert metadata.saved_temperature(str(tmp_path)) == expected


# ---------------------------------------------------------------- finetune --calibrate, predict and evaluate


def separable_rows() -> list[tuple[str, str]]:
    """40 short sentences, two classes told apart by their words (as conftest's toy_rows)."""
    good = ["great", "wonderful", "lovely", "superb", "delightful"]
    bad = ["awful", "terrible", "boring", "dreadful", "horrible"]
    return [row for i in range(20) for row in ((f"a {good[i % 5]} film , truly {good[(i + 2) % 5]}", "pos"),
                                               (f"an {bad[i % 5]} movie , really {bad[(i + 1) % 5]}", "neg"))]


@pytest.fixture(scope="module")
def calibrated_run(tiny_bert_dir, tmp_path_factory):
    """A tiny fp32 run with --calibrate temperature (the dev rows are the training rows' first half)."""
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    folder = tmp_path_factory.mktemp("calibrated")
    header, rows = "sentence\tlabel\n", separable_rows()
    (folder / "train.tsv").write_text(header + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    (folder / "dev.tsv").write_text(header + "".join(f"{t}\t{y}\n" for t, y in rows[:20]), encoding="utf-8")
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(folder / "train.tsv"), dev=str(folder / "dev.tsv"),
                         out=str(folder / "run"), epochs=2, lr=5e-3, batch_size=8, save_every=None, precision="fp32",
                         calibrate="temperature")
    return finetune(cfg, progress=False), folder


def test_finetune_records_the_temperature_in_best_and_in_metrics(calibrated_run):
    result, folder = calibrated_run
    temperature = metadata.saved_temperature(str(folder / "run" / "best"))
    assert temperature is not None and temperature > 0
    assert result.summary.calibration is not None and result.summary.calibration.temperature == temperature
    assert result.summary.calibration.nll_after <= result.summary.calibration.nll_before + 1e-9
    metadata.verify_model_folder(folder / "run" / "best")  # the record was written again whole: still verified
    if result.summary.final_same_as_best:
        assert metadata.saved_temperature(str(folder / "run" / "final")) == temperature


def test_predict_and_evaluate_divide_the_logits_by_the_recorded_temperature(calibrated_run):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from typer.testing import CliRunner

    from bertkit.cli.app import app

    _, folder = calibrated_run
    best = folder / "run" / "best"
    temperature = metadata.saved_temperature(str(best))
    text = "a wonderful and lovely film"
    shown = CliRunner().invoke(app, ["predict", "--model", str(best), "--text", text, "--json", "--precision", "fp32"])
    assert shown.exit_code == 0, shown.output
    answer = json.loads(shown.stdout)
    model = AutoModelForSequenceClassification.from_pretrained(best).eval()
    with torch.no_grad():
        logits = model(**AutoTokenizer.from_pretrained(best)([text], return_tensors="pt")).logits.double().numpy()
    expected = np.exp(logits / temperature) / np.exp(logits / temperature).sum(1, keepdims=True)
    assert answer["temperature"] == temperature
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    assert np.allclose([answer["predictions"][0]["probabilities"][name] for name in names], expected[0], atol=1e-4)
    evaluated = CliRunner().invoke(app, ["evaluate", "--model", str(best), "--data", str(folder / "dev.tsv"),
                                         "--precision", "fp32"])
    assert evaluated.exit_code == 0 and "probabilities calibrated (logits /" in evaluated.output


def test_calibrate_is_refused_on_numbers(tiny_bert_dir, tmp_path):
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune
    from bertkit.errors import UserError

    rows = "".join(f"text number {i}\t{i / 10}\n" for i in range(20))
    (tmp_path / "train.tsv").write_text("sentence\tscore\n" + rows, encoding="utf-8")
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(tmp_path / "train.tsv"), out=str(tmp_path / "run"),
                         label_column="score", epochs=1, precision="fp32", calibrate="temperature")
    with pytest.raises(UserError, match="--calibrate temperature scales a single-label"):
        finetune(cfg, progress=False)
    assert not (tmp_path / "run").exists()
