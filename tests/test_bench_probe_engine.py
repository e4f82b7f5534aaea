"""The probe-engine benchmark's bookkeeping (benchmarks/bench_probe_engine.py): the order the trees' tables run in
and which run of each tree is reported."""

from __future__ import annotations

from benchmark_scripts import benchmark_module


def test_tables_run_mirrored_this_tree_first():
    bench = benchmark_module("bench_probe_engine")
    assert bench.table_order(2, False) == ["after", "before", "before", "after"]
    assert bench.table_order(3, True) == ["after", "after", "after"]


def test_each_tree_reports_its_fastest_finished_run_with_every_runs_time_beside_it():
    bench = benchmark_module("bench_probe_engine")
    runs = [{"exit_code": 0, "seconds": 30.0, "fit_seconds_total": 20.0},
            {"exit_code": 1, "seconds": 5.0},  # failed fast: not the tree's time
            {"exit_code": 0, "seconds": 25.0, "fit_seconds_total": 18.0}]
    table = bench.fastest_table(runs)
    assert table["seconds"] == 25.0 and table["seconds_all"] == [30.0, 5.0, 25.0]
    assert table["fit_seconds_total_all"] == [20.0, None, 18.0]
    assert bench.fastest_table([{"exit_code": 1, "seconds": 9.0}])["seconds"] == 9.0  # none finished: what there is
    assert bench.fastest([{"fit_seconds": 3.0}, {"error": "x"}, {"fit_seconds": 2.0}],
                         lambda r: "fit_seconds" in r, "fit_seconds") == {"fit_seconds": 2.0}
