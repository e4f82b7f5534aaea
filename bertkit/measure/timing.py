"""Measurement primitives: how long to measure, repeated and interleaved timing, summaries, peak memory.

Discipline: each measurement has warm-up iterations, then at least `min_iters` iterations AND `min_seconds` of
timed work; models are interleaved (A B A B ...) so machine drift hits both. A step reads the clock itself around
exactly the work it counts (inputs are prepared before the clock starts; queued device work is synchronised
before it stops): `Stopwatch` times one block that way, `timed_step` makes a step of one call. The clock and the synchronisation are injected (`Budget`), so tests can drive them.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.options import BENCH, option

Clock = Callable[[], float]
BENCH_PROTOCOLS = ("standard", "paper")
"""--protocol: standard (latency, throughput, training step) or the paper's (CPU, batch 1, one pass)."""


def no_sync() -> None:
    """The synchronisation of a device that runs work as it is called (the CPU): nothing to wait for."""
    return None


@dataclass(frozen=True)
class Budget:
    """How long to measure: warm-up iterations, then at least `min_iters` AND `min_seconds` of timed work."""

    warmup: int = 1
    min_iters: int = 3
    min_seconds: float = 2.0
    rounds: int = 2
    """Each measurement is split into this many chunks, interleaved across models (A B A B ...)."""
    clock: Clock = time.perf_counter
    sync: Callable[[], None] = no_sync
    """Waits for queued device work (torch.cuda.synchronize on GPU) so the clock sees finished work."""


@dataclass(frozen=True)
class TimingOptions:
    """The timing group of `bertkit bench`: what is timed (--protocol, the batch sizes, the training step), for how
    long (the `Budget` they build) and on how many threads."""

    ADVANCED_OPTIONS = ("warmup", "min_iters", "min_seconds", "rounds", "threads")

    protocol: str = option("standard", "standard (latency, throughput, training step) or paper (CPU, batch 1, one "
                           "full pass over the data).", panel=BENCH, choices=BENCH_PROTOCOLS)
    batch_sizes: str = option("1,8,32", "Throughput batch sizes, comma-separated.", panel=BENCH)
    train_batch_size: int = option(32, "Batch size of the timed training step (0 skips it).", panel=BENCH, minimum=0)
    warmup: int = option(1, "Untimed warm-up iterations per model and measurement.", panel=BENCH, minimum=0)
    min_iters: int = option(3, "Minimum timed iterations per measurement and model.", panel=BENCH, above=0)
    min_seconds: float = option(2.0, "Minimum timed seconds per measurement and model.", panel=BENCH, minimum=0)
    rounds: int = option(2, "Chunks per measurement, alternating models (A B A B) so drift hits both.", panel=BENCH,
                         above=0)
    threads: int | None = option(None, "torch intra-op threads (default: torch's choice).", panel=BENCH, above=0)

    @property
    def batch_size_list(self) -> tuple[int, ...]:
        """--batch-sizes as numbers (a ValueError on a word that is not one)."""
        return tuple(int(v) for v in str(self.batch_sizes).split(",") if v.strip())

    def timing_problems(self) -> list[str]:
        """--batch-sizes: positive whole numbers."""
        try:
            sizes = self.batch_size_list
            if sizes and min(sizes) > 0:
                return []
        except ValueError:
            pass
        return [f"--batch-sizes must be comma-separated positive integers, e.g. 1,8,32; got {self.batch_sizes!r}."]

    def budget(self, clock: Clock, sync: Callable[[], None]) -> Budget:
        """How long each measurement runs, read by `clock` after `sync` (the device's)."""
        return Budget(self.warmup, self.min_iters, self.min_seconds, self.rounds, clock, sync)


Step = Callable[[], tuple[float, ...]]
"""One iteration: returns (timed seconds, *counters); it reads the clock itself around exactly the counted work."""


def sync_for(device: Any) -> Callable[[], None]:
    """The function that waits for `device`'s queued work (CUDA, MPS), or `no_sync` on the CPU."""
    import torch

    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "mps":
        return torch.mps.synchronize
    return no_sync


class Stopwatch:
    """Seconds of a block of work: `with Stopwatch(sync) as watch: ...`, then `watch.seconds`.

    `sync` (`sync_for(device)`; `no_sync` by default) is called before the clock starts and again before it is
    read at the end, so the seconds hold exactly the block's device work: none queued before it, all it queued.
    The seconds are recorded even when the block raises. Without `with`: `start()`, then `stop()` (returns the
    seconds); `elapsed` reads a running watch without stopping or synchronising it (a deadline's clock).
    """

    def __init__(self, sync: Callable[[], None] = no_sync, clock: Clock = time.perf_counter) -> None:
        self.sync, self.clock = sync, clock
        self.started: float | None = None
        self.seconds = 0.0

    def start(self) -> Stopwatch:
        self.sync()
        self.started = self.clock()
        return self

    def stop(self) -> float:
        if self.started is None:
            raise RuntimeError("Stopwatch.stop() before start()")
        self.sync()
        self.seconds = self.clock() - self.started
        self.started = None
        return self.seconds

    @property
    def elapsed(self) -> float:
        """Seconds since `start()` while running; once stopped, the recorded `seconds`."""
        return self.seconds if self.started is None else self.clock() - self.started

    def __enter__(self) -> Stopwatch:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def timed_step(fn: Callable[[], Any], sync: Callable[[], None] = no_sync,
               setup: Callable[[], Any] | None = None, clock: Clock = time.perf_counter) -> Step:
    """A `Step` for `repeat` / `interleaved`: one call of `fn` timed by a `Stopwatch(sync, clock)`, as (seconds,).

    `setup`, when given, runs before each call, off the clock (e.g. emptying a cache the call must not find).
    """

    def step() -> tuple[float, ...]:
        if setup is not None:
            setup()
        with Stopwatch(sync, clock) as watch:
            fn()
        return (watch.seconds,)

    return step


def repeat(step: Step, warmup: int, min_iters: int, min_seconds: float) -> list[tuple[float, ...]]:
    """Run `warmup` untimed iterations, then iterate until both `min_iters` and `min_seconds` are reached.

    `min_seconds` counts timed seconds (what the samples hold), not wall time around them.
    """
    for _ in range(warmup):
        step()
    samples: list[tuple[float, ...]] = []
    spent = 0.0
    while len(samples) < min_iters or spent < min_seconds:
        sample = step()
        samples.append(sample)
        spent += sample[0]
    return samples


def interleaved(
    labels: Sequence[str], steps: dict[str, Step], budget: Budget, device: Any = None
) -> tuple[dict[str, list[tuple[float, ...]]], dict[str, dict[str, float]]]:
    """Samples per model: all warm up first, then `rounds` chunks in A B A B order; peak memory per model."""
    for label in labels:
        repeat(steps[label], budget.warmup, 0, 0.0)
    per_iters = max(1, math.ceil(budget.min_iters / budget.rounds))
    per_seconds = budget.min_seconds / budget.rounds
    samples: dict[str, list[tuple[float, ...]]] = {label: [] for label in labels}
    memory: dict[str, dict[str, float]] = {}
    for _ in range(budget.rounds):
        for label in labels:
            with peak_memory(device) as meter:
                samples[label].extend(repeat(steps[label], 0, per_iters, per_seconds))
            memory[label] = max_memory(memory.get(label), meter)
    return samples, memory


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """mean/p50/p90/p99/min/max in milliseconds, and n."""
    values = np.asarray(seconds, dtype=np.float64) * 1000.0
    if values.size == 0:
        return {"n": 0}
    pct = np.percentile(values, [50, 90, 99])
    return {"n": int(values.size), "mean": float(values.mean()), "p50": float(pct[0]), "p90": float(pct[1]),
            "p99": float(pct[2]), "min": float(values.min()), "max": float(values.max())}


# ---------------------------------------------------------------- memory


def _proc_status_mb(field_name: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024 / 1e6  # kB in /proc are KiB; MB = 1e6 bytes
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) for this process; False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class MemoryMeter:
    """What `peak_memory` read: the kind of counter, the level at the start, the peak (MB = 1e6 bytes)."""

    kind: str = "none"
    base_mb: float = 0.0
    peak_mb: float = 0.0
    reserved_mb: float | None = None
    anon_growth_mb: float = 0.0
    """RSS: growth of the anonymous memory (RssAnon) from start to end. The kernel may drop clean file-backed pages
    (mapped weights, libraries, the Arrow cache) from RSS while the block runs - a memory-pressure or DAMON
    `pageout` policy does - which lowers RSS and so hides that much of the block's peak; the block's own
    allocations still held at its end are anonymous memory and are counted here whatever happens to file pages."""

    def as_dict(self) -> dict[str, float]:
        delta = max(0.0, self.peak_mb - self.base_mb, self.anon_growth_mb)
        out = {"peak_mb": self.peak_mb, "delta_mb": delta}
        if self.reserved_mb is not None:
            out["reserved_mb"] = self.reserved_mb
        return out


@contextmanager
def peak_memory(device: Any = None) -> Iterator[MemoryMeter]:
    """Peak memory of the block in MB (1e6 bytes): CUDA allocated/reserved on GPU, process RSS (VmHWM, reset first)
    on CPU.

    `delta_mb` is the peak above what was in use when the block started (activations, gradients, optimizer).
    Garbage is collected before the start level is read: tensors of an earlier measurement that only a reference
    cycle still held would otherwise count in the start level and be freed (and their memory reused) inside the
    block, hiding that much of the block's own peak.
    """
    import torch

    meter = MemoryMeter()
    cuda = device is not None and getattr(device, "type", str(device)) == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        meter.kind, meter.base_mb = "cuda_allocated", torch.cuda.memory_allocated() / 1e6
    elif _reset_peak_rss():
        meter.kind, meter.base_mb = "rss", _proc_status_mb("VmRSS") or 0.0
    else:
        meter.kind, meter.base_mb = "rss_process_peak", _proc_status_mb("VmRSS") or 0.0
    anon_start = None if cuda else _proc_status_mb("RssAnon")
    yield meter
    if cuda:
        torch.cuda.synchronize()
        meter.peak_mb = torch.cuda.max_memory_allocated() / 1e6
        meter.reserved_mb = torch.cuda.max_memory_reserved() / 1e6
    else:
        meter.peak_mb = _proc_status_mb("VmHWM") or 0.0
        anon_end = _proc_status_mb("RssAnon")
        if anon_start is not None and anon_end is not None:
            meter.anon_growth_mb = anon_end - anon_start


def max_memory(previous: dict[str, float] | None, meter: MemoryMeter) -> dict[str, float]:
    """The larger of each reading of two measurements of the same model (`previous` None: the meter's)."""
    current = meter.as_dict()
    if previous is None:
        return current
    return {k: max(previous.get(k, 0.0), v) for k, v in current.items()}


BUSY_LOAD_PER_CORE = 0.5
"""A 1-minute load average above this many runnable processes per core, before the benchmark's own work, is a busy
machine: its timings run slower and spread wider than on an idle one."""


def busy_machine_note(load: float | None = None, cores: int | None = None) -> str | None:
    """A line for the report when other work already loads the machine (None when it is idle enough, or the load
    average cannot be read)."""
    import os

    try:
        load = os.getloadavg()[0] if load is None else load
    except OSError:
        return None
    cores = cores or os.cpu_count() or 1
    if load <= BUSY_LOAD_PER_CORE * cores:
        return None
    return (f"The machine was busy when the benchmark started (load average {load:.1f} on {cores} cores): timings "
            f"are slower and noisier than on an idle machine. Re-run when it is idle to compare with other runs.")
