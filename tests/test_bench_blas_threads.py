"""The BLAS-threads benchmark's summary (benchmarks/bench_blas_threads.py): each setting's best and median fit
seconds, their ratios, and whether every run chose the same best cell; failed runs count for neither."""

from __future__ import annotations

from benchmark_scripts import benchmark_module


def test_summary_compares_the_settings_on_their_finished_runs():
    bench = benchmark_module("bench_blas_threads")
    cell = {"pool": "mean", "layer": "layer 3", "C": 0.01, "accuracy": 0.81}
    runs = {"openblas default": [{"fit_seconds": 2.4, "best": cell}, {"fit_seconds": 2.0, "best": cell},
                                 {"exit_code": 1, "log_tail": "killed"}],
            "openblas 1 thread": [{"fit_seconds": 1.0, "best": cell}, {"fit_seconds": 1.6, "best": cell}]}
    out = bench.summary(runs)
    assert out["openblas default"] == {"best": 2.0, "median": 2.2}
    assert out["openblas 1 thread"] == {"best": 1.0, "median": 1.3}
    assert out["speedup_best"] == 2.0 and out["speedup_median"] == 1.69 and out["same_best_cell"] is True
    runs["openblas 1 thread"][0]["best"] = {**cell, "C": 0.1}
    assert bench.summary(runs)["same_best_cell"] is False
    assert "speedup_best" not in bench.summary({"openblas default": runs["openblas default"],
                                                "openblas 1 thread": [{"exit_code": 1}]})
