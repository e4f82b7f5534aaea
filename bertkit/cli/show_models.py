"""What `bertkit push` prints: where the model went and which files, or the same as JSON (--json)."""

from __future__ import annotations

from bertkit.cli.output import View, emit_json, out_console
from bertkit.commands.push import PushResult


def show_push(result: PushResult, view: View) -> None:
    if view.json:
        emit_json(result)
        return
    visibility = "private" if result.private else "public unless it existed"
    out_console.print(f"pushed {result.model} to {result.url} ({visibility}): {len(result.files)} files "
                      f"({', '.join(result.files)})", highlight=False)
    out_console.print(f"commit: {result.commit}", highlight=False)
