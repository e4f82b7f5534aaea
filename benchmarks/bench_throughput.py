"""Throughput on SST-2 per command, this tree vs another bertkit checkout (issue 22: "Throughput on SST-2 does
not get worse (within noise) for any command").

Each command runs end to end as its own process (`python -m bertkit ...`, as a user runs it: start-up, model
load, parsing, tokenizing, the model, writing) from this tree and from --baseline-src (PYTHONPATH=DIR), the two
interleaved (the order alternates every repeat) so both see the same machine load; wall time and peak RSS
(os.wait4) of every run, the median per tree, and current/baseline ratios with each side's spread as the noise:

  tokens    SST-2 train + dev: the token-length report                      (MiniLM tokenizer)
  embed     SST-2 train + dev: [CLS] of the last layer into a store, fp32   (MiniLM-L6)
  predict   SST-2 train: labels + probabilities to a CSV, fp32              (MiniLM-L6 + a 2-label head)
  evaluate  SST-2 dev: metrics, fp32                                        (the same classifier)
  finetune  the first --finetune-rows of train, 1 epoch, batch 32, dev = SST-2 dev, fp32   (MiniLM-L6)

Every run starts with an empty cache (cold: the input is parsed each time); --warm-cache keeps each tree's cache
between repeats (a repeated command on the same file). SST-2 is ../shared/data/sst2 (bertkit's demo data when
absent, labels mapped to 0/1).

    python benchmarks/bench_throughput.py --quick --baseline-src /tmp/bk-old    # 1000 rows, 1 repeat: a few minutes
    python benchmarks/bench_throughput.py --baseline-src /tmp/bk-old            # all rows, 3 repeats
Writes benchmarks/results/throughput.json and .md (quick: throughput-quick.*; --out to choose).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_memory as bm  # noqa: E402

ALL = ("tokens", "embed", "predict", "evaluate", "finetune")


def sst2_files(args: argparse.Namespace, work: Path) -> tuple[Path, Path, str]:
    """(train, dev) headerless `sentence<TAB>label` files with labels 0/1: SST-2 itself, else the demo data
    rewritten into the scratch folder."""
    sst2 = bm.find_sst2(args.sst2)
    if sst2 and (sst2 / "dev.tsv").is_file():
        return sst2 / "train.tsv", sst2 / "dev.tsv", str(sst2)
    demo = bm.ROOT / "bertkit" / "resources" / "demo"
    out = []
    for name in ("train", "dev"):
        lines = (demo / f"{name}.tsv").read_text(encoding="utf-8").splitlines()[1:]
        rows = [line.rsplit("\t", 1) for line in lines if "\t" in line]
        labels = {y: str(i) for i, y in enumerate(sorted({y for _, y in rows}))}
        path = work / "data" / f"demo-{name}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{t}\t{labels[y]}\n" for t, y in rows), encoding="utf-8")
        out.append(path)
    print("SST-2 not found: using bertkit's demo data (labels mapped to 0/1)", flush=True)
    return out[0], out[1], str(demo)


def count_rows(path: Path, limit: int | None) -> int:
    with path.open("rb") as f:
        n = sum(1 for line in f if line.strip())
    return min(n, limit) if limit else n


def plan(args: argparse.Namespace, train: Path, dev: Path) -> dict[str, dict[str, Any]]:
    """Per command: (data file, extra options, rows processed)."""
    limit = ["--limit", str(args.limit)] if args.limit else []
    n_train, n_dev = count_rows(train, args.limit), count_rows(dev, args.limit)
    ft_rows = min(args.finetune_rows, count_rows(train, args.limit))
    specs = {
        "tokens": (train, ["--dev", str(dev), *limit], n_train + n_dev),
        "embed": (train, ["--dev", str(dev), *limit], n_train + n_dev),
        "predict": (train, limit, n_train),
        "evaluate": (dev, limit, n_dev),
        # finetune trains on a file of the first --finetune-rows rows (--limit cuts the dev file too)
        "finetune": (args.work_path / "data" / f"train-{ft_rows}.tsv",
                     ["--dev", str(dev), "--epochs", "1", "--batch-size", "32", "--save-every", "100000",
                      *limit], ft_rows),
    }
    if "finetune" in args.commands:
        head = train.read_text(encoding="utf-8").splitlines(keepends=True)[:ft_rows]
        specs["finetune"][0].parent.mkdir(parents=True, exist_ok=True)
        specs["finetune"][0].write_text("".join(head), encoding="utf-8")
    return {c: {"data": specs[c][0], "extra": specs[c][1], "rows": specs[c][2]} for c in args.commands}


def run_once(tree: bm.Tree, command: str, spec: dict[str, Any], models: dict[str, str], work: Path, rep: int,
             warm: bool, timeout: float | None) -> dict[str, Any]:
    cache, out = work / "cache" / tree.name, work / "out" / tree.name
    shutil.rmtree(out, ignore_errors=True)
    if not warm:
        shutil.rmtree(cache, ignore_errors=True)
    out.mkdir(parents=True)
    cache.mkdir(parents=True, exist_ok=True)
    argv = bm.bertkit_argv(tree, command, bm.command_args(command, spec["data"], models, out, spec["extra"]), cache)
    result = bm.run_measured(argv, bm.child_env(tree, cache), work / "logs" / f"{tree.name}-{command}-{rep}.log",
                             timeout)
    result.update(tree=tree.name, command=command, repeat=rep, rows=spec["rows"],
                  rows_per_s=round(spec["rows"] / result["seconds"], 1))
    status = "ok" if result["exit_code"] == 0 else f"FAILED (exit {result['exit_code']})"
    print(f"  #{rep} {tree.name:<9}{command:<9}{spec['rows']:>7,} rows {result['seconds']:>8.1f} s "
          f"{result['rows_per_s']:>8.0f} rows/s {result['peak_rss_mib']:>7.0f} MiB  {status}", flush=True)
    return result


def summarize(runs: list[dict[str, Any]], trees: list[str]) -> list[dict[str, Any]]:
    """Per command: each tree's median seconds, spread ((max - min) / median) and median peak RSS; with two
    trees, current / baseline ratios of seconds (>1: current is slower) and of peak RSS, and whether the
    current tree is slower beyond the noise (its fastest run slower than the baseline's slowest)."""
    out = []
    for command in dict.fromkeys(r["command"] for r in runs):
        row: dict[str, Any] = {"command": command}
        for tree in trees:
            ok = [r for r in runs if r["command"] == command and r["tree"] == tree and r["exit_code"] == 0]
            if not ok:
                row[tree] = None
                continue
            secs = [r["seconds"] for r in ok]
            med = statistics.median(secs)
            row[tree] = {"runs": len(ok), "rows": ok[0]["rows"], "median_s": round(med, 2), "min_s": min(secs),
                         "max_s": max(secs), "spread": round((max(secs) - min(secs)) / med, 3),
                         "rows_per_s": round(ok[0]["rows"] / med, 1),
                         "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in ok)}
        cur, base = row.get("current"), row.get("baseline")
        if cur and base:
            row["time_ratio"] = round(cur["median_s"] / base["median_s"], 3)
            row["rss_ratio"] = round(cur["peak_rss_mib"] / base["peak_rss_mib"], 3)
            row["slower_beyond_noise"] = cur["min_s"] > base["max_s"] if cur["runs"] > 1 else None
        out.append(row)
    return out


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    trees = list(report["trees"])
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM; {report['repeats']} repeat(s), "
             f"{'warm' if report['warm_cache'] else 'cold'} cache; "
             + "; ".join(f"{n}: {(t['commit'] or '?')[:10]}{' (dirty)' if t['dirty'] else ''}"
                         for n, t in report["trees"].items()) + ".", ""]
    head = "| command | rows |" + "".join(f" {t} s (spread) | {t} rows/s | {t} MiB |" for t in trees)
    if len(trees) > 1:
        head += " time current/baseline | RSS current/baseline |"
    lines += [head, "|" + "---|" * (2 + 3 * len(trees) + (2 if len(trees) > 1 else 0))]
    for row in report["summary"]:
        first = next((row[t] for t in trees if row.get(t)), None)
        cells = [row["command"], f"{first['rows']:,}" if first else "-"]
        for t in trees:
            s = row.get(t)
            cells += ([f"{s['median_s']:.1f} ({s['spread']:.0%})", f"{s['rows_per_s']:,.0f}", f"{s['peak_rss_mib']:,.0f}"]
                      if s else ["failed", "-", "-"])
        if len(trees) > 1:
            cells += [f"{row['time_ratio']:.2f}x" if "time_ratio" in row else "-",
                      f"{row['rss_ratio']:.2f}x" if "rss_ratio" in row else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_throughput(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    args.work_path = work
    trees = [bm.Tree("current", bm.ROOT)] + ([bm.Tree("baseline", Path(args.baseline_src).resolve())]
                                             if args.baseline_src else [])
    train, dev, source = sst2_files(args, work)
    models = {"encoder": bm.minilm_dir()}
    if {"predict", "evaluate"} & set(args.commands):
        models["classifier"] = bm.build_classifier(models["encoder"], work / "models" / "minilm-classifier")
    specs = plan(args, train, dev)
    report: dict[str, Any] = {
        "benchmark": "throughput", "quick": args.quick, "limit": args.limit, "repeats": args.repeats,
        "warm_cache": args.warm_cache, "finetune_rows": args.finetune_rows, "machine": bm.machine(),
        "trees": {t.name: t.describe() for t in trees}, "source": source, "models": models,
        "commands": {c: {"data": str(s["data"]), "extra": s["extra"], "rows": s["rows"]} for c, s in specs.items()},
        "loadavg_start": os.getloadavg(), "runs": [],
        "notes": ["seconds: wall time of the whole command as a user runs it (start-up and model load included)",
                  "time_ratio = current median / baseline median (>1: current slower); spread = (max-min)/median",
                  "slower_beyond_noise: current's fastest run slower than baseline's slowest (needs repeats > 1)"]}
    for rep in range(args.repeats):
        for command, spec in specs.items():
            for tree in (trees if rep % 2 == 0 else trees[::-1]):
                report["runs"].append(run_once(tree, command, spec, models, work, rep, args.warm_cache, args.timeout))
    report["summary"] = summarize(report["runs"], [t.name for t in trees])
    report["loadavg_end"] = os.getloadavg()
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="--limit 1000, 1 repeat, finetune on 256 rows")
    parser.add_argument("--commands", default=",".join(ALL), help=f"comma list of {', '.join(ALL)}")
    parser.add_argument("--limit", type=int, default=None, help="first N rows of each file (default: all)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per command and tree (default 3; quick 1)")
    parser.add_argument("--finetune-rows", type=int, default=None, help="training rows for finetune (default 512)")
    parser.add_argument("--warm-cache", action="store_true", help="keep each tree's cache between repeats")
    bm.common_options(parser)
    args = parser.parse_args(argv)
    args.commands = [c for c in args.commands.split(",") if c]
    if unknown := set(args.commands) - set(ALL):
        raise SystemExit(f"--commands: unknown {', '.join(sorted(unknown))} (known: {', '.join(ALL)})")
    args.limit = args.limit or (1000 if args.quick else None)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.finetune_rows = args.finetune_rows or (256 if args.quick else 512)
    out = Path(args.out) if args.out else bm.RESULTS / ("throughput-quick.json" if args.quick else "throughput.json")
    return bm.run_in_scratch(args, run_throughput, out, markdown)


if __name__ == "__main__":
    report = main()
    sys.exit(0 if all(r["exit_code"] == 0 for r in report["runs"]) else 1)
