"""How bertkit prints: the consoles (stdout for results, stderr for status), the --quiet/--json view, JSON on
stdout, rich tables, and the number formats of summary lines."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

# Piped output (files, CI logs) gets a wide console so report tables are not squeezed to 80 columns.
out_console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 200)


@dataclass(frozen=True)
class View:
    """How the results are shown (the options every command has that are not part of what it computes)."""

    quiet: bool = False
    json: bool = False
    recipe: str | None = None

    @property
    def progress(self) -> bool:
        return not self.quiet and not self.json


def result_json(result: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A command's result as its JSON object: its fields, less those marked `json: False` (objects behind the
    numbers, e.g. the length reports' raw counts), those marked `omit_empty` that are None or empty (what a run did
    not do), and `drop`."""
    shown = {}
    for f in dataclasses.fields(result):
        value = getattr(result, f.name)
        if not f.metadata.get("json", True) or f.name in drop:
            continue
        if f.metadata.get("omit_empty") and (value is None or value == {} or value == []):
            continue
        shown[f.name] = value
    return shown


def emit_json(obj: Any) -> None:
    """Results as JSON on stdout (nothing else goes to stdout with --json)."""
    from bertkit.io.atomic import to_json

    sys.stdout.write(to_json(obj) + "\n")
    sys.stdout.flush()


class JsonStream:
    """`emit_json({key: [items...], **rest})` printed item by item as the items come (the same text, without holding
    the list): `add(item)` for each, then `close(rest)` with the other keys (which follow the list)."""

    def __init__(self, key: str):
        from bertkit.io.atomic import to_json

        self.key, self.count = key, 0
        empty = to_json({key: []})
        self._opening = empty[: empty.index("[") + 1]

    def add(self, item: Any) -> None:
        import textwrap

        from bertkit.io.atomic import to_json

        sys.stdout.write((self._opening + "\n") if self.count == 0 else ",\n")
        sys.stdout.write(textwrap.indent(to_json(item), "    "))
        self.count += 1

    def close(self, rest: dict[str, Any]) -> None:
        from bertkit.io.atomic import to_json

        whole = to_json({self.key: [], **rest})
        if self.count == 0:
            sys.stdout.write(whole + "\n")
        else:
            sys.stdout.write("\n  " + whole[len(self._opening):] + "\n")
        sys.stdout.flush()


def info(message: str, quiet: bool = False) -> None:
    """A status line on stderr (kept off stdout so --json output stays parseable)."""
    if not quiet:
        err_console.print(message, highlight=False)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table; numbers right-aligned."""
    result = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        result.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        result.add_row(*[_cell(v) for v in row])
    return result


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1:
            return f"{int(value):,}"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def format_score(value: float | None, spec: str = ".4f") -> str:
    """A metric for a summary line: formatted, or "undefined" (None: e.g. Pearson of constant targets)."""
    return "undefined" if value is None else format(value, spec)


def format_size(n_bytes: float) -> str:
    """A size in bytes for a summary line: B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    return str(n_bytes)
