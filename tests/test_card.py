"""Model cards: every saved model folder (best/, final/, a distilled student, a sweep's OUT/best, an ONNX export)
has a README.md that huggingface_hub.ModelCard loads strictly and `check_model_card` passes, holding the metrics the
run measured (those of metrics.json), with bootstrap intervals, and a command line that parses back to the config."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import typer

from bertkit.cli.app import CLI_ONLY, app
from bertkit.commands.distill import DistillConfig
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.registry import config_for_command
from bertkit.models.card import CardFacts, check_model_card, hub_base_model, read_model_card, write_model_card
from bertkit.options import command_line, replaced
from bertkit.scoring.intervals import bootstrap_interval, bootstrap_intervals
from bertkit.training.options import NOT_REPRODUCED

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def run_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return (write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header),
            write_tsv("test.tsv", toy_rows[20:], header))


@pytest.fixture
def finished_run(tiny_bert_dir, run_files, tmp_path):
    train, dev, test = run_files
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(dev), test=str(test),
                         out=str(tmp_path / "run"), epochs=2, lr=5e-3, batch_size=8, save_every=1000, precision="fp32")
    result = finetune(cfg, progress=False)
    return cfg, result, tmp_path / "run"


def parse_back(line: str) -> object:
    """The config the CLI builds from a reproduce line (Click parses it exactly as the shell would hand it)."""
    words = shlex.split(line)
    assert words[0] == "bertkit"
    command = typer.main.get_command(app).commands[words[1]]
    params = command.make_context(words[1], words[2:]).params
    for name in (*CLI_ONLY, "recipe"):
        params.pop(name, None)
    cls = config_for_command(words[1])
    return cls.of(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items()})


def card_command(folder: Path) -> str:
    text = read_model_card(folder).text
    return text.split("## Reproduce")[1].split("```bash\n")[1].split("\n```")[0]


def card_metrics(folder: Path, split: str) -> dict[str, float]:
    card = read_model_card(folder)
    return {r.metric_type: r.metric_value for r in card.data.eval_results if r.dataset_split == split}


def test_best_and_final_cards_hold_the_measured_metrics(finished_run):
    cfg, result, run = finished_run
    summary = json.loads((run / "metrics.json").read_text())
    for role in ("best", "final"):
        assert check_model_card(run / role) == [], role
        assert "README.md" in json.loads((run / role / ".bertkit-files.json").read_text())["files"]
        card = read_model_card(run / role)
        assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-classification"
        assert card.data.base_model is None  # a local folder is no hub id: the text names it instead
        assert str(cfg.model) in card.text and "train.tsv" in card.text and "## Reproduce" in card.text
        assert card.data.label_names == ["neg", "pos"]
    best_dev, final_dev = card_metrics(run / "best", "validation"), card_metrics(run / "final", "validation")
    assert best_dev["accuracy"] == summary["best_dev"]["accuracy"] and best_dev["mcc"] == summary["best_dev"]["mcc"]
    assert final_dev["accuracy"] == summary["final_dev"]["dev_accuracy"]
    assert card_metrics(run / "best", "test")["accuracy"] == summary["best_test"]["accuracy"]
    assert card_metrics(run / "final", "test")["accuracy"] == summary["final_test"]["accuracy"]
    assert summary["final_test"]["n"] == 20
    assert "95% interval" in read_model_card(run / "best").text


def test_reproduce_line_parses_back_to_the_same_config(finished_run):
    cfg, result, run = finished_run
    # the run resolved the metric from the data's shape, and its reading against the --model (a hub-like tiny BERT:
    # no record, so 128 and head): the reproduce line spells what the run used
    resolved = replaced(cfg, metric_for_best="accuracy", max_length=128, truncation="head")
    assert card_command(run / "best") == card_command(run / "final") == command_line("finetune", resolved, skip=NOT_REPRODUCED)
    assert parse_back(card_command(run / "best")) == resolved
    odd = FinetuneConfig.of(model="minilm-offline", data="my data.tsv", out="o", metric=("f1", "mcc"),
                         fast_forward=False, lr=3e-05, freeze_encoder=True, overwrite=True)
    assert parse_back(command_line("finetune", odd, skip=NOT_REPRODUCED)) == replaced(odd, overwrite=False)


def test_distilled_student_card_names_the_teacher(finished_run, tmp_path):
    from bertkit.commands.distill import run as distill

    cfg, _, run = finished_run
    dcfg = DistillConfig.of(teacher=str(run / "best"), student_layers=1, data=cfg.inputs.data, dev=cfg.inputs.dev,
                         out=str(tmp_path / "student"), epochs=1, lr=5e-3, batch_size=8, save_every=1000,
                         precision="fp32", report=False)
    distill(dcfg, progress=False)
    summary = json.loads((tmp_path / "student" / "metrics.json").read_text())
    for role in ("best", "final"):
        folder = tmp_path / "student" / role
        assert check_model_card(folder) == []
        card = read_model_card(folder)
        assert "distillation" in card.data.tags and str(run / "best") in card.text and "layers copied" in card.text
    assert card_metrics(tmp_path / "student" / "best", "validation")["accuracy"] == summary["best_dev"]["accuracy"]
    line = card_command(tmp_path / "student" / "best")
    assert line.startswith("bertkit distill ") and f"--teacher {run / 'best'}" in line
    # --max-length as the teacher records it (distill has no --truncation: the teacher's is read)
    assert parse_back(line) == replaced(dcfg, metric_for_best="accuracy", task="single_label",
                                                   max_length=128)


def test_card_metadata_rules(tmp_path):
    assert hub_base_model("minilm-offline") == "sentence-transformers/all-MiniLM-L6-v2"
    assert hub_base_model(str(tmp_path)) is None and hub_base_model("bert-base-uncased") == "bert-base-uncased"
    facts = CardFacts(command="finetune", model="minilm-offline", task="regression", labels=["score"],
                      data=[{"split": "dev", "source": "glue[validation]", "fingerprint": "hub:nyu-mll/glue/stsb/validation",
                             "rows": 3}],
                      results={"dev": {"metrics": {"pearson": 0.5, "spearman": None}, "intervals": {}, "rows": 3}})
    write_model_card(tmp_path, facts)
    card = read_model_card(tmp_path)
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2" and card.data.datasets == ["glue"]
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [("pearson", 0.5)]
    assert check_model_card(tmp_path) == []
    (tmp_path / "README.md").write_text("---\npipeline_tag: [oops\n---\nbody\n")
    assert check_model_card(tmp_path) and "does not load" in check_model_card(tmp_path)[0]
    (tmp_path / "README.md").write_text("---\nlibrary_name: transformers\nbase_model: ./local/folder\n"
                                        "pipeline_tag: text-classification\n---\nbody\n")
    assert any("base_model" in p for p in check_model_card(tmp_path))
    assert check_model_card(tmp_path / "missing") == [f"{tmp_path / 'missing' / 'README.md'} is missing"]


def test_bootstrap_intervals_bracket_each_shape_score():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    pred = np.where(rng.random(300) < 0.8, y, 1 - y)
    proba = np.c_[1 - (pred * 0.6 + 0.2), pred * 0.6 + 0.2]
    found = bootstrap_intervals("single_label", y, pred, proba, n_labels=2, seed=0)
    assert set(found) == {"accuracy", "f1", "binary_f1", "mcc", "precision", "recall", "roc_auc"}
    low, high = found["accuracy"]
    assert low < float((y == pred).mean()) < high and high - low < 0.15
    numbers = rng.normal(size=200)
    low, high = bootstrap_interval("regression", "spearman", numbers, numbers + rng.normal(size=200) * 0.5, seed=0)
    assert 0.7 < low < high < 1.0
    assert bootstrap_interval("single_label", "loss", y, pred) is None


def test_sweep_best_is_a_trials_best_with_its_card(tiny_bert_dir, run_files, tmp_path):
    from typer.testing import CliRunner

    train, dev, _ = run_files
    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["sweep", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev),
                                      "--out", str(out), "--epochs", "1", "--batch-size", "8", "--precision", "fp32",
                                      "--grid", "lr=5e-3,1e-4", "--quiet", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    best_trial = json.loads(result.stdout)["best"]["trial"]
    assert check_model_card(out / "best") == []
    assert (out / "best" / "README.md").read_text() == (out / "trials" / best_trial / "best" / "README.md").read_text()
    trial_summary = json.loads((out / "trials" / best_trial / "metrics.json").read_text())
    assert card_metrics(out / "best", "validation")["accuracy"] == trial_summary["best_dev"]["accuracy"]
    assert "bertkit finetune " in card_command(out / "best")


def test_export_folder_card_names_the_source_precision_and_gate(finished_run, tmp_path):
    pytest.importorskip("onnxruntime")
    from typer.testing import CliRunner

    _, _, run = finished_run
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", "--model", str(run / "best"), "--out", str(out), "--quantize", "none",
                                      "--data", str(run.parent / "test.tsv"), "-q", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "export_report.json").read_text())
    assert check_model_card(out) == []
    card = read_model_card(out)
    assert card.data.library_name == "onnx" and "onnx" in card.data.tags and card.data.pipeline_tag == "text-classification"
    assert card_metrics(out, "validation") == {report["metric"]: report["metric_export"]}
    assert str(run / "best") in card.text and "fp32" in card.text and "agreement" in card.text
    assert parse_back(card_command(out)).model == str(run / "best")
