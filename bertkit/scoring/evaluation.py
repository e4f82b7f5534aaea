"""The scoring jobs a training run hands over whole: before training, which dev metric picks the best model
(`choose_best_metric`: checked against the data's shape and the --metric modules); at each evaluation, the dev
scores completed and judged against the best so far and the constant baseline (`judge_evaluation`); for a saved
model's card, one split's record (`split_result`: headline metrics, bootstrap intervals, rows). The loop keeps what
it decides with them (checkpoints, early stopping); what the metric names mean stays here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bertkit.data.dataset import TextDataset
from bertkit.errors import UserError
from bertkit.scoring import metrics, shapes
from bertkit.scoring.baseline import Baseline
from bertkit.scoring.intervals import bootstrap_intervals
from bertkit.scoring.table import BUILT_IN


@dataclass(frozen=True)
class MetricChoice:
    """The dev metric that picks the best model, why it is that one when the data chose it (`note`), and the options
    the data's shape ignores (`warnings`, one line each)."""

    metric: str
    note: str
    warnings: tuple[str, ...] = ()


def choose_best_metric(task: str, n_labels: int, requested: str | None, metric_list: Sequence[str],
                       threshold: str | None, external: Sequence[str], dev: TextDataset | None) -> MetricChoice:
    """--metric-for-best fitted to the data's problem shape, before any training: the shape's headline when none is
    given; a metric the shape lacks, a --metric module that fails on a synthetic input of the shape, or a best metric
    the dev evaluation will not have, is a UserError. A constant regression dev target (its correlations are
    undefined) picks by dev mse."""
    warnings = tuple(shapes.inapplicable_options(task, n_labels, list(metric_list), threshold))
    scores = metrics.check_external(metrics.load_metrics(tuple(external)), task, n_labels)
    metric = shapes.best_metric(task, requested, n_labels)
    _check_best_is_scored(metric, scores, task, n_labels, dev)
    note = f"the best checkpoint is picked by dev {metric} (pass --metric-for-best to choose another)."
    dev_targets = set((dev.labels if dev is not None else None) or []) if task == "regression" else set()
    if metric in shapes.Regression.correlations and len(dev_targets) == 1:
        metric = "mse"
        note = (f"the dev targets are all {dev_targets.pop():g}, so Pearson and Spearman are undefined on dev "
                f"(reported as null): the best checkpoint is picked by dev mse. Pass --dev with varied targets "
                f"for correlations.")
    return MetricChoice(metric, note, warnings)


def _check_best_is_scored(metric: str, scores: dict[str, float], task: str, n_labels: int,
                          dev: TextDataset | None) -> None:
    """--metric-for-best names a score the dev evaluation will have: roc_auc needs both classes in the dev data; a
    module's score must be one the module returned on the synthetic input (`scores`)."""
    valid = " / ".join(shapes.shape_metrics(task, n_labels))
    if metric == "roc_auc" and dev is not None and len({str(y) for y in dev.labels or []}) < 2:
        raise UserError(f"--metric-for-best roc_auc needs both classes in the dev data; {dev.source} has only "
                        f"{', '.join(sorted({str(y) for y in dev.labels or []})) or 'no labels'}. Pass --metric-for-best "
                        f"{valid.replace(' / roc_auc', '')}, or dev data with both classes (--dev).")
    if metric in BUILT_IN or metric == "loss" or metrics.best_value({"external": scores}, metric) is not None:
        return
    raise UserError(f"--metric-for-best {metric} is not a score the --metric modules return: on a synthetic input of "
                    f"this data's shape they return {', '.join(scores) or 'no scores'}. Pass --metric-for-best with one "
                    f"of those, or a built-in metric ({valid}).")


@dataclass(frozen=True)
class Judgement:
    """One dev evaluation judged: the --metric-for-best value, the scalar scores (`headline`, --metric names first),
    whether it beats the best so far and the constant baseline (None: no baseline), or why it could not be scored
    (`problem`; `failed_spec`: the --metric module that failed, None when the best metric has no value)."""

    value: float | None
    headline: dict[str, float] = field(default_factory=dict)
    best: bool = False
    above_baseline: bool | None = None
    problem: str | None = None
    failed_spec: str | None = None


def judge_evaluation(scored: shapes.Scored, references: Any, *, metric_list: Sequence[str],
                     external: Sequence[str], metric_for_best: str, best_so_far: float | None,
                     baseline: Baseline | None) -> Judgement:
    """Add the --metric scores to `scored.metrics` (evaluate modules compare the decisions with `references`), then
    judge the --metric-for-best value. A module that fails on the real predictions (it passed the synthetic check)
    or a best metric left without a value is a `problem`, not an exception: the loop saves the model first."""
    decisions = metrics.predicted(scored.outputs) if scored.decisions is None else scored.decisions
    try:
        metrics.add_requested(scored.metrics, metric_list, metrics.load_metrics(tuple(external)), decisions,
                              references)
    except metrics.MetricFailed as exc:
        return Judgement(None, problem=f"--metric {exc.spec} failed on the dev predictions: {exc.reason}",
                         failed_spec=exc.spec)
    headline = metrics.headline(scored.metrics)
    value = metrics.best_value(scored.metrics, metric_for_best)
    if value is None:
        return Judgement(None, headline, problem=f"--metric-for-best {metric_for_best} has no value in the dev scores "
                                                 f"({', '.join(headline)})")
    return Judgement(value, headline, metrics.is_better(value, best_so_far, metric_for_best),
                     None if baseline is None else baseline.beaten_by(value))


def split_result(scored: shapes.Scored, y: Any, source: str, *, task: str, n_labels: int,
                 seed: int) -> dict[str, Any]:
    """One split's record in a model card: headline metrics (loss too), bootstrap intervals (`seed`), rows (tags:
    words, and the per-type scores)."""
    shown = {**metrics.headline(scored.metrics), "loss": scored.metrics.get("loss")}
    if task == "spans":  # questions: the objective's intervals over questions (`scoring.answer_objective`), in %
        return {"metrics": {k: v for k, v in shown.items() if v is not None},
                "intervals": scored.metrics.get("intervals", {}), "rows": len(y), "unit": "questions",
                "source": source}
    if task == "tags":  # words: the main score's interval resamples sentences (`scoring.tags`); per-type scores
        return {"metrics": {k: v for k, v in shown.items() if v is not None},
                "intervals": scored.metrics.get("intervals", {}), "rows": len(y), "unit": "words", "source": source,
                "per_type": scored.metrics.get("per_type", {})}
    decisions = metrics.predicted(scored.outputs) if scored.decisions is None else scored.decisions
    intervals = bootstrap_intervals(task, y, decisions, scored.outputs, n_labels=n_labels, seed=seed)
    return {"metrics": {k: v for k, v in shown.items() if v is not None}, "intervals": intervals, "rows": len(y),
            "source": source}
