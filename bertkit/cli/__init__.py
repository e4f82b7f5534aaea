"""The Typer app: parse, one call, show. The only place that prints or sets exit codes.

`bertkit.cli:app` is the console script; `python -m bertkit.cli` runs it too (what `accelerate launch` and
`torchrun` start).

Before the app's imports load numpy, the command's process gives numpy's BLAS one thread (`OPENBLAS_NUM_THREADS`,
unless the user set it): torch's thread pool does bertkit's arithmetic on every core, and OpenBLAS (in numpy's and
scipy's wheels) keeps a pool of its own whose threads spin for a while after each call, taking the cores from
torch's. numpy's share is small products between torch's (a probe's predictions, bootstrap sums), so one thread
costs it nothing; the fits beside it lost much: SST-2's probe sweep (14 cells at C = 1, then a 5-fold CV over 9 C
values; 2 AMD EPYC cores) fitted in 1.9-2.8 s with OpenBLAS's default, 1.3-1.7 s with one thread (median 2.02 s
against 1.33 s: `benchmarks/bench_blas_threads.py` -> `benchmarks/results/blas-threads.json`)."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bertkit.cli.app import app  # noqa: E402  (after the thread setting: the app's imports load numpy)

__all__ = ["app"]
