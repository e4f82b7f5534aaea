"""`python -m bertkit.cli` (what accelerate launch and torchrun start)."""

from bertkit.cli.app import app

app()
