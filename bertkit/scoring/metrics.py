"""Metrics: built-in ones from scikit-learn/scipy (always offline) for every problem shape, plus any `evaluate`
module (`load_metric`): a local metric script always, a hub module when the hub or the local evaluate cache
has it."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import UserError
from bertkit.scoring.table import BUILT_IN, LOWER_IS_BETTER, SHAPE, shape_of


def classification_metrics(
    y_true: Sequence[int], y_pred: Sequence[int], proba: np.ndarray | None = None, label_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """accuracy, macro-F1, MCC, macro precision/recall, ROC-AUC (binary, with probabilities), per-class report
    and confusion matrix (rows = true, columns = predicted). Two classes also get binary_f1, the F1 of the second
    label (id 1: the positive class of 0/1 labels), which is what GLUE reports as F1 for MRPC and QQP."""
    # imported here, not at the top: predict with a fine-tuned classifier never scores, and sklearn costs it ~1 s
    from sklearn import metrics as skm

    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    n_labels = len(label_names) if label_names is not None else int(max(y_true.max(), y_pred.max())) + 1
    labels = list(range(n_labels))
    names = [str(n) for n in label_names] if label_names is not None else [str(i) for i in labels]
    result: dict[str, Any] = {
        "n": int(len(y_true)),
        "accuracy": float(skm.accuracy_score(y_true, y_pred)),
        "f1": float(skm.f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
        "mcc": float(skm.matthews_corrcoef(y_true, y_pred)),
        "precision": float(skm.precision_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
        "recall": float(skm.recall_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
    }
    if n_labels == 2:
        result["binary_f1"] = float(skm.f1_score(y_true, y_pred, pos_label=1, average="binary", zero_division=0))
    if proba is not None and n_labels == 2 and len(np.unique(y_true)) == 2:
        result["roc_auc"] = float(skm.roc_auc_score(y_true, np.asarray(proba)[:, 1]))
    if proba is not None:
        result["ece"] = expected_calibration_error(y_true, np.asarray(proba))
        result["reliability"] = reliability_table(y_true, np.asarray(proba))
    result["per_class"] = skm.classification_report(
        y_true, y_pred, labels=labels, target_names=names, output_dict=True, zero_division=0
    )
    result["confusion_matrix"] = skm.confusion_matrix(y_true, y_pred, labels=labels).tolist()
    result["labels"] = names
    return result


CALIBRATION_BINS = 15
"""Equal-width confidence bins of the calibration error and the reliability table (the usual 15)."""


def reliability_table(y_true: np.ndarray, proba: np.ndarray, bins: int = CALIBRATION_BINS) -> list[dict[str, float]]:
    """Per confidence bin with rows in it: the bin's edges, its rows, their mean confidence (the top class's
    probability) and their accuracy - what a reliability plot draws."""
    confidence, correct = proba.max(axis=1), (proba.argmax(axis=1) == y_true)
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        inside = which == b
        if inside.any():
            rows.append({"low": b / bins, "high": (b + 1) / bins, "n": int(inside.sum()),
                         "confidence": float(confidence[inside].mean()), "accuracy": float(correct[inside].mean())})
    return rows


def expected_calibration_error(y_true: np.ndarray, proba: np.ndarray, bins: int = CALIBRATION_BINS) -> float:
    """Top-label expected calibration error: the row-weighted mean |accuracy - confidence| over equal-width
    confidence bins. 0 is calibrated; a model that says 0.99 and is right 70% of the time scores about 0.29."""
    table = reliability_table(np.asarray(y_true), proba, bins)
    total = sum(row["n"] for row in table)
    return float(sum(row["n"] * abs(row["accuracy"] - row["confidence"]) for row in table) / max(total, 1))


def headline(metrics: dict[str, Any]) -> dict[str, float]:
    """Just the scalar scores (for tables and comparisons): the --metric names asked for first (`requested`), then
    the other built-in ones, then any external metric's."""
    asked = [k for k in metrics.get("requested", ()) if k in BUILT_IN and k in metrics]
    scores = {k: metrics[k] for k in [*asked, *BUILT_IN] if k in metrics}
    scores.update({k: v for k, v in metrics.get("external", {}).items() if isinstance(v, (int, float))})
    return scores


def add_requested(result: dict[str, Any], names: Sequence[str], external: Sequence[ExternalMetric],
                  predictions: Sequence[Any], references: Sequence[Any]) -> dict[str, Any]:
    """`result` with the --metric scores: each evaluate module's under `external`, and the names asked for under
    `requested` (the headline shows them first). `predictions` and `references` are what the modules compare
    (label ids for classification)."""
    for metric in external:
        scores = metric.compute(predictions, references)  # MetricFailed leaves `result` as it was
        result.setdefault("external", {}).update(scores)
    if names:
        result["requested"] = list(names)
    return result


def predicted(outputs: np.ndarray) -> np.ndarray:
    """What an evaluate module compares with the references: class ids from per-class outputs (argmax), the
    scores themselves from a one-column (regression) output."""
    outputs = np.asarray(outputs)
    return outputs.argmax(axis=1) if outputs.ndim == 2 and outputs.shape[1] > 1 else outputs.reshape(-1)


def best_value(result: dict[str, Any], name: str) -> float | None:
    """The score --metric-for-best `name` names in `result`: a built-in metric, an external score
    (`glue/f1`), or an evaluate module (`glue:mrpc`, `path/to/my_metric.py`: its first score); None if absent."""
    value = result.get(name)
    if isinstance(value, (int, float)):
        return float(value)
    external = result.get("external", {})
    if name in external:
        return float(external[name])
    stem = metric_name(name)
    return next((float(v) for k, v in external.items() if k == stem or k.startswith(f"{stem}/")), None)


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict[str, Any]:
    """Pearson and Spearman correlation, mean squared and mean absolute error (GLUE STS-B reports the first two).

    Constant targets leave the correlations undefined: None (null in JSON), with a `note` saying why. Constant
    predictions of varied targets score 0 (no relation found), so a model that learnt nothing still ranks last."""
    from scipy import stats
    from sklearn import metrics as skm

    y_true, y_pred = np.asarray(y_true, dtype=np.float64), np.asarray(y_pred, dtype=np.float64)
    undefined = bool(np.ptp(y_true) == 0)
    constant = undefined or np.ptp(y_pred) == 0  # a correlation with a constant is undefined
    result: dict[str, Any] = {
        "n": int(len(y_true)),
        "pearson": None if undefined else 0.0 if constant else float(stats.pearsonr(y_true, y_pred)[0]),
        "spearman": None if undefined else 0.0 if constant else float(stats.spearmanr(y_true, y_pred)[0]),
        "mse": float(skm.mean_squared_error(y_true, y_pred)),
        "mae": float(skm.mean_absolute_error(y_true, y_pred)),
    }
    if undefined:
        result["note"] = (f"pearson and spearman are undefined (null): every target is {y_true[0]:g}, and a "
                          f"correlation needs targets that vary.")
    return result


def multilabel_metrics(y_true: np.ndarray, y_pred: np.ndarray, label_names: Sequence[str]) -> dict[str, Any]:
    """Micro/macro F1, subset accuracy (every label right), Hamming loss and a per-label table, for 0/1 matrices
    of shape (rows, labels)."""
    from sklearn import metrics as skm

    y_true, y_pred = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    per_label = {
        str(name): {"f1": float(skm.f1_score(y_true[:, j], y_pred[:, j], zero_division=0)),
                    "precision": float(skm.precision_score(y_true[:, j], y_pred[:, j], zero_division=0)),
                    "recall": float(skm.recall_score(y_true[:, j], y_pred[:, j], zero_division=0)),
                    "support": int(y_true[:, j].sum())}
        for j, name in enumerate(label_names)
    }
    return {
        "n": int(len(y_true)),
        "micro_f1": float(skm.f1_score(y_true, y_pred, average="micro", zero_division=0)),
        "macro_f1": float(skm.f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "subset_accuracy": float(skm.accuracy_score(y_true, y_pred)),
        "hamming_loss": float(skm.hamming_loss(y_true, y_pred)),
        "per_label": per_label,
        "labels": [str(n) for n in label_names],
    }


def is_better(value: float, best: float | None, metric: str) -> bool:
    """Whether `value` of `metric` beats `best` (losses and errors: lower is better)."""
    if best is None:
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best


# ---------------------------------------------------------------- metrics from the `evaluate` library


@dataclass
class ExternalMetric:
    """An `evaluate` module: `compute(predictions, references)` -> its scores (flattened to numbers)."""

    spec: str
    module: Any

    def compute(self, predictions: Sequence[Any], references: Sequence[Any]) -> dict[str, float]:
        """The module's numeric scores, keyed `NAME` for a score named like the module (matthews_correlation),
        else `NAME/score` (glue:mrpc -> glue/accuracy, glue/f1), so they never clash with the built-in names.

        Other values in its dict (lists, texts) are left out; a module that raises, returns something other than a
        dict, or a dict without one number raises `MetricFailed` (a UserError: the module is the user's code)."""
        try:
            result = self.module.compute(predictions=[_plain(p) for p in predictions],
                                         references=[_plain(r) for r in references])
        except Exception as exc:  # the user's script, or evaluate refusing the inputs: any exception type
            raise MetricFailed(self.spec, f"it raised {type(exc).__name__}: {_first_words(exc)}") from None
        if not isinstance(result, Mapping):
            raise MetricFailed(self.spec, f"it returned {_kind(result)} instead of a dict of scores")
        scores = {k if k == self.name else f"{self.name}/{k}": float(v)
                  for k, v in result.items() if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}
        if not scores:
            raise MetricFailed(self.spec, f"its dict holds no number (got {_preview(result)})")
        return scores

    @property
    def name(self) -> str:
        return metric_name(self.spec)


class MetricFailed(UserError):
    """An evaluate module (--metric) that raised, or returned no scores, on the predictions it was given."""

    def __init__(self, spec: str, reason: str):
        super().__init__(f"--metric {spec} failed: {reason}. Fix the metric script (it must return a dict of "
                         f"numbers), or drop --metric {spec}.")
        self.spec, self.reason = spec, reason


def synthetic_input(task: str, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, references): 8 rows of the kind real ones have for `task`, in the same numpy types, with some
    predictions wrong and every class / tag value present, so a metric module can be tried before any work."""
    rows = np.arange(8)
    if task == "regression":
        references = np.linspace(0.5, 4.0, len(rows))
        return references[::-1] * 0.5 + 1.0, references
    if task == "multi_label":
        references = (np.add.outer(rows, np.arange(max(n_labels, 1))) % 2).astype(np.int64)
        predictions = references.copy()
        predictions[::3] = 1 - predictions[::3]
        return predictions, references
    k = max(n_labels, 2)
    references = (rows % k).astype(np.int64)
    return ((references + (rows % 3 == 0)) % k).astype(np.int64), references


def check_external(external: Sequence[ExternalMetric], task: str, n_labels: int) -> dict[str, float]:
    """Every --metric module tried on a tiny synthetic input of the data's shape (`synthetic_input`), before any
    work: a module that fails on it is a UserError naming what it was given. Returns the scores it produced (for
    checking a --metric-for-best that names one of them)."""
    predictions, references = synthetic_input(task, n_labels)
    scores: dict[str, float] = {}
    for metric in external:
        try:
            scores.update(metric.compute(predictions, references))
        except MetricFailed as exc:
            kind = shape_of(task).decisions.format(last=max(n_labels, 2) - 1, n=n_labels)
            raise UserError(
                f"--metric {metric.spec} does not work on {task.replace('_', '-')} data: tried on 8 synthetic rows "
                f"of that shape before any work (predictions and references: {kind}), {exc.reason}. Fix the metric "
                f"script so that it takes {kind.split(',')[0]} and returns a dict of numbers, or drop "
                f"--metric {metric.spec}."
            ) from None
    return scores


def _first_words(exc: BaseException) -> str:
    """An exception's message on one line, at most 300 characters (evaluate's format errors span lines)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _kind(value: Any) -> str:
    """`a list`, `None`, `a str` ... for a message about what a module returned."""
    return "None" if value is None else f"{'an' if type(value).__name__[0] in 'aeiou' else 'a'} {type(value).__name__}" \
        f" ({_preview(value)})"


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def metric_name(spec: str) -> str:
    """The short name of a --metric spec: `glue:mrpc` -> glue, `metrics/my_acc.py` -> my_acc, `user/m` -> m."""
    return Path(spec.partition(":")[0].rstrip("/")).stem


RESERVED_NAMES = frozenset({*BUILT_IN, *(name for shape in SHAPE.values() for name in shape.scored()), "loss", "n",
                            "threshold"})
"""Keys of an evaluation's scores that bertkit fills itself: a --metric module named like one would overwrite it."""


def _check_not_built_in(spec: str) -> None:
    """A module's score is keyed by its name (`metric_name`): one named like a built-in metric (`accuracy.py`) would
    replace bertkit's own score in the history, the tables and --metric-for-best, so it is refused before loading."""
    name = metric_name(spec)
    if name not in RESERVED_NAMES:
        return
    built_in = "score" if name in ("n", "threshold") else "metric"
    raise UserError(f"--metric {spec}: this metric module is named {name!r}, like bertkit's built-in {name} "
                    f"{built_in}, whose value it would overwrite in the history and the tables. Rename the file "
                    f"(e.g. {name}.py -> my_{name}.py, and pass --metric path/to/my_{name}.py), or pass --metric {name} "
                    f"for the built-in one.")


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number evaluate's features expect."""
    return value.item() if isinstance(value, np.generic) else value


@functools.lru_cache(maxsize=16)
def load_metrics(specs: tuple[str, ...]) -> tuple[ExternalMetric, ...]:
    """The evaluate modules of `specs`, each loaded once per process (finetune scores every evaluation)."""
    return tuple(load_metric(spec) for spec in specs)


def load_metric(spec: str, *, trust_remote_code: bool = False) -> ExternalMetric:
    """An `evaluate` module from `spec`: a local metric script (a .py file or a folder holding NAME.py), or a hub
    name `NAME` / `NAME:CONFIG` (e.g. `matthews_correlation`, `glue:mrpc`), loaded from the hub or the local
    evaluate cache.

    Local scripts are the user's own code and run as given. Hub modules of the official evaluate collection load
    by name; any other hub namespace (`user/metric`) is downloaded code and needs --trust-remote-code.
    """
    name, _, config = spec.partition(":")
    local = Path(name).expanduser()
    _check_not_built_in(spec)
    if not local.exists() and (name.endswith(".py") or name.startswith((".", "/", "~")) or name.count("/") > 1):
        raise UserError(f"--metric {spec}: there is no metric script at {local}. Pass a local evaluate metric script "
                        f"(a .py file, or the folder NAME holding NAME.py), a built-in metric "
                        f"({', '.join(SHAPE['single_label'].metrics)}), or a hub metric name.")
    if not local.exists() and "/" in name and not trust_remote_code:
        raise UserError(
            f"--metric {spec}: {name} is a metric script from a user namespace on the hub, i.e. downloaded code. "
            f"Pass --trust-remote-code if you have read and trust it, or use a local copy of the script "
            f"(--metric path/to/{name.split('/')[-1]}) or a built-in metric."
        )
    try:
        import evaluate
    except ImportError:
        raise UserError(f"--metric {spec} needs the `evaluate` package: pip install evaluate.") from None
    try:
        module = evaluate.load(str(local) if local.exists() else name, config or None)
    except Exception as exc:  # offline, unknown name, broken script: many exception types
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300].rstrip(".")
        offline = [v for v in ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE") if os.environ.get(v, "0") not in ("", "0")]
        if offline and not local.exists():  # evaluate's own message then blames the hub for not having it
            reason = f"{offline[0]}=1 keeps the hub off, and {name!r} is not in the local evaluate cache"
        raise UserError(
            f"Could not load the evaluate metric {spec!r}: {reason}. Offline, a hub metric loads only when it is in "
            f"the local evaluate cache: run once where the hub is reachable, or pass a local metric script "
            f"(--metric path/to/metric.py or its folder), or use a built-in metric ({', '.join(SHAPE['single_label'].metrics)})."
        ) from None
    return ExternalMetric(spec, module)
