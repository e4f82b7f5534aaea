"""The default probe on the first hour's two questions (issue 44): how long the README's Job 1 takes on the full
SST-2, and whether the defaults beat TF-IDF on a data set they were never tuned on.

1. **Job 1 as the README runs it**: `bertkit probe --recipe alammar-sst2-probe-offline` (packaged MiniLM, every layer x
   [CLS] and mean pooling, SST-2 train 6,920 rows -> dev 872, baselines), a fresh process with an empty cache folder
   (nothing parsed or extracted before), timed wall clock; the
   target is at most 3 minutes on an idle 2-core CPU. The machine's load average before and after is recorded: on a
   busy machine the time grows, and the file says so.
2. **A data set the defaults have never seen**: the genre of a sentence of the English Web Treebank (answers, email,
   newsgroup, reviews, weblog: the prefix of each sentence's `sent_id` in ../shared/data/uner_ewt, train 2,001 -> dev
   2,077 sentences, 5 classes). Built into a temporary folder (the shared data is never copied into the project),
   probed with `bertkit probe` and no probe option at all; the probe's own TF-IDF + logistic-regression baseline is
   the bar.

Writes benchmarks/results/probe-defaults.json (`--out` another file; `--skip-sst2` runs only the second part).

    python benchmarks/bench_probe_defaults.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.measure.timing import Stopwatch  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
UNER = SHARED / "uner_ewt"
TARGET_SECONDS = 180


def genre_rows(path: Path) -> list[tuple[str, str]]:
    """(sentence text, genre) for every sentence of an EWT CoNLL file: `# sent_id = GENRE-...` and `# text = ...`."""
    rows, genre = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# sent_id = "):
            genre = line[len("# sent_id = "):].split("-", 1)[0]
        elif line.startswith("# text = ") and genre is not None:
            rows.append((line[len("# text = "):].replace("\t", " "), genre))
            genre = None
    return rows


def write_tsv(rows: list[tuple[str, str]], path: Path) -> Path:
    path.write_text("sentence\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")
    return path


def run_probe(args: list[str], out: Path, cwd: Path) -> dict[str, Any]:
    """One `bertkit probe` in a fresh process: its wall seconds and metrics.json's best cell and baselines."""
    # a cold start: its own empty cache folder (no data or features cached by an earlier run)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "BERTKIT_CACHE_DIR": str(out.parent / f"cache-{out.name}")}
    with Stopwatch() as watch:
        done = subprocess.run([sys.executable, "-m", "bertkit", "probe", *args, "--out", str(out), "-q"], cwd=cwd,
                              env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bertkit probe {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    best, baselines = metrics["best"], metrics.get("baselines") or {}
    found = {name: round(float(scores["accuracy"]), 4) for name, scores in baselines.items()
             if isinstance(scores, dict) and isinstance(scores.get("accuracy"), (int, float))}
    accuracy = float(best["dev"]["accuracy"])
    return {"seconds": round(watch.seconds, 1), "rows": metrics.get("rows"),
            "best": {"pool": best["pool"], "layer": best["layer"], "C": best.get("C"),
                     "dev_accuracy": round(accuracy, 4), "dev_ece": round(float(best["dev"].get("ece", 0.0)), 4),
                     "ci95": [round(x, 4) for x in best.get("accuracy_ci95", [])]},
            "baselines": found, "beats_tfidf": accuracy > found.get("tfidf", 1.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "probe-defaults.json")
    parser.add_argument("--skip-sst2", action="store_true", help="only the unseen data set")
    args = parser.parse_args()
    result: dict[str, Any] = {"machine": {"cpu_count": os.cpu_count(), "load_average_before": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="bertkit-probe-defaults-") as tmp:
        work = Path(tmp)
        if not args.skip_sst2 and (SHARED / "sst2" / "train.tsv").is_file():
            job1 = run_probe(["--recipe", "alammar-sst2-probe-offline"], work / "probe-sst2", ROOT)
            job1["target_seconds"], job1["within_target"] = TARGET_SECONDS, job1["seconds"] <= TARGET_SECONDS
            result["job1_sst2"] = job1
            print(f"[probe-defaults] Job 1 (full SST-2): {job1['seconds']} s, best {job1['best']}", flush=True)
        if (UNER / "train.iob2").is_file():
            train = write_tsv(genre_rows(UNER / "train.iob2"), work / "genre-train.tsv")
            dev = write_tsv(genre_rows(UNER / "dev.iob2"), work / "genre-dev.tsv")
            genre = run_probe(["--data", str(train), "--dev", str(dev)], work / "probe-genre", work)
            genre["task"] = "EWT sentence genre from sent_id (answers, email, newsgroup, reviews, weblog)"
            result["unseen_ewt_genre"] = genre
            print(f"[probe-defaults] EWT genre: best {genre['best']}, baselines {genre['baselines']}", flush=True)
    result["machine"]["load_average_after"] = os.getloadavg()
    result["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
