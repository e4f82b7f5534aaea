"""Library logging helpers: `quieted` keeps a chatty library logger down to errors for one block."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quieted(name: str | None) -> Iterator[None]:
    """Only errors from logger `name` (None: the root logger) inside the block; its level is restored after."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
