"""Cell problems found a chunk at a time: how many cells had a problem, and the first few (their rows and
values) for the message. A pass over ten million rows keeps at most MAX_LISTED of each kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bertkit.data.cells import MAX_LISTED


@dataclass
class Found:
    """Rows with one kind of problem: `count` of them, the first MAX_LISTED rows (table positions) and values."""

    count: int = 0
    rows: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def add(self, start: int, offsets: list[int], cells: list[Any]) -> None:
        """Rows `start + offset` of a chunk whose cells are `cells`."""
        self.count += len(offsets)
        for offset in offsets[: MAX_LISTED - len(self.rows)]:
            self.rows.append(start + offset)
            self.values.append(cells[offset])

    def __bool__(self) -> bool:
        return self.count > 0

    def where(self, lines: Any, unit: str) -> str:
        """`lines 3, 7 (+12 more)`: the first rows (as file lines when `lines` is given) and how many more."""
        shown = [lines[r] if lines is not None else r for r in self.rows]
        more = f" (+{self.count - len(shown)} more)" if self.count > len(shown) else ""
        return f"{unit}{'s' if self.count > 1 else ''} {', '.join(map(str, shown))}{more}"

    def cells(self, lines: Any, unit: str, limit: int = 5) -> str:
        """`line 7 ('n/a'), line 12 ('-')`: where the first `limit` cells are and what they hold, then a count."""
        shown = [f"{unit} {lines[r] if lines is not None else r} ({v!r})"
                 for r, v in zip(self.rows[:limit], self.values[:limit], strict=False)]
        return ", ".join(shown) + (f" (+{self.count - limit} more)" if self.count > limit else "")
