"""bertkit predict / evaluate: labels + probabilities in input order, metrics, CSV output, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.config.commands import FinetuneConfig, PredictConfig
from bertkit.data.dataset import TextDataset
from bertkit.errors import UserError
from bertkit.models.infer import load_for_inference
from bertkit.scoring.predictions import predict_proba
from bertkit.training.finetune import finetune

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tiny_bert_dir, tmp_path_factory, toy_rows_module) -> Path:
    """A tiny BERT fine-tuned for a few steps on the toy rows (string labels neg/pos)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("predict")
    train = folder / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows_module) + "\n")
    cfg = FinetuneConfig(model=str(tiny_bert_dir), data=str(train), dev=str(train), out=str(folder / "run"),
                         epochs=2, lr=5e-3, batch_size=8, save_every=None)
    finetune(cfg, progress=False)
    torch.set_num_threads(before)
    return folder / "run" / "best"


@pytest.fixture(scope="module")
def toy_rows_module() -> list[tuple[str, str]]:
    good, bad = ["great", "wonderful", "lovely", "superb"], ["awful", "terrible", "boring", "dreadful"]
    rows = []
    for i in range(16):
        rows.append((f"a {good[i % 4]} film {'!' * (i % 5)}", "pos"))
        rows.append((f"an {bad[i % 4]} movie , really {bad[(i + 1) % 4]} and long {'.' * (i % 7)}", "neg"))
    return rows


def test_probabilities_sum_to_one_and_keep_the_input_order(trained):
    model, tokenizer, label_map = load_for_inference(str(trained))
    texts = ["short", "a much longer sentence with many more words in it than the others", "mid length one", "x y"]
    ds = TextDataset(texts)
    proba = predict_proba(model, tokenizer, ds, batch_size=2)
    assert proba.shape == (4, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    one_by_one = np.vstack([predict_proba(model, tokenizer, TextDataset([t]), batch_size=1) for t in texts])
    np.testing.assert_allclose(proba, one_by_one, rtol=1e-4, atol=1e-5)  # batching/sorting does not reorder rows
    assert label_map.labels == ("neg", "pos")


def test_predict_cli_writes_csv_in_input_order(trained, tmp_path, write_tsv):
    texts = [f"{'very ' * (i % 5)}{'great' if i % 2 else 'awful'} film number {i}" for i in range(13)]
    data = write_tsv("new.tsv", [(t,) for t in texts], ("sentence",))
    out = tmp_path / "preds.csv"
    result = runner.invoke(app, ["predict", "--model", str(trained), "--data", str(data), "--out", str(out),
                                 "--batch-size", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert frame["text"].tolist() == texts
    assert set(frame["predicted"]) <= {"neg", "pos"}
    np.testing.assert_allclose(frame["p_neg"] + frame["p_pos"], 1.0, rtol=1e-6)
    assert (frame["confidence"] == frame[["p_neg", "p_pos"]].max(axis=1)).all()
    assert not list(tmp_path.glob(".*tmp"))  # atomic write leaves no temp files


def test_predict_repeatable_text_json(trained):
    result = runner.invoke(app, ["predict", "--model", str(trained), "--text", "a wonderful film", "--text",
                                 "an awful movie , really boring", "--json"])
    assert result.exit_code == 0, result.output
    predictions = json.loads(result.stdout)["predictions"]
    assert [p["text"] for p in predictions] == ["a wonderful film", "an awful movie , really boring"]
    for p in predictions:
        assert p["label"] in {"neg", "pos"}
        assert sum(p["probabilities"].values()) == pytest.approx(1.0)


def test_predict_as_a_subprocess(trained):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "bertkit", "predict", "--model", str(trained), "--text",
                           "a lovely film"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "a lovely film" in done.stdout and ("pos" in done.stdout or "neg" in done.stdout)


def test_evaluate_cli_reports_metrics(trained, tmp_path, toy_rows_module, write_tsv):
    data = write_tsv("dev.tsv", toy_rows_module, ("sentence", "label"))
    result = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data), "--json", "--out",
                                 str(tmp_path / "eval"), "--quiet"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    for key in ("accuracy", "f1", "mcc", "precision", "recall", "roc_auc", "confusion_matrix"):
        assert key in metrics
    assert metrics["n"] == len(toy_rows_module) and sum(map(sum, metrics["confusion_matrix"])) == metrics["n"]
    assert (tmp_path / "eval" / "confusion_matrix.png").exists()
    assert len(pd.read_csv(tmp_path / "eval" / "predictions.csv")) == metrics["n"]
    table = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data), "--quiet"])
    assert table.exit_code == 0 and "mcc" in table.output and "confusion matrix" in table.output


def test_evaluate_refuses_labels_the_model_does_not_know(trained, write_tsv):
    data = write_tsv("odd.tsv", [("a film", "pos"), ("a movie", "meh")], ("sentence", "label"))
    result = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data)])
    assert result.exit_code == 2 and "meh" in result.output


def test_predict_config_needs_exactly_one_model_and_one_input():
    with pytest.raises(UserError) as err:
        PredictConfig(model=None, probe=None, text=())
    assert "--model" in str(err.value) and "--text" in str(err.value)
    with pytest.raises(UserError):
        PredictConfig(model="m", probe="p", text=("x",))
    assert PredictConfig(model="m", text=["a", "b"]).text == ("a", "b")


@pytest.mark.parametrize("max_length", ["1", "2"])
def test_predict_and_evaluate_refuse_a_max_length_below_the_special_tokens(trained, write_tsv, max_length):
    long_text = "word " * 300
    result = runner.invoke(app, ["predict", "--model", str(trained), "--text", long_text, "--text", "a lovely film",
                                 "--max-length", max_length])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"--max-length {max_length} cannot hold a text" in result.output
    assert "The smallest valid value is 3; pass --max-length 3 or more" in result.output
    pairs = write_tsv("pairs.tsv", [("a film", "a movie", "pos"), ("awful", "bad", "neg")], ("a", "b", "label"))
    for too_small in (max_length, "4"):  # [CLS] a [SEP] b [SEP]: three special tokens and a token of each text
        result = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(pairs), "--text-column", "a",
                                     "--text-pair-column", "b", "--max-length", too_small])
        assert result.exit_code == 2, result.output
        assert "cannot hold a sentence pair" in result.output and "pass --max-length 5 or more" in result.output
    result = runner.invoke(app, ["predict", "--model", str(trained), "--text", "a lovely film", "--max-length", "3",
                                 "--json"])
    assert result.exit_code == 0, result.output  # the smallest valid value works


def test_predict_and_evaluate_refuse_a_max_length_beyond_the_model(trained, write_tsv):
    long_text = "word " * 300  # longer than the tiny model's 128 positions: a crash in the forward before
    result = runner.invoke(app, ["predict", "--model", str(trained), "--text", long_text, "--max-length", "100000"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--max-length 100000 is more than model" in result.output and "--max-length 128 or less" in result.output
    data = write_tsv("long.tsv", [(long_text, "pos"), ("awful", "neg")], ("sentence", "label"))
    result = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data), "--max-length", "100000"])
    assert result.exit_code == 2 and "--max-length 128 or less" in result.output
