"""DistilBERT vs BERT shapes on this machine: `bertkit bench --preset distilbert-vs-bert` on SST-2 dev.

Runs the CLI (offline: exact DistilBertConfig()/BertConfig() shapes with random init), then copies bench.json,
bench.md and bench.png to benchmarks/results/distilbert-vs-bert.{json,md,png} (and the paper protocol run, with
--paper, to benchmarks/results/distilbert-vs-bert-paper.*).

Usage: python benchmarks/bench_models.py [--quick] [--paper] [--paper-limit N] [--data PATH]
  --quick   smoke run: 32 sentences, --max-length 64, one iteration per measurement, training step at batch 8
            (about 5 minutes on 2 busy shared cores; with --paper, the paper protocol over 32 sentences).
  default   872 SST-2 dev sentences; batch sizes 1,8; 2 iterations and 1 s minimum per measurement; training
            step at batch 32 (7-10 minutes on 2 busy shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.measure.timing import Stopwatch  # noqa: E402

RESULTS = HERE / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "sst2" / "dev.tsv"


def bench_command(data: Path, out: Path, quick: bool, paper: bool, paper_limit: int | None) -> list[str]:
    command = [sys.executable, "-m", "bertkit", "bench", "--preset", "distilbert-vs-bert", "--data", str(data),
               "--text-column", "0", "--out", str(out), "--batch-sizes", "1,8", "--quiet"]
    if paper:
        command += ["--protocol", "paper"] + (["--limit", str(paper_limit)] if paper_limit else [])
    elif quick:
        command += ["--limit", "32", "--max-length", "64", "--min-iters", "1", "--min-seconds", "0",
                    "--train-batch-size", "8"]
    else:
        command += ["--min-iters", "2", "--min-seconds", "1"]
    return command


def run_one(name: str, command: list[str], out: Path) -> int:
    print(f"[bench_models] {' '.join(command[1:])}", flush=True)
    watch = Stopwatch().start()
    code = subprocess.call(command, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if code != 0:
        print(f"[bench_models] {name}: exit {code}", flush=True)
        return code
    RESULTS.mkdir(parents=True, exist_ok=True)
    for suffix in ("json", "md", "png"):
        shutil.copyfile(out / f"bench.{suffix}", RESULTS / f"{name}.{suffix}")
    report = json.loads((out / "bench.json").read_text())
    report["wall_seconds"] = round(watch.stop(), 1)
    report["command"] = " ".join(["bertkit", *command[3:]])
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    from bertkit.measure.report import (
        report_markdown,  # re-rendered: the command line, and the renamed picture
    )

    (RESULTS / f"{name}.md").write_text(report_markdown(report, png_name=f"{name}.png"))
    print(f"[bench_models] wrote {RESULTS / name}.{{json,md,png}} in {report['wall_seconds']} s", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short smoke run (32 sentences, 1 iteration)")
    parser.add_argument("--paper", action="store_true", help="also run --protocol paper (batch 1, full pass)")
    parser.add_argument("--paper-limit", type=int, default=None, help="sentences for the paper protocol (default all)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="headerless sentence<TAB>label file")
    args = parser.parse_args()
    if not args.data.exists():
        print(f"[bench_models] {args.data} not found; pass --data with an SST-2 style dev.tsv", flush=True)
        return 2
    work = ROOT / "runs" / "bench-models"
    suffix = "-quick" if args.quick else ""
    code = run_one(f"distilbert-vs-bert{suffix}", bench_command(args.data, work / "standard", args.quick, False, None),
                   work / "standard")
    if args.paper and code == 0:
        limit = args.paper_limit or (32 if args.quick else None)
        code = run_one(f"distilbert-vs-bert-paper{suffix}", bench_command(args.data, work / "paper", args.quick, True, limit),
                       work / "paper")
    return code


if __name__ == "__main__":
    sys.exit(main())
