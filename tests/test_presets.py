"""--task-preset glue/<task>: columns, problem type and official metrics for the hub data and the GLUE TSV files;
explicit flags and recipes win over the preset."""

from __future__ import annotations

import pytest

from bertkit import recipes
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.predict import PredictConfig
from bertkit.commands.probe import ProbeConfig
from bertkit.data import presets
from bertkit.data.splits import load_dataset_split, load_splits
from bertkit.errors import UserError
from bertkit.options import replaced

HUB = {  # task: (text, pair, label) in nyu-mll/glue
    "cola": ("sentence", None, "label"), "sst2": ("sentence", None, "label"),
    "mrpc": ("sentence1", "sentence2", "label"), "qqp": ("question1", "question2", "label"),
    "stsb": ("sentence1", "sentence2", "label"), "mnli": ("premise", "hypothesis", "label"),
    "qnli": ("question", "sentence", "label"), "rte": ("sentence1", "sentence2", "label"),
    "wnli": ("sentence1", "sentence2", "label"),
}
TSV = {  # task: (text, pair, label) in the GLUE download's TSV files
    "cola": ("3", None, "1"), "sst2": ("sentence", None, "label"), "mrpc": ("#1 String", "#2 String", "Quality"),
    "qqp": ("question1", "question2", "is_duplicate"), "stsb": ("sentence1", "sentence2", "score"),
    "mnli": ("sentence1", "sentence2", "gold_label"), "qnli": ("question", "sentence", "label"),
    "rte": ("sentence1", "sentence2", "label"), "wnli": ("sentence1", "sentence2", "label"),
}
OFFICIAL = {"cola": ("mcc",), "sst2": ("accuracy",), "mrpc": ("binary_f1", "accuracy"),
            "qqp": ("binary_f1", "accuracy"), "stsb": ("pearson", "spearman"), "mnli": ("accuracy",),
            "qnli": ("accuracy",), "rte": ("accuracy",), "wnli": ("accuracy",)}


def columns(cfg) -> tuple:
    return cfg.inputs.text_column, cfg.inputs.text_pair_column, cfg.inputs.label_column


@pytest.mark.parametrize("task", list(HUB))
def test_hub_preset_fills_columns_splits_and_metrics(task):
    cfg = FinetuneConfig.of(task_preset=f"glue/{task}", out="o")
    assert (cfg.inputs.data, cfg.inputs.data_config) == ("nyu-mll/glue", task)
    assert columns(cfg) == HUB[task]
    assert cfg.inputs.dev == ("validation_matched" if task == "mnli" else "validation")
    assert cfg.inputs.test == ("validation_mismatched" if task == "mnli" else None)
    assert cfg.metrics.metric == OFFICIAL[task] and cfg.training.metric_for_best == OFFICIAL[task][0]
    evaluate = EvaluateConfig.of(task_preset=f"glue/{task}", model="m", data="nyu-mll/glue", train_split="validation")
    assert evaluate.inputs.data_config == task and columns(evaluate) == HUB[task] and evaluate.metrics.metric == OFFICIAL[task]


@pytest.mark.parametrize("task", list(TSV))
def test_tsv_preset_fills_the_download_column_names(task):
    cfg = ProbeConfig.of(task_preset=f"glue/{task}", data=f"glue_data/{task}/train.tsv")
    assert columns(cfg) == TSV[task] and cfg.inputs.data_config is None and cfg.inputs.dev is None
    assert cfg.inputs.header == ("no" if task == "cola" else "auto")


def test_problem_type_is_recorded_and_passed_where_the_command_has_it():
    assert presets.find_preset("glue/stsb").problem == "regression"
    assert {p.problem for name, p in presets.PRESETS.items() if name != "stsb"} == {"single_label"}
    values = presets.preset_values(presets.find_preset("stsb"), None)
    assert values["task"] == "regression"
    cfg = FinetuneConfig.of(task_preset="glue/stsb", out="o")
    assert getattr(cfg, "task", "regression") == "regression"  # set when the command has a --task option


def test_explicit_values_win_over_the_preset():
    cfg = FinetuneConfig.of(task_preset="glue/mrpc", data="my/train.tsv", out="o", text_column="a", label_column="y",
                         metric_for_best="accuracy", header="yes")
    assert columns(cfg) == ("a", "#2 String", "y") and cfg.training.metric_for_best == "accuracy" and cfg.inputs.header == "yes"
    assert FinetuneConfig.of(task_preset="glue/cola", out="o", dev="my_dev.tsv").inputs.dev == "my_dev.tsv"
    assert FinetuneConfig.of(out="o", data="x.tsv").training.metric_for_best is None  # no preset: the shape's, once data is read


def test_the_preset_records_once_which_options_it_set():
    cfg = FinetuneConfig.of(task_preset="glue/mrpc", data="my/train.tsv", out="o", text_column="a")
    fill = cfg.inputs.preset_fill
    assert fill.preset == "glue/mrpc"
    assert {"text_pair_column", "label_column", "header", "metric_for_best"} <= fill.options
    assert "text_column" not in fill.options  # the user's own column is not the preset's
    assert FinetuneConfig.of(out="o", data="x.tsv").inputs.preset_fill == presets.NO_PRESET


def test_a_copy_of_a_config_keeps_the_presets_record():
    """`dataclasses.replace` runs `__post_init__` on values no longer unset: they still read as the preset's."""

    cfg = FinetuneConfig.of(task_preset="glue/rte", data="my/train.tsv", out="o")
    copy = replaced(cfg, metric_for_best="accuracy")
    assert {"text_column", "text_pair_column", "label_column"} <= copy.inputs.preset_fill.options
    assert "text_column" not in replaced(cfg, text_column="mine").inputs.preset_fill.options


def test_a_column_message_does_not_go_back_to_the_presets(tmp_path, monkeypatch):
    path = tmp_path / "train.tsv"
    path.write_text("review\tstars\n" + "".join(f"row {i}\t{i % 2}\n" for i in range(10)), encoding="utf-8")
    cfg = FinetuneConfig.of(task_preset="glue/rte", data=str(path), out="o")

    def asked(*args, **kwargs):
        raise AssertionError("the presets were asked again")

    monkeypatch.setattr(presets, "preset_values", asked)
    monkeypatch.setattr(presets, "find_preset", asked)
    with pytest.raises(UserError, match=r"Column 'sentence1' \(set by --task-preset glue/rte"):
        load_dataset_split(cfg.inputs, str(path))


def test_recipe_values_win_over_the_preset_and_flags_over_both(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[finetune]\ntask-preset = "glue/cola"\nout = "o"\nmetric-for-best = "accuracy"\n'
                      'text-column = "2"\n', encoding="utf-8")
    values = recipes.load_recipe(str(recipe), "finetune", FinetuneConfig)
    cfg = FinetuneConfig.of(**{**values, "data": "cola/train.tsv"})
    assert (cfg.inputs.text_column, cfg.inputs.label_column, cfg.training.metric_for_best) == ("2", "1", "accuracy")
    flags = FinetuneConfig.of(**{**values, "data": "cola/train.tsv", "text_column": "3", "metric_for_best": "f1"})
    assert (flags.inputs.text_column, flags.training.metric_for_best) == ("3", "f1")


def test_predict_uses_the_text_columns_but_needs_no_labels():
    cfg = PredictConfig.of(task_preset="glue/rte", model="m", data="RTE/test.tsv")
    assert columns(cfg) == ("sentence1", "sentence2", None)
    assert PredictConfig.of(task_preset="glue/sst2", model="m", text=("a fine film",)).inputs.data is None


def test_an_unknown_preset_lists_the_valid_ones():
    with pytest.raises(UserError) as err:
        FinetuneConfig.of(task_preset="glue/squad", out="o")
    message = str(err.value)
    assert "--task-preset" in message and "glue/cola" in message and "glue/wnli" in message
    assert presets.find_preset("RTE") is presets.find_preset("glue/rte")


def test_rte_tsv_reads_with_the_preset_alone(shared_data):
    cfg = ProbeConfig.of(task_preset="glue/rte", data=str(shared_data / "rte" / "train.tsv"),
                      dev=str(shared_data / "rte" / "dev.tsv"), limit=20)
    splits = load_splits(cfg.inputs)
    assert len(splits.train) == 20 and splits.train.pairs is not None
    assert set(splits.label_map.labels) == {"entailment", "not_entailment"}


def test_glue_download_layouts_read_with_the_preset(tmp_path):
    cola = tmp_path / "cola.tsv"  # headerless: source, label, original mark, sentence
    cola.write_text("gj04\t1\t\tThe cat sat on the mat.\ngj04\t0\t*\tCat the mat on sat.\n"
                    "gj04\t1\t\tShe left early.\ngj04\t0\t*\tLeft she early the.\n", encoding="utf-8")
    rows = load_dataset_split(FinetuneConfig.of(task_preset="glue/cola", data=str(cola), out="o").inputs, str(cola))
    assert rows.texts[0] == "The cat sat on the mat." and rows.labels == [1, 0, 1, 0]
    mrpc = tmp_path / "mrpc.tsv"
    mrpc.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tHe said hi.\tHe greeted.\n"
                    "0\t3\t4\tIt rained.\tThe sun shone.\n", encoding="utf-8")
    rows = load_dataset_split(FinetuneConfig.of(task_preset="glue/mrpc", data=str(mrpc), out="o").inputs, str(mrpc))
    assert rows.texts == ["He said hi.", "It rained."] and rows.pairs == ["He greeted.", "The sun shone."]
    assert rows.labels == [1, 0]


@pytest.mark.parametrize("task", list(HUB))
def test_glue_recipes_load_for_finetune_and_evaluate(task):
    for command, cls in (("finetune", FinetuneConfig), ("evaluate", EvaluateConfig)):
        values = recipes.load_recipe(f"glue-{task}", command, cls)
        cfg = cls.of(**values)
        assert cfg.inputs.task_preset == f"glue/{task}" and cfg.inputs.data_config == task and columns(cfg) == HUB[task]
    assert EvaluateConfig.of(**recipes.load_recipe("glue-mnli", "evaluate", EvaluateConfig)).inputs.train_split == \
        "validation_mismatched"


def test_a_column_the_preset_chose_is_named_as_the_presets_with_the_override(tmp_path):
    """Issue 20: a missing column that came from --task-preset says so, and which flag overrides the preset."""
    from typer.testing import CliRunner

    from bertkit.cli.app import app

    path = tmp_path / "train.tsv"
    path.write_text("review\tstars\n" + "".join(f"row {i}\t{i % 2}\n" for i in range(10)), encoding="utf-8")
    for preset, column, flag in (("glue/rte", "sentence1", "--text-column"), ("glue/cola", "3", "--text-column")):
        with pytest.raises(UserError) as err:
            load_dataset_split(FinetuneConfig.of(task_preset=preset, data=str(path), out="o").inputs, str(path))
        message = str(err.value)
        assert f"Column '{column}' (set by --task-preset {preset}, which expects the GLUE files' columns)" in message
        assert f"Pass {flag} with one of them to override the preset." in message
    with pytest.raises(UserError, match=r"Column 'stars_given' \(from --label-column\).*Pass --label-column with one "
                                        r"of them\.$"):
        load_dataset_split(FinetuneConfig.of(task_preset="glue/sst2", data=str(path), out="o",
                                               text_column="review", label_column="stars_given").inputs, str(path))
    with pytest.raises(UserError, match=r"Column 'label' \(set by --task-preset glue/sst2.*Pass --label-column"):
        load_dataset_split(FinetuneConfig.of(task_preset="glue/sst2", data=str(path), out="o",
                                               text_column="review").inputs, str(path))
    result = CliRunner().invoke(app, ["tokens", "--data", str(path), "--task-preset", "glue/mrpc"])
    assert result.exit_code == 2 and "set by --task-preset glue/mrpc" in " ".join(result.output.split())
