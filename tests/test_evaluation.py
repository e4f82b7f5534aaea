"""The scoring jobs a training run hands over whole (`bertkit.scoring.evaluation`), and the run's figures drawn in
one call (`plots.training_figures`)."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.dataset import TextDataset
from bertkit.errors import UserError
from bertkit.scoring.baseline import Baseline
from bertkit.scoring.evaluation import choose_best_metric, judge_evaluation
from bertkit.scoring.shapes import Scored


def _scored(accuracy: float) -> Scored:
    return Scored({"accuracy": accuracy, "f1": accuracy / 2, "loss": 0.5}, np.array([[0.8, 0.2], [0.3, 0.7]]))


def _judge(accuracy: float, best_so_far: float | None, baseline: Baseline | None = None, metric: str = "accuracy"):
    return judge_evaluation(_scored(accuracy), np.array([0, 1]), metric_list=["f1"], external=[],
                            metric_for_best=metric, best_so_far=best_so_far, baseline=baseline)


def test_judge_evaluation_says_best_and_baseline_and_puts_requested_first():
    judged = _judge(0.9, 0.8, Baseline("accuracy", 0.95, None, "always 'a'"))
    assert (judged.value, judged.best, judged.above_baseline, judged.problem) == (0.9, True, False, None)
    assert list(judged.headline)[0] == "f1"  # the --metric names asked for come first
    assert _judge(0.7, 0.8).best is False and _judge(0.7, None).best is True
    assert _judge(0.7, None).above_baseline is None  # no baseline: nothing said


def test_judge_evaluation_names_a_best_metric_without_value_instead_of_raising():
    judged = _judge(0.9, None, metric="glue/f1")
    assert judged.value is None and judged.failed_spec is None
    assert judged.problem.startswith("--metric-for-best glue/f1 has no value in the dev scores (f1, accuracy")


def test_choose_best_metric_defaults_refuses_and_switches_constant_regression_dev_to_mse():
    dev = TextDataset(["a", "b"], labels=[0, 1], source="dev.tsv")
    assert choose_best_metric("single_label", 2, None, [], None, [], dev).metric == "accuracy"
    warned = choose_best_metric("single_label", 2, None, ["pearson"], None, [], dev)
    assert len(warned.warnings) == 1 and "--metric pearson is not computed" in warned.warnings[0]
    one_class = TextDataset(["a", "b"], labels=[1, 1], source="dev.tsv")
    with pytest.raises(UserError, match="roc_auc needs both classes in the dev data; dev.tsv has only 1"):
        choose_best_metric("single_label", 2, "roc_auc", [], None, [], one_class)
    constant = TextDataset(["a", "b"], labels=[2.0, 2.0], source="dev.tsv", task="regression")
    choice = choose_best_metric("regression", 1, None, [], None, [], constant)
    assert choice.metric == "mse" and "the dev targets are all 2" in choice.note


def test_training_figures_draws_the_run_figures_for_its_shape(tmp_path):
    from bertkit import plots

    history = [{"step": 1, "train_loss": 0.7, "dev_loss": 0.6, "dev_accuracy": 0.5},
               {"step": 2, "train_loss": 0.5, "dev_loss": 0.4, "dev_accuracy": 0.75}]
    best = {"confusion_matrix": [[1, 0], [1, 2]], "ece": 0.1,
            "reliability": [{"low": 0.6, "high": 0.7, "n": 4, "confidence": 0.65, "accuracy": 0.75}]}
    drawn = plots.training_figures(tmp_path, history, "accuracy", "finetune m", [], best, np.array([0, 1]),
                                   np.array([[0.6, 0.4], [0.3, 0.7]]), ["a", "b"], "single_label", 2)
    assert [p.name for p in drawn] == ["curves.png", "confusion_matrix.png", "reliability.png"]
    assert all(p.stat().st_size > 0 for p in drawn)
    scatter = plots.training_figures(tmp_path, history, "pearson", "t", [], {}, np.array([1.0, 2.0]),
                                     np.array([[1.1], [1.9]]), ["score"], "regression", 2)
    assert [p.name for p in scatter] == ["curves.png", "dev_scatter.png"]
