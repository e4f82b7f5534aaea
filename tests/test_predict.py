"""bertkit predict / evaluate: labels + probabilities in input order, metrics, CSV output, errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.predict import PredictConfig
from bertkit.data.dataset import TextDataset
from bertkit.errors import UserError
from bertkit.models.compute import Compute
from bertkit.models.infer import load_for_inference
from bertkit.scoring.predictions import predict_proba

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
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(train), out=str(folder / "run"),
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
    model, tokenizer, label_map = load_for_inference(str(trained), Compute.resolve(None, "fp32"))
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
    shown = json.loads(result.stdout)
    metrics = shown["metrics"]
    for key in ("accuracy", "f1", "mcc", "precision", "recall", "roc_auc", "confusion_matrix"):
        assert key in metrics
    assert metrics["n"] == len(toy_rows_module) and sum(map(sum, metrics["confusion_matrix"])) == metrics["n"]
    assert (tmp_path / "eval" / "confusion_matrix.png").exists() and (tmp_path / "eval" / "reliability.png").exists()
    assert len(pd.read_csv(tmp_path / "eval" / "predictions.csv")) == metrics["n"]
    table = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data), "--quiet"])
    assert table.exit_code == 0 and "mcc" in table.output and "confusion matrix" in table.output


def test_evaluate_says_how_it_read_the_rows(trained, tmp_path, toy_rows_module, write_tsv):
    data = write_tsv("dev.tsv", toy_rows_module, ("sentence", "label"))
    result = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data), "--max-length", "16"])
    assert result.exit_code == 0, result.output
    assert re.search(r"read at max length 16 tokens: \d+ of \d+ rows were longer and kept their head", result.output)


def test_evaluate_refuses_labels_the_model_does_not_know(trained, write_tsv):
    data = write_tsv("odd.tsv", [("a film", "pos"), ("a movie", "meh")], ("sentence", "label"))
    result = runner.invoke(app, ["evaluate", "--model", str(trained), "--data", str(data)])
    assert result.exit_code == 2 and "meh" in result.output


def test_predict_config_needs_exactly_one_model_and_one_input():
    with pytest.raises(UserError) as err:
        PredictConfig.of(model=None, probe=None, text=())
    assert "--model" in str(err.value) and "--text" in str(err.value)
    with pytest.raises(UserError):
        PredictConfig.of(model="m", probe="p", text=("x",))
    assert PredictConfig.of(model="m", text=["a", "b"]).text == ("a", "b")


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


# ---------------------------------------------------------------- issue 22: predictions stream to their file

TRICKY = ["plain", "a, comma", 'a "quote"', "new\nline", "ünïcødé ✓", "", "  spaces  ", "x" * 300, "tab\there",
          "9", "last one"]


def _whole_csv(dataset, values, names, **kwargs) -> bytes:
    """The bytes of the whole-table writer (every row in one DataFrame, as predict wrote before it streamed)."""
    from bertkit.scoring.predictions import prediction_frame

    return prediction_frame(dataset, values, names, **kwargs)[0].to_csv(index=False).encode("utf-8")


@pytest.mark.parametrize("task", ["single_label", "multi_label", "regression"])
@pytest.mark.parametrize("with_pairs", [False, True])
@pytest.mark.parametrize("with_truth", [False, True])
def test_streamed_predictions_csv_has_the_bytes_of_the_whole_table(task, with_pairs, with_truth, tmp_path,
                                                                    monkeypatch):
    from bertkit.scoring import predictions

    monkeypatch.setattr(predictions, "CHUNK_ROWS", 3)  # 11 rows: 4 chunks, the last one short
    n = len(TRICKY)
    rng = np.random.default_rng(0)
    dataset = TextDataset(TRICKY, pairs=[t[::-1] for t in TRICKY] if with_pairs else None,
                          line_numbers=list(range(2, n + 2)) if with_pairs else None)
    names = ["neg", "pos", "mid"]
    if task == "regression":
        values, truth = rng.normal(size=(n, 1)).astype(np.float32), rng.normal(size=n)
    elif task == "multi_label":
        values, truth = rng.random((n, 3)).astype(np.float32), rng.integers(0, 2, (n, 3))
    else:
        values = rng.random((n, 3)).astype(np.float32)
        values, truth = values / values.sum(axis=1, keepdims=True), rng.integers(0, 3, n)
    y_true = truth if with_truth else None
    path = tmp_path / "p.csv"
    assert predictions.write_predictions_csv(path, dataset, values, names, y_true=y_true, task=task,
                                             threshold=0.4) == n
    assert path.read_bytes() == _whole_csv(dataset, values, names, y_true=y_true, task=task, threshold=0.4)
    empty = TextDataset([], pairs=[] if with_pairs else None)
    predictions.write_predictions_csv(path, empty, values[:0], names, task=task)
    assert path.read_bytes() == _whole_csv(empty, values[:0], names, task=task)  # the header alone
    assert not list(tmp_path.glob(".*.tmp"))


def _predict_data(write_tsv, n: int = 13):
    texts = [f"{'very ' * (i % 5)}{'great' if i % 2 else 'awful'}, film \"number\" {i} " + "long " * (i * 7 % 40)
             for i in range(n)]
    pairs = [f"second text {i}" for i in range(n)]
    return texts, pairs, write_tsv("new.tsv", list(zip(texts, pairs, strict=True)), ("sentence", "other"))


@pytest.mark.parametrize("extra", [[], ["--text-pair-column", "other"], ["--long-text", "chunk", "--max-length", "16",
                                                                         "--stride", "4"]], ids=["single", "pairs", "chunk"])
def test_predict_writes_windows_as_it_goes_with_the_bytes_of_one_pass(trained, tmp_path, write_tsv, monkeypatch,
                                                                       extra):
    """Windows of 4 rows (13 rows: 4 windows): one row per batch, so the outputs do not depend on the batching and
    the file must be byte for byte the one the whole-dataset writer makes from one pass over every row."""
    from bertkit.encoding import batches
    from bertkit.encoding.reading import Reading

    texts, pairs, data = _predict_data(write_tsv)
    out = tmp_path / "preds.csv"
    model, tokenizer, label_map = load_for_inference(str(trained), Compute.resolve(None, "fp32"))
    dataset = TextDataset(texts, pairs=pairs if extra[:1] == ["--text-pair-column"] else None,
                          line_numbers=list(range(2, len(texts) + 2)))
    reading = Reading(16, "chunk", stride=4) if "chunk" in extra else Reading(128)
    proba = predict_proba(model, tokenizer, dataset, batch_size=1, reading=reading)
    expected = _whole_csv(dataset, proba, list(label_map.labels))

    import bertkit.scoring.predictions as predictions_module

    calls, original = [], predictions_module.predict_proba
    monkeypatch.setattr(predictions_module, "predict_proba", lambda m, t, part, **kw: calls.append(len(part))
                        or original(m, t, part, **kw))
    monkeypatch.setattr(batches, "SORT_WINDOW", 4)
    result = runner.invoke(app, ["predict", "--model", str(trained), "--data", str(data), "--out", str(out),
                                 "--batch-size", "1", "--precision", "fp32", "--quiet", *extra])
    assert result.exit_code == 0, result.output
    assert calls == [4, 4, 4, 1]
    assert out.read_bytes() == expected
    assert "13 prediction(s) (first 13)" not in result.output and "13 prediction(s)" in result.output


def test_predict_json_streams_the_text_one_dump_prints(trained, write_tsv, monkeypatch):
    from bertkit.encoding import batches
    from bertkit.io.atomic import to_json

    texts, _, data = _predict_data(write_tsv, 9)
    args = ["predict", "--model", str(trained), "--data", str(data), "--batch-size", "1", "--json", "--quiet"]
    whole = runner.invoke(app, args)
    monkeypatch.setattr(batches, "SORT_WINDOW", 2)
    streamed = runner.invoke(app, args)
    assert whole.exit_code == 0 and streamed.exit_code == 0, streamed.output
    assert streamed.stdout == whole.stdout
    parsed = json.loads(streamed.stdout)
    assert [p["text"] for p in parsed["predictions"]] == texts
    assert streamed.stdout == to_json(parsed) + "\n"


def test_predict_failing_midway_leaves_the_previous_output(trained, tmp_path, write_tsv, monkeypatch):
    from bertkit.encoding import batches
    from bertkit.scoring import predictions as predictions_module

    _, _, data = _predict_data(write_tsv)
    out = tmp_path / "preds.csv"
    args = ["predict", "--model", str(trained), "--data", str(data), "--out", str(out), "--quiet"]
    assert runner.invoke(app, args).exit_code == 0
    before = out.read_bytes()
    original, calls = predictions_module.predict_proba, []

    def fail_on_the_third_window(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected: the model failed on window 3")
        return original(*a, **kw)

    monkeypatch.setattr(predictions_module, "predict_proba", fail_on_the_third_window)
    monkeypatch.setattr(batches, "SORT_WINDOW", 4)
    failed = runner.invoke(app, args)
    assert failed.exit_code != 0 and len(calls) == 3
    assert out.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))  # the half-written temp file is removed


def test_predict_killed_midway_leaves_the_previous_output(trained, tmp_path, write_tsv):
    import signal

    _, _, data = _predict_data(write_tsv)
    out = tmp_path / "preds.csv"  # the previous output, as predict wrote it (with its record: issue 43)
    assert runner.invoke(app, ["predict", "--model", str(trained), "--text", "old", "--out", str(out), "--quiet"]).exit_code == 0
    before = out.read_bytes()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "BERTKIT_KILL_AT": "predictions.window"}
    done = subprocess.run([sys.executable, "-m", "bertkit", "predict", "--model", str(trained), "--data", str(data),
                           "--out", str(out), "--quiet"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert out.read_bytes() == before  # killed after a window was appended: the temp file, never the output
    assert len(list(tmp_path.glob(".preds.csv.*.tmp"))) == 1


def test_predict_with_a_saved_probe_streams_like_one_pass(tiny_bert_dir, tmp_path, write_tsv, monkeypatch):
    from bertkit.data.labels import LabelMap
    from bertkit.encoding import batches
    from bertkit.probe import fit as probe_fit
    from bertkit.probe import saved as probe_io

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 32)).astype(np.float32), np.arange(40) % 2
    label_map = LabelMap.build(["neg", "pos"])
    probe_io.save_probe(tmp_path / "probe", probe_fit.fit_probe(X, y, seed=0), label_map,
                        {"model": str(tiny_bert_dir), "pool": "mean", "layers": "-1", "max_length": 64})
    saved = probe_io.load_probe(tmp_path / "probe")
    texts, _, data = _predict_data(write_tsv)
    dataset = TextDataset(texts, line_numbers=list(range(2, len(texts) + 2)))
    _, proba = probe_io.predict_with_probe(saved, dataset, batch_size=1, precision="fp32")
    monkeypatch.setattr(batches, "SORT_WINDOW", 5)
    out = tmp_path / "preds.csv"
    result = runner.invoke(app, ["predict", "--probe", str(tmp_path / "probe"), "--data", str(data), "--out", str(out),
                                 "--batch-size", "1", "--precision", "fp32", "--quiet"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    np.testing.assert_allclose(frame[["p_neg", "p_pos"]].to_numpy(), proba, rtol=1e-5, atol=1e-6)
    # the probe's matrix product over 5 rows may round in the last bit unlike one over 13: the bytes are those of
    # the whole-table writer given the windows' outputs
    windows = np.concatenate([probe_io.predict_with_probe(saved, dataset.subset(range(s, min(s + 5, 13))),
                                                          batch_size=1, precision="fp32")[1] for s in range(0, 13, 5)])
    assert out.read_bytes() == _whole_csv(dataset, windows, ["neg", "pos"])


def test_evaluate_in_windows_gives_the_metrics_and_file_of_one_pass(trained, tmp_path, toy_rows_module, write_tsv,
                                                                    monkeypatch):
    from bertkit.encoding import batches

    data = write_tsv("dev.tsv", toy_rows_module, ("sentence", "label"))
    args = ["evaluate", "--model", str(trained), "--data", str(data), "--batch-size", "1", "--json", "--quiet"]
    whole = runner.invoke(app, [*args, "--out", str(tmp_path / "whole")])
    monkeypatch.setattr(batches, "SORT_WINDOW", 5)
    windows = runner.invoke(app, [*args, "--out", str(tmp_path / "windows")])
    assert whole.exit_code == 0 and windows.exit_code == 0, windows.output
    assert json.loads(windows.stdout) == json.loads(whole.stdout)
    assert (tmp_path / "windows" / "predictions.csv").read_bytes() == (tmp_path / "whole" / "predictions.csv").read_bytes()


# ---------------------------------------------------------------- --precision int8


def test_int8_classifier_is_a_quantized_copy_close_to_fp32(trained, toy_rows_module, monkeypatch):
    from bertkit.models import quantize

    monkeypatch.setenv("BERTKIT_DEVICE", "cpu")  # the fp32 model is quantized on the way below: int8 runs on the CPU
    fp32_model, tokenizer, _ = load_for_inference(str(trained), Compute.resolve(None, "fp32"))
    assert next(fp32_model.parameters()).device.type == "cpu"
    int8_model, _, _ = load_for_inference(str(trained), Compute.resolve(None, "int8"))
    assert quantize.is_int8(int8_model) and not quantize.is_int8(fp32_model)
    assert next(int8_model.parameters()).device.type == "cpu"
    ds = TextDataset([t for t, _ in toy_rows_module])
    fp32 = predict_proba(fp32_model, tokenizer, ds, batch_size=8)
    int8 = predict_proba(int8_model, tokenizer, ds, batch_size=8)
    assert not np.array_equal(int8, fp32)  # the int8 layers really ran
    # measured on this tiny fine-tuned BERT: largest probability difference 3.7e-4, every label the same
    np.testing.assert_allclose(int8, fp32, atol=1e-2, rtol=0)
    assert (int8.argmax(1) == fp32.argmax(1)).mean() >= 0.95  # (a margin: 1.0 measured)
    # an fp32 model asked for int8 is quantized on the way (a copy), never converted
    again = predict_proba(fp32_model, tokenizer, ds, batch_size=8, precision="int8")
    np.testing.assert_allclose(again, int8, atol=1e-6, rtol=0)
    assert not quantize.is_int8(fp32_model)


@pytest.mark.gpu
def test_on_cuda_a_classifier_predicts_as_on_the_cpu_and_int8_stays_on_the_cpu(trained, toy_rows_module, monkeypatch):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    ds = TextDataset([t for t, _ in toy_rows_module])
    on_gpu, tokenizer, _ = load_for_inference(str(trained), Compute.resolve(None, "fp32"))  # auto: the GPU
    assert next(on_gpu.parameters()).device.type == "cuda"
    gpu = predict_proba(on_gpu, tokenizer, ds, batch_size=8)
    with pytest.raises(UserError, match=r"--precision int8 is a CPU precision"):
        predict_proba(on_gpu, tokenizer, ds, batch_size=8, precision="int8")
    int8, _, _ = load_for_inference(str(trained), Compute.resolve(None, "int8"))  # auto with int8: the CPU
    assert next(int8.parameters()).device.type == "cpu"
    monkeypatch.setenv("BERTKIT_DEVICE", "cpu")
    on_cpu, _, _ = load_for_inference(str(trained), Compute.resolve(None, "fp32"))
    cpu = predict_proba(on_cpu, tokenizer, ds, batch_size=8)
    np.testing.assert_allclose(gpu, cpu, atol=1e-3, rtol=0)
    assert (gpu.argmax(1) == cpu.argmax(1)).all()


def test_predict_and_evaluate_run_and_record_int8(trained, tmp_path, toy_rows_module, write_tsv, auto_dtype):
    from bertkit.commands.evaluate import EvaluateConfig
    from bertkit.commands.evaluate import run as run_evaluate
    from bertkit.commands.predict import run as run_predict

    texts = ["a wonderful film", "an awful movie , really boring"]
    result = run_predict(PredictConfig.of(model=str(trained), text=tuple(texts), precision="int8"))
    assert result.dtype == "int8" and len(result.labels) == 2
    assert run_predict(PredictConfig.of(model=str(trained), text=tuple(texts))).dtype == auto_dtype  # the default: auto
    cli = runner.invoke(app, ["predict", "--model", str(trained), "--text", texts[0], "--precision", "int8", "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["predictions"][0]["label"] in {"neg", "pos"}
    data = write_tsv("dev.tsv", toy_rows_module, ("sentence", "label"))
    out = tmp_path / "eval"
    scored = run_evaluate(EvaluateConfig.of(model=str(trained), data=str(data), out=str(out), precision="int8"))
    assert scored.dtype == "int8" and scored.metrics.n == len(toy_rows_module)
    assert isinstance(scored.metrics.value("precision"), float)  # the macro precision metric, not the compute precision
    assert json.loads((out / "metrics.json").read_text())["dtype"] == "int8"
    assert json.loads((out / "config.json").read_text())["config"]["precision"] == "int8"
    fp32 = run_evaluate(EvaluateConfig.of(model=str(trained), data=str(data), precision="fp32"))
    assert run_evaluate(EvaluateConfig.of(model=str(trained), data=str(data))).dtype == auto_dtype  # the default
    assert fp32.dtype == "fp32" and abs(scored.metrics.score("accuracy") - fp32.metrics.score("accuracy")) <= 0.05


def test_predict_says_how_it_read_the_rows(trained):
    """The max length and truncation the rows were read with (as the model records them) and how many rows were cut
    are under the table and in the JSON."""
    shown = runner.invoke(app, ["predict", "--model", str(trained), "--text", "a wonderful film"])
    assert shown.exit_code == 0, shown.output
    # the fixture's run trained at finetune's default, 128 tokens, and its folder records it
    assert "read at max length 128 tokens: 0 of 1 rows were longer and kept their head" in shown.output
    long = "a wonderful film , " * 6
    as_json = runner.invoke(app, ["predict", "--model", str(trained), "--text", "good", "--text", long, "--json",
                                  "--max-length", "16"])
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert (document["max_length"], document["truncation"], document["rows_cut"]) == (16, "head", 1)
    assert "pooling" not in document


@pytest.mark.parametrize("native", ["0", "1"])
def test_predict_auto_reads_in_the_precision_the_model_records(trained, monkeypatch, native):
    """--precision auto runs a fine-tuned folder in the precision its record names (`compute`) where this CPU runs
    it natively, and says so where it cannot; an explicit --precision wins."""
    from bertkit.models import loading

    recorded = json.loads((trained / "bertkit_model.json").read_text())["compute"]["precision"]
    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", native)
    try:
        shown = runner.invoke(app, ["predict", "--model", str(trained), "--text", "a lovely film", "--json"])
        assert shown.exit_code == 0, shown.output
        expected = recorded if native == "1" or recorded == "fp32" else "fp32"
        assert json.loads(shown.stdout)["dtype"] == expected
        assert ("does not run natively" in shown.stderr) == (expected != recorded)
        asked = runner.invoke(app, ["predict", "--model", str(trained), "--text", "a lovely film", "--json",
                                    "--precision", "fp32"])
        assert json.loads(asked.stdout)["dtype"] == "fp32"
    finally:
        loading.cpu_supports_bf16.cache_clear()


def test_predict_on_a_folder_bertkit_did_not_save_says_so_once(tiny_bert_dir, tmp_path):
    """A plain transformers classifier folder (no bertkit_model.json) is read as its config says, with one line
    saying it was not made by bertkit and its files are not verified (issue 43); a bertkit folder gets no such line."""
    from transformers import AutoConfig, AutoTokenizer, BertForSequenceClassification

    folder = tmp_path / "plain"
    config = AutoConfig.from_pretrained(tiny_bert_dir, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    shown = runner.invoke(app, ["predict", "--model", str(folder), "--text", "a lovely film"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("was not made by bertkit") == 1 and "not verified" in shown.output
