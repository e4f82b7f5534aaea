"""Metrics: the built-in ones, and `evaluate` modules through --metric (a local metric script written here; no
network), in `bertkit evaluate` and `finetune --metric-for-best`."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from sklearn import metrics as skm
from typer.testing import CliRunner

from bertkit import metrics
from bertkit.cli import app
from bertkit.config import EvaluateConfig, FinetuneConfig
from bertkit.errors import UserError

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
    scores = json.loads(result.stdout)
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
    cfg = EvaluateConfig(model="m", data="d.tsv", metric=("accuracy,mcc", "glue:mrpc", "mcc"))
    assert cfg.metric_list == ["accuracy", "mcc", "glue:mrpc"] and cfg.external_metrics == ["glue:mrpc"]


def test_metric_for_best_must_be_built_in_or_a_given_module():
    assert FinetuneConfig(data="x.tsv", out="o").metric_for_best is None  # the shape's headline, once data is read
    with pytest.raises(UserError) as err:
        FinetuneConfig(data="x.tsv", out="o", metric_for_best="acuracy")
    assert "--metric-for-best" in str(err.value) and "did you mean accuracy" in str(err.value)
    with pytest.raises(UserError, match="--metric matthews_correlation"):
        FinetuneConfig(data="x.tsv", out="o", metric_for_best="matthews_correlation")
    for best in ("matthews_correlation",):
        assert FinetuneConfig(data="x.tsv", out="o", metric=(best,), metric_for_best=best).metric_for_best == best
    cfg = FinetuneConfig(data="x.tsv", out="o", metric=("metrics/my_scores.py",), metric_for_best="my_scores/f1")
    assert cfg.external_metrics == ["metrics/my_scores.py"]


def test_finetune_picks_the_best_checkpoint_by_a_local_module(tiny_bert_dir, metric_dir, tmp_path, toy_rows):
    import torch

    from bertkit.finetune import finetune

    torch.set_num_threads(1)
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows) + "\n", encoding="utf-8")
    cfg = FinetuneConfig(model=str(tiny_bert_dir), data=str(train), dev=str(train), out=str(tmp_path / "run"),
                         epochs=2, lr=5e-3, batch_size=8, save_every=None, metric=(str(metric_dir),),
                         metric_for_best="my_scores/accuracy")
    result = finetune(cfg, progress=False)
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert history and all(r["dev_my_scores/accuracy"] == pytest.approx(r["dev_accuracy"]) for r in history)
    assert result.metrics["best_metric_name"] == "my_scores/accuracy"
    assert result.metrics["best_metric"] == pytest.approx(max(r["dev_accuracy"] for r in history))


def test_finetune_stops_before_work_on_a_module_it_cannot_load(tiny_bert_dir, tmp_path, toy_rows):
    from bertkit.finetune import finetune

    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in toy_rows) + "\n", encoding="utf-8")
    cfg = FinetuneConfig(model=str(tiny_bert_dir), data=str(train), out=str(tmp_path / "run"), epochs=1,
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
