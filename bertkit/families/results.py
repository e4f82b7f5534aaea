"""What a family's part of a command returns, typed: one record per command that every family fills in (the fields a
family does not produce stay at their defaults). A command's `*Result` is this record under the command's name
(`commands.predict.PredictResult`), so the command owns its result and every family answers in one shape."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from bertkit.data.dataset import TextDataset
    from bertkit.scoring.spans import TaggedWords

Prediction = str | tuple[str, ...] | float
"""One row's prediction: a class name (single-label), its tags (multi-label), or a number (regression)."""


@dataclass
class Predictions:
    """The predictions: the family that made them, the problem shape and its names, and the first rows' labels and
    outputs (all rows are in --out, and reach the command's `on_chunk` as they come)."""

    task: str
    label_names: list[str]
    threshold: float | list[float]
    out: str | None
    dtype: str
    """The precision the model ran in (fp32, bf16, fp16, int8; onnx/onnx-int8 for an export)."""
    max_length: int | None = None
    """The tokens a row was read with (as the model or probe records, unless --max-length said otherwise)."""
    truncation: str | None = None
    """Which tokens an over-long row kept (head, tail, head+tail)."""
    pooling: str | None = None
    """With --probe: the features the probe reads (pool, layers), as its record says."""
    rows_cut: int | None = None
    """Rows longer than max_length, cut as `truncation` says (None: read whole in windows)."""
    temperature: float | None = None
    """The temperature the model's logits were divided by (`finetune --calibrate temperature`); None: none recorded."""
    dataset: TextDataset | None = field(default=None, metadata={"json": False})
    labels: list[Prediction] = field(default_factory=list)
    """The kept rows' predictions: a class name, the tuple of tags, or the number."""
    proba: np.ndarray | None = field(default=None, metadata={"json": False})
    """The kept rows' outputs: class or tag probabilities, or the numbers (one column)."""
    sentences: list[TaggedWords] = field(default_factory=list, metadata={"json": False})
    """Words (a tagging model or word probe): the kept sentences' words, tags and spans."""
    n_sentences: int | None = None
    """Words: the sentences tagged (all of them are in --out, and reach `on_chunk`)."""
    aggregate: str | None = None
    """A tagging model: how each word's tag was read from its pieces (--aggregate)."""
    family: str = "sentences"
    """The problem family that read the model or probe (`bertkit.families`)."""

    @classmethod
    def of(cls, record: Predictions) -> Predictions:
        """This class (a command's result) holding `record`'s values."""
        return cls(**{f.name: getattr(record, f.name) for f in fields(record)})
