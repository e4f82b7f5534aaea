"""Metrics: the built-in ones, and `evaluate` modules through --metric (a local metric script written here; no
network), in `bertkit evaluate` and `finetune --metric-for-best`."""

from __future__ import annotations

import json
import logging
import re
import textwrap

import numpy as np
import pytest
from sklearn import metrics as skm
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.finetune import FinetuneConfig
from bertkit.errors import UserError
from bertkit.scoring import metrics

runner = CliRunner()

METRIC_SCRIPT = '''
import datasets
import evaluate
from sklearn.metrics import accuracy_score, f1_score


class MyScores(evaluate.Metric):
    """Accuracy and macro-F1, computed the way bertkit's built-in metrics are."""

    def _info(self):
        return evaluate.MetricInfo(
            description="accuracy and macro-F1", citation="", inputs_description="predictions, references: ids",
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        return {"accuracy": float(accuracy_score(references, predictions)),
                "f1": float(f1_score(references, predictions, average="macro"))}
'''


@pytest.fixture(scope="module")
def metric_dir(tmp_path_factory):
    """A local evaluate metric module: a folder holding a script of the same name (evaluate's layout)."""
    folder = tmp_path_factory.mktemp("metrics") / "my_scores"
    folder.mkdir()
    (folder / "my_scores.py").write_text(textwrap.dedent(METRIC_SCRIPT), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def classifier_dir(tiny_bert_dir, tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(2)
    config = BertConfig.from_pretrained(str(tiny_bert_dir), num_labels=2, id2label={0: "neg", 1: "pos"},
                                        label2id={"neg": 0, "pos": 1})
    folder = tmp_path_factory.mktemp("metric-clf")
    BertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(folder)
    return folder


def test_a_local_evaluate_module_computes_what_the_built_in_metrics_do(metric_dir):
    rng = np.random.default_rng(0)
    y_true, y_pred = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    built_in = metrics.classification_metrics(y_true, y_pred)
    for spec in (str(metric_dir), str(metric_dir / "my_scores.py")):  # the folder or the script itself
        external = metrics.load_metric(spec).compute(y_pred, y_true)
        assert external == pytest.approx({"my_scores/accuracy": built_in["accuracy"], "my_scores/f1": built_in["f1"]},
                                         abs=1e-12)


def test_binary_f1_is_the_positive_class_f1():
    y_true, y_pred = np.array([0, 1, 1, 0, 1, 0, 0]), np.array([0, 1, 0, 1, 1, 0, 0])
    result = metrics.classification_metrics(y_true, y_pred)
    assert result["binary_f1"] == pytest.approx(skm.f1_score(y_true, y_pred))
    assert result["binary_f1"] != pytest.approx(result["f1"])
    assert "binary_f1" not in metrics.classification_metrics(np.array([0, 1, 2]), np.array([0, 2, 1]))


def test_requested_metrics_come_first_and_best_value_finds_any_score():
    result = {"accuracy": 0.5, "f1": 0.4, "mcc": 0.1, "external": {"glue/f1": 0.7, "matthews_correlation": 0.2}}
    metrics.add_requested(result, ["mcc", "glue:mrpc"], [], [], [])
    assert list(metrics.headline(result))[:2] == ["mcc", "accuracy"]
    assert metrics.best_value(result, "mcc") == 0.1
    assert metrics.best_value(result, "glue/f1") == 0.7 and metrics.best_value(result, "glue:mrpc") == 0.7
    assert metrics.best_value(result, "matthews_correlation") == 0.2 and metrics.best_value(result, "bleu") is None


def test_evaluate_cli_reports_a_local_module_next_to_the_built_ins(classifier_dir, metric_dir, tmp_path):
    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great acting", "pos"), ("dull plot", "neg")] * 5
    path = tmp_path / "dev.tsv"
    path.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["evaluate", "--model", str(classifier_dir), "--data", str(path), "--json", "--quiet",
                                 "--metric", f"mcc,{metric_dir}"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)["metrics"]
    assert scores["external"]["my_scores/accuracy"] == pytest.approx(scores["accuracy"])
    assert scores["external"]["my_scores/f1"] == pytest.approx(scores["f1"])
    assert scores["requested"] == ["mcc", str(metric_dir)]
    table = runner.invoke(app, ["evaluate", "--model", str(classifier_dir), "--data", str(path), "--quiet",
                                "--metric", str(metric_dir)])
    assert table.exit_code == 0 and "my_scores/accuracy" in table.output


def test_an_uncached_hub_metric_offline_exits_2_naming_the_fix(classifier_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))  # no evaluate cache
    path = tmp_path / "dev.tsv"
    path.write_text("sentence\tlabel\na good film\tpos\na bad film\tneg\n", encoding="utf-8")
    result = runner.invoke(app, ["evaluate", "--model", str(classifier_dir), "--data", str(path),
                                 "--metric", "no_such_metric_here"])
    assert result.exit_code == 2, result.output
    assert "no_such_metric_here" in result.output and "local evaluate cache" in result.output
    assert "--metric path/to/metric.py" in result.output and "Traceback" not in result.output


def test_metric_options_split_comma_lists_and_keep_built_ins_offline():
    cfg = EvaluateConfig.of(model="m", data="d.tsv", metric=("accuracy,mcc", "glue:mrpc", "mcc"))
    assert cfg.metrics.metric_list == ["accuracy", "mcc", "glue:mrpc"] and cfg.metrics.external_metrics == ["glue:mrpc"]


def test_metric_for_best_must_be_built_in_or_a_given_module():
    assert FinetuneConfig.of(data="x.tsv", out="o").training.metric_for_best is None  # the shape's headline, once data is read
    with pytest.raises(UserError) as err:
        FinetuneConfig.of(data="x.tsv", out="o", metric_for_best="acuracy")
    assert "--metric-for-best" in str(err.value) and "did you mean accuracy" in str(err.value)
    with pytest.raises(UserError, match="--metric matthews_correlation"):
        FinetuneConfig.of(data="x.tsv", out="o", metric_for_best="matthews_correlation")
    for best in ("matthews_correlation",):
        assert FinetuneConfig.of(data="x.tsv", out="o", metric=(best,), metric_for_best=best).training.metric_for_best == best
    cfg = FinetuneConfig.of(data="x.tsv", out="o", metric=("metrics/my_scores.py",), metric_for_best="my_scores/f1")
    assert cfg.metrics.external_metrics == ["metrics/my_scores.py"]


def test_finetune_picks_the_best_checkpoint_by_a_local_module(tiny_bert_dir, metric_dir, tmp_path, toy_rows):
    import torch

    from bertkit.commands.finetune import run as finetune

    torch.set_num_threads(1)
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows) + "\n", encoding="utf-8")
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(train), out=str(tmp_path / "run"),
                         epochs=2, lr=5e-3, batch_size=8, save_every=None, metric=(str(metric_dir),),
                         metric_for_best="my_scores/accuracy")
    result = finetune(cfg, progress=False)
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert history and all(r["dev_my_scores/accuracy"] == pytest.approx(r["dev_accuracy"]) for r in history)
    assert result.metrics["best_metric_name"] == "my_scores/accuracy"
    assert result.metrics["best_metric"] == pytest.approx(max(r["dev_accuracy"] for r in history))


def test_finetune_stops_before_work_on_a_module_it_cannot_load(tiny_bert_dir, tmp_path, toy_rows):
    from bertkit.commands.finetune import run as finetune

    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows) + "\n", encoding="utf-8")
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), out=str(tmp_path / "run"), epochs=1,
                         metric=(str(tmp_path / "missing_metric.py"),))
    with pytest.raises(UserError, match="no metric script at .*missing_metric.py"):
        finetune(cfg, progress=False)
    assert not (tmp_path / "run").exists()


def test_modules_compare_class_ids_or_regression_scores():
    np.testing.assert_array_equal(metrics.predicted(np.array([[0.1, 0.9], [0.8, 0.2]])), [1, 0])
    np.testing.assert_allclose(metrics.predicted(np.array([[2.5], [0.5]])), [2.5, 0.5])


def test_probe_reports_a_local_module_for_the_best_cell(tiny_bert_dir, metric_dir, tmp_path, toy_rows):
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows[:30]) + "\n", encoding="utf-8")
    dev.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows[30:]) + "\n", encoding="utf-8")
    args = ["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev), "--test", str(dev),
            "--layers", "all", "--no-baselines", "--metric", f"mcc,{metric_dir}"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "run"), "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["best"]
    for split in ("dev", "test"):
        assert best[split]["external"]["my_scores/accuracy"] == pytest.approx(best[split]["accuracy"])
        assert best[split]["external"]["my_scores/f1"] == pytest.approx(best[split]["f1"])
        assert best[split]["requested"] == ["mcc", str(metric_dir)]
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["best"]["dev"]["external"] == best["dev"]["external"]
    table = runner.invoke(app, [*args, "--quiet"])
    assert table.exit_code == 0, table.output
    assert "my_scores/accuracy" in table.output and "--metric on dev" in table.output


def test_probe_stops_before_work_on_a_module_it_cannot_load(tiny_bert_dir, tmp_path, toy_rows):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--out",
                                 str(tmp_path / "run"), "--metric", str(tmp_path / "missing_metric.py")])
    assert result.exit_code == 2 and "missing_metric.py" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- metric modules that fail (issue 20)

BAD_METRIC_TEMPLATE = '''
import datasets
import evaluate


class {name}(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="a broken metric", citation="", inputs_description="predictions, references: ids",
            features=datasets.Features({{"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}}),
        )

    def _compute(self, predictions, references):
        {body}
'''
BAD_BODIES = {
    "raising": ('raise ZeroDivisionError("division by zero")', r"raised ZeroDivisionError: division by zero"),
    "listing": ("return [0.5, 0.7]", r"returned a list \(\[0\.5, 0\.7\]\) instead of a dict of scores"),
    "wordy": ('return {"score": "high"}', r"its dict holds no number \(got \{'score': 'high'\}\)"),
}
LATE_BODY = ('if len(predictions) > 8:\n            raise RuntimeError("too many rows for me")\n'
             '        return {"hits": float(sum(p == r for p, r in zip(predictions, references)))}')
"""Passes the 8-row synthetic check, fails on the real (larger) dev predictions."""


def write_metric(folder, name: str, body: str):
    """A local metric script `folder/name.py` whose _compute runs `body`."""
    path = folder / f"{name}.py"
    path.write_text(BAD_METRIC_TEMPLATE.format(name=name.capitalize(), body=body), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bad_metrics(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad-metrics")
    return {kind: write_metric(folder, kind, body) for kind, (body, _) in BAD_BODIES.items()}


@pytest.fixture
def toy_tsv(tmp_path, toy_rows):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", sorted(BAD_BODIES))
def test_a_failing_module_is_a_user_error_on_every_shape(bad_metrics, kind):
    module = metrics.load_metric(str(bad_metrics[kind]))
    with pytest.raises(metrics.MetricFailed, match=BAD_BODIES[kind][1]):
        module.compute(np.array([0, 1]), np.array([1, 1]))
    for task, n_labels, kind_words in (("single_label", 3, "class ids"), ("regression", 1, "numbers"),
                                       ("multi_label", 4, "0/1 tag rows")):
        with pytest.raises(UserError) as err:
            metrics.check_external([module], task, n_labels)
        message = str(err.value)
        assert f"does not work on {task.replace('_', '-')} data" in message and kind_words in message
        assert f"drop --metric {bad_metrics[kind]}" in message and "before any work" in message


def test_synthetic_inputs_have_the_shape_and_types_of_real_ones():
    pred, ref = metrics.synthetic_input("single_label", 3)
    assert pred.dtype == ref.dtype == np.int64 and set(ref) == {0, 1, 2} and (pred != ref).any()
    pred, ref = metrics.synthetic_input("multi_label", 4)
    assert pred.shape == ref.shape == (8, 4) and set(np.unique(ref)) == {0, 1} and (ref.min(axis=0) == 0).all()
    pred, ref = metrics.synthetic_input("regression", 1)
    assert pred.dtype == ref.dtype == np.float64 and pred.ndim == 1 and np.ptp(ref) > 0


def test_a_good_module_passes_the_check_and_reports_its_scores(metric_dir):
    scores = metrics.check_external([metrics.load_metric(str(metric_dir))], "single_label", 2)
    assert set(scores) == {"my_scores/accuracy", "my_scores/f1"}


@pytest.mark.parametrize("kind", sorted(BAD_BODIES))
def test_evaluate_exits_2_on_a_failing_module_and_writes_nothing(classifier_dir, bad_metrics, kind, toy_tsv, tmp_path):
    out = tmp_path / "eval"
    result = runner.invoke(app, ["evaluate", "--model", str(classifier_dir), "--data", str(toy_tsv), "--quiet",
                                 "--out", str(out), "--metric", str(bad_metrics[kind])])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert re.search(BAD_BODIES[kind][1], result.output) and "does not work on single-label data" in result.output
    assert not (out / "metrics.json").exists()


@pytest.mark.parametrize("kind", sorted(BAD_BODIES))
def test_finetune_exits_2_before_training_on_a_failing_module(tiny_bert_dir, bad_metrics, kind, toy_tsv, tmp_path,
                                                               monkeypatch):
    from bertkit.training import loop

    monkeypatch.setattr(loop, "train_step", lambda *a, **k: pytest.fail("training started"))
    result = runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out",
                                 str(tmp_path / "run"), "--epochs", "1", "--quiet", "--metric", str(bad_metrics[kind])])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert re.search(BAD_BODIES[kind][1], result.output) and "before any work" in result.output
    assert not (tmp_path / "run").exists()


def test_a_module_failing_on_the_real_dev_predictions_loses_no_trained_model(tiny_bert_dir, toy_tsv, tmp_path):
    late = write_metric(tmp_path, "late", LATE_BODY)
    run = tmp_path / "run"
    result = runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--dev",
                                 str(toy_tsv), "--out", str(run), "--epochs", "1", "--batch-size", "8", "--lr", "5e-3",
                                 "--save-every", "1000", "--quiet", "--metric", str(late)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    flat = " ".join(result.output.split())
    assert "failed on the dev predictions: it raised RuntimeError: too many rows for me" in flat
    assert f"saved, not lost: {run / 'final'}" in flat and "bertkit evaluate --model" in flat
    assert (run / "final" / "model.safetensors").is_file()
    saved = runner.invoke(app, ["evaluate", "--model", str(run / "final"), "--data", str(toy_tsv), "--json", "--quiet"])
    assert saved.exit_code == 0, saved.output
    reported = float(re.search(r"\(dev accuracy ([0-9.]+)", flat).group(1))
    assert json.loads(saved.stdout)["metrics"]["accuracy"] == pytest.approx(reported, abs=1e-4)  # the model that was scored
    assert json.loads((run / "final" / "bertkit_model.json").read_text())["step"] == 5  # 40 rows / batch 8


def test_probe_checks_modules_first_and_saves_its_run_before_a_late_failure(tiny_bert_dir, bad_metrics, toy_rows,
                                                                            tmp_path):
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows[:30]) + "\n", encoding="utf-8")
    dev.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows[30:]) + "\n", encoding="utf-8")
    args = ["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev), "--no-baselines", "--quiet"]
    early = runner.invoke(app, [*args, "--threshold", "0.4", "--out", str(tmp_path / "early"),
                                "--metric", str(bad_metrics["listing"])])
    assert early.exit_code == 2 and "returned a list" in early.output and "Traceback" not in early.output
    assert not (tmp_path / "early").exists()  # refused before any model work or run directory
    assert "--threshold 0.4 is the decision threshold of multi-label (tag) data" in " ".join(early.output.split())
    late = runner.invoke(app, [*args, "--out", str(tmp_path / "run"), "--metric", str(write_metric(tmp_path, "late", LATE_BODY))])
    assert late.exit_code == 2 and "Traceback" not in late.output, late.output
    flat = " ".join(late.output.split())
    assert "failed on the best probe's predictions: it raised RuntimeError" in flat and "saved, not lost" in flat
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "external" not in saved["best"]["dev"] and (tmp_path / "run" / "probe").is_dir()


# ---------------------------------------------------------------- --metric-for-best and options the shape lacks


def _finetune_argv(model, data, out, *extra):
    return ["finetune", "--model", str(model), "--data", str(data), "--out", str(out), "--epochs", "1", "--quiet",
            *extra]


@pytest.mark.parametrize(("extra", "problem", "fix"), [
    (("--metric-for-best", "pearson"), "--metric-for-best pearson is a regression metric; this is single-label data",
     "Pass --metric-for-best accuracy / f1 / binary_f1 / mcc"),
    (("--metric-for-best", "hamming_loss"), "is a multi-label metric; this is single-label data", "accuracy"),
])
def test_a_metric_for_best_the_shape_lacks_exits_2_before_training(tiny_bert_dir, toy_tsv, tmp_path, extra, problem,
                                                                    fix):
    result = runner.invoke(app, _finetune_argv(tiny_bert_dir, toy_tsv, tmp_path / "run", *extra))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    flat = " ".join(result.output.split())
    assert problem in flat and fix in flat and "roc_auc needs two classes" not in flat
    assert not (tmp_path / "run").exists()


def test_two_class_metrics_need_two_classes_and_both_in_dev(tiny_bert_dir, tmp_path):
    three = tmp_path / "three.tsv"
    three.write_text("sentence\tlabel\n" + "".join(f"row {i}\t{'abc'[i % 3]}\n" for i in range(30)), encoding="utf-8")
    result = runner.invoke(app, _finetune_argv(tiny_bert_dir, three, tmp_path / "a", "--metric-for-best", "roc_auc"))
    assert result.exit_code == 2 and "roc_auc needs two classes; this single-label data has 3" in result.output
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"row {i}\t{'ab'[i % 2]}\n" for i in range(20)), encoding="utf-8")
    dev.write_text("sentence\tlabel\n" + "".join(f"row {i}\ta\n" for i in range(6)), encoding="utf-8")
    result = runner.invoke(app, _finetune_argv(tiny_bert_dir, train, tmp_path / "b", "--dev", str(dev),
                                               "--metric-for-best", "roc_auc"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "roc_auc needs both classes in the dev data" in flat and "--dev" in flat


def test_metric_for_best_must_be_a_score_the_module_returns(tiny_bert_dir, metric_dir, toy_tsv, tmp_path):
    result = runner.invoke(app, _finetune_argv(tiny_bert_dir, toy_tsv, tmp_path / "run", "--metric", str(metric_dir),
                                               "--metric-for-best", "my_scores/bleu"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "--metric-for-best my_scores/bleu is not a score the --metric modules return" in flat
    assert "my_scores/accuracy, my_scores/f1" in flat and not (tmp_path / "run").exists()


def test_explicit_accuracy_on_regression_exits_2_and_the_default_becomes_pearson(tiny_bert_dir, tmp_path):
    scores = tmp_path / "scores.tsv"
    scores.write_text("sentence\tlabel\n" + "".join(f"row {i}\t{i / 7:.2f}\n" for i in range(20)), encoding="utf-8")
    result = runner.invoke(app, _finetune_argv(tiny_bert_dir, scores, tmp_path / "a", "--metric-for-best", "accuracy"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "--metric-for-best accuracy is a single-label metric; this is regression" in flat
    from bertkit.data.splits import load_splits
    from bertkit.training.finetune import _for_the_shape

    cfg = FinetuneConfig.of(data=str(scores), out=str(tmp_path / "b"))
    splits = load_splits(cfg.inputs, need_labels=True, need_dev=True)
    assert _for_the_shape(cfg, splits).training.metric_for_best == "pearson"


def test_options_the_shape_ignores_are_warned_about(classifier_dir, toy_tsv, tmp_path, caplog, monkeypatch):
    from bertkit.data.splits import load_splits
    from bertkit.training.finetune import _for_the_shape

    cfg = FinetuneConfig.of(data=str(toy_tsv), out=str(tmp_path / "run"), threshold="0.3", metric=("mcc", "pearson"))
    monkeypatch.setattr(logging.getLogger("bertkit"), "propagate", True)  # the CLI turns it off; caplog is at the root
    with caplog.at_level("WARNING", logger="bertkit"):
        resolved = _for_the_shape(cfg, load_splits(cfg.inputs, need_labels=True, need_dev=True))
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "--threshold 0.3 is the decision threshold of multi-label (tag) data; this is single-label data" in warned
    assert "--metric pearson is not computed for single-label data" in warned and "--metric mcc" not in warned
    assert resolved.training.metric_for_best == "accuracy"
    result = runner.invoke(app, ["evaluate", "--model", str(classifier_dir), "--data", str(toy_tsv), "--quiet",
                                 "--metric", "spearman,mcc"])
    assert result.exit_code == 0, result.output
    assert "--metric spearman is not computed for single-label data" in " ".join(result.output.split())


def test_expected_calibration_error_and_the_reliability_table():
    """ECE is the row-weighted gap between confidence and accuracy per confidence bin: 0 for a model whose 0.9s are
    right 90% of the time, the gap itself for one that says 0.99 and is right 70% of the time."""
    from bertkit.scoring.metrics import classification_metrics, expected_calibration_error, reliability_table

    y = np.array([1] * 9 + [0])
    calibrated = np.tile([0.1, 0.9], (10, 1))
    assert expected_calibration_error(y, calibrated) == pytest.approx(0.0)
    y = np.array([1] * 7 + [0] * 3)
    sure = np.tile([0.01, 0.99], (10, 1))
    assert expected_calibration_error(y, sure) == pytest.approx(0.29)
    (row,) = reliability_table(y, sure)
    assert row["n"] == 10 and row["accuracy"] == pytest.approx(0.7) and row["confidence"] == pytest.approx(0.99)
    scored = classification_metrics(y, sure.argmax(1), sure, ["neg", "pos"])
    assert scored["ece"] == pytest.approx(0.29) and scored["reliability"] == reliability_table(y, sure)
    assert "ece" not in classification_metrics(y, sure.argmax(1), None, ["neg", "pos"])


def test_the_probe_summary_calls_out_overconfident_probabilities():
    from bertkit.cli.show import calibration_line

    assert "rankings, not as chances" in calibration_line(0.27)
    assert "track accuracy" in calibration_line(0.03)
    assert calibration_line(None) is None


@pytest.mark.parametrize("name", ["accuracy", "f1", "pearson", "loss", "threshold"])
def test_a_module_named_like_a_built_in_score_is_refused_before_loading(tmp_path, name):
    """issue 43 (keys): its scores would be keyed `accuracy` and overwrite the built-in one in history and tables."""
    script = write_metric(tmp_path, name, 'return {"' + name + '": 1.0}')
    with pytest.raises(UserError) as err:
        metrics.load_metric(str(script))
    message = str(err.value)
    assert f"--metric {script}" in message and f"built-in {name}" in message
    assert f"my_{name}.py" in message and "Rename the file" in message
    assert metrics.load_metric(str(write_metric(tmp_path, f"my_{name}", 'return {"x": 1.0}'))).name == f"my_{name}"


def test_finetune_exits_2_on_a_module_named_accuracy_and_writes_nothing(tiny_bert_dir, toy_tsv, tmp_path):
    script = write_metric(tmp_path, "accuracy", 'return {"accuracy": 1.0}')
    out = tmp_path / "run"
    result = runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out",
                                 str(out), "--epochs", "1", "--quiet", "--metric", str(script)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "named 'accuracy', like bertkit's built-in accuracy metric" in result.output and not out.exists()
