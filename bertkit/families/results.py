"""What a family's part of a command returns, typed: one record per command that every family fills in (the fields a
family does not produce stay at their defaults). A command's `*Result` is this record under the command's name
(`commands.predict.PredictResult`), so the command owns its result and every family answers in one shape."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.scoring.scores import Scores

if TYPE_CHECKING:
    import numpy as np

    from bertkit.data.dataset import TextDataset
    from bertkit.encoding.qa_windows import QAReading
    from bertkit.scoring.answers import PredictedAnswer
    from bertkit.scoring.spans import TaggedWords
    from bertkit.scoring.tag_report import TagMistakes

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
    answers: list[PredictedAnswer] = field(default_factory=list, metadata={"json": False})
    """Questions (a question-answering model): the kept questions' answers, with their n-best candidates."""
    n_questions: int | None = None
    """Questions: the questions answered (all of them are in --out, and reach `on_chunk`)."""
    doc_stride: int | None = None
    """Questions: the tokens neighbouring windows of a passage shared."""
    allow_null: bool | None = None
    """Questions: whether the model may leave a question unanswered (SQuAD v2.0; `threshold` is then the no-answer
    threshold)."""
    family: str = "sentences"
    """The problem family that read the model or probe (`bertkit.families`)."""

    @classmethod
    def of(cls, record: Predictions) -> Predictions:
        """This class (a command's result) holding `record`'s values."""
        return cls(**{f.name: getattr(record, f.name) for f in fields(record)})


@dataclass(frozen=True)
class Evaluation:
    """The metrics of a model on labelled data (`metrics`: its problem shape's, with the per-tag table or confusion
    matrix and `n` rows), and what they were computed on and how - apart, so no setting takes a metric's name."""

    model: str
    """The model scored (--predictions: the predictions file; no model ran)."""
    data: str
    data_fingerprint: str
    max_length: int | None
    """The window texts were read in (None: no model ran, --predictions)."""
    long_text: str | None
    truncation: str | None
    """Which tokens an over-long text kept (None: none was cut - questions' passages are read whole in windows - or
    no model ran)."""
    dtype: str | None
    """The compute precision the model ran in (`precision` is the macro precision metric in `metrics`; None: no model
    ran)."""
    metrics: Scores
    rows_cut: int | None = None
    """Rows longer than max_length, cut as `truncation` says (None: read whole in windows)."""
    temperature: float | None = None
    """The temperature the model's logits were divided by (`finetune --calibrate temperature`); None: none recorded."""
    mistakes: TagMistakes | None = None
    """A tagging model's mistakes: the confusion of entity types (with `none`) and the entity error counts, or for
    plain tags (POS) the confusion of tags and per-tag scores; None for other shapes."""
    doc_stride: int | None = None
    """A question-answering model: the tokens neighbouring windows of a passage shared."""

    @classmethod
    def of(cls, record: Evaluation) -> Evaluation:
        """This class (a command's result) holding `record`'s values."""
        return cls(**{f.name: getattr(record, f.name) for f in fields(record)})

    @property
    def task(self) -> str:
        return str(self.metrics.value("task"))

    @property
    def rows(self) -> int:
        return int(self.metrics.n or 0)

    @property
    def note(self) -> str | None:
        """Why a metric is undefined or limited on these rows (e.g. one class only), if it is."""
        note = self.metrics.value("note")
        return str(note) if note else None

    @property
    def threshold(self) -> object:
        """A tag model's decision threshold (tags: one for all, or one per tag)."""
        return self.metrics.threshold

    @property
    def per_tag(self) -> dict[str, dict[str, float]]:
        """A tag model's scores per tag (F1, precision, recall, support); empty for other shapes."""
        return dict(self.metrics.value("per_label") or {})  # type: ignore[call-overload]

    @property
    def per_type(self) -> dict[str, dict[str, float]]:
        """A tagging model's strict entity scores per type (precision, recall, f1, support, predicted); else empty."""
        return dict(self.metrics.value("per_type") or {})  # type: ignore[call-overload]

    @property
    def confusion(self) -> tuple[list[str], list[list[int]]]:
        """A single-label model's label names and confusion matrix (rows = true); empty for other shapes."""
        return (list(self.metrics.value("labels") or []),  # type: ignore[call-overload]
                list(self.metrics.value("confusion_matrix") or []))  # type: ignore[call-overload]


@dataclass(frozen=True)
class TimedData:
    """What bench times: rows of text, (tagged data) sentences given as words with the tags the taggers output
    (the training corpus's), or (questions on passages) SQuAD questions with the windows they are read in; and where
    they come from (`source`, `fingerprint`)."""

    texts: list[Any]
    source: dict[str, Any]
    tags: tuple[str, ...] | None = None
    questions: QAReading | None = None
    """Questions on passages (`texts` are `data.squad.Question`s): how each is read, in windows of `max_length`
    tokens sharing `doc_stride` (the models are timed as question-answering models); None: not questions."""


def written_chunks(out: str | None, open_out: Callable[..., Any], chunks: Iterable[Sequence[Any]], keep: int | None,
                   on_chunk: Callable[[Any], None] | None,
                   handed: Callable[[Sequence[Any]], Any] = lambda chunk: chunk) -> tuple[list[Any], int]:
    """Every chunk of a family's predictions to --out (`open_out(path, vouch)`: the family's writer of that file; no
    --out: nowhere) and to the command's `on_chunk` (as `handed` wraps it), as they come: (the first `keep`
    predictions, how many there were)."""
    from bertkit.io import predictions_out

    kept: list[Any] = []
    total = 0
    sink = open_out(Path(out), predictions_out.vouch(Path(out))) if out else contextlib.nullcontext(lambda _: None)
    with sink as append:
        for chunk in chunks:
            append(chunk)
            kept.extend(chunk[:len(chunk) if keep is None else max(0, keep - len(kept))])
            total += len(chunk)
            if on_chunk is not None:
                on_chunk(handed(chunk))
    return kept, total
