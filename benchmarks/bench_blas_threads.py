"""numpy's BLAS threads beside torch's: why a bertkit command gives OpenBLAS one thread (bertkit/cli/__init__.py).

torch's thread pool does the probe engine's arithmetic on every core; OpenBLAS (in numpy's and scipy's wheels) keeps
a pool of its own, whose threads spin for a while after each call. The probe's small numpy products between the fits
(each fit's predictions, the bootstrap sums) wake them, and on a 2-core machine they then take the cores from torch's.

Measured here: the fits of `bertkit probe --recipe alammar-sst2-probe-offline` (SST-2, 6,920 training sentences,
MiniLM [CLS] and mean pooling x 7 hidden states at C = 1, then the best cell's C by 5-fold CV over 9 values), the
features extracted once, then `search.sweep_layers` run on them in a fresh process per run, its `fit_probe` calls timed
(bench_probe_engine.py's sentence child, `sweep_child`), with `OPENBLAS_NUM_THREADS` unset (OpenBLAS's default: a thread per core)
and with it at 1, the two alternating. `OMP_WAIT_POLICY` is left as the user's shell has it (unset: OpenMP's
default), unlike bench_probe_engine.py, which sets it PASSIVE for both of its trees.

    python benchmarks/bench_blas_threads.py              # 5 runs each
Writes benchmarks/results/blas-threads.json (--out to choose).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_memory  # noqa: E402
from bench_probe_engine import sentence_features, sweep_child  # noqa: E402

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402

SETTINGS = {"openblas default": None, "openblas 1 thread": "1"}


def sweep_fits(features: Path, work: Path, openblas: str | None) -> dict[str, Any]:
    """One sweep's fit seconds in a fresh process (this checkout's bertkit) with OPENBLAS_NUM_THREADS as given."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(bench_memory.CHILD_ENV, PYTHONPATH=str(ROOT), BERTKIT_CACHE_DIR=str(work / "cache"))
    if openblas is not None:
        env["OPENBLAS_NUM_THREADS"] = openblas
    load = os.getloadavg()
    result = sweep_child(features, work, env)
    if "exit_code" in result:
        return result
    return {"fit_seconds": round(result["fit_seconds"], 3), "best": result["best"],
            "load_before": [round(x, 2) for x in load]}


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    seconds = {name: [r["fit_seconds"] for r in done if "fit_seconds" in r] for name, done in runs.items()}
    out: dict[str, Any] = {name: {"best": min(s), "median": statistics.median(s)} for name, s in seconds.items() if s}
    if len(out) == len(SETTINGS):
        default, one = out["openblas default"], out["openblas 1 thread"]
        out["speedup_best"] = round(default["best"] / one["best"], 2)
        out["speedup_median"] = round(default["median"] / one["median"], 2)
        out["same_best_cell"] = len({json.dumps(r["best"], sort_keys=True) for done in runs.values() for r in done
                                     if "best" in r}) == 1
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="sweeps per setting, alternating")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "blas-threads.json"))
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"benchmark": "blas-threads", "args": vars(args), "machine": machine_info(),
                              "versions": package_versions(),
                              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
                              "recipe": "alammar-sst2-probe-offline"}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-blas-threads-") as tmp:
        work = Path(tmp)
        features, described = sentence_features(work)
        report.update(described)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
        for _ in range(max(1, args.runs)):
            for name, value in SETTINGS.items():
                runs[name].append(sweep_fits(features, work, value))
                print(f"[{name}] {runs[name][-1].get('fit_seconds')} s", file=sys.stderr, flush=True)
        report["runs"] = runs
    report["summary"] = summary(runs)
    report["seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(Path(args.out), report)
    print(json.dumps(report["summary"], indent=2))
    return report


if __name__ == "__main__":
    main()
