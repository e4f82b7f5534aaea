"""Where bertkit keeps what it derives from input files (parsed tables, token ids): --cache-dir, else the
BERTKIT_CACHE_DIR environment variable, else $XDG_CACHE_HOME/bertkit (~/.cache/bertkit). Everything in it can be
deleted at any time: it is rebuilt from the inputs."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "BERTKIT_CACHE_DIR"


def cache_root(cache_dir: str | None = None) -> Path:
    """The cache folder (not created here)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "bertkit"
