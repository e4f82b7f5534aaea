"""bertkit probe on numbers (ridge regression) and tag sets (one-vs-rest logistic regression): the fits on arrays,
the sweep and baselines, the saved probe and `predict --probe`, and bad input. Tiny models here; learning on real
data (MiniLM) in the slow tests at the end. The data generators are test_shapes.py's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from older_records import resealed
from test_shapes import rating_rows, topic_rows, write_jsonl
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.probe import ProbeConfig
from bertkit.data.labels import LabelMap
from bertkit.errors import UserError
from bertkit.options import all_fields
from bertkit.probe import fit as probe_fit
from bertkit.probe import saved as probe_io
from bertkit.probe import search as probe_sweep
from bertkit.probe import shapes as probe_shapes
from bertkit.scoring import metrics
from bertkit.scoring.table import SHAPE

runner = CliRunner()
TAGS = ["a", "b", "c", "d"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def linear_target(n: int, d: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X, X @ rng.normal(size=d) + noise * rng.normal(size=n)


def tag_target(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tag j is on where feature j is above 0.3 (each tag on for about 40% of the rows)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X, (X[:, : len(TAGS)] > 0.3).astype(np.int64)


# ---------------------------------------------------------------- fits on arrays


def test_ridge_probe_learns_a_linear_target_and_chooses_alpha_by_cv():
    X, y = linear_target(300, 20, noise=0.5)
    fit = probe_fit.fit_probe(X[:200], y[:200], task="regression", seed=0)
    scored = probe_sweep.score_probe(fit, X[200:], y[200:])
    assert scored["pearson"] > 0.95 and scored["mse"] < 0.5
    assert [r["alpha"] for r in fit.cv_results or []] == pytest.approx(list(probe_fit.ALPHA_GRID))
    assert fit.classifier.alpha == pytest.approx(1.0 / fit.C)
    shuffled = np.random.default_rng(1).permutation(y)
    noise = probe_fit.fit_probe(X[:200], shuffled[:200], task="regression", seed=0)
    assert abs(probe_sweep.score_probe(noise, X[200:], shuffled[200:])["pearson"]) < 0.3
    assert noise.C < fit.C  # pure noise: the CV picks a stronger penalty


def test_ridge_with_fixed_C_and_custom_grid():
    X, y = linear_target(120, 8, noise=0.2)
    assert probe_fit.fit_probe(X, y, task="regression", C=0.5).classifier.alpha == pytest.approx(2.0)
    fit = probe_fit.fit_probe(X, y, task="regression", cv=3, C_grid=[0.01, 1.0])
    assert [r["C"] for r in fit.cv_results or []] == [0.01, 1.0] and len(fit.cv_results or []) == 2


def test_tag_probe_beats_the_per_label_majority_and_tunes_its_threshold():
    X, Y = tag_target(400, 12)
    fit = probe_fit.fit_probe(X[:300], Y[:300], task="multi_label", seed=0)
    probe_shapes.tune_threshold(fit, X[300:], Y[300:], TAGS, "tune")
    assert 0.0 < float(fit.threshold) < 1.0  # type: ignore[arg-type]
    scored = probe_sweep.score_probe(fit, X[300:], Y[300:], TAGS)
    majority = probe_shapes.trivial_baseline("multi_label", Y[:300], Y[300:], TAGS)
    assert scored["micro_f1"] > majority["micro_f1"] + 0.3 and scored["threshold"] == fit.threshold
    probe_shapes.tune_threshold(fit, X[300:], Y[300:], TAGS, "0.7")
    assert fit.threshold == 0.7
    probe_shapes.tune_threshold(fit, X[300:], Y[300:], TAGS, "tune-per-label")
    assert isinstance(fit.threshold, list) and len(fit.threshold) == len(TAGS)


def test_tag_probe_cv_searches_C_by_micro_f1():
    X, Y = tag_target(120, 6)
    fit = probe_fit.fit_probe(X, Y, task="multi_label", cv=3, C_grid=[0.001, 1.0])
    assert [r["C"] for r in fit.cv_results or []] == [0.001, 1.0]
    assert fit.C == 1.0  # C=0.001 flattens every probability towards the base rate: nothing reaches 0.5


def test_bootstrap_interval_brackets_the_dev_score():
    X, y = linear_target(200, 6, noise=1.0)
    pred = y + np.random.default_rng(2).normal(size=len(y))
    low, high = probe_shapes.bootstrap_shaped_ci("regression", y, pred, seed=0)
    assert low < metrics.regression_metrics(y, pred)["pearson"] < high
    _, Y = tag_target(200, 6)
    guess = Y.copy()
    guess[::4] = 1 - guess[::4]
    low, high = probe_shapes.bootstrap_shaped_ci("multi_label", Y, guess, seed=0)
    assert low < metrics.multilabel_metrics(Y, guess, TAGS)["micro_f1"] < high


def test_shaped_sweep_picks_the_best_cell_by_the_shape_metric():
    X, y = linear_target(200, 10, noise=0.3)
    noise = np.random.default_rng(3).normal(size=X.shape).astype(np.float32)
    layers = np.stack([noise, X], axis=1)  # layer 0 knows nothing, layer 1 everything
    sweep = probe_sweep.sweep_layers({"cls": layers[:150]}, y[:150], {"cls": layers[150:]}, y[150:], metric="pearson",
                               task="regression", label_names=["score"])
    rows = sweep.rows()
    assert [r["best"] for r in rows] == [False, True]
    assert set(rows[1]) >= {"pearson", "spearman", "mse", "mae", "pearson_ci95", "alpha", "C"}
    assert "accuracy" not in rows[1]
    repeats = probe_sweep.repeat_probe(X[:150], y[:150], X[150:], y[150:], repeats=2, task="regression", seed=0)
    assert repeats["repeats"] == 2 and repeats["pearson"]["mean"] > 0.9


# ---------------------------------------------------------------- saved probes


def test_saved_regression_and_tag_probes_give_the_fits_outputs(tmp_path):
    X, y = linear_target(150, 8, noise=0.3)
    fit = probe_fit.fit_probe(X, y, task="regression")
    probe_io.save_probe(tmp_path / "r", fit, LabelMap(("score",), "regression"),
                        {"model": "m", "pool": "cls", "layers": "-1"})
    saved = probe_io.load_probe(tmp_path / "r")
    assert saved.task == "regression"
    assert np.allclose(saved.outputs(X)[:, 0], fit.predict(X), atol=1e-5)
    assert np.allclose(saved.predict(X), fit.predict(X), atol=1e-5)

    X, Y = tag_target(200, 8)
    Y = np.concatenate([Y, np.ones((len(Y), 1), dtype=np.int64)], axis=1)  # a tag every training row has
    fit = probe_fit.fit_probe(X, Y, task="multi_label")
    fit.threshold = 0.4
    probe_io.save_probe(tmp_path / "t", fit, LabelMap((*TAGS, "always"), "multi_label"),
                        {"model": "m", "pool": "cls", "layers": "-1"})
    record = json.loads((tmp_path / "t" / probe_io.PROBE_META).read_text())
    assert record["threshold"] == 0.4 and record["label_map"]["task"] == "multi_label"
    saved = probe_io.load_probe(tmp_path / "t")
    assert np.allclose(saved.outputs(X), fit.predict_proba(X), atol=1e-5)
    assert (saved.predict(X) == (fit.predict_proba(X) >= 0.4)).all() and saved.predict(X)[:, -1].all()


def test_single_label_probe_json_has_no_shape_fields(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)), np.arange(60) % 2
    probe_io.save_probe(tmp_path, probe_fit.fit_probe(X, y), LabelMap(("neg", "pos")), {"model": "m", "pool": "cls",
                                                                                    "layers": "-1"})
    record = json.loads((tmp_path / probe_io.PROBE_META).read_text())
    assert "threshold" not in record and record["label_map"] == {"labels": ["neg", "pos"]}


@pytest.mark.parametrize("change, reason", [
    ({"threshold": 1.5}, "threshold 1.5"),
    ({"label_map": {"labels": ["a", "b"], "task": "ranking"}}, "task 'ranking'"),
])
def test_damaged_shaped_probe_records_are_named(tmp_path, change, reason):
    X, Y = tag_target(100, 6)
    probe_io.save_probe(tmp_path, probe_fit.fit_probe(X, Y, task="multi_label"), LabelMap(tuple(TAGS), "multi_label"),
                        {"model": "m", "pool": "cls", "layers": "-1"})
    meta = tmp_path / probe_io.PROBE_META
    meta.write_text(json.dumps(resealed({**json.loads(meta.read_text()), **change})))  # as a writer would seal it
    with pytest.raises(UserError, match="damaged") as err:
        probe_io.load_probe(tmp_path)
    assert reason in str(err.value)


# ---------------------------------------------------------------- options


def test_probe_and_finetune_share_the_task_options():
    probe_fields = {f.name: f for f in all_fields(ProbeConfig)}
    finetune_fields = {f.name: f for f in all_fields(FinetuneConfig)}
    for name in ("task", "threshold", "label_sep"):
        assert probe_fields[name] is finetune_fields[name]  # defined once, in the shared TaskOptions
    assert ProbeConfig.of(data="x.jsonl", task="regression").inputs.task == "regression"


@pytest.mark.parametrize("kwargs, flag", [
    ({"data": "x.tsv", "threshold": "1.2"}, "--threshold"),
    ({"data": "x.tsv", "task": "regression", "label_sep": "|"}, "--label-sep"),
    ({"features": "store", "task": "regression"}, "--features"),
])
def test_probe_shape_options_are_checked(kwargs, flag):
    with pytest.raises(UserError, match=flag):
        ProbeConfig.of(**kwargs)


# ---------------------------------------------------------------- the command (tiny BERT)


@pytest.fixture
def shaped_files(tmp_path):
    return {
        "regression": (write_jsonl(tmp_path / "r-train.jsonl", rating_rows(40, 0)),
                       write_jsonl(tmp_path / "r-dev.jsonl", rating_rows(20, 1))),
        "multi_label": (write_jsonl(tmp_path / "t-train.jsonl", topic_rows(40, 0)),
                        write_jsonl(tmp_path / "t-dev.jsonl", topic_rows(20, 1))),
    }


def dev_truth(task: str, dev, label_names: list[str]) -> np.ndarray:
    rows = [json.loads(line) for line in dev.read_text().splitlines()]
    if task == "regression":
        return np.asarray([r["label"] for r in rows])
    return LabelMap(tuple(label_names), "multi_label").encode([tuple(r["labels"]) for r in rows], "dev")


@pytest.mark.parametrize("task", ["regression", "multi_label"])
def test_cli_probe_writes_the_shape_run_and_predict_probe_repeats_its_dev_predictions(tiny_bert_dir, shaped_files,
                                                                                      tmp_path, task):
    train, dev = shaped_files[task]
    out = tmp_path / "run"
    # fp32 features, as predict --probe extracts them with --precision fp32 (auto may mean bf16 here)
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--layers", "0,-1",
                    "--precision", "fp32", "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    headline = SHAPE[task].headline
    assert report["task"] == task and len(report["sweep"]) == 2
    assert set(report["baselines"]) == {"mean" if task == "regression" else "majority", "tfidf", "random_encoder"}
    figure = "scatter.png" if task == "regression" else "per_label_f1.png"
    for name in ("probe_layers.png", figure, "probe/probe.json", "probe/probe.safetensors"):
        assert (out / name).is_file(), name
    assert report["best"]["dev"][headline] == max(r[headline] for r in report["sweep"])

    predicted = invoke("predict", "--probe", out, "--data", dev, "--precision", "fp32", "--json", "--quiet")
    assert predicted.exit_code == 0, predicted.output
    answer = json.loads(predicted.stdout)
    truth = dev_truth(task, dev, report["labels"])
    best = report["best"]["dev"]
    if task == "regression":
        scores = np.asarray([p["score"] for p in answer["predictions"]])
        again = metrics.regression_metrics(truth, scores)
        # re-extracted features differ from the sweep's in float32 rounding (other batches, other padding)
        assert again["mse"] == pytest.approx(best["mse"], rel=1e-3) and again["pearson"] == pytest.approx(
            best["pearson"], abs=1e-3)
    else:
        assert answer["threshold"] == report["best"]["threshold"]
        on = np.asarray([[tag in p["labels"] for tag in report["labels"]] for p in answer["predictions"]])
        again = metrics.multilabel_metrics(truth, on, report["labels"])
        assert {k: again[k] for k in ("micro_f1", "subset_accuracy", "hamming_loss", "per_label")} == \
            {k: best[k] for k in ("micro_f1", "subset_accuracy", "hamming_loss", "per_label")}
        assert set(answer["predictions"][0]["probabilities"]) == set(report["labels"])


def test_cli_tables_name_the_shape_metrics(tiny_bert_dir, shaped_files, tmp_path):
    train, dev = shaped_files["regression"]
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--quiet", "--repeats", "2")
    assert result.exit_code == 0, result.output
    for text in ("Pearson", "Spearman", "mean predictor", "TF-IDF + ridge", "random-init encoder", "ridge alpha",
                 "2 refits"):
        assert text in result.stdout
    train, dev = shaped_files["multi_label"]
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--quiet", "--no-baselines",
                    "--threshold", "0.5", "--out", tmp_path / "tags")
    assert result.exit_code == 0, result.output
    assert "micro-F1" in result.stdout and "threshold 0.5" in result.stdout
    shown = invoke("predict", "--probe", tmp_path / "tags", "--text", "football and pizza today", "--quiet")
    assert shown.exit_code == 0 and "labels (probability)" in shown.stdout


def test_cli_forced_regression_on_integer_ratings(tiny_bert_dir, tmp_path):
    rows = [{"text": r["text"], "label": round(r["label"])} for r in rating_rows(30, 0)]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--task", "regression", "--no-baselines",
                    "--quiet", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["task"] == "regression"


# ---------------------------------------------------------------- bad input


def test_regression_labels_mixing_numbers_and_names_exit_2(tiny_bert_dir, tmp_path):
    path = tmp_path / "mixed.tsv"
    path.write_text("text\tlabel\n" + "".join(f"row {i}\t{'pos' if i % 5 == 0 else i / 2}\n" for i in range(20)),
                    encoding="utf-8")
    result = invoke("probe", "--model", tiny_bert_dir, "--data", path, "--task", "regression", "--quiet")
    assert result.exit_code == 2
    assert "mixes numbers and names" in result.output and "'pos'" in result.output
    assert "Traceback" not in result.output


def test_empty_tag_list_exits_2(tiny_bert_dir, tmp_path):
    rows = topic_rows(20, 0)
    rows[3]["labels"] = []
    train = write_jsonl(tmp_path / "tags.jsonl", rows)
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--quiet")
    assert result.exit_code == 2
    assert "empty tag list" in result.output and "line 4" in result.output


def test_class_weight_on_numbers_exits_2(tiny_bert_dir, shaped_files):
    train, dev = shaped_files["regression"]
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--class-weight", "balanced",
                    "--quiet")
    assert result.exit_code == 2 and "--class-weight balanced" in result.output


# ---------------------------------------------------------------- learning (real MiniLM; slow)


@pytest.mark.slow
def test_minilm_regression_probe_learns_a_learnable_score(minilm_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rating_rows(240, 2))
    dev = write_jsonl(tmp_path / "dev.jsonl", rating_rows(60, 4))
    held_out = write_jsonl(tmp_path / "test.jsonl", rating_rows(100, 3))
    result = invoke("probe", "--model", minilm_dir, "--data", train, "--dev", dev, "--test", held_out,
                    "--pool", "mean", "--layers", "all", "--out", tmp_path / "run", "--quiet", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["best"]["test"]["pearson"] > 0.8, report["best"]
    assert report["best"]["test"]["pearson"] > report["baselines"]["random_encoder"]["pearson"]


@pytest.mark.slow
def test_minilm_tag_probe_beats_the_per_label_majority(minilm_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", topic_rows(240, 2))
    dev = write_jsonl(tmp_path / "dev.jsonl", topic_rows(60, 4))
    held_out = write_jsonl(tmp_path / "test.jsonl", topic_rows(100, 3))
    result = invoke("probe", "--model", minilm_dir, "--data", train, "--dev", dev, "--test", held_out,
                    "--pool", "mean", "--layers", "all", "--out", tmp_path / "run", "--quiet", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    labels = report["labels"]
    encode = LabelMap(tuple(labels), "multi_label").encode
    majority = probe_shapes.trivial_baseline(
        "multi_label", encode([tuple(r["labels"]) for r in topic_rows(240, 2)], "t"),
        encode([tuple(r["labels"]) for r in topic_rows(100, 3)], "h"), labels)["micro_f1"]
    assert report["best"]["test"]["micro_f1"] > majority + 0.2, (report["best"]["test"], majority)
