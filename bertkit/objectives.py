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

from bertkit import metrics


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a (rows, classes) array, stable for large logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


@dataclass
class Scored:
    """Dev metrics (`metrics["loss"]` included), and the per-row outputs shown to users (probabilities)."""

    metrics: dict[str, Any]
    outputs: np.ndarray


class SingleLabel:
    """One label per row: cross-entropy (optionally class-weighted) and the classification metrics."""

    problem_type = "single_label_classification"

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
        labels = torch.as_tensor(self.y_train[rows], device=logits.device)
        weight = None if self._weight is None else self._weight.to(logits.device)
        return torch.nn.functional.cross_entropy(logits.float(), labels, weight=weight)

    def score(self, logits: np.ndarray) -> Scored:
        """Classification metrics of dev logits (rows in dev order) and the dev loss."""
        proba = softmax(logits)
        y = self.y_dev
        result = metrics.classification_metrics(y, proba.argmax(axis=1), proba, self.label_names)
        result["loss"] = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-12, None))))
        return Scored(result, proba)


class Distillation:
    """A student learning from a teacher (Hinton et al. 2015; DistilBERT): temperature-scaled KL to the teacher's
    soft targets, mixed with the hard-label loss, optionally a cosine loss pulling the student's [CLS] vector to
    the teacher's. Scored on the hard dev labels, like fine-tuning.

    `teacher_logits` (and `teacher_cls`) hold one row per training row, computed once before training. `cls_of`
    returns the student's [CLS] vectors of the batch just run (captured by a hook), for the cosine term.
    """

    def __init__(self, hard: SingleLabel, teacher_logits: np.ndarray, temperature: float, alpha: float,
                 cos_weight: float = 0.0, teacher_cls: np.ndarray | None = None, cls_of: Any = None):
        self.hard, self.temperature, self.alpha, self.cos_weight = hard, temperature, alpha, cos_weight
        self.teacher_logits, self.teacher_cls, self.cls_of = teacher_logits, teacher_cls, cls_of
        self.label_names, self.y_dev = hard.label_names, hard.y_dev

    def to(self, device: torch.device) -> Distillation:
        self.hard.to(device)
        return self

    def loss(self, logits: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """alpha x T^2 x KL(teacher || student at temperature T) + (1 - alpha) x CE(hard labels) [+ cosine term].

        T^2 keeps the soft term's gradients on the scale of the hard term's as T grows (Hinton et al.)."""
        t = self.temperature
        teacher = torch.as_tensor(self.teacher_logits[rows], device=logits.device, dtype=torch.float32)
        student = logits.float()
        soft = torch.nn.functional.kl_div(torch.log_softmax(student / t, dim=-1), torch.log_softmax(teacher / t, dim=-1),
                                          reduction="batchmean", log_target=True) * t * t
        loss = self.alpha * soft + (1.0 - self.alpha) * self.hard.loss(logits, rows)
        if self.cos_weight > 0 and self.teacher_cls is not None and self.cls_of is not None:
            target = torch.as_tensor(self.teacher_cls[rows], device=logits.device, dtype=torch.float32)
            cosine = torch.nn.functional.cosine_similarity(self.cls_of().float(), target, dim=-1)
            loss = loss + self.cos_weight * (1.0 - cosine).mean()
        return loss

    def score(self, logits: np.ndarray) -> Scored:
        return self.hard.score(logits)
