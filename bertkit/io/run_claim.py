"""A run that writes its --out folder only at its end (the word and span probes) still holds it from its start:
`claimed_for_the_run`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from bertkit.io.rundir import RunDir


@contextmanager
def claimed_for_the_run(plan: RunDir | None) -> Iterator[RunDir | None]:
    """`plan` (None: no --out) claimed now and held for the whole run: its lock refuses a second run on the same --out
    from the start, not after that run's work too. A failure, a refusal or Ctrl-C takes the claim back
    (`RunDir.abandon`): --out is left as it was."""
    if plan is None:
        yield None
        return
    run = plan.claim()
    try:
        yield run
    except BaseException:
        run.abandon()
        raise
