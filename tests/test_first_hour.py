"""Issue 33, "the first hour": --lr auto, the majority-class baseline line, a finished run's disk, the curves."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bertkit import plots
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.sweep import SweepConfig
from bertkit.errors import UserError
from bertkit.models.metadata import verify_model_folder
from bertkit.scoring.baseline import constant_logits, majority_baseline
from bertkit.scoring.shapes import Regression, SingleLabel
from bertkit.training import learning_rate

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def make_cfg(model: Path, train: Path, dev: Path, out: Path, **overrides) -> FinetuneConfig:
    values = dict(model=str(model), data=str(train), dev=str(dev), out=str(out), epochs=1, batch_size=8,
                  save_every=2, precision="fp32")
    values.update(overrides)
    return FinetuneConfig.of(**values)


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


# ---------------------------------------------------------------- --lr auto


@pytest.mark.parametrize(("hidden", "lr"), [(32, 3e-4), (128, 3e-4), (256, 1.5e-4), (384, 1e-4), (512, 7.5e-5),
                                            (768, 5e-5), (1024, 2e-5), (2048, 2e-5)])
def test_auto_lr_scales_with_width_and_keeps_the_bert_paper_range_for_base_and_large(hidden, lr):
    assert learning_rate.lr_for_width(hidden) == pytest.approx(lr)


def test_lr_is_auto_by_default_an_explicit_number_wins_and_equal_numbers_are_one_run(tmp_path):
    base = dict(data="x.tsv", out=str(tmp_path / "o"))
    assert FinetuneConfig.of(**base).training.lr == "auto"
    assert FinetuneConfig.of(**base, lr="1e-4").training.lr == FinetuneConfig.of(**base, lr=0.0001).training.lr == "0.0001"
    assert FinetuneConfig.of(**base, lr="AUTO").training.lr == "auto"
    with pytest.raises(UserError, match=r"--lr must be a number or auto; got 'fast'"):
        FinetuneConfig.of(**base, lr="fast")
    with pytest.raises(UserError, match=r"--lr must be a positive number"):
        FinetuneConfig.of(**base, lr=0)


def test_resolve_lr_reads_the_model_config_only_for_auto(tmp_path):
    minilm = SimpleNamespace(hidden_size=384, num_hidden_layers=6, vocab_size=30522, intermediate_size=1536,
                             max_position_embeddings=512)
    cfg = FinetuneConfig.of(data="x.tsv", out=str(tmp_path / "o"))
    resolved, choice = learning_rate.resolve_lr(cfg, lambda: minilm)
    assert resolved.training.lr == "0.0001" and (choice.value, choice.source, choice.hidden_size) == (1e-4, "auto", 384)
    assert 22e6 < choice.parameters < 23.5e6  # MiniLM-L6: 22.7M
    assert choice.line.startswith("lr auto -> 1e-4 for a ~23M-parameter encoder, hidden 384")

    def never():
        raise AssertionError("an explicit --lr needs no model config")

    given = FinetuneConfig.of(data="x.tsv", out=str(tmp_path / "o"), lr="3e-5")
    assert learning_rate.resolve_lr(given, never) == (given, learning_rate.LrChoice(3e-5, "given"))


def test_sweep_grids_and_ranges_take_numbers_and_auto(tmp_path):
    base = dict(data="x.tsv", out=str(tmp_path / "s"))
    (dim,) = SweepConfig.of(**base, grid=("lr=auto,1e-4,5e-5",)).dimensions
    assert dim.values == ("auto", 1e-4, 5e-5)
    (dim,) = SweepConfig.of(**base, search="optuna", space=("lr=1e-5:1e-4:log",)).dimensions
    assert (dim.low, dim.high, dim.log) == (1e-5, 1e-4, True)
    with pytest.raises(UserError, match=r"--lr 'slow' is not a number|is not a number"):
        SweepConfig.of(**base, grid=("lr=slow",))


def test_a_run_records_and_logs_the_resolved_lr(tiny_bert_dir, toy_files, tmp_path, caplog):
    train, dev = toy_files
    with caplog.at_level(logging.INFO, logger="bertkit"):
        result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run"), progress=False)
    line = "lr auto -> 3e-4 for a ~1M-parameter encoder, hidden 32"
    assert any(r.getMessage().startswith(line) for r in caplog.records)
    assert any(n.startswith(line) for n in result.notes)
    assert result.metrics["learning_rate"] == {"value": 3e-4, "source": "auto", "hidden_size": 32,
                                               "parameters": result.metrics["learning_rate"]["parameters"]}
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["config"]["lr"] == 3e-4 and config["learning_rate"]["source"] == "auto"
    card = (tmp_path / "run" / "best" / "README.md").read_text()
    assert "0.0003" in card or "3e-4" in card or "3e-04" in card
    again = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", lr=3e-4), progress=False)
    assert again.already_finished  # the resolved number and `auto` are the same run


# ---------------------------------------------------------------- the majority-class baseline


def test_the_constant_baseline_is_the_majority_class_share_and_mcc_zero():
    y_dev = np.array([0, 1, 1, 1, 0, 1, 1, 1])
    objective = SingleLabel(np.array([0, 1]), y_dev, ["neg", "pos"])
    assert constant_logits("single_label", y_dev, 2).argmax(axis=1).tolist() == [1] * 8
    accuracy = majority_baseline(objective, "single_label", "accuracy")
    assert accuracy.value == 0.75 and accuracy.predicts == "always 'pos', 6 of 8 dev rows"
    assert accuracy.loss == pytest.approx(-(0.25 * np.log(0.25) + 0.75 * np.log(0.75)))
    assert majority_baseline(objective, "single_label", "mcc").value == 0.0
    assert not accuracy.beaten_by(0.75) and accuracy.beaten_by(0.76)
    mse = majority_baseline(Regression(np.zeros(2), np.array([1.0, 3.0]), ["y"]), "regression", "mse")
    assert mse.value == 1.0 and not mse.beaten_by(1.0) and mse.beaten_by(0.5)  # lower is better
    assert majority_baseline(objective, "single_label", "glue/f1") is None  # an evaluate module's score


def test_a_run_that_cannot_learn_says_so_in_one_line_with_the_fix(tiny_bert_dir, write_tsv, tmp_path, caplog):
    """Labels unrelated to the text and a dev split 80% one class: a tiny random model at a vanishing --lr cannot
    beat always predicting that class. Every evaluation logs one line; the result and metrics.json carry it."""
    rng = np.random.default_rng(0)
    words = ["red", "green", "blue", "cat", "dog", "tree", "sun", "rain"]
    rows = [(" ".join(rng.choice(words, 5)), "a" if i % 5 else "b") for i in range(40)]
    train = write_tsv("train.tsv", rows, ("sentence", "label"))
    dev = write_tsv("dev.tsv", rows[:20], ("sentence", "label"))
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", lr=1e-9, epochs=2,
                                   metric_for_best="mcc"), progress=False)
    lines = [r.getMessage() for r in caplog.records if "baseline" in r.getMessage()]
    assert len(lines) == 2  # one per evaluation
    assert all(r.name.startswith("bertkit.") for r in caplog.records if "baseline" in r.getMessage())
    line = lines[-1]
    assert line.startswith("dev mcc ") and "is not above the majority-class baseline 0.0000 (always 'a', 16 of 20" in line
    assert "--lr 1e-9 is likely too low for this model" in line and "Fix: --lr 2e-9" in line and "--epochs" in line
    assert result.notes[-1] == line
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["notes"][-1] == line and saved["baseline"]["metric"] == "mcc" and saved["baseline"]["value"] == 0.0
    assert [h["above_baseline"] for h in saved["history"]] == [False, False]


def test_a_run_that_learns_has_no_baseline_note(tiny_bert_dir, toy_files, tmp_path, caplog):
    train, dev = toy_files
    with caplog.at_level(logging.WARNING, logger="bertkit"):
        result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", lr=5e-3, epochs=3), progress=False)
    assert result.metrics["best_metric"] > result.metrics["baseline"]["value"]
    assert not any("baseline" in n for n in result.notes)


# ---------------------------------------------------------------- disk: best/ and final/ once, no finished checkpoints


def test_a_finished_run_stores_its_weights_once_and_drops_its_checkpoints(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    out = tmp_path / "run"
    result = finetune(make_cfg(tiny_bert_dir, train, dev, out, lr=5e-3), progress=False)
    best, final = out / "best" / "model.safetensors", out / "final" / "model.safetensors"
    assert result.metrics["best_step"] == result.metrics["global_step"] and result.metrics["final_same_as_best"]
    assert best.stat().st_ino == final.stat().st_ino  # one copy on disk
    assert not (out / "checkpoints").exists() and result.metrics["checkpoints_kept"] is False
    for folder in (out / "best", out / "final"):
        verify_model_folder(folder)  # predict / evaluate / export / distill verify the same way
    info = json.loads((out / "final" / "bertkit_model.json").read_text())
    assert info["step"] == result.metrics["global_step"] and info["weights_shared_with"] == "best"
    again = finetune(make_cfg(tiny_bert_dir, train, dev, out, lr=5e-3), progress=False)
    assert again.already_finished and again.metrics["global_step"] == result.metrics["global_step"]


def test_keep_checkpoints_keeps_them_and_a_changed_final_is_refused(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    out = tmp_path / "run"
    finetune(make_cfg(tiny_bert_dir, train, dev, out, lr=5e-3, keep_checkpoints=True), progress=False)
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if not p.name.startswith("."))
    with open(out / "best" / "model.safetensors", "r+b") as handle:  # best/ and final/ share the bytes
        handle.seek(200)
        handle.write(b"\x00\x01\x02\x03")
    for folder in (out / "best", out / "final"):
        with pytest.raises(UserError, match=r"is not the one bertkit saved: model\.safetensors"):
            verify_model_folder(folder)


def test_the_predict_command_reads_a_linked_final(tiny_bert_dir, toy_files, tmp_path):
    from bertkit.commands.predict import PredictConfig, run

    train, dev = toy_files
    out = tmp_path / "run"
    finetune(make_cfg(tiny_bert_dir, train, dev, out, lr=5e-3), progress=False)
    best = run(PredictConfig.of(model=str(out / "best"), text=("a great film",)))
    final = run(PredictConfig.of(model=str(out / "final"), text=("a great film",)))
    assert best.labels == final.labels and np.allclose(best.proba, final.proba)


# ---------------------------------------------------------------- curves


def test_the_training_curve_has_one_point_per_logged_step(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    out = tmp_path / "run"
    result = finetune(make_cfg(tiny_bert_dir, train, dev, out, lr=5e-3, log_every=1), progress=False)
    steps = result.metrics["global_step"]
    log = result.metrics["train_log"]
    assert [e["step"] for e in log] == list(range(1, steps + 1))
    series = plots.curve_series(result.metrics["history"], "accuracy", log)
    assert series["train loss"][0] == list(range(1, steps + 1)) and len(series["dev accuracy"][0]) == 1
    assert (out / "curves.png").is_file()


def test_the_last_partial_log_window_is_logged_too(tiny_bert_dir, toy_files, tmp_path):
    """--log-every 4 on a run whose step count is not a multiple of 4: the steps after the last multiple still
    reach the curve (and metrics.json) as one last point at the final step."""
    train, dev = toy_files
    result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", lr=5e-3, log_every=4), progress=False)
    steps = result.metrics["global_step"]
    assert steps % 4 != 0  # the toy data's step count: the case this test is about
    assert [e["step"] for e in result.metrics["train_log"]] == [*range(4, steps, 4), steps]


def test_curve_series_falls_back_to_the_evaluations_without_a_log():
    history = [{"step": 5, "train_loss": 0.6, "dev_loss": 0.5, "dev_accuracy": 0.7, "dev_mcc": 0.4},
               {"step": 10, "train_loss": 0.4, "dev_loss": 0.45, "dev_accuracy": 0.8, "dev_mcc": 0.6}]
    series = plots.curve_series(history, "accuracy")
    assert series["train loss"] == ([5, 10], [0.6, 0.4]) and set(series) == {"train loss", "dev loss",
                                                                           "dev accuracy", "dev mcc"}


def test_bench_figure_has_no_training_panel_without_a_training_measurement(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setitem(plots.BENCH_PANELS, "train", lambda *a: drawn.append("train"))
    for name in ("params", "size", "latency", "throughput", "memory"):
        monkeypatch.setitem(plots.BENCH_PANELS, name, lambda ax, chart, report, name=name: drawn.append(name))
    report = {"models": [{"label": "m", "parameters": 1e6}], "environment": {}}
    plots.bench_bars(report, tmp_path / "a.png")
    assert "train" not in drawn and len(drawn) == 5
    drawn.clear()
    report["models"][0]["train_step"] = {"step_ms": {"mean": 120.0}, "batch_size": 8}
    plots.bench_bars(report, tmp_path / "b.png")
    assert "train" in drawn


def test_the_summary_says_final_shares_best_and_checkpoints_were_removed(tiny_bert_dir, toy_files, tmp_path, capsys):
    from bertkit.cli.output import View
    from bertkit.cli.show_training import show_finetune

    train, dev = toy_files
    result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", lr=5e-3), progress=False)
    show_finetune(result, View(quiet=True))
    printed = capsys.readouterr().out
    assert "final = best's step" in printed and "checkpoints/ removed (--keep-checkpoints keeps them)" in printed
