"""`bertkit recipes list|show`: every packaged recipe (name, command, what it does, its measured result), or one
recipe's file as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape

from bertkit.cli.output import emit_json, out_console, table


def show_recipes(found: list[Any], json_output: bool) -> None:
    """Every recipe: name, command(s), what it does, measured result."""
    if json_output:
        emit_json([{"name": r.name, "commands": list(r.commands), "summary": r.summary, "result": r.result,
                    "path": str(r.path)} for r in found])
        return
    rows = [[r.name, "\n".join(r.commands), escape(r.summary) + (f"\n[dim]measured: {escape(r.result)}[/]" if r.result else "")]
            for r in found]
    out_console.print(table("Recipes (bertkit COMMAND --recipe NAME)", ["name", "command", "what it does"], rows,
                            prose=("what it does",)))


def show_recipe(path: Path) -> None:
    """A recipe file, as it is."""
    out_console.print(f"# {path}", highlight=False)
    out_console.print(path.read_text(encoding="utf-8"), highlight=False, markup=False)
