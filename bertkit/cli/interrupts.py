"""How a command that is stopped ends: Ctrl-C (KeyboardInterrupt) exits 130 and SIGTERM (`Terminated`) 143, each with
one line saying what stopped it and what a re-run does (`interrupted_line`: a training run's note says where it would
resume). `bertkit.cli.app.user_errors` runs every command inside `sigterm_as_interrupt`."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `kill`, a scheduler or a container stop sends), raised where the command is when it arrives: the
    command ends as on Ctrl-C (its `finally` blocks run, its locks are released, it says what a re-run does)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM raises `Terminated` (Python's default ends the process on the spot, silently);
    the previous handler is put back after. Outside the main thread signals cannot be handled: left as they are."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


RERUN = ("re-run the same command: it resumes where the command supports resuming (embed, finetune, distill, sweep), "
         "else starts over")
"""What an interrupted command says a re-run does, when the command did not say (a training run says where it would
resume: the exception's note)."""


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """One line: what stopped the command (Ctrl-C or SIGTERM), and what a re-run of it does."""
    what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"
    notes = getattr(exc, "__notes__", None)
    return f"{what}; {notes[-1] if notes else RERUN}."
