"""What every probe table by layer choice answers the same way (the word table, the span table): its best row and the
single hidden state where the per-layer curve peaks, each by the table's own score of a row (`row_score`)."""

from __future__ import annotations

from typing import Any


class LayerRows:
    """A table's `rows` (each with its `pooling`), ranked by `row_score` (the first row on a tie)."""

    rows: tuple[Any, ...]

    def row_score(self, row: Any) -> float:
        raise NotImplementedError

    def best(self) -> Any:
        """The row scoring highest."""
        return max(self.rows, key=self.row_score)

    def peak_layer(self) -> Any | None:
        """The single hidden state scoring highest (where the per-layer curve peaks); None with no single-layer row."""
        singles = [row for row in self.rows if row.pooling.single_layer]
        return max(singles, key=self.row_score) if singles else None
