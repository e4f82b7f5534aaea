"""The span probe's fits with and without the curvature start (issue 56), read from two runs of the same command on
the same machine, one after the other: `bertkit probe --model minilm-offline --data
../shared/data/tydiqa_goldp_en/train.json --dev ../shared/data/tydiqa_goldp_en/dev.json --limit 1000 --batch-size 32
--out RUN` under `/usr/bin/time -v`, once with the tree before the curvature start (PYTHONPATH=that tree) and once
with this one. Per row: iterations, fit seconds and dev F1 of each; each run's wall time and peak RSS.

    python benchmarks/span_probe_engine.py --before RUN_BEFORE --before-log TIME_LOG --before-commit C \\
        --after RUN_AFTER --after-log TIME_LOG --after-commit C [--out benchmarks/results/span-probe-engine.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bertkit.io.atomic import write_json_atomic  # noqa: E402


def time_record(log: Path) -> dict[str, float]:
    """Wall seconds and peak RSS (MiB) from `/usr/bin/time -v`'s report at the end of `log`."""
    text = log.read_text(errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if wall is None or rss is None:
        raise SystemExit(f"{log}: no /usr/bin/time -v report at its end")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return {"wall_seconds": round(seconds, 1), "peak_rss_mib": round(int(rss.group(1)) / 1024, 1)}


def run_record(run: Path, log: Path, commit: str) -> dict[str, Any]:
    metrics = json.loads((run / "metrics.json").read_text())
    rows = [{"label": r["label"], "dim": r["dim"], "iterations": r["iterations"],
             "fit_seconds": round(r["fit_seconds"], 1), "f1": round(r["f1"], 3), "exact_match": round(r["exact_match"], 3)}
            for r in metrics["rows"]]
    return {"commit": commit, **time_record(log), "fit_seconds_total": round(sum(r["fit_seconds"] for r in rows), 1),
            "best": metrics["best"], "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for side in ("before", "after"):
        parser.add_argument(f"--{side}", required=True, type=Path)
        parser.add_argument(f"--{side}-log", required=True, type=Path)
        parser.add_argument(f"--{side}-commit", required=True)
    parser.add_argument("--machine", default="2 AMD EPYC cores")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "span-probe-engine.json")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "benchmark": "span-probe-engine", "issue": 56,
        "command": "bertkit probe --model minilm-offline --data ../shared/data/tydiqa_goldp_en/train.json --dev "
                   "../shared/data/tydiqa_goldp_en/dev.json --limit 1000 --batch-size 32 --out RUN",
        "machine": args.machine,
        "before": {"engine": "L-BFGS from a scaled identity", **run_record(args.before, args.before_log,
                                                                           args.before_commit)},
        "after": {"engine": "L-BFGS from the curvature at zero weights", **run_record(args.after, args.after_log,
                                                                                   args.after_commit)}}
    before = {r["label"]: r for r in report["before"]["rows"]}
    report["rows"] = [{"label": r["label"], "iterations": {"before": before[r["label"]]["iterations"],
                                                         "after": r["iterations"]},
                       "fit_speedup": round(before[r["label"]]["fit_seconds"] / max(r["fit_seconds"], 1e-9), 2),
                       "f1_difference": round(r["f1"] - before[r["label"]]["f1"], 3)}
                      for r in report["after"]["rows"]]
    write_json_atomic(args.out, report)
    print(json.dumps(report["rows"], indent=1))
    return report


if __name__ == "__main__":
    main()
