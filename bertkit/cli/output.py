"""How bertkit prints: the consoles (stdout for results, stderr for status), the --quiet/--json view, JSON on
stdout, rich tables, and the number formats of summary lines."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table


def _width(stream: Any) -> int | None:
    """A terminal's own width; piped output (files, CI logs) $COLUMNS where set, else 200 so report tables are not
    squeezed to rich's 80."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 200


out_console = Console(soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, soft_wrap=True, width=_width(sys.stderr))


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


def table_unless_json(run: Any, view: View) -> Any:
    """A probe run's table to show, or None where --json printed the run instead (nothing more to show)."""
    if view.json:
        emit_json(run)
        return None
    return run.table


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


class LoggedLines(logging.Filter):
    """Remembers the messages the library logged to the terminal in this process, so a result's note that was
    already shown as it happened (the resolved --lr, a baseline warning) is not printed a second time."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        self.shown.add(record.getMessage())
        return True


LOGGED = LoggedLines()


def info(message: str, quiet: bool = False) -> None:
    """A status line on stderr (kept off stdout so --json output stays parseable); not again when the same line was
    logged already."""
    if not quiet and message not in LOGGED.shown:
        err_console.print(message, highlight=False)


def table(title: str, columns: list[str], rows: list[list[Any]], formats: dict[str, str] | None = None,
          wrap_first: int | None = None, prose: tuple[str, ...] = (), measures_as_rows: bool = False) -> Table:
    """A rich table: number columns right-aligned, each with one number format (`formats[column]`, a format spec
    such as ".1f" or "d" for identifiers; otherwise chosen from the column's largest value), text left-aligned;
    `wrap_first` folds long first-column names (model ids) at that width; `prose` columns share the width the
    others (kept on one line) leave and wrap at words; `measures_as_rows`: each row is one measure (a turned table),
    so the number format is chosen per row."""
    formats = formats or {}
    if measures_as_rows:
        row_formats = [formats.get(str(row[0])) or _column_format(row[1:]) for row in rows]
        cells = [[row[0] if i == 0 else _cell(row[i], row_formats[j]) for j, row in enumerate(rows)]
                 for i in range(len(columns))]
    else:
        cells = [[_cell(row[i], formats.get(name) or _column_format([r[i] for r in rows])) for row in rows]
                 for i, name in enumerate(columns)]
    result = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        numeric = i > 0 and all(isinstance(r[i], (int, float)) or r[i] is None or _looks_numeric(r[i]) for r in rows)
        if prose:
            result.add_column(name, justify="left", ratio=1 if name in prose else None,
                              no_wrap=name not in prose)
            continue
        result.add_column(name, justify="right" if numeric else "left",
                          max_width=wrap_first if i == 0 else None, overflow="fold")
    for j in range(len(rows)):
        result.add_row(*[cells[i][j] for i in range(len(columns))])
    return result


def _looks_numeric(value: Any) -> bool:
    """A preformatted number ("0.810-0.862", "12.5 (b32 dynamic)", "83%") reads best right-aligned too."""
    return isinstance(value, str) and (value == "" or value[:1].isdigit() or value[:1] == "-" and value[1:2].isdigit())


def _column_format(values: list[Any]) -> str:
    """One format for a column's floats, so 36.1 and 237.0 line up: 3 decimals below 10, 1 below 1,000, else
    none (with thousands separators)."""
    floats = [abs(v) for v in values if isinstance(v, float) and v == v]
    if not floats:
        return ","
    largest = max(floats)
    return ".3f" if largest < 10 else ",.1f" if largest < 1000 else ",.0f"


def _cell(value: Any, spec: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) and spec in (",", "d"):
        return format(value, spec)
    if isinstance(value, int) and spec.endswith("f") and not spec.startswith(","):
        return format(value, ",")
    return format(value, spec)


def format_score(value: float | None, spec: str = ".4f") -> str:
    """A metric for a summary line: formatted, or "undefined" (None: e.g. Pearson of constant targets)."""
    return "undefined" if value is None else format(value, spec)


def format_threshold(value: Any) -> str:
    """A decision threshold for a summary line: one number (3 significant digits), or one per tag as their range."""
    if isinstance(value, (list, tuple)) and value:
        return f"{min(value):.3g}-{max(value):.3g} (one per tag)"
    return format(value, ".3g") if isinstance(value, (int, float)) else str(value)


def format_size(n_bytes: float) -> str:
    """A size in bytes for a summary line: B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    return str(n_bytes)
