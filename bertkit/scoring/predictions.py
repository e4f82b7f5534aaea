"""A fine-tuned classifier's outputs on a dataset as a user reads them (`predict_proba`: class probabilities, tag
probabilities or numbers, by its problem_type) and the predictions CSV they are written to (`predict --out`,
evaluate's predictions.csv, finetune's dev_errors.csv)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.dataset import CHUNK_ROWS, TextDataset
from bertkit.data.labels import task_of_problem_type
from bertkit.encoding.encode import RowsCut
from bertkit.encoding.reading import Reading
from bertkit.io import atomic, faults
from bertkit.models import infer
from bertkit.scoring.shapes import model_outputs


def predict_proba(model: Any, tokenizer: Any, dataset: TextDataset, *, reading: Reading = Reading(),
                  batch_size: int = 64, precision: str = "fp32", progress: bool = False,
                  counted: RowsCut | None = None, temperature: float | None = None) -> np.ndarray:
    """The model's outputs for every row of `dataset` (batched longest-first, returned in the original order):
    class probabilities, tag probabilities (multi-label) or predicted numbers (regression), as its problem_type says.

    Texts longer than `reading.max_length` are cut (`reading.truncation`), or with `reading.long_text` chunk read
    whole in overlapping windows whose outputs are pooled (see `bertkit.models.infer.classifier_logits`). A
    single-label model's logits are divided by `temperature` before the softmax (`finetune --calibrate`)."""
    logits = infer.classifier_logits(model, tokenizer, dataset, reading=reading, batch_size=batch_size,
                                     precision=precision, progress=progress, counted=counted)
    config = model.config
    task = task_of_problem_type(getattr(config, "problem_type", None), config.num_labels)
    if temperature is not None and task == "single_label":
        logits = np.asarray(logits, dtype=np.float64) / temperature
    return model_outputs(task, logits)


def write_predictions_csv(
    path: Path, dataset: TextDataset, proba: np.ndarray, label_names: list[str], *,
    y_true: np.ndarray | None = None, only_errors: bool = False, task: str = "single_label",
    threshold: float | list[float] = 0.5,
) -> int:
    """Rows with the prediction and the outputs behind it, in the original order. Single-label: predicted label,
    confidence, per-class probabilities (errors: most confident first). Multi-label: the predicted tags joined by
    "|", per-tag probabilities (errors: rows whose tag set is wrong). Regression: the predicted number (and the
    error; errors: every row, largest first).

    Every row: written `CHUNK_ROWS` rows at a time (`open_predictions_csv`), so only a chunk's texts are held as a
    table. The errors only (`only_errors`, finetune's dev_errors.csv): one table, since they are sorted."""
    if only_errors:
        return write_errors_csv(path, dataset, proba, label_names, y_true=y_true, task=task, threshold=threshold)
    with open_predictions_csv(path, dataset, label_names, task=task, threshold=threshold) as append:
        for start, part in dataset.chunks(CHUNK_ROWS):
            end = start + len(part)
            append(start, part, proba[start:end], None if y_true is None else y_true[start:end])
    return len(dataset)


def write_errors_csv(path: Path, dataset: TextDataset, proba: np.ndarray, label_names: list[str], *,
                     y_true: np.ndarray | None = None, task: str = "single_label",
                     threshold: float | list[float] = 0.5) -> int:
    """The rows `write_predictions_csv` writes, wrong ones only, worst first (single-label: most confident first;
    multi-label: wrong tag sets; regression: every row, largest error first), as one table: finetune's
    dev_errors.csv. Returns the rows written."""
    frame, wrong, order = prediction_frame(dataset, proba, label_names, y_true=y_true, task=task, threshold=threshold)
    if wrong is not None:
        frame = frame[wrong].sort_values(order, ascending=False)
    with atomic.atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return len(frame)


@contextlib.contextmanager
def open_predictions_csv(path: Path, dataset: TextDataset, label_names: list[str], *, task: str = "single_label",
                         threshold: float | list[float] = 0.5, vouch: Any = None) -> Iterator[Any]:
    """`append(start, part, values, y_true=None)`: write the rows `part` (rows start.. of `dataset`, in order) and
    their outputs to a temp file next to `path`; on leaving the block it is renamed over `path` (atomic: a failure
    or a kill before that leaves the previous file as it was). The bytes are those of one `prediction_frame` of all
    rows written with `to_csv` (an empty dataset: the header alone). `vouch`: see `atomic.atomic_path`."""
    header = True

    def append(start: int, part: TextDataset, values: np.ndarray, y_true: np.ndarray | None = None) -> None:
        nonlocal header
        frame = prediction_frame(part, values, label_names, start=start, y_true=y_true, task=task,
                                 threshold=threshold)[0]
        frame.to_csv(handle, index=False, header=header)
        header = False
        faults.kill_point("predictions.window")

    with atomic.atomic_path(path, vouch) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        yield append
        if header:  # no rows: the header alone
            width = 1 if task == "regression" else len(label_names)
            append(0, dataset.subset([]), np.zeros((0, width), np.float32), None)


def prediction_frame(dataset: TextDataset, proba: np.ndarray, label_names: list[str], *, start: int = 0,
                     y_true: np.ndarray | None = None, task: str = "single_label",
                     threshold: float | list[float] = 0.5) -> tuple[Any, Any, str]:
    """(the table of `dataset`'s rows numbered from `start`, which rows are wrong (None: no targets), the column the
    errors sort by): the columns `write_predictions_csv` writes for the problem shape."""
    import pandas as pd

    frame = pd.DataFrame({"row": np.arange(start, start + len(dataset))})
    if dataset.line_numbers is not None:
        frame["line"] = dataset.line_numbers
    frame["text"] = dataset.texts
    if dataset.pairs is not None:
        frame["text_pair"] = dataset.pairs
    if task == "regression":
        return _regression_columns(frame, proba, y_true)
    if task == "multi_label":
        return _tag_columns(frame, proba, label_names, y_true, threshold)
    predicted = proba.argmax(axis=1)
    if y_true is not None:
        frame["label"] = [label_names[i] for i in y_true]
    frame["predicted"] = [label_names[i] for i in predicted]
    frame["confidence"] = proba.max(axis=1)
    for j, name in enumerate(label_names):
        frame[f"p_{name}"] = proba[:, j]
    return frame, (None if y_true is None else predicted != y_true), "confidence"


def _regression_columns(frame: Any, values: np.ndarray, y_true: np.ndarray | None) -> tuple[Any, Any, str]:
    frame["predicted"] = values[:, 0]
    if y_true is None:
        return frame, None, "predicted"
    frame.insert(frame.columns.get_loc("predicted"), "label", y_true)
    frame["abs_error"] = np.abs(values[:, 0] - y_true)
    return frame, np.ones(len(frame), dtype=bool), "abs_error"


def _tag_columns(frame: Any, proba: np.ndarray, names: list[str], y_true: np.ndarray | None,
                 threshold: float | list[float]) -> tuple[Any, Any, str]:
    on = proba >= np.asarray(threshold)
    if y_true is not None:
        frame["label"] = ["|".join(n for n, hit in zip(names, row, strict=True) if hit) for row in y_true]
    frame["predicted"] = ["|".join(n for n, hit in zip(names, row, strict=True) if hit) for row in on]
    if y_true is not None:
        frame["wrong_tags"] = (on != y_true.astype(bool)).sum(axis=1)
    for j, name in enumerate(names):
        frame[f"p_{name}"] = proba[:, j]
    return frame, (None if y_true is None else frame["wrong_tags"].to_numpy() > 0), "wrong_tags"
