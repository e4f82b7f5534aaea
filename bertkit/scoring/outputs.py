"""A model's outputs on rows, read in its problem shape: `Outputs` (class or tag probabilities, or numbers, with the
decision threshold saved at training), `OutputReader` (a loaded fine-tuned model or saved probe run window by window),
`classifier_read` (a fine-tuned classifier's outputs, read as the command's options say) and `score_outputs` (the
shape's metrics). predict, evaluate and export's gate read outputs through here, so a shape is read one way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.encoding import batches
from bertkit.encoding.encode import RowsCut
from bertkit.encoding.reading import Reading
from bertkit.models.compute import Compute
from bertkit.scoring import metrics, predictions
from bertkit.scoring.shapes import predicted_labels

if TYPE_CHECKING:
    from bertkit.data.dataset import TextDataset
    from bertkit.data.labels import LabelMap


@dataclass
class Outputs:
    """A model's outputs for rows (a window of them, or every row; input order) and how to read them: class
    probabilities (single-label), tag probabilities with the decision threshold saved at training (multi-label), or
    the predicted numbers (regression: one column)."""

    label_map: LabelMap
    values: np.ndarray
    threshold: float | list[float] = 0.5

    @property
    def task(self) -> str:
        return self.label_map.task

    @property
    def label_names(self) -> list[str]:
        return [str(x) for x in self.label_map.labels]

    def predicted(self) -> list[Any]:
        """Per row: the class name, the tuple of tags, or the number."""
        return predicted_labels(self.task, self.label_names, self.values, self.threshold)

    def decisions(self) -> np.ndarray:
        """What an evaluate module (--metric) compares with the references: class ids (single-label), the 0/1 tag
        matrix at the saved threshold (multi-label), or the numbers (regression)."""
        if self.task == "multi_label":
            return (self.values >= np.asarray(self.threshold)).astype(int)
        return metrics.predicted(self.values)


@dataclass
class OutputReader:
    """A loaded fine-tuned model or saved probe: `outputs(part)` runs it on a window of rows."""

    label_map: LabelMap
    read: Callable[[TextDataset], np.ndarray]
    threshold: float | list[float] = 0.5
    precision: str = "fp32"
    """The precision the model runs in (`auto` resolved; int8 for dynamically quantized linear layers)."""
    counted: RowsCut = field(default_factory=RowsCut)
    """Rows read so far and how many of them were cut at the max length (filled by `read` as it tokenizes)."""
    features: str | None = None
    """A saved probe's: the features it reads ('POOL, layers L', as its record says); None for a model."""
    temperature: float | None = None
    """The temperature the model's logits are divided by (its record's calibration); None: not calibrated."""

    @property
    def label_names(self) -> list[str]:
        return [str(x) for x in self.label_map.labels]

    @property
    def width(self) -> int:
        """Outputs per row."""
        return 1 if self.label_map.task == "regression" else len(self.label_map.labels)

    def outputs(self, part: TextDataset) -> Outputs:
        """The outputs of one window of rows."""
        return Outputs(self.label_map, self.read(part), self.threshold)

    def all_outputs(self, dataset: TextDataset) -> Outputs:
        """The outputs of every row (input order), the model run window by window as predict runs it."""
        parts = [self.read(part) for _, part in dataset.chunks(batches.SORT_WINDOW)]
        values = np.concatenate(parts) if parts else np.zeros((0, self.width), np.float32)
        return Outputs(self.label_map, values, self.threshold)


def score_outputs(outputs: Outputs, y: np.ndarray) -> dict[str, Any]:
    """The metrics of the outputs' problem shape against targets `y` (label ids, a 0/1 tag matrix or numbers)."""
    if outputs.task == "regression":
        result = metrics.regression_metrics(y, outputs.values[:, 0])
    elif outputs.task == "multi_label":
        result = metrics.multilabel_metrics(y, outputs.values >= np.asarray(outputs.threshold), outputs.label_names)
        result["threshold"] = outputs.threshold
    else:
        result = metrics.classification_metrics(y, outputs.values.argmax(axis=1), outputs.values, outputs.label_names)
    result["task"] = outputs.task
    return result


def classifier_read(model: Any, tokenizer: Any, reading: Reading, batch_size: int, compute: Compute, progress: bool,
                    counted: RowsCut | None = None,
                    temperature: float | None = None) -> Callable[[TextDataset], np.ndarray]:
    """The function of a window of rows giving the loaded classifier's outputs, read as the command's `reading`
    says (window, long texts cut or chunked) in `batch_size` rows and `compute` (the precision resolved once);
    `counted` adds up the rows cut; `temperature` (the model's recorded calibration) divides the logits."""
    return lambda part: predictions.predict_proba(
        model, tokenizer, part, progress=progress, reading=reading, batch_size=batch_size,
        precision=compute.precision, counted=counted, temperature=temperature)
