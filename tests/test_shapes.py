"""Problem shapes beyond one class per row: regression (one number per row) and multi-label (a tag set per row).

Reading (detection, the three ways to give tags, refusals), the objectives and metrics, fine-tuning, and the saved
models: they load in plain `transformers` (AutoModelForSequenceClassification, pipeline) and give what
`bertkit predict` gives. Learning on real data (MiniLM) is in the slow tests at the end.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.evaluate import run as run_evaluate
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.predict import PredictConfig
from bertkit.commands.predict import run as run_predict
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import TASKS, LabelMap
from bertkit.data.options import DataOptions
from bertkit.data.splits import load_dataset_split, load_splits
from bertkit.errors import UserError
from bertkit.options import replaced
from bertkit.scoring import metrics
from bertkit.scoring import shapes as objectives
from bertkit.scoring.table import BUILT_IN, SHAPE

runner = CliRunner()

LEVELS = {"awful": 0.5, "bad": 1.5, "okay": 2.5, "good": 3.5, "great": 4.5}
NOUNS = ["film", "meal", "hotel", "book", "concert", "phone", "game", "trip", "show", "car"]
FILL = ["the", "this", "was", "really", "quite", "my", "our", "honestly", "overall", "today"]
TOPICS = {"sports": ["football", "tennis", "goal", "match"], "food": ["pizza", "soup", "bread", "cheese"],
          "music": ["guitar", "song", "piano", "violin"], "travel": ["airport", "train", "hotel", "beach"]}


def rating_rows(n: int, seed: int) -> list[dict]:
    """A score set by the sentence's adjective (awful 0.5 ... great 4.5) plus noise of +-0.3: learnable from text."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        adj = rng.choice(list(LEVELS))
        text = " ".join([rng.choice(FILL), rng.choice(NOUNS), "was", adj, rng.choice(FILL)])
        rows.append({"text": text, "label": round(LEVELS[adj] + rng.uniform(-0.3, 0.3), 2)})
    return rows


def topic_rows(n: int, seed: int) -> list[dict]:
    """Tags = the topics whose words the sentence uses (one or two of four)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        tags = sorted(rng.sample(list(TOPICS), rng.choice([1, 1, 2])))
        words = [rng.choice(TOPICS[t]) for t in tags] + [rng.choice(FILL) for _ in range(3)]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "labels": tags})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read(path: Path, **kw) -> TextDataset:
    return load_dataset_split(FinetuneConfig.of(data=str(path), out="unused", **kw).inputs, str(path))


# ---------------------------------------------------------------- reading labels of every shape


def test_auto_detects_regression_from_fractional_numbers(tmp_path):
    ds = read(write_jsonl(tmp_path / "r.jsonl", rating_rows(10, 0)))
    assert ds.task == "regression" and all(isinstance(x, float) for x in ds.labels)
    assert ds.label_columns == ("label",)


def test_auto_keeps_integers_and_names_single_label(tmp_path):
    rows = [{"text": f"t{i}", "label": i % 3} for i in range(9)]
    assert read(write_jsonl(tmp_path / "i.jsonl", rows)).task == "single_label"
    rows = [{"text": f"t{i}", "label": "1.5" if i else "pos"} for i in range(9)]
    assert read(write_jsonl(tmp_path / "s.jsonl", rows), task="single_label").task == "single_label"
    names = [{"text": f"t{i}", "label": "2" if i == 0 else ("pos", "neg")[i % 2]} for i in range(9)]
    assert read(write_jsonl(tmp_path / "n.jsonl", names)).task == "single_label"  # names with a few numbers
    assert read(write_jsonl(tmp_path / "f.jsonl", rows[1:] + [{"text": "x", "label": 2}]),
                task="regression").labels[-1] == 2.0


def test_three_ways_to_give_tags_read_the_same(tmp_path):
    listed = write_jsonl(tmp_path / "l.jsonl", [{"text": "a", "labels": ["x", "y"]}, {"text": "b", "labels": ["y"]}])
    sep = tmp_path / "s.tsv"
    sep.write_text("text\tlabel\na\tx| y\nb\ty\n", encoding="utf-8")
    columns = tmp_path / "c.csv"
    columns.write_text("text,x,y\na,1,1\nb,0,1\n", encoding="utf-8")
    for ds in (read(listed), read(sep, label_sep="|"), read(columns, label_column="x,y")):
        assert ds.task == "multi_label" and ds.labels == [("x", "y"), ("y",)]
        label_map = LabelMap.build(ds.labels, ds.task, ds.label_columns)
        assert label_map.labels == ("x", "y")
        assert label_map.encode(ds.labels, "here").tolist() == [[1, 1], [0, 1]]


def test_a_column_whose_name_has_a_comma_is_one_label_column(tmp_path):
    path = tmp_path / "c.jsonl"
    write_jsonl(path, [{"text": "a", "x,y": "p"}, {"text": "b", "x,y": "q"}])
    ds = read(path, label_column="x,y")
    assert ds.task == "single_label" and ds.labels == ["p", "q"]


def test_zero_one_columns_keep_their_order_and_allow_rows_without_tags(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("text,toxic,insult\na,0,0\nb,1,0\nc,true,false\n", encoding="utf-8")
    ds = read(path, label_column="toxic,insult")
    assert ds.labels == [(), ("toxic",), ("toxic",)]
    assert LabelMap.build(ds.labels, ds.task, ds.label_columns).labels == ("toxic", "insult")


def test_regression_refuses_names_among_numbers(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("text\tlabel\na\t1.5\nb\tpos\nc\t2\nd\tneg\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        read(path, task="regression")
    message = str(err.value)
    assert "mixes numbers and names: 2 cell(s) are not numbers, at lines 3, 5" in message
    assert "'pos'" in message and "--task single_label" in message


def test_regression_on_a_column_of_names_says_it_holds_names(tmp_path):
    path = tmp_path / "n.tsv"
    path.write_text("text\tlabel\na\tpos\nb\tneg\nc\tpos\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        read(path, task="regression")
    message = str(err.value)
    assert "holds names, not numbers" in message and "mixes" not in message
    assert "none of its 3 label cell(s) is a number" in message and "'pos'" in message
    assert "--task single_label" in message and "--label-column" in message


def write_scores(path: Path, labels: list[str]) -> Path:
    """A TSV with a header and one row per label (line 2 holds the first)."""
    path.write_text("text\tlabel\n" + "".join(f"text {i}\t{y}\n" for i, y in enumerate(labels)), encoding="utf-8")
    return path


@pytest.mark.parametrize("odd", ["n/a", "-", "?", "inf", "\u200b x"])
def test_auto_refuses_a_number_column_with_a_few_other_cells_naming_them(tmp_path, odd):
    labels = [f"{0.1 * i:.2f}" for i in range(1, 24)]
    labels[6] = odd  # line 8
    with pytest.raises(UserError) as err:
        read(write_scores(tmp_path / "s.tsv", labels))
    message = str(err.value)
    assert "holds numbers in 22 of 23 label cells" in message and f"line 8 ({odd!r})" in message
    assert "does not guess its shape" in message and "--task single_label" in message
    assert ("not finite numbers" if odd == "inf" else "not numbers") in message
    forced = read(write_scores(tmp_path / "s.tsv", labels), task="single_label")  # --task chooses: classes
    assert forced.task == "single_label" and len(set(forced.labels)) == 23


def test_auto_refuses_integer_classes_with_a_stray_cell_too(tmp_path):
    with pytest.raises(UserError, match=r"holds numbers in 8 of 9 label cells, but 1 cell\(s\) are not numbers: "
                                        r"line 6 \('n/a'\)"):
        read(write_scores(tmp_path / "i.tsv", ["0", "1", "2", "1", "n/a", "0", "2", "1", "0"]))


def test_a_label_of_only_invisible_characters_is_a_missing_label(tmp_path):
    with pytest.raises(UserError, match=r"1 missing/blank label\(s\) .* at line 3"):
        read(write_scores(tmp_path / "z.tsv", ["0.5", "\u200b", "1.5", "2.5"]))


def test_auto_does_not_guess_from_huge_numbers_but_plain_integer_ids_stay_classes(tmp_path):
    with pytest.raises(UserError) as err:
        read(write_scores(tmp_path / "h.tsv", ["1e30", "2e30", "1e30", "3e30"]))
    message = str(err.value)
    assert "beyond +-1e+06 that are not plain integers: line 2 ('1e30')" in message
    assert "--task single_label" in message and "scale the targets" in message and "--task regression" in message
    assert len(set(read(write_scores(tmp_path / "h.tsv", ["1e30", "2e30"]), task="single_label").labels)) == 2
    ids = read(write_scores(tmp_path / "d.tsv", ["20230101", "20230102", "20230101"]))
    assert ids.task == "single_label" and ids.labels[0] == 20230101


def test_regression_targets_must_be_finite_naming_the_rows(tmp_path):
    with pytest.raises(UserError) as err:
        read(write_scores(tmp_path / "f.tsv", ["0.5", "inf", "1.5", "-Infinity"]), task="regression")
    assert "must be finite numbers" in str(err.value) and "line 3 ('inf'), line 5 ('-Infinity')" in str(err.value)
    with pytest.raises(UserError, match=r"1 missing/blank label\(s\) .* at line 3"):
        read(write_scores(tmp_path / "n.tsv", ["0.5", "nan", "1.5"]), task="regression")
    infinite = tmp_path / "j.jsonl"
    infinite.write_text('{"text": "a", "label": 0.5}\n{"text": "b", "label": Infinity}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"must be finite numbers.*line 2 \(inf\)"):
        read(infinite, task="regression")


def test_empty_tag_lists_and_bad_zero_one_cells_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "e.jsonl", [{"text": "a", "labels": ["x"]}, {"text": "b", "labels": []}])
    with pytest.raises(UserError, match=r"1 empty tag list\(s\) .* at line 2: every row needs at least one tag"):
        read(path)
    sep = tmp_path / "s.tsv"
    sep.write_text("text\tlabel\na\tx|y\nb\t|\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"empty tag list.*line 3"):
        read(sep, label_sep="|")
    columns = tmp_path / "c.csv"
    columns.write_text("text,x,y\na,1,2\nb,0,1\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"must hold 0 or 1 .* at line 2 \(e\.g\. y='2'\)"):
        read(columns, label_column="x,y")


def test_dev_tags_must_be_known_and_dev_is_a_random_hold_out(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", topic_rows(30, 0))
    splits = load_splits(FinetuneConfig.of(data=str(train), out="x").inputs)
    assert splits.label_map.task == "multi_label" and len(splits.dev) == 3 and len(splits.train) == 27
    assert "random" in splits.notes[0]
    dev = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "labels": ["food", "chess"]}])
    with pytest.raises(UserError, match=r"tags not seen in the training data: 'chess'"):
        load_splits(FinetuneConfig.of(data=str(train), dev=str(dev), out="x").inputs)


def test_commands_without_tags_keep_refusing_lists_and_predict_ignores_them(tmp_path):
    path = write_jsonl(tmp_path / "l.jsonl", [{"text": "a", "label": ["x"]}, {"text": "b", "label": ["y"]}])
    with pytest.raises(UserError, match="multi-label data is not supported by this command"):
        load_dataset_split(DataOptions(), str(path))
    assert load_dataset_split(DataOptions(), str(path), need_labels=False).labels is None


def test_label_map_round_trips_through_a_transformers_config():
    regression = LabelMap.from_id2label({"0": "score"}, "regression")
    assert (regression.task, regression.labels, regression.problem_type) == ("regression", ("score",), "regression")
    assert LabelMap.from_id2label({0: "LABEL_0"}).task == "regression"  # one output, no problem_type
    tags = LabelMap.from_id2label({"0": "1", "1": "2"}, "multi_label_classification")
    assert tags.labels == ("1", "2") and tags.problem_type == "multi_label_classification"
    assert LabelMap.from_json(tags.to_json()) == tags
    assert LabelMap(("a", "b")).to_json() == {"labels": ["a", "b"]}  # single-label records are as they were


# ---------------------------------------------------------------- options


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.2", "half", "nan"])
def test_threshold_outside_zero_one_is_refused(value):
    with pytest.raises(UserError, match=r"--threshold must be a probability strictly between 0 and 1"):
        FinetuneConfig.of(data="x.tsv", out="o", threshold=value)


def test_threshold_modes_and_label_sep_rules():
    for value in ("0.3", "tune", "tune-per-label"):
        assert FinetuneConfig.of(data="x.tsv", out="o", threshold=value).inputs.threshold == value
    with pytest.raises(UserError, match=r"--label-sep .* does not apply to --task regression"):
        FinetuneConfig.of(data="x.tsv", out="o", label_sep="|", task="regression")
    with pytest.raises(UserError, match=r"--label-sep must be a visible separator"):
        EvaluateConfig.of(data="x.tsv", model="m", label_sep=" ")
    with pytest.raises(UserError, match=r"--task must be one of auto, single_label, multi_label, regression"):
        FinetuneConfig.of(data="x.tsv", out="o", task="ranking")


# ---------------------------------------------------------------- metrics and objectives


def test_regression_metrics_match_their_definitions():
    y, p = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.5, 1.5, 3.5, 4.5])
    result = metrics.regression_metrics(y, p)
    assert result["mse"] == pytest.approx(0.25) and result["mae"] == pytest.approx(0.5)
    assert result["pearson"] == pytest.approx(np.corrcoef(y, p)[0, 1])
    assert result["spearman"] == pytest.approx(0.9486832980505138)  # ranks 1,2,3,4 vs 1.5,1.5,3,4
    assert metrics.regression_metrics(y, np.ones(4))["pearson"] == 0.0  # constant predictions: no relation, 0
    constant = metrics.regression_metrics(np.full(4, 2.5), p)  # constant targets: undefined, null with a note
    assert constant["pearson"] is None and constant["spearman"] is None and constant["mse"] > 0
    assert "every target is 2.5" in constant["note"]


def test_multilabel_metrics_match_their_definitions():
    y = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]])
    p = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1]])
    result = metrics.multilabel_metrics(y, p, ["a", "b", "c"])
    tp, fp, fn = 3, 1, 2
    assert result["micro_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert result["subset_accuracy"] == pytest.approx(1 / 3) and result["hamming_loss"] == pytest.approx(3 / 9)
    assert result["per_label"]["a"]["f1"] == 1.0 and result["per_label"]["c"]["f1"] == 0.0
    assert result["macro_f1"] == pytest.approx(np.mean([1.0, 2 / 3, 0.0]))


def test_lower_is_better_for_losses_and_errors():
    for name in ("mse", "mae", "hamming_loss", "loss"):
        assert metrics.is_better(0.1, 0.2, name) and not metrics.is_better(0.3, 0.2, name)
    for name in ("pearson", "spearman", "micro_f1", "subset_accuracy"):
        assert metrics.is_better(0.3, 0.2, name)


def test_one_table_holds_each_shapes_facts():
    """Every TASKS shape has one record; its headline, table and probe columns are metrics it computes; each built-in
    metric belongs to one shape; the objectives and the probe read their columns from it."""
    assert set(SHAPE) == set(TASKS)
    assert len(BUILT_IN) == len(set(BUILT_IN))
    for task, shape in SHAPE.items():
        assert shape.name == task and shape.probe_keys[0] == shape.headline
        assert {shape.headline, *shape.table_metrics, *shape.probe_keys, *shape.lower_is_better} <= set(shape.metrics)
        assert objectives.best_metric(task, None) == shape.headline
    assert objectives.SingleLabel.table_metrics == SHAPE["single_label"].table_metrics
    assert SHAPE["single_label"].scored(3) == ("accuracy", "f1", "mcc", "precision", "recall", "ece", "loss")


def test_regression_objective_is_mse_and_scores_the_first_output():
    objective = objectives.Regression(np.array([1.0, 3.0]), np.array([0.0, 1.0, 2.0]), ["score"])
    logits = torch.tensor([[2.0], [1.0]])
    assert objective.loss(logits, np.array([0, 1])).item() == pytest.approx((1 + 4) / 2)
    scored = objective.score(np.array([[0.0], [1.0], [2.5]]))
    assert scored.metrics["mse"] == pytest.approx(0.25 / 3) and scored.metrics["loss"] == scored.metrics["mse"]
    assert scored.outputs.shape == (3, 1)


def test_regression_head_starts_at_the_target_mean(tiny_bert_dir):
    from bertkit.models import loading

    model = loading.load_classifier(str(tiny_bert_dir), {0: "score"}, problem_type="regression")
    objectives.Regression(np.array([2.0, 4.0, 6.0]), np.array([1.0]), ["score"]).init_head(model)
    assert model.classifier.bias.item() == pytest.approx(4.0)


def test_multilabel_objective_is_bce_and_tunes_its_threshold():
    y_dev = np.array([[1, 0], [1, 0], [0, 1], [0, 0]])
    logits = np.log(np.array([[0.32, 0.1], [0.36, 0.2], [0.1, 0.8], [0.2, 0.1]]) /
                    (1 - np.array([[0.32, 0.1], [0.36, 0.2], [0.1, 0.8], [0.2, 0.1]])))
    tuned = objectives.MultiLabel(y_dev, y_dev, ["a", "b"], "tune").score(logits)
    assert 0.2 < tuned.metrics["threshold"] <= 0.32 and tuned.metrics["micro_f1"] == 1.0
    fixed = objectives.MultiLabel(y_dev, y_dev, ["a", "b"], "0.5").score(logits)
    assert fixed.metrics["threshold"] == 0.5 and fixed.metrics["micro_f1"] < 1.0
    per_label = objectives.MultiLabel(y_dev, y_dev, ["a", "b"], "tune-per-label").score(logits)
    assert len(per_label.metrics["threshold"]) == 2 and per_label.metrics["per_label"]["a"]["f1"] == 1.0
    loss = objectives.MultiLabel(y_dev, y_dev, ["a", "b"]).loss(torch.zeros(2, 2), np.array([0, 2]))
    assert loss.item() == pytest.approx(np.log(2))


def test_class_weight_is_refused_for_numbers_and_tags(tmp_path):
    train = write_jsonl(tmp_path / "r.jsonl", rating_rows(20, 0))
    with pytest.raises(UserError, match=r"--class-weight balanced weighs classes of single-label data; this is "
                                        r"regression data\. Drop --class-weight"):
        finetune(FinetuneConfig.of(data=str(train), out=str(tmp_path / "o"), class_weight="balanced"), progress=False)
    assert not (tmp_path / "o").exists()


def test_best_metric_follows_the_shape():
    assert objectives.best_metric("regression", None) == "pearson"  # none given: the shape's headline
    assert objectives.best_metric("regression", "mae") == "mae"
    assert objectives.best_metric("multi_label", None) == "micro_f1"
    with pytest.raises(UserError, match=r"--metric-for-best accuracy is a single-label metric; this is multi-label"):
        objectives.best_metric("multi_label", "accuracy")  # given explicitly: refused, not silently replaced
    assert objectives.best_metric("single_label", "mcc") == "mcc"
    with pytest.raises(UserError, match=r"--metric-for-best f1 is a single-label metric; this is regression data"):
        objectives.best_metric("regression", "f1")


# ---------------------------------------------------------------- fine-tuned models in plain transformers


@pytest.fixture(scope="module")
def shaped_runs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    """A tiny BERT fine-tuned briefly on rating rows (regression) and on topic rows (multi-label)."""
    folder = tmp_path_factory.mktemp("shapes")
    runs = {}
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads cost more than they give on a shared machine
    for name, rows in (("regression", rating_rows(40, 1)), ("multi_label", topic_rows(40, 1))):
        train = write_jsonl(folder / f"{name}.jsonl", rows)
        cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), out=str(folder / name), epochs=2, lr=5e-3,
                             batch_size=8, save_every=None, dev_fraction=0.25)
        finetune(cfg, progress=False)
        runs[name] = folder / name
    torch.set_num_threads(before)
    runs["regression_data"], runs["multi_label_data"] = folder / "regression.jsonl", folder / "multi_label.jsonl"
    return runs


def test_regression_run_saves_a_transformers_regression_model(shaped_runs):
    run = shaped_runs["regression"]
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["task"] == "regression" and summary["best_metric_name"] == "pearson" and {"pearson", "spearman", "mse", "mae"} <= set(summary["best_dev"])
    assert json.loads((run / "config.json").read_text())["config"]["metric_for_best"] == "pearson"
    config = json.loads((run / "best" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "label"}
    assert json.loads((run / "best" / "bertkit_model.json").read_text())["task"] == "regression"
    assert (run / "dev_scatter.png").stat().st_size > 0
    errors = pd.read_csv(run / "dev_errors.csv")
    assert list(errors.columns[-3:]) == ["label", "predicted", "abs_error"]
    assert errors["abs_error"].is_monotonic_decreasing


def test_regression_model_gives_the_same_scores_in_transformers_and_bertkit(shaped_runs):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    best = str(shaped_runs["regression"] / "best")
    texts = ["the film was great today", "my meal was awful", "our trip was okay"]
    ours = run_predict(PredictConfig.of(model=best, text=tuple(texts), precision="fp32"))  # transformers runs fp32
    assert ours.task == "regression" and all(isinstance(x, float) for x in ours.labels)
    model = AutoModelForSequenceClassification.from_pretrained(best)
    assert model.config.problem_type == "regression" and model.config.num_labels == 1
    tokenizer = AutoTokenizer.from_pretrained(best)
    with torch.no_grad():
        plain = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits[:, 0].numpy()
    np.testing.assert_allclose(ours.labels, plain, atol=1e-4)
    piped = pipeline("text-classification", model=best, function_to_apply="none")(texts)
    np.testing.assert_allclose(ours.labels, [r["score"] for r in piped], atol=1e-4)


def test_multilabel_run_saves_its_threshold_and_transformers_agrees(shaped_runs):
    from transformers import pipeline

    run = shaped_runs["multi_label"]
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["best_metric_name"] == "micro_f1" and "per_label" in summary["best_dev"]
    config = json.loads((run / "best" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert sorted(config["id2label"].values()) == sorted(TOPICS)
    saved = json.loads((run / "best" / "bertkit_model.json").read_text())
    assert saved["task"] == "multi_label" and saved["threshold"] == summary["best_dev"]["threshold"]
    texts = ["pizza and a guitar song", "the football match", "a train to the beach"]
    ours = run_predict(PredictConfig.of(model=str(run / "best"), text=tuple(texts), precision="fp32"))
    piped = pipeline("text-classification", model=str(run / "best"), function_to_apply="sigmoid", top_k=None)(texts)
    for row, (tags, proba) in enumerate(zip(ours.labels, ours.proba, strict=True)):
        theirs = {r["label"]: r["score"] for r in piped[row]}
        np.testing.assert_allclose(proba, [theirs[n] for n in ours.label_names], atol=1e-5)
        assert set(tags) == {n for n, p in theirs.items() if p >= saved["threshold"]}


def test_predict_and_evaluate_cli_for_tags_and_scores(shaped_runs, tmp_path):
    best = str(shaped_runs["multi_label"] / "best")
    result = runner.invoke(app, ["predict", "--model", best, "--text", "pizza", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    prediction = json.loads(result.output)["predictions"][0]
    assert set(prediction["probabilities"]) == set(TOPICS) and isinstance(prediction["labels"], list)
    out = tmp_path / "eval"
    result = runner.invoke(app, ["evaluate", "--model", best, "--data", str(shaped_runs["multi_label_data"]),
                                 "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "per tag (threshold" in result.output and "micro_f1" in result.output
    written = json.loads((out / "metrics.json").read_text())
    assert written["metrics"]["task"] == "multi_label" and set(written["metrics"]["per_label"]) == set(TOPICS)
    assert (out / "per_label_f1.png").is_file()
    scored = run_evaluate(EvaluateConfig.of(model=str(shaped_runs["regression"] / "best"),
                                         data=str(shaped_runs["regression_data"]), out=str(tmp_path / "reg")))
    assert scored.task == "regression" and 0 <= scored.metrics.value("mae") and (tmp_path / "reg" / "scatter.png").is_file()
    frame = pd.read_csv(tmp_path / "reg" / "predictions.csv")
    assert np.allclose(frame["abs_error"], (frame["predicted"] - frame["label"]).abs())


@pytest.mark.parametrize("shape", ["regression", "multi_label"])
def test_distilling_a_regression_or_multilabel_teacher_keeps_its_shape(shaped_runs, shape, tmp_path):
    from bertkit.commands import distill as distill_command
    from bertkit.commands.distill import DistillConfig

    cfg = DistillConfig.of(teacher=str(shaped_runs[shape] / "best"), data=str(shaped_runs[f"{shape}_data"]),
                        out=str(tmp_path / "student"), student_layers=1, epochs=1, batch_size=8, lr=5e-3,
                        save_every=None, report=False, dev_fraction=0.25)
    result = distill_command.run(cfg, progress=False).training
    student = json.loads((result.out / "best" / "config.json").read_text())
    assert student["num_hidden_layers"] == 1
    assert student["problem_type"] == {"regression": "regression", "multi_label": "multi_label_classification"}[shape]
    assert result.metrics["best_metric_name"] == {"regression": "pearson", "multi_label": "micro_f1"}[shape]
    assert np.isfinite(result.metrics["best_dev"]["loss"])
    with pytest.raises(UserError, match=rf"--task single_label: the teacher .* is a {shape} model"):
        distill_command.run(replaced(cfg, task="single_label", out=str(tmp_path / "other")), progress=False)


# ---------------------------------------------------------------- a model saved is the model trained


def hi_lo_rows(n: int, seed: int) -> list[dict]:
    """The rating rows as two classes: hi (score above 2.5) and lo."""
    return [{"text": r["text"], "label": "hi" if r["label"] > 2.5 else "lo"} for r in rating_rows(n, seed)]


@pytest.fixture(scope="module")
def single_from_regression(shaped_runs, tmp_path_factory) -> dict[str, Path]:
    """Single-label fine-tuning started from the regression run's best/ (a regression head in config.json)."""
    folder = tmp_path_factory.mktemp("restart")
    train = write_jsonl(folder / "hilo.jsonl", hi_lo_rows(40, 1))
    dev = write_jsonl(folder / "hilo-dev.jsonl", hi_lo_rows(12, 2))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    finetune(FinetuneConfig.of(model=str(shaped_runs["regression"] / "best"), data=str(train), dev=str(dev),
                            out=str(folder / "run"), epochs=2, lr=5e-3, batch_size=8, save_every=None), progress=False)
    torch.set_num_threads(before)
    return {"run": folder / "run", "train": train, "dev": dev}


def test_single_label_started_from_a_regression_folder_is_saved_single_label(single_from_regression, shaped_runs):
    run = single_from_regression["run"]
    assert json.loads((shaped_runs["regression"] / "best" / "config.json").read_text())["problem_type"] == "regression"
    for folder in ("best", "final"):
        config = json.loads((run / folder / "config.json").read_text())
        assert config["problem_type"] == "single_label_classification"
        assert config["id2label"] == {"0": "hi", "1": "lo"} and config["label2id"] == {"hi": 0, "lo": 1}
    result = runner.invoke(app, ["predict", "--model", str(run / "best"), "--text", "the film was great",
                                 "--text", "my meal was awful", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    predictions = json.loads(result.output)["predictions"]
    assert json.loads(result.output)["task"] == "single_label"
    assert all(p["label"] in ("hi", "lo") and set(p["probabilities"]) == {"hi", "lo"} for p in predictions)
    trained = json.loads((run / "metrics.json").read_text())["best_dev"]
    scored = run_evaluate(EvaluateConfig.of(model=str(run / "best"), data=str(single_from_regression["dev"])))
    assert scored.task == "single_label" and scored.metrics.value("accuracy") == pytest.approx(trained["accuracy"])


@pytest.mark.parametrize("shape", ["regression", "multi_label"])
def test_numbers_or_tags_started_from_a_single_label_folder_are_saved_in_their_shape(single_from_regression,
                                                                                    shaped_runs, shape, tmp_path):
    start = single_from_regression["run"] / "best"
    finetune(FinetuneConfig.of(model=str(start), data=str(shaped_runs[f"{shape}_data"]), out=str(tmp_path / "run"),
                            epochs=1, lr=5e-3, batch_size=8, save_every=None, dev_fraction=0.25), progress=False)
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    if shape == "regression":
        assert config["problem_type"] == "regression"
        assert config["id2label"] == {"0": "label"} and config["label2id"] == {"label": 0}
    else:
        assert config["problem_type"] == "multi_label_classification"
        assert sorted(config["id2label"].values()) == sorted(TOPICS) and len(config["label2id"]) == 4
    ours = run_predict(PredictConfig.of(model=str(tmp_path / "run" / "best"), text=("pizza and a guitar song",)))
    assert ours.task == shape
    assert isinstance(ours.labels[0], float if shape == "regression" else tuple)


def test_a_student_started_from_a_regression_folder_is_saved_in_the_teachers_shape(single_from_regression,
                                                                                  shaped_runs, tmp_path):
    from bertkit.commands import distill as distill_command
    from bertkit.commands.distill import DistillConfig

    cfg = DistillConfig.of(teacher=str(single_from_regression["run"] / "best"),
                        student=str(shaped_runs["regression"] / "best"), data=str(single_from_regression["train"]),
                        out=str(tmp_path / "student"), epochs=1, batch_size=8, lr=5e-3, save_every=None, report=False,
                        dev_fraction=0.25)
    result = distill_command.run(cfg, progress=False).training
    config = json.loads((result.out / "best" / "config.json").read_text())
    assert config["problem_type"] == "single_label_classification" and config["id2label"] == {"0": "hi", "1": "lo"}
    assert run_predict(PredictConfig.of(model=str(result.out / "best"), text=("good",))).labels[0] in ("hi", "lo")


# ---------------------------------------------------------------- targets that cannot be trained on or scored


def test_huge_regression_targets_are_refused_before_training_naming_the_file(tmp_path):
    rows = [{"text": r["text"], "label": r["label"] * 1e30} for r in rating_rows(20, 0)]
    train = write_jsonl(tmp_path / "huge.jsonl", rows)
    with pytest.raises(UserError) as err:
        finetune(FinetuneConfig.of(data=str(train), out=str(tmp_path / "o"), task="regression"), progress=False)
    message = str(err.value)
    assert "Regression targets in column 'label' of" in message and "huge.jsonl reach" in message
    assert "Scale the targets" in message and "whatever the --lr" in message and "too high" not in message
    assert not (tmp_path / "o").exists()


def test_a_diverging_regression_names_the_span_of_its_targets_next_to_the_lr(tiny_bert_dir, tmp_path):
    rows = [{"text": r["text"], "label": r["label"] * 1000} for r in rating_rows(24, 0)]
    train = write_jsonl(tmp_path / "wide.jsonl", rows)
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), out=str(tmp_path / "o"), task="regression", lr=5e5,
                         max_grad_norm=0, epochs=1, batch_size=8, save_every=None)
    with pytest.raises(UserError, match=r"became NaN/inf.*--lr 500000 is too high \(the regression targets span "
                                        r"\d+ to \d+: if that is wide, scale them\)"):
        finetune(cfg, progress=False)


def test_a_constant_dev_target_reports_undefined_correlations_and_picks_by_mse(tiny_bert_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rating_rows(24, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": r["text"], "label": 2.5} for r in rating_rows(6, 1)])
    result = runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev),
                                 "--out", str(tmp_path / "run"), "--epochs", "1", "--batch-size", "8", "--lr", "5e-3"])
    assert result.exit_code == 0, result.output
    assert "the dev targets are all 2.5, so Pearson and Spearman are undefined" in result.output
    assert "best mse" in result.output and "pearson undefined" in result.output
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["best_metric_name"] == "mse" and summary["best_step"] is not None
    assert summary["best_dev"]["pearson"] is None and "undefined" in summary["best_dev"]["note"]
    result = runner.invoke(app, ["evaluate", "--model", str(tmp_path / "run" / "best"), "--data", str(dev),
                                 "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    assert "undefined" in result.output and "every target is 2.5" in result.output
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    scores = written["metrics"]
    assert scores["pearson"] is None and scores["spearman"] is None and scores["mse"] >= 0


def test_evaluate_refuses_zero_one_columns_that_leave_out_or_add_tags(shaped_runs, tmp_path):
    best = str(shaped_runs["multi_label"] / "best")
    frame = pd.DataFrame([{"text": r["text"], **{t: int(t in r["labels"]) for t in TOPICS}, "extra": 0}
                          for r in topic_rows(12, 5)])
    path = tmp_path / "tags.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(UserError) as err:
        run_evaluate(EvaluateConfig.of(model=best, data=str(path), label_column="food,music,sports"))
    assert "no column for its tag(s) 'travel' (each would read as never on)" in str(err.value)
    assert "Pass --label-column food,music,sports,travel" in str(err.value)
    with pytest.raises(UserError, match=r"column\(s\) 'extra' that are not its tags"):
        run_evaluate(EvaluateConfig.of(model=best, data=str(path), label_column="food,music,sports,travel,extra"))
    with pytest.raises(UserError, match=r"no column for its tag\(s\) 'food', 'music', 'sports'"):
        run_evaluate(EvaluateConfig.of(model=best, data=str(path), label_column="travel"))
    listed = write_jsonl(tmp_path / "tags.jsonl", topic_rows(12, 5))
    whole = run_evaluate(EvaluateConfig.of(model=best, data=str(path), label_column="food,music,sports,travel"))
    assert whole.metrics.value("micro_f1") == pytest.approx(run_evaluate(EvaluateConfig.of(model=best, data=str(listed))).metrics.value("micro_f1"))


def test_soft_losses_per_shape():
    student, teacher = torch.tensor([[0.5, -1.0]]), torch.tensor([[2.0, 0.0]])
    y = np.array([[1, 0]])
    tags = objectives.Distillation(objectives.MultiLabel(y, y, ["a", "b"]), teacher.numpy(), 2.0, 1.0)
    expected = torch.nn.functional.binary_cross_entropy(torch.sigmoid(student / 2), torch.sigmoid(teacher / 2)) * 4
    assert tags.loss(student, np.array([0])).item() == pytest.approx(expected.item(), rel=1e-5)
    numbers = objectives.Distillation(objectives.Regression(np.array([1.0]), np.array([1.0]), ["s"]),
                                      np.array([[3.0]]), 2.0, 1.0)
    assert numbers.loss(torch.tensor([[1.0]]), np.array([0])).item() == pytest.approx(4.0)


# ---------------------------------------------------------------- learning (real MiniLM; slow)


def per_label_majority_micro_f1(y_train: np.ndarray, y_dev: np.ndarray) -> float:
    """Micro-F1 of predicting, for every tag, its majority value in training."""
    majority = (y_train.mean(axis=0) > 0.5).astype(int)
    return metrics.multilabel_metrics(y_dev, np.tile(majority, (len(y_dev), 1)), list(range(y_dev.shape[1])))[
        "micro_f1"]


@pytest.mark.slow
def test_minilm_regression_learns_a_learnable_score(minilm_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rating_rows(240, 2))
    held_out = write_jsonl(tmp_path / "test.jsonl", rating_rows(100, 3))
    dev = write_jsonl(tmp_path / "dev.jsonl", rating_rows(60, 4))
    finetune(FinetuneConfig.of(model=str(minilm_dir), data=str(train), dev=str(dev), out=str(tmp_path / "run"),
                            epochs=3, lr=1e-4, batch_size=16, save_every=None), progress=False)
    scored = run_evaluate(EvaluateConfig.of(model=str(tmp_path / "run" / "best"), data=str(held_out)))
    assert scored.metrics.value("pearson") > 0.8, scored


@pytest.mark.slow
def test_minilm_multilabel_beats_the_per_label_majority(minilm_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", topic_rows(240, 2))
    held_out = write_jsonl(tmp_path / "test.jsonl", topic_rows(100, 3))
    dev = write_jsonl(tmp_path / "dev.jsonl", topic_rows(60, 4))
    finetune(FinetuneConfig.of(model=str(minilm_dir), data=str(train), dev=str(dev), out=str(tmp_path / "run"),
                            epochs=2, lr=1e-4, batch_size=16, save_every=None), progress=False)
    scored = run_evaluate(EvaluateConfig.of(model=str(tmp_path / "run" / "best"), data=str(held_out)))
    label_map = LabelMap(tuple(scored.metrics.value("labels")), "multi_label")
    majority = per_label_majority_micro_f1(label_map.encode([tuple(r["labels"]) for r in topic_rows(240, 2)], "t"),
                                           label_map.encode([tuple(r["labels"]) for r in topic_rows(100, 3)], "h"))
    assert scored.metrics.value("micro_f1") > majority + 0.2, (scored.metrics.value("micro_f1"), majority)
