"""bertkit.measure.timing's Stopwatch and timed_step: driven by an injected clock, no sleeping, no wall-clock values."""

from __future__ import annotations

import pytest

from bertkit.measure import timing


class FakeClock:
    """A clock that advances by `step` seconds on each read, and logs each read next to the sync calls."""

    def __init__(self, log: list[str], step: float = 1.5) -> None:
        self.log, self.now, self.step = log, 0.0, step

    def __call__(self) -> float:
        self.log.append("clock")
        self.now += self.step
        return self.now


def test_stopwatch_records_non_negative_float_seconds():
    with timing.Stopwatch() as watch:
        sum(range(10))
    assert isinstance(watch.seconds, float) and watch.seconds >= 0.0
    assert watch.elapsed == watch.seconds  # stopped: elapsed is the recorded time


def test_stopwatch_syncs_before_starting_and_before_stopping_the_clock():
    log: list[str] = []
    with timing.Stopwatch(sync=lambda: log.append("sync"), clock=FakeClock(log)) as watch:
        log.append("work")
    assert log == ["sync", "clock", "work", "sync", "clock"]
    assert watch.seconds == 1.5


def test_stopwatch_records_when_the_block_raises():
    log: list[str] = []
    watch = timing.Stopwatch(sync=lambda: log.append("sync"), clock=FakeClock(log, step=2.0))
    with pytest.raises(ValueError), watch:
        raise ValueError("boom")
    assert watch.seconds == 2.0 and log[-2:] == ["sync", "clock"]


def test_stopwatch_start_stop_and_elapsed_while_running():
    log: list[str] = []
    watch = timing.Stopwatch(clock=FakeClock(log, step=1.0)).start()
    assert watch.elapsed == 1.0 and watch.elapsed == 2.0  # running: each read looks at the clock
    assert watch.stop() == 3.0 == watch.seconds
    with pytest.raises(RuntimeError):
        watch.stop()


def test_timed_step_runs_setup_off_the_clock_and_feeds_repeat():
    log: list[str] = []
    step = timing.timed_step(lambda: log.append("call"), setup=lambda: log.append("setup"), clock=FakeClock(log, 0.5))
    samples = timing.repeat(step, warmup=1, min_iters=3, min_seconds=0.0)
    assert samples == [(0.5,)] * 3
    assert log[:4] == ["setup", "clock", "call", "clock"]  # setup before the clock starts


def test_a_busy_machine_is_named_with_its_load():
    from bertkit.measure.timing import busy_machine_note

    assert busy_machine_note(load=5.1, cores=2).startswith("The machine was busy")
    assert "load average 5.1 on 2 cores" in busy_machine_note(load=5.1, cores=2)
    assert busy_machine_note(load=0.4, cores=2) is None
