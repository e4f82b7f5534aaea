"""What `bertkit probe` on questions on passages (SQuAD) found, typed: a row per layer choice with its official dev
scores (`SpanScore`: exact match and F1 in %, with 95% bootstrap intervals over the dev questions), the baselines,
and the run (`SpanProbeRun`: what was read, how, and the files written; metrics.json is its `to_json`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bertkit.encoding.qa_windows import QAReading
from bertkit.features.settings import Pooling
from bertkit.models.compute import Compute
from bertkit.probe.layer_rows import LayerRows
from bertkit.scoring.answers import AnswerSettings
from bertkit.scoring.squad import SquadScores


@dataclass(frozen=True)
class SpanScore:
    """Official SQuAD scores of one set of dev answers, in %, with their 95% bootstrap intervals (None: not asked)."""

    exact_match: float
    f1: float
    exact_interval: tuple[float, float] | None = None
    f1_interval: tuple[float, float] | None = None

    @classmethod
    def of(cls, scores: SquadScores) -> SpanScore:
        return cls(scores.exact, scores.f1, scores.exact_interval, scores.f1_interval)

    def to_json(self) -> dict[str, Any]:
        return {"exact_match": self.exact_match, "f1": self.f1,
                "intervals": {"exact_match": list(self.exact_interval) if self.exact_interval else None,
                              "f1": list(self.f1_interval) if self.f1_interval else None}}


@dataclass(frozen=True)
class SpanProbeRow:
    """One layer choice's span head: its dev scores, its training objective (mean start + end cross-entropy per
    window, with the penalty), the solver's iterations, the vector size and the fit's seconds."""

    label: str
    pooling: Pooling
    dim: int
    scores: SpanScore
    objective: float
    iterations: int
    fit_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "pooling": self.pooling.to_json(), "dim": self.dim, **self.scores.to_json(),
                "objective": self.objective, "iterations": self.iterations, "fit_seconds": self.fit_seconds}


OVERLAP = "overlap: the passage sentence with the most question words"
RANDOM_ENCODER = "random-init encoder"


@dataclass(frozen=True)
class SpanProbeTable(LayerRows):
    """Span heads side by side: a row per layer choice, the baselines by name (`OVERLAP`, `RANDOM_ENCODER`: at the
    best row's layers, `random_encoder_row`), and the windows and tokens they were fitted and scored on."""

    rows: tuple[SpanProbeRow, ...]
    windows: Mapping[str, int]
    tokens: Mapping[str, int]
    baselines: Mapping[str, SpanScore] = field(default_factory=dict)
    random_encoder_row: str | None = None

    def row_score(self, row: SpanProbeRow) -> float:
        """Rows rank by dev F1."""
        return row.scores.f1

    def to_json(self) -> dict[str, Any]:
        peak = self.peak_layer()
        return {"windows": dict(self.windows), "tokens": dict(self.tokens), "rows": [r.to_json() for r in self.rows],
                "baselines": {name: s.to_json() for name, s in self.baselines.items()},
                "best": self.best().label, "peak_layer": peak.label if peak is not None else None,
                **({"random_encoder_row": self.random_encoder_row} if self.random_encoder_row else {})}


@dataclass(frozen=True)
class SpanProbeRun:
    """What the span probe found and how: the table, the SQuAD sets and rules, the reading (windows and doc stride),
    how answers were read (`AnswerSettings`), the penalty C, the encoder and precision, notes, and the files
    written."""

    JSON_RECORD: ClassVar[bool] = True  # written as `to_json` says (metrics.json and --json)

    model: str
    revision: str | None
    train: str
    dev: str
    rules: str
    reading: QAReading
    answers: AnswerSettings
    C: float
    questions: Mapping[str, int]
    table: SpanProbeTable
    compute: Compute = Compute()
    notes: tuple[str, ...] = ()
    outputs: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"family": "spans", "task": "spans", "model": self.model, "revision": self.revision,
                "train": self.train, "dev": self.dev, "rules": self.rules, "reading": self.reading.to_json(),
                "answers": self.answers.to_json(), "compute": self.compute.to_json(),
                "probe": {"kind": "linear start and end heads per token (softmax over each window's tokens)",
                          "C": self.C, "objective": "mean start + end cross-entropy per window + ||W||^2 / (2 C N)"},
                "questions": dict(self.questions), "metric": "f1", **self.table.to_json(), "notes": list(self.notes),
                **({"outputs": dict(self.outputs)} if self.outputs else {})}
