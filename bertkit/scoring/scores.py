"""One evaluation's scores as results carry them: the metric values by name (data: which metrics depends on the
problem shape and the --metric modules), read through a few typed accessors and written back as the JSON object
they were read from, so --json and metrics files keep their keys."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass

from bertkit.io.atomic import JsonRecord


@dataclass(frozen=True)
class Scores(JsonRecord):
    """Scores of one evaluation: metric name -> value (None: undefined on these rows), with what the evaluation
    recorded beside them (rows scored `n`, the decision `threshold`, per-class tables, the confusion matrix)."""

    record: Mapping[str, object]

    @classmethod
    def from_json(cls, record: Mapping[str, object] | None) -> Scores:
        return cls(dict(record or {}))

    def to_json(self) -> dict[str, object]:
        return dict(self.record)

    def has(self, name: str) -> bool:
        """Whether the evaluation recorded `name` (a metric the shape scores, or `threshold`, `n`...)."""
        return name in self.record

    def score(self, name: str) -> float | None:
        """The value of metric `name` (None: undefined, or not scored)."""
        value = self.record.get(name)
        return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None

    def value(self, name: str) -> object:
        """What the evaluation recorded under `name` as written (a list, table or label; None when absent)."""
        return self.record.get(name)

    @property
    def n(self) -> int | None:
        """Rows scored, where the evaluation recorded them."""
        n = self.record.get("n")
        return int(n) if isinstance(n, numbers.Integral) and not isinstance(n, bool) else None

    @property
    def threshold(self) -> object:
        """The decision threshold the scores were taken at (a number, one per tag, or None: no threshold)."""
        return self.record.get("threshold")

    def __bool__(self) -> bool:
        return bool(self.record)
