"""The Typer app: parse, one call, show. The only place that prints or sets exit codes.

`bertkit.cli:app` is the console script; `python -m bertkit.cli` runs it too (what `accelerate launch` and
`torchrun` start)."""

from bertkit.cli.app import app

__all__ = ["app"]
