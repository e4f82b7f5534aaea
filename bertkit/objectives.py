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
