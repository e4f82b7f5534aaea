"""The first hour (issue 33): does the obvious `bertkit finetune` learn with its default settings?

Per task (SST-2 single sentences, RTE sentence pairs; the first 1500 training rows, the whole dev split), next to
each other:

  majority       always the most frequent dev class (the bar every run must clear; MCC 0)
  tfidf          TF-IDF + logistic regression on the raw text (`bertkit probe`'s baseline)
  probe          a logistic-regression probe on the frozen encoder's [CLS] features of the last layer (`bertkit
                 probe --pool cls --layers -1`: its default until issue 44, pinned so the recorded row reproduces)
  finetune runs  the default model (minilm-offline) with the old default lr 5e-5 and the new default `--lr auto`,
                 for 1 epoch and for the default epochs (3): dev accuracy/F1/MCC of best/, how many dev rows were
                 predicted per class, the baseline warning's note if any, the wall time, and the run folder's disk
                 (hard links counted once, as `du` does) with and without checkpoints.

Every run is recorded as soon as it ends, and a re-run skips the runs already in the results file (--fresh starts
over), so an interrupted benchmark continues. Runs take minutes each on 2 CPU cores: the whole file ~30-40 minutes.

    .venv/bin/python benchmarks/bench_defaults.py                      # both tasks, every run
    .venv/bin/python benchmarks/bench_defaults.py --tasks sst2 --only 1ep

Writes benchmarks/results/first-hour-defaults.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data"
RESULT = ROOT / "benchmarks" / "results" / "first-hour-defaults.json"
ROWS = 1500
TASKS = {
    "sst2": {"data": str(DATA / "sst2" / "train.tsv"), "dev": str(DATA / "sst2" / "dev.tsv"),
             "text_column": "0", "label_column": "1"},
    "rte": {"data": str(DATA / "rte" / "train.tsv"), "dev": str(DATA / "rte" / "dev.tsv"),
            "text_column": "sentence1", "text_pair_column": "sentence2", "label_column": "label"},
}
OLD_LR = "5e-5"
"""The default --lr before `auto` (the BERT paper's largest grid value)."""
RUNS = {"old_1ep": (OLD_LR, 1), "new_1ep": ("auto", 1), "old_default_epochs": (OLD_LR, 3),
        "new_default_epochs": ("auto", 3)}
"""Fine-tuning runs: (--lr, --epochs); 3 is the default --epochs."""
DISK_BEFORE = {"commit": "7b8b891 (main before issue 33)", "run": "sst2, 1500 rows, 1 epoch, --lr 5e-5",
               "disk_mb": 435, "disk_mb_by_folder": {"best": 88, "final": 88, "checkpoints": 261},
               "how": "du -sh of the run folder"}
"""The same 1-epoch MiniLM run's folder before issue 33 (measured once with `du`, not re-run here): best/ and final/
(the same step) stored twice, and the finished run's checkpoints/step-47 kept (182 MB of it AdamW state)."""


def disk_bytes(folder: Path) -> int:
    """Bytes of the files under `folder`, each inode once (hard-linked files count once, as `du` counts them)."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total


def run_finetune(task: str, lr: str, epochs: int, out: Path) -> dict[str, Any]:
    from bertkit.commands.finetune import FinetuneConfig, run

    cfg = FinetuneConfig.of(**TASKS[task], limit=ROWS, epochs=epochs, lr=lr, out=str(out), seed=42)
    started = time.perf_counter()
    result = run(cfg, progress=False)
    wall = time.perf_counter() - started
    summary = result.summary.to_json()
    best = summary["best_dev"]
    predicted = [int(sum(col)) for col in zip(*best["confusion_matrix"], strict=True)]
    folders = {name: disk_bytes(out / name) for name in ("best", "final", "checkpoints") if (out / name).exists()}
    return {
        "lr_flag": lr, "lr": summary["learning_rate"]["value"], "lr_source": summary["learning_rate"]["source"],
        "epochs": epochs, "steps": summary["global_step"], "best_step": summary["best_step"],
        "dev_accuracy": round(best["accuracy"], 4), "dev_f1": round(best["f1"], 4), "dev_mcc": round(best["mcc"], 4),
        "final_dev_accuracy": round(summary["final_dev"]["dev_accuracy"], 4),
        "dev_predicted_per_class": dict(zip(best["labels"], predicted, strict=True)),
        "above_majority": [h.get("above_baseline") for h in summary["history"]],
        "baseline_warning": next((n for n in summary.get("notes", []) if "baseline" in n), None),
        "train_seconds": summary["train_seconds"], "wall_seconds": round(wall, 1),
        "disk_mb": round(disk_bytes(out) / 1e6, 1),
        "disk_mb_by_folder": {k: round(v / 1e6, 1) for k, v in folders.items()},
        "final_same_as_best": summary.get("final_same_as_best"), "checkpoints_kept": summary.get("checkpoints_kept"),
    }


def run_probe(task: str, out: Path) -> dict[str, Any]:
    from bertkit.commands.probe import ProbeConfig, run

    cfg = ProbeConfig.of(**TASKS[task], limit=ROWS, out=str(out), seed=42, pool="cls", layers="-1")
    started = time.perf_counter()
    run(cfg, progress=False)
    return probe_row(json.loads((out / "metrics.json").read_text()), time.perf_counter() - started)


def probe_row(saved: dict[str, Any], wall: float) -> dict[str, Any]:
    """The probe's best cell and its baselines, from the probe run's metrics.json."""
    pick = ("accuracy", "f1", "mcc")
    best, base = saved["best"], saved.get("baselines", {})

    def scores(found: dict[str, Any]) -> dict[str, float]:
        return {f"dev_{k}": round(found[k], 4) for k in pick if k in found}

    return {
        "probe": {**scores(best["dev"]), "pool": best.get("pool"), "layer": best.get("layer"), "C": best.get("C"),
                  "wall_seconds": round(wall, 1)},
        "majority": scores(base.get("majority", {})), "tfidf": scores(base.get("tfidf", {})),
        "random_encoder_probe": scores(base.get("random_encoder", {})), "rows": saved.get("rows"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="sst2,rte")
    parser.add_argument("--only", default="", help="run names containing this text (e.g. 1ep), plus the probes")
    parser.add_argument("--fresh", action="store_true", help="ignore the runs already in the results file")
    parser.add_argument("--redo-probes", action="store_true", help="run the probes again (the fine-tuning runs kept)")
    parser.add_argument("--keep", default=None, help="keep the run folders here (default: a temp folder)")
    args = parser.parse_args()

    from bertkit.io.atomic import write_json_atomic
    from bertkit.io.trail import machine_info, package_versions

    results = {} if args.fresh or not RESULT.exists() else json.loads(RESULT.read_text())
    results.update(protocol={"rows": ROWS, "dev": "whole dev split", "model": "minilm-offline", "seed": 42,
                             "batch_size": 32, "warmup_ratio": 0.1, "max_length": 128, "old_lr": OLD_LR,
                             "runs": {k: {"lr": lr, "epochs": e} for k, (lr, e) in RUNS.items()}},
                   disk_before=DISK_BEFORE, machine=machine_info(), versions=package_versions())
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-defaults-"))
    for task in args.tasks.split(","):
        done = results.setdefault("tasks", {}).setdefault(task, {})
        if "probe" not in done or args.redo_probes:
            print(f"{task}: probe + baselines", flush=True)
            done.update(run_probe(task, work / f"{task}-probe"))
            write_json_atomic(RESULT, results)
        for name, (lr, epochs) in RUNS.items():
            if name in done.get("finetune", {}) or args.only not in name:
                continue
            print(f"{task}: finetune {name} (--lr {lr}, --epochs {epochs})", flush=True)
            row = run_finetune(task, lr, epochs, work / f"{task}-{name}")
            done.setdefault("finetune", {})[name] = row
            print(f"  dev accuracy {row['dev_accuracy']}, mcc {row['dev_mcc']}, {row['wall_seconds']} s", flush=True)
            write_json_atomic(RESULT, results)
    print(f"wrote {RESULT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
