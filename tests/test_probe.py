"""bertkit probe: the probe core on arrays, the layer sweep, saved probes, the CLI and its errors (tiny models)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertkit import plots
from bertkit.cli.app import app
from bertkit.commands.probe import ProbeConfig
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.options import all_fields
from bertkit.probe import baselines as probe_baselines
from bertkit.probe import fit as probe_fit
from bertkit.probe import saved as probe_io
from bertkit.probe import search as probe_sweep

runner = CliRunner()


def blobs(n: int, d: int, classes: int = 2, seed: int = 0, gap: float = 4.0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs, one per class, `gap` apart along the first axes: linearly separable for a big gap."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[np.arange(n), y % d] += gap
    return X, y


def sklearn_pipeline(C: float = 1.0, class_weight: str | None = None):
    """The reference the engine is compared with: scikit-learn's StandardScaler + LogisticRegression(lbfgs), as
    bertkit fitted probes before it had its own engine."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    return Pipeline([("scaler", StandardScaler()),
                     ("lr", LogisticRegression(C=C, max_iter=probe_fit.MAX_ITER, class_weight=class_weight))])


# ---------------------------------------------------------------- core on arrays


def test_separable_features_score_one():
    X, y = blobs(200, 16, gap=12.0)
    fit = probe_fit.fit_probe(X, y, seed=0)
    result = probe_sweep.score_probe(fit, X, y, ["neg", "pos"])
    assert result["accuracy"] == 1.0
    assert result["mcc"] == 1.0
    assert result["confusion_matrix"] == [[100, 0], [0, 100]]


def test_shuffled_labels_score_near_chance():
    X, y = blobs(1200, 16, gap=12.0)
    shuffled = np.random.default_rng(1).permutation(y)
    fit = probe_fit.fit_probe(X[:800], shuffled[:800], seed=0)
    accuracy = probe_sweep.score_probe(fit, X[800:], shuffled[800:])["accuracy"]
    assert 0.40 <= accuracy <= 0.60


def test_multiclass_probe_and_class_weight():
    X, y = blobs(300, 8, classes=3, gap=10.0)
    fit = probe_fit.fit_probe(X, y, class_weight="balanced", seed=0)
    result = probe_sweep.score_probe(fit, X, y, ["a", "b", "c"])
    assert result["accuracy"] > 0.95
    assert len(result["confusion_matrix"]) == 3
    assert fit.classifier.class_weight == "balanced"


def test_cv_path_matches_grid_search_on_the_same_folds():
    """The warm-started path gives the same fold scores as GridSearchCV over a scaler+LR pipeline."""
    from sklearn.model_selection import GridSearchCV

    X, y = blobs(240, 10, gap=1.0, seed=3)
    grid = [0.001, 0.01, 0.1, 1.0, 10.0]
    fit = probe_fit.fit_probe(X, y, cv=4, C_grid=grid, seed=0, criterion="accuracy")
    search = GridSearchCV(sklearn_pipeline(), {"lr__C": grid}, cv=probe_fit.cv_folds(y, 4)).fit(X, y)
    ours = [r["mean"] for r in fit.cv_results or []]
    assert np.allclose(ours, search.cv_results_["mean_test_score"], atol=1e-9)
    assert fit.C == search.best_params_["lr__C"]


def test_cv_chooses_C_by_log_loss_as_grid_search_scores_it():
    """By default C minimises the K-fold log-loss: the same fold losses and the same C as GridSearchCV with
    scoring="neg_log_loss" on the same folds."""
    from sklearn.model_selection import GridSearchCV

    X, y = blobs(240, 10, gap=1.0, seed=3)
    grid = [0.001, 0.01, 0.1, 1.0, 10.0]
    fit = probe_fit.fit_probe(X, y, cv=4, C_grid=grid, seed=0)
    search = GridSearchCV(sklearn_pipeline(), {"lr__C": grid}, cv=probe_fit.cv_folds(y, 4),
                          scoring="neg_log_loss").fit(X, y)
    ours = [r["log_loss"] for r in fit.cv_results or []]
    assert np.allclose(ours, -search.cv_results_["mean_test_score"], atol=1e-4)  # warm starts: lbfgs tolerance
    assert fit.C == search.best_params_["lr__C"]


def test_log_loss_prefers_the_C_whose_probabilities_are_honest():
    """Noisy labels: accuracy barely moves with C, but a weakly regularised probe is over-confident on the rows it
    gets wrong; log-loss picks a smaller C than the largest, and never one with a worse held-out loss."""
    X, y = blobs(400, 40, gap=0.4, seed=5)
    grid = [0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 100.0]
    fit = probe_fit.fit_probe(X, y, cv=5, C_grid=grid, seed=0)
    losses = {r["C"]: r["log_loss"] for r in fit.cv_results or []}
    assert losses[fit.C] == min(losses.values())
    assert fit.C < 100.0 and losses[fit.C] < losses[100.0]


def test_best_C_index_rejects_an_unknown_criterion():
    with pytest.raises(ValueError, match="criterion"):
        probe_fit.best_C_index([{"C": 1.0, "mean": 0.5, "std": 0.0, "log_loss": 0.7}], "f1")


def test_cv_with_too_few_rows_per_class_is_a_user_error():
    X, y = blobs(6, 4)
    with pytest.raises(UserError, match="--cv 5"):
        probe_fit.fit_probe(X, y, cv=5)


def test_repeats_and_bootstrap_interval():
    X, y = blobs(300, 8, gap=1.5)
    rep = probe_sweep.repeat_probe(X[:200], y[:200], X[200:], y[200:], repeats=4, seed=0)
    assert rep["repeats"] == 4 and len(rep["accuracy"]["values"]) == 4
    assert rep["accuracy"]["std"] > 0  # different subsets, different probes
    pred = np.where(np.arange(100) < 70, y[200:], 1 - y[200:])  # 70% right
    low, high = probe_sweep.bootstrap_ci(y[200:], pred, seed=0)
    assert 0.55 < low < 0.70 < high < 0.85


def test_majority_and_tfidf_baselines():
    y_train, y_dev = np.array([0, 0, 0, 1]), np.array([0, 1, 1, 1])
    assert probe_baselines.majority_baseline(y_train, y_dev)["accuracy"] == 0.25
    texts = ["good film", "great movie", "bad film", "awful movie"] * 5
    labels = np.array([1, 1, 0, 0] * 5)
    result = probe_baselines.tfidf_baseline(texts, labels, ["good movie", "awful film"], np.array([1, 0]))
    assert result["accuracy"] == 1.0


# ---------------------------------------------------------------- layer sweep and plot


def test_sweep_gives_one_row_per_layer_and_pool_and_a_plot(tmp_path):
    X, y = blobs(160, 6, gap=3.0)
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(160, 3, 6)).astype(np.float32)
    layered = np.stack([noise[:, 0], X, noise[:, 2]], axis=1)  # only "layer 1" carries the label
    by_pool = {"cls": layered, "mean": noise}
    sweep = probe_sweep.sweep_layers({p: a[:120] for p, a in by_pool.items()}, y[:120], {p: a[120:] for p, a in by_pool.items()},
                               y[120:], layer_names=["embeddings", "layer 1", "layer 2"], seed=0)
    rows = sweep.rows()
    names = ["embeddings", "layer 1", "layer 2"]
    assert [(r["pool"], r["layer"]) for r in rows] == [(p, n) for p in ("cls", "mean") for n in names]
    assert all(r["layer_name"] == r["layer"] and r["hidden_state"] is None for r in rows)  # no indexes given
    assert [r["hidden_state"] for r in sweep.rows([0, 1, 2])] == [0, 1, 2, 0, 1, 2]
    assert sum(r["best"] for r in rows) == 1
    assert (sweep.best.pool, sweep.best.layer_name) == ("cls", "layer 1")
    png = plots.probe_layer_curve(rows, {"majority class": 0.5}, tmp_path / "curve.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- saved probe


@pytest.mark.parametrize("classes", [2, 3])
def test_saved_probe_reloads_and_predicts_the_same(tmp_path, classes):
    X, y = blobs(150, 12, classes=classes, gap=1.5)
    fit = probe_fit.fit_probe(X, y, seed=0)
    label_map = LabelMap.build([f"c{i}" for i in range(classes)])
    probe_io.save_probe(tmp_path, fit, label_map, {"model": "m", "pool": "cls", "layers": "-1", "max_length": 128})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.json", "probe.safetensors"]
    saved = probe_io.load_probe(tmp_path)
    assert np.array_equal(saved.predict(X), fit.predict(X))
    assert np.allclose(saved.predict_proba(X), fit.predict_proba(X), atol=1e-6)
    assert saved.label_map == label_map and saved.meta["pool"] == "cls"


def test_load_probe_of_a_folder_without_probe_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not a saved probe"):
        probe_io.load_probe(tmp_path)


# ---------------------------------------------------------------- config


def test_config_validation_names_the_flags():
    with pytest.raises(UserError, match="--C fixes"):
        ProbeConfig.of(data="x.tsv", C=1.0, cv=5)
    with pytest.raises(UserError, match="--C-grid"):
        ProbeConfig.of(data="x.tsv", C_grid="0.1,1")
    with pytest.raises(UserError, match="--pool"):
        ProbeConfig.of(data="x.tsv", pool="cls,avg")
    with pytest.raises(UserError, match="exactly one of --features"):
        ProbeConfig.of()
    assert ProbeConfig.of(data="x.tsv", cv=5, C_grid="alammar").fit.c_values[-1] == pytest.approx(100.0)


# ---------------------------------------------------------------- CLI (tiny BERT)


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    train = write_tsv("train.tsv", toy_rows[:30], header=("sentence", "label"))
    dev = write_tsv("dev.tsv", toy_rows[30:], header=("sentence", "label"))
    return train, dev


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_cli_probe_sweep_writes_run_dir_and_reuses_cached_features(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    out = tmp_path / "run"
    args = ["probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--layers", "all", "--pool", "cls,mean",
            "--repeats", "2", "--out", out, "--quiet", "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(r["pool"], r["layer_name"]) for r in report["sweep"]] == [
        (p, n) for p in ("cls", "mean") for n in ("embeddings", "layer 1", "layer 2")]
    # issue 43 (keys): sweep[].layer is the layer's name, as best.layer is; hidden_state the model's index
    assert [(r["layer"], r["hidden_state"]) for r in report["sweep"][:3]] == [("embeddings", 0), ("layer 1", 1),
                                                                               ("layer 2", 2)]
    best_row = next(r for r in report["sweep"] if r["best"])
    assert (best_row["layer"], best_row["hidden_state"]) == (report["best"]["layer"], report["best"]["hidden_state"])
    assert set(report["baselines"]) == {"majority", "tfidf", "random_encoder"}
    assert report["repeats"]["repeats"] == 2
    for name in ("config.json", "metrics.json", "probe_layers.png", "confusion_matrix.png", "reliability.png",
                 "probe/probe.safetensors",
                 "probe/probe.json", "features/train-cls-all.npy", "features/dev-mean-all.npy"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["command"] == "probe" and config["config"]["pool"] == "cls,mean"
    cached = out / "features" / "train-cls-all.npy"
    before = cached.stat().st_mtime_ns
    again = invoke(*args)
    assert again.exit_code == 0
    assert cached.stat().st_mtime_ns == before  # reused, not re-extracted
    assert json.loads(again.stdout)["sweep"] == report["sweep"]


def test_cli_table_marks_best_and_lists_baselines(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--quiet", "--cv", "2",
                    "--C-grid", "0.1,1")
    assert result.exit_code == 0, result.output
    best = result.stdout.split("best: cls ")[1].split(",")[0]  # the default probes every layer
    assert f"{best} *" in result.stdout and result.stdout.count(" * ") == 1
    for text in ("majority class", "TF-IDF + LR", "random-init encoder"):
        assert text in result.stdout


def test_saved_probe_predicts_like_the_sweep_and_predict_command_uses_it(tiny_bert_dir, toy_files, tmp_path):
    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split

    train, dev = toy_files
    out = tmp_path / "run"
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--pool", "mean",
                    "--no-baselines", "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    saved = probe_io.load_probe(out / "probe")
    dev_ds = load_dataset_split(DataOptions(), str(dev))
    ids, proba = probe_io.predict_with_probe(saved, dev_ds)
    confusion = np.zeros((2, 2), dtype=int)
    truth = saved.label_map.encode(dev_ds.labels or [], "dev")
    np.add.at(confusion, (truth, ids), 1)
    assert confusion.tolist() == report["best"]["dev"]["confusion_matrix"]
    assert np.allclose(proba.sum(axis=1), 1.0)

    predicted = invoke("predict", "--probe", out, "--text", "a wonderful film , truly great", "--text", "an awful movie",
                       "--json", "--quiet")
    assert predicted.exit_code == 0, predicted.output
    rows = json.loads(predicted.stdout)["predictions"]
    assert len(rows) == 2 and {r["label"] for r in rows} <= {"neg", "pos"}
    new = TextDataset(["a wonderful film , truly great", "an awful movie"])
    expected = saved.label_map.decode(probe_io.predict_with_probe(saved, new)[0])
    assert [r["label"] for r in rows] == expected


def embed_store(model: Path, train: Path, dev: Path | None, out: Path, *extra: str) -> Path:
    args = ["embed", "--model", model, "--data", train, "--layers", "all", "--out", out, "--quiet", *extra]
    if dev is not None:
        args += ["--dev", dev]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def toy_store(tiny_bert_dir, tmp_path_factory):
    """A `--layers all` train/dev store of the toy rows made by the tiny BERT (shared by the store tests)."""
    good, bad = ["great", "wonderful", "lovely", "superb", "delightful"], ["awful", "terrible", "boring", "dreadful", "horrible"]
    rows = [row for i in range(20) for row in ((f"a {good[i % 5]} film , truly {good[(i + 2) % 5]}", "pos"),
                                               (f"an {bad[i % 5]} movie , really {bad[(i + 1) % 5]}", "neg"))]
    root = tmp_path_factory.mktemp("toy-store")
    for name, part in (("train.tsv", rows[:30]), ("dev.tsv", rows[30:])):
        (root / name).write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in part), encoding="utf-8")
    return embed_store(tiny_bert_dir, root / "train.tsv", root / "dev.tsv", root / "store")


def test_probe_on_a_store_as_a_subprocess(toy_store):
    store_dir = toy_store
    proc = subprocess.run([sys.executable, "-m", "bertkit", "probe", "--features", str(store_dir), "--layers", "1,2",
                           "--no-baselines", "--json", "--quiet"], capture_output=True, text=True,
                          env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [r["layer_name"] for r in report["sweep"]] == ["layer 1", "layer 2"]
    assert report["source"] == "store" and report["rows"] == {"train": 30, "dev": 10}
    assert "baselines" not in report


def test_probe_on_a_store_rereads_text_for_baselines(toy_store):
    result = invoke("probe", "--features", toy_store, "--layers", "-1", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report["baselines"]) == {"majority", "tfidf", "random_encoder"}  # text from the store's data file
    assert report["baselines"]["random_encoder"]["layer"] == "layer 2"


def test_options_that_make_features_warn_with_a_store_and_the_report_holds_the_stores(toy_store):
    """--precision int8 with --features used to be dropped silently: the store's features were made already."""
    result = invoke("probe", "--features", toy_store, "--layers", "-1", "--precision", "int8", "--max-length", "64",
                    "--normalize", "--no-baselines", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    warned = " ".join(result.stderr.split())
    manifest = json.loads((Path(toy_store) / "train" / "manifest.json").read_text())
    assert f"--precision int8 does not apply with --features and is ignored: the store {toy_store}" in warned
    assert f"was embedded with dtype {manifest['dtype']}" in warned and "bertkit embed --precision int8" in warned
    assert "--max-length 64 does not apply with --features" in warned and "--normalize does not apply" in warned
    assert json.loads(result.stdout)["dtype"] == manifest["dtype"]
    quiet = invoke("probe", "--features", toy_store, "--layers", "-1", "--no-baselines", "--json", "--quiet")
    assert quiet.exit_code == 0 and "does not apply" not in quiet.stderr


def test_store_without_labels_is_a_clear_error(tiny_bert_dir, write_tsv, tmp_path):
    texts = write_tsv("texts.tsv", [(f"sentence number {i}",) for i in range(12)], header=("sentence",))
    store_dir = embed_store(tiny_bert_dir, texts, None, tmp_path / "store")
    result = invoke("probe", "--features", store_dir)
    assert result.exit_code == 2
    assert "has no labels" in result.output and "--label-column" in result.output


def test_store_from_another_model_is_a_clear_error(tiny_distilbert_dir, toy_store):
    result = invoke("probe", "--features", toy_store, "--model", tiny_distilbert_dir)
    assert result.exit_code == 2
    assert "was made by model" in result.output and "Drop --model" in result.output


def test_dev_labels_unseen_in_train_is_a_clear_error(tiny_bert_dir, write_tsv, toy_rows):
    train = write_tsv("train.tsv", toy_rows[:20], header=("sentence", "label"))
    dev = write_tsv("dev.tsv", [("a so-so film", "meh"), *toy_rows[20:24]], header=("sentence", "label"))
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev)
    assert result.exit_code == 2
    assert "not seen in the training data" in result.output and "'meh'" in result.output


def test_missing_store_and_wrong_pool_are_clear_errors(toy_store, tmp_path):
    result = invoke("probe", "--features", tmp_path / "nowhere")
    assert result.exit_code == 2 and "does not exist" in result.output
    store_dir = toy_store
    result = invoke("probe", "--features", store_dir, "--pool", "mean")
    assert result.exit_code == 2 and "holds 'cls' features only" in result.output
    result = invoke("probe", "--features", store_dir, "--layers", "7")
    assert result.exit_code == 2 and "has no layer 7" in result.output


def test_one_pass_pooling_equals_extract_features(tiny_bert_dir):
    import torch

    from bertkit.features import extract
    from bertkit.features.extract import extract_features
    from bertkit.models import loading

    tokenizer, encoder = loading.load_tokenizer(str(tiny_bert_dir)), loading.load_encoder(str(tiny_bert_dir))
    ds = TextDataset(["a short one", "a somewhat longer sentence with more words in it", "mid length text here"])
    both = extract.extract_pooled(encoder, tokenizer, ds, pools=["cls", "mean"], layers=[0, 2], reading=Reading(32),
                                  batch_size=2, dtype=torch.float32)
    for pool in ("cls", "mean"):
        assert both[pool].shape == (3, 2, 32)
        for position, layer in enumerate([0, 2]):
            single = extract_features(encoder, tokenizer, ds, pool=pool, layers=str(layer), reading=Reading(32), batch_size=2)
            assert np.allclose(both[pool][:, position], single, atol=1e-5)


def test_config_fields_are_probe_options_and_recipes_load():
    import inspect

    from bertkit.cli.app import probe
    from bertkit.recipes import load_recipe

    params = set(inspect.signature(probe).parameters)
    assert {f.name for f in all_fields(ProbeConfig)} <= params
    for name in ("alammar-sst2-probe", "alammar-sst2-probe-offline"):
        cfg = ProbeConfig.of(**load_recipe(name, "probe", ProbeConfig))
        assert cfg.inputs.data and cfg.inputs.text_column == "0"
        if name == "alammar-sst2-probe":  # the notebook: first 2,000 rows, 25% held out
            assert (cfg.inputs.limit, cfg.inputs.dev_fraction, cfg.inputs.dev) == (2000, 0.25, None)
        else:
            assert cfg.inputs.dev
    assert ProbeConfig.of(**load_recipe("alammar-sst2-probe", "probe", ProbeConfig)).fit.cv == 5


# ---------------------------------------------------------------- issue 22: probes read the store's mapping

@pytest.mark.parametrize("layers", ["1,2", "-1", "0,2"])
def test_probe_inputs_from_a_float32_store_are_views_of_its_mapping(tiny_bert_dir, toy_files, tmp_path, layers):
    """Consecutive layers are fitted on the memory-mapped features as they are (no copy of the store); other
    selections copy the chosen layers only. The values are the store's either way."""
    from bertkit.commands.probe import ProbeConfig
    from bertkit.features import store
    from bertkit.probe.inputs import load_store_inputs

    train, dev = toy_files
    root = embed_store(tiny_bert_dir, train, dev, tmp_path / "store", "--store-dtype", "float32")
    inputs = load_store_inputs(ProbeConfig.of(features=str(root), layers=layers), Reading())
    pool = next(iter(inputs.train))
    stored = store.open_splits(root)
    positions = {"1,2": [1, 2], "-1": [2], "0,2": [0, 2]}[layers]
    for X, split in ((inputs.train[pool], "train"), (inputs.dev[pool], "dev")):
        assert np.array_equal(X, stored[split].features[:, positions])
        mapped = not X.flags.owndata and not X.flags.writeable  # a read-only view of the mapped file
        assert mapped == (layers != "0,2"), (layers, X.flags)


def test_probe_extracts_in_int8_records_it_and_its_saved_probe_predicts_in_int8(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    out = tmp_path / "run"
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--pool", "mean", "--layers",
                    "-1", "--precision", "int8", "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dtype"] == "int8" and set(report["baselines"]) == {"majority", "tfidf", "random_encoder"}
    assert json.loads((out / "config.json").read_text())["features"]["dtype"] == "int8"
    assert json.loads((out / "features" / "train-mean-2.json").read_text())["dtype"] == "int8"  # its own cache key
    saved = probe_io.load_probe(out / "probe")
    assert saved.meta["dtype"] == "int8"
    fp32 = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--pool", "mean",
                  "--precision", "fp32", "--no-baselines", "--quiet", "--json")
    assert json.loads(fp32.stdout)["dtype"] == "fp32"
    predicted = invoke("predict", "--probe", out, "--text", "a wonderful film , truly great", "--text", "an awful movie",
                       "--precision", "int8", "--json", "--quiet")
    assert predicted.exit_code == 0, predicted.output
    assert {r["label"] for r in json.loads(predicted.stdout)["predictions"]} <= {"neg", "pos"}
    new = TextDataset(["a wonderful film , truly great", "an awful movie"])
    _, int8 = probe_io.predict_with_probe(saved, new, precision="int8")
    _, exact = probe_io.predict_with_probe(saved, new, precision="fp32")
    assert not np.array_equal(int8, exact)
    np.testing.assert_allclose(int8, exact, atol=1e-2, rtol=0)  # measured on the tiny BERT: 2e-4


def test_a_one_layer_store_says_how_to_compare_layers(tiny_bert_dir, toy_store, tmp_path):
    """embed's default --layers -1 makes the per-layer curve one point: the probe says to embed --layers all."""
    root = Path(toy_store).parent
    result = invoke("embed", "--model", tiny_bert_dir, "--data", root / "train.tsv", "--dev", root / "dev.tsv",
                    "--out", tmp_path / "one", "--quiet")
    assert result.exit_code == 0, result.output
    probed = invoke("probe", "--features", tmp_path / "one", "--no-baselines", "--json", "--quiet")
    assert probed.exit_code == 0, probed.output
    assert any("--layers all" in note for note in json.loads(probed.stdout)["notes"])
    every = invoke("probe", "--features", toy_store, "--layers", "-1", "--no-baselines", "--json", "--quiet")
    assert not any("--layers all" in note for note in json.loads(every.stdout)["notes"])  # the store has them all


def test_probe_result_records_are_typed_and_write_back_the_json_they_were_read_from():
    """`bertkit probe` returns typed records (cells, best cell, baselines, refits) that cli/show.py reads by
    attribute; --json writes each back as the object metrics.json holds."""
    import json as json_module

    from bertkit.commands.probe import ProbeResult
    from bertkit.io.atomic import to_json

    record = {
        "model": "m", "revision": None, "source": "s", "features": None, "dtype": "fp32",
        "rows": {"train": 10, "dev": 4}, "labels": ["a", "b"], "probe": {"C": 1.0},
        "sweep": [{"pool": "cls", "layer": 0, "layer_name": "layer 1", "accuracy": 0.75, "f1": 0.7, "mcc": 0.5,
                   "accuracy_ci95": [0.5, 1.0], "C": 1.0, "cv": None, "best": True}],
        "best": {"pool": "cls", "layer": "layer 1", "hidden_state": 1, "C": 1.0,
                 "dev": {"accuracy": 0.75, "f1": 0.7, "mcc": 0.5, "n": 4, "requested": ["mcc"],
                         "external": {"matthews_correlation": 0.5}},
                 "accuracy_ci95": [0.5, 1.0], "test": {"accuracy": 0.6, "n": 5}},
        "notes": [],
        "baselines": {"majority": {"accuracy": 0.5, "f1": 0.33, "mcc": 0.0},
                      "random_encoder": {"accuracy": 0.55, "f1": 0.5, "mcc": 0.1, "pool": "cls", "layer": "layer 1",
                                         "C": 1.0}},
        "repeats": {"repeats": 3, "fraction": 0.8, "accuracy": {"mean": 0.7, "std": 0.05, "values": [0.65, 0.7, 0.75]}},
    }
    result = ProbeResult.from_json(json_module.loads(json_module.dumps(record)))
    cell, best = result.sweep[0], result.best
    assert (cell.pool, cell.layer_name, cell.best, cell.C) == ("cls", "layer 1", True, 1.0)
    assert cell.scores == {"accuracy": 0.75, "f1": 0.7, "mcc": 0.5} and cell.intervals == {"accuracy": (0.5, 1.0)}
    assert best.dev["accuracy"] == 0.75 and "n" not in best.dev
    assert best.asked == {"mcc": 0.5, "matthews_correlation": 0.5}
    assert best.test is not None and best.test.rows == 5 and best.test.scores == {"accuracy": 0.6}
    assert result.baselines.by_name["majority"].C is None and result.baselines.by_name["majority"].where is None
    assert result.baselines.by_name["random_encoder"].where == ("cls", "layer 1")
    assert result.repeats is not None and result.repeats.spreads["accuracy"].std == 0.05
    written = json_module.loads(to_json({k: getattr(result, k) for k in record}))
    assert written == record


# ---------------------------------------------------------------- defaults that learn (issue 44)


def test_the_packaged_minilm_folder_says_it_was_trained_with_mean_pooling(tmp_path, tiny_bert_dir):
    from bertkit.models.trained_pooling import trained_pooling

    assert trained_pooling("minilm-offline") == ("mean", "1_Pooling/config.json")
    assert trained_pooling(str(tiny_bert_dir)) is None  # a plain transformers folder
    assert trained_pooling("bert-base-uncased") is None  # a hub id: no folder to read here


def test_default_cells_on_minilm_are_cls_and_its_mean_over_every_hidden_state():
    from bertkit.probe.inputs import default_cells

    cfg = ProbeConfig.of(data="train.tsv")
    pools, layers, note = default_cells(cfg, "minilm-offline", (6, 384), 1000)
    assert (pools, layers) == (["cls", "mean"], "all")
    assert note is not None and note.startswith(
        "default: cls and mean (the model's sentence-transformers pooling, 1_Pooling/config.json) over all 7 hidden "
        "states (embeddings + 6 layers) - 14 probes")
    assert "20.5 MiB" in note  # 1000 rows x 2 poolings x 7 states x 384 float32
    explicit = ProbeConfig.of(data="train.tsv", pool="max", layers="-1")
    assert default_cells(explicit, "minilm-offline", (6, 384), 1000) == (["max"], "-1", None)
    pools, layers, note = default_cells(ProbeConfig.of(data="train.tsv", layers="2"), "minilm-offline", (6, 384), 10)
    assert (pools, layers) == (["cls", "mean"], "2") and note is not None and "hidden states" not in note


def sentence_transformers_copy(tiny_bert_dir: Path, root: Path, mode: str) -> Path:
    """The tiny BERT's folder as a sentence-transformers folder whose Pooling module uses `mode`."""
    import shutil

    folder = shutil.copytree(tiny_bert_dir, root / "st-tiny")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pool", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pool").mkdir()
    (folder / "1_Pool" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
         "pooling_mode_max_tokens": False, f"pooling_mode_{mode}": True}))
    return folder


def test_probe_default_reads_the_pooling_from_the_folder_and_sweeps_every_layer(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    plain = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--no-baselines", "--json", "-q")
    assert plain.exit_code == 0, plain.output
    report = json.loads(plain.stdout)
    assert [(r["pool"], r["layer_name"]) for r in report["sweep"]] == [
        ("cls", n) for n in ("embeddings", "layer 1", "layer 2")]
    assert any(n.startswith("default: cls (the model folder records no sentence-transformers pooling) over all 3 "
                            "hidden states") for n in report["notes"])

    folder = sentence_transformers_copy(tiny_bert_dir, tmp_path, "max_tokens")
    result = invoke("probe", "--model", folder, "--data", train, "--dev", dev, "--no-baselines", "--json", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [r["pool"] for r in report["sweep"]] == ["cls"] * 3 + ["max"] * 3
    assert any(n.startswith("default: cls and max (the model's sentence-transformers pooling, 1_Pool/config.json) "
                            "over all 3 hidden states") for n in report["notes"])


def test_explicit_pool_and_layers_probe_exactly_those_cells(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    folder = sentence_transformers_copy(tiny_bert_dir, tmp_path, "mean_tokens")
    result = invoke("probe", "--model", folder, "--data", train, "--dev", dev, "--pool", "cls", "--layers", "-1",
                    "--no-baselines", "--json", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(r["pool"], r["layer_name"]) for r in report["sweep"]] == [("cls", "layer 2")]
    assert not any(n.startswith("default:") for n in report["notes"])


def test_a_best_cell_that_loses_to_tfidf_is_called_out_with_the_fix(tiny_bert_dir, toy_files):
    train, dev = toy_files  # words separate the toy rows; [CLS] of the embedding layer is one vector for every row
    result = invoke("probe", "--model", tiny_bert_dir, "--data", train, "--dev", dev, "--pool", "cls", "--layers", "0",
                    "--json", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["best"]["dev"]["accuracy"] < report["baselines"]["tfidf"]["accuracy"]
    warning = next(n for n in report["notes"] if "does not beat TF-IDF" in n)
    assert warning.startswith("warning: the best cell (cls embeddings, dev accuracy 0.500)")
    assert "bertkit finetune" in warning and "--pool cls,mean,max --layers all" in warning


def test_no_baseline_warning_when_the_best_cell_beats_them():
    scores = {"tfidf": {"accuracy": 0.8}, "random_encoder": {"accuracy": 0.6}, "majority": {"accuracy": 0.9}}
    assert probe_baselines.losing_to_baselines("mean layer 3", 0.85, scores, "accuracy", True) == []
    lines = probe_baselines.losing_to_baselines("mean layer 3", 0.6, scores, "accuracy", True)
    assert len(lines) == 2 and "random weights (0.600)" in lines[1] and "--layers all" not in lines[0]
    assert probe_baselines.losing_to_baselines("cls layer 2", 0.1, {}, "accuracy", False) == []


def test_probe_on_the_packaged_minilm_defaults_to_cls_and_mean_over_its_seven_hidden_states(toy_files):
    train, dev = toy_files
    result = invoke("probe", "--data", train, "--dev", dev, "--no-baselines", "--json", "-q")  # minilm-offline
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    names = ["embeddings"] + [f"layer {i}" for i in range(1, 7)]
    assert [(r["pool"], r["layer_name"]) for r in report["sweep"]] == [(p, n) for p in ("cls", "mean") for n in names]
    assert any(n.startswith("default: cls and mean (the model's sentence-transformers pooling, 1_Pooling/config.json)")
               for n in report["notes"])


def test_the_default_sweep_chooses_the_best_cells_C_by_cross_validated_log_loss():
    """Without --C or --cv, cells are compared at C = 1 and the kept one is refit with its C chosen by 5-fold CV on
    log-loss (the other cells keep C = 1 and no CV rows); with --C given, nothing is searched."""
    X, y = blobs(300, 8, gap=1.2, seed=4)
    rng = np.random.default_rng(1)
    layered = np.stack([rng.normal(size=X.shape).astype(np.float32), X], axis=1)
    sweep = probe_sweep.sweep_layers({"cls": layered[:200]}, y[:200], {"cls": layered[200:]}, y[200:], seed=0)
    best, other = sweep.best, sweep.cells[1 - sweep.best_index]
    assert best.layer == 1 and best.fit.cv_results is not None
    losses = {r["C"]: r["log_loss"] for r in best.fit.cv_results}
    assert set(losses) == set(probe_fit.DEFAULT_C_GRID) and losses[best.fit.C] == min(losses.values())
    assert other.fit.C == 1.0 and other.fit.cv_results is None
    fixed = probe_sweep.sweep_layers({"cls": layered[:200]}, y[:200], {"cls": layered[200:]}, y[200:], seed=0, C=1.0)
    assert fixed.best.fit.C == 1.0 and fixed.best.fit.cv_results is None
