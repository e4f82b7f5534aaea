"""What fine-tuning optimises and how dev predictions are scored, per problem shape.

The training loop (`finetune.py`) knows nothing about labels: it asks its objective for the loss of a batch of
rows (`loss(logits, rows)`) and for the metrics of the dev logits (`score(logits)`). A new problem shape - or a
distillation loss against a teacher's logits - is a new objective, not a new loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertkit.errors import UserError
from bertkit.scoring.table import BUILT_IN, SHAPE, shape_of, sigmoid, softmax  # noqa: F401 - shapes' outputs


@dataclass
class Scored:
    """Dev metrics (`metrics["loss"]` included), and the per-row outputs shown to users (probabilities)."""

    metrics: dict[str, Any]
    outputs: np.ndarray
    decisions: np.ndarray | None = None
    """What --metric evaluate modules compare with the references when it is not `metrics.predicted(outputs)` (class
    ids or numbers): the 0/1 tag matrix at the threshold used, for multi-label."""


def rows_of(owner: Any, name: str, rows: np.ndarray | torch.Tensor, device: torch.device,
            dtype: torch.dtype | None = None) -> torch.Tensor:
    """`owner.<name>` (one entry per training row) at `rows`, as a tensor on `device`. Numpy `rows` index on the
    host; a tensor of row indices indexes a copy of the table kept on the device, so a captured training step
    (`bertkit.training.graphs`) reads its targets without the host."""
    table = getattr(owner, name)
    if not isinstance(rows, torch.Tensor):
        return torch.as_tensor(table[rows], device=device, dtype=dtype)
    cache = owner.__dict__.setdefault("_on_device", {})
    key = (name, str(rows.device), dtype)
    if key not in cache:
        cache[key] = torch.as_tensor(np.asarray(table), dtype=dtype).to(rows.device)
    return cache[key].index_select(0, rows)


class SingleLabel:
    """One label per row: cross-entropy (optionally class-weighted) and the classification metrics."""

    table_metrics = SHAPE["single_label"].table_metrics

    def __init__(self, y_train: np.ndarray, y_dev: np.ndarray, label_names: list[str], class_weight: str = "none"):
        self.y_train, self.y_dev, self.label_names = y_train, y_dev, label_names
        self.class_weight = class_weight
        self._weight: torch.Tensor | None = None

    @property
    def num_outputs(self) -> int:
        return len(self.label_names)

    def to(self, device: torch.device) -> SingleLabel:
        """Put the class weights (`--class-weight balanced`: sklearn's inverse-frequency weights) on `device`."""
        if self.class_weight == "balanced":
            from sklearn.utils.class_weight import compute_class_weight

            classes = np.arange(self.num_outputs)
            present = np.isin(classes, self.y_train)
            weights = np.ones(self.num_outputs)
            weights[present] = compute_class_weight("balanced", classes=classes[present], y=self.y_train)
            self._weight = torch.tensor(weights, dtype=torch.float32, device=device)
        return self

    def loss(self, logits: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """Mean cross-entropy over `rows` (indices into the training data), computed in fp32."""
        labels = rows_of(self, "y_train", rows, logits.device)
        weight = None if self._weight is None else self._weight.to(logits.device)
        return torch.nn.functional.cross_entropy(logits.float(), labels, weight=weight)

    def score(self, logits: np.ndarray) -> Scored:
        """Classification metrics of dev logits (rows in dev order) and the dev loss."""
        # scikit-learn is imported where a score is computed, not where a model only predicts
        from bertkit.scoring import metrics

        proba = softmax(logits)
        y = self.y_dev
        result = metrics.classification_metrics(y, proba.argmax(axis=1), proba, self.label_names)
        result["loss"] = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-12, None))))
        return Scored(result, proba)


class Regression:
    """One number per row: one output, mean squared error (transformers' problem_type="regression"), scored by
    Pearson, Spearman, MSE and MAE."""

    table_metrics = SHAPE["regression"].table_metrics
    correlations = ("pearson", "spearman")
    """Undefined (null) when the targets are constant."""

    def __init__(self, y_train: np.ndarray, y_dev: np.ndarray, label_names: list[str]):
        self.y_train, self.y_dev, self.label_names = y_train, y_dev, label_names

    @property
    def num_outputs(self) -> int:
        return 1

    def to(self, device: torch.device) -> Regression:
        return self

    def init_head(self, model: Any) -> None:
        """Start the output at the training targets' mean (the output layer's bias; its weights start near 0): the
        first steps then learn the differences between rows instead of spending themselves - and, with targets far
        from 0 such as ratings 1-5, huge MSE gradients through the encoder - on moving the output to the targets'
        level. A plain transformers model still (its bias is an ordinary parameter)."""
        head = getattr(model, "classifier", None) or getattr(model, "score", None)
        head = getattr(head, "out_proj", head)  # RoBERTa-style heads: dense -> out_proj
        if isinstance(head, torch.nn.Linear) and head.out_features == 1 and head.bias is not None:
            with torch.no_grad():
                head.bias.fill_(float(np.mean(self.y_train)))

    def loss(self, logits: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """Mean squared error of the one output against the targets of `rows`, in fp32."""
        target = rows_of(self, "y_train", rows, logits.device, torch.float32)
        return torch.nn.functional.mse_loss(logits.float().squeeze(-1), target)

    def score(self, logits: np.ndarray) -> Scored:
        predicted = np.asarray(logits, dtype=np.float64)[:, 0]
        from bertkit.scoring import metrics

        result = metrics.regression_metrics(self.y_dev, predicted)
        result["loss"] = result["mse"]
        return Scored(result, predicted[:, None])


class MultiLabel:
    """A set of tags per row: one sigmoid per tag, binary cross-entropy with logits (transformers'
    problem_type="multi_label_classification"). A tag is predicted when its probability reaches the threshold:
    fixed, or tuned on dev at every evaluation - one for all tags (best micro-F1) or one per tag (best F1 of that
    tag) - and saved with the model."""

    table_metrics = SHAPE["multi_label"].table_metrics
    GRID = np.round(np.arange(0.05, 0.951, 0.025), 3)
    """Thresholds tried when tuning."""

    def __init__(self, y_train: np.ndarray, y_dev: np.ndarray, label_names: list[str], threshold: str = "tune"):
        self.y_train, self.y_dev, self.label_names, self.threshold = y_train, y_dev, label_names, threshold

    @property
    def num_outputs(self) -> int:
        return len(self.label_names)

    def to(self, device: torch.device) -> MultiLabel:
        return self

    def loss(self, logits: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """Mean binary cross-entropy over every (row, tag) of `rows`, in fp32."""
        target = rows_of(self, "y_train", rows, logits.device, torch.float32)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), target)

    def score(self, logits: np.ndarray) -> Scored:
        """Multi-label metrics of dev logits at the (tuned) threshold; `metrics["threshold"]` is the one used (a
        number, or a list with one per tag)."""
        proba = sigmoid(logits)
        threshold = self.tuned_threshold(proba)
        from bertkit.scoring import metrics

        result = metrics.multilabel_metrics(self.y_dev, proba >= threshold, self.label_names)
        result["threshold"] = threshold.tolist() if isinstance(threshold, np.ndarray) else threshold
        p = np.clip(proba, 1e-12, 1 - 1e-12)
        result["loss"] = float(-np.mean(self.y_dev * np.log(p) + (1 - self.y_dev) * np.log(1 - p)))
        return Scored(result, proba, (proba >= threshold).astype(int))

    def tuned_threshold(self, proba: np.ndarray) -> float | np.ndarray:
        """The --threshold to use on these dev probabilities: the fixed one, or the best on the grid (ties: the
        threshold nearest 0.5, the untuned default)."""
        if isinstance(self.threshold, (list, tuple, np.ndarray)):  # one per tag, tuned before (test scoring)
            return np.asarray(self.threshold, dtype=np.float64)
        if self.threshold not in ("tune", "tune-per-label"):
            return float(self.threshold)
        from sklearn.metrics import f1_score

        by_nearness = sorted(self.GRID, key=lambda t: abs(t - 0.5))
        if self.threshold == "tune":
            return float(max(by_nearness, key=lambda t: f1_score(self.y_dev, proba >= t, average="micro",
                                                                 zero_division=0)))
        return np.asarray([max(by_nearness, key=lambda t: f1_score(self.y_dev[:, j], proba[:, j] >= t,
                                                                   zero_division=0))
                           for j in range(proba.shape[1])])


def model_outputs(task: str, logits: np.ndarray) -> np.ndarray:
    """What a saved model's logits mean to a user: class probabilities (softmax), tag probabilities (sigmoid) or
    the predicted numbers (the logits themselves) - transformers pipeline's function_to_apply softmax/sigmoid/none."""
    if task == "multi_label":
        return sigmoid(logits)
    if task == "regression":
        return np.asarray(logits, dtype=np.float64)
    return softmax(logits)


def predicted_labels(task: str, label_names: list[str], outputs: np.ndarray,
                     threshold: float | list[float] = 0.5) -> list[Any]:
    """Per row: the most probable class name, the tuple of tags at or above the threshold, or the number."""
    if task == "regression":
        return [float(x) for x in outputs[:, 0]]
    if task == "multi_label":
        on = outputs >= np.asarray(threshold)
        return [tuple(name for name, hit in zip(label_names, row, strict=True) if hit) for row in on]
    return [label_names[i] for i in outputs.argmax(axis=1)]


def shape_metrics(task: str, n_labels: int = 2) -> tuple[str, ...]:
    """The built-in dev metrics of this problem shape (single-label with other than two classes: no binary_f1 and no
    roc_auc)."""
    return shape_of(task).scored(n_labels)


def best_metric(task: str, requested: str | None, n_labels: int = 2) -> str:
    """The dev metric that picks the best checkpoint for this problem shape: --metric-for-best where the shape has
    it, the shape's headline metric when none is given; a built-in metric of another shape (or a two-class metric
    for more classes) is a UserError listing the shape's. Other names (evaluate modules) are returned as given."""
    shape = shape_of(task)
    if requested is None:
        return shape.headline
    valid = shape.scored(n_labels)
    if requested in valid or requested not in BUILT_IN:
        return requested
    owner = next((t for t, other in SHAPE.items() if requested in other.metrics), "question-answering")
    what = (f"needs two classes; this single-label data has {n_labels}" if owner == task
            else f"is a {owner.replace('_', '-')} metric; this is {task.replace('_', '-')} data")
    raise UserError(f"--metric-for-best {requested} {what}. Pass --metric-for-best {' / '.join(valid)} (or drop it: "
                    f"{shape.headline}).")


def inapplicable_options(task: str, n_labels: int, requested: list[str], threshold: str | None = None) -> list[str]:
    """One-line warnings for options this problem shape ignores: built-in --metric names it does not compute, and a
    --threshold (a multi-label setting) given for single-label or regression data. (An explicit --metric-for-best the
    shape lacks is an error instead: `best_metric`.)"""
    shape_name = task.replace("_", "-")
    valid = shape_metrics(task, n_labels)
    data = f"{shape_name} data" + (f" with {n_labels} classes" if task == "single_label" and n_labels != 2 else "")
    notes = [f"--metric {name} is not computed for {data} (its metrics: "
             f"{', '.join(m for m in valid if m != 'loss')}); ignored. Drop it or pass one of those."
             for name in requested if name in BUILT_IN and name not in valid]
    if threshold is not None and threshold != "tune" and task != "multi_label":
        notes.append(f"--threshold {threshold} is the decision threshold of multi-label (tag) data; this is "
                     f"{shape_name} data, so it is ignored. Drop --threshold.")
    return notes


class Distillation:
    """A student learning from a teacher (Hinton et al. 2015; DistilBERT): temperature-scaled KL to the teacher's
    soft targets, mixed with the hard-label loss, optionally a cosine loss pulling the student's [CLS] vector to
    the teacher's. Scored on the hard dev labels, like fine-tuning.

    `teacher_logits` (and `teacher_cls`) hold one row per training row, computed once before training. `cls_of`
    returns the student's [CLS] vectors of the batch just run (captured by a hook), for the cosine term.
    """

    def __init__(self, hard: Any, teacher_logits: np.ndarray, temperature: float, alpha: float,
                 cos_weight: float = 0.0, teacher_cls: np.ndarray | None = None, cls_of: Any = None):
        self.hard, self.temperature, self.alpha, self.cos_weight = hard, temperature, alpha, cos_weight
        self.teacher_logits, self.teacher_cls, self.cls_of = teacher_logits, teacher_cls, cls_of
        self.label_names, self.y_dev, self.table_metrics = hard.label_names, hard.y_dev, hard.table_metrics

    def to(self, device: torch.device) -> Distillation:
        self.hard.to(device)
        return self

    def loss(self, logits: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """alpha x T^2 x KL(teacher || student at temperature T) + (1 - alpha) x CE(hard labels) [+ cosine term].

        T^2 keeps the soft term's gradients on the scale of the hard term's as T grows (Hinton et al.)."""
        teacher = rows_of(self, "teacher_logits", rows, logits.device, torch.float32)
        soft = self.soft_loss(logits.float(), teacher)
        loss = self.alpha * soft + (1.0 - self.alpha) * self.hard.loss(logits, rows)
        if self.cos_weight > 0 and self.teacher_cls is not None and self.cls_of is not None:
            target = rows_of(self, "teacher_cls", rows, logits.device, torch.float32)
            cosine = torch.nn.functional.cosine_similarity(self.cls_of().float(), target, dim=-1)
            loss = loss + self.cos_weight * (1.0 - cosine).mean()
        return loss

    def soft_loss(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        """The student's distance to the teacher's outputs, per problem shape: KL between the temperature-softened
        softmaxes (one label), binary cross-entropy to the softened sigmoids (tags: each tag its own two-class
        softmax), squared error to the teacher's numbers (regression: no temperature). x T^2 as in Hinton et al."""
        t = self.temperature
        if isinstance(self.hard, Regression):
            return torch.nn.functional.mse_loss(student, teacher)
        if isinstance(self.hard, MultiLabel):
            return torch.nn.functional.binary_cross_entropy_with_logits(student / t, torch.sigmoid(teacher / t)) * t * t
        return torch.nn.functional.kl_div(torch.log_softmax(student / t, dim=-1), torch.log_softmax(teacher / t, dim=-1),
                                          reduction="batchmean", log_target=True) * t * t

    def score(self, logits: np.ndarray) -> Scored:
        return self.hard.score(logits)
