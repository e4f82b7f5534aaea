"""`make bench`: run every benchmark script in benchmarks/ one after another; each writes benchmarks/results/<name>.json.

Usage: python benchmarks/run_all.py [--quick] [--only embed,probe]
Benchmarks compare alternatives side by side in the same script (ratios), never against fixed timings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bertkit.measure.timing import Stopwatch  # noqa: E402

ORDER = ["startup", "embed", "int8", "probe", "finetune", "ner", "models", "distill", "memory", "throughput"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short smoke runs of every benchmark")
    parser.add_argument("--only", default="", help="comma list of benchmarks (" + ", ".join(ORDER) + ")")
    args = parser.parse_args()
    wanted = [n for n in args.only.split(",") if n] or ORDER
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    summary = {}
    for name in wanted:
        script = HERE / f"bench_{name}.py"
        if not script.exists():
            print(f"[bench] {script.name} not found, skipped", flush=True)
            continue
        cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else [])
        print(f"[bench] {' '.join(cmd)}", flush=True)
        with Stopwatch() as watch:
            code = subprocess.call(cmd, env=env, cwd=HERE.parent)
        summary[name] = {"exit_code": code, "seconds": round(watch.seconds, 1)}
        print(f"[bench] {name}: exit {code} in {summary[name]['seconds']} s", flush=True)
    print(json.dumps(summary, indent=2))
    return 0 if all(v["exit_code"] == 0 for v in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
