"""The first hour with words (issue 57): on about 1,500 tagged sentences, does the default `bertkit finetune` (no
flags) beat the best frozen word probe (`bertkit probe`, no flags) on the same dev words?

Three sets from ../shared/data, each its first 1,500 training sentences and first 1,000 dev sentences, written as a
user would have them:

* `uner`: Universal NER English-EWT as shipped (IOB2, `#` comments, five columns);
* `conll2003`: the same sentences in CoNLL-2003's shape (four space-separated columns, -DOCSTART-, IOB1;
  `bench_tag_unseen.conll2003_text`);
* `pos`: UD English-EWT's UPOS tags (17 plain tags, scored by word accuracy).

Both sides run as fresh CLI processes with their defaults on the packaged MiniLM; the score is the dev entity F1
(conlleval counting) or word accuracy. Writes benchmarks/results/tagger-first-hour.json.

    .venv/bin/python benchmarks/bench_tagger_first_hour.py [--sets uner,conll2003,pos] [--train 1500] [--dev 1000]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_tag_unseen import UNER, cli, conll2003_text, uner_sentences  # noqa: E402

from bertkit.io.atomic import write_json_atomic  # noqa: E402

POS = ROOT.parent / "shared" / "data" / "ud_ewt_pos"


def blocks(path: Path, limit: int) -> str:
    """The first `limit` blank-line separated sentences of a column file, as they are."""
    return "\n\n".join(path.read_text(encoding="utf-8").strip().split("\n\n")[:limit]) + "\n"


def write_set(name: str, folder: Path, n_train: int, n_dev: int) -> tuple[Path, Path]:
    """train and dev of set `name`, written under `folder`."""
    paths = []
    for split, n in (("train", n_train), ("dev", n_dev)):
        if name == "uner":
            path, text = folder / f"uner-{split}.iob2", blocks(UNER / f"{split}.iob2", n)
        elif name == "conll2003":
            path, text = folder / f"conll-{split}.conll", conll2003_text(uner_sentences(UNER / f"{split}.iob2", n))
        else:
            path, text = folder / f"pos-{split}.tsv", blocks(POS / f"{split}.tsv", n)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def score_of(record: dict[str, Any]) -> float:
    """A word table row's or a run's headline score (entity F1, else word accuracy)."""
    entities = record.get("entities")
    return float(entities["f1"]) if entities and entities.get("f1") is not None else float(record["token_accuracy"])


def probe_side(train: Path, dev: Path, out: Path) -> dict[str, Any]:
    seconds = cli(["probe", "--data", str(train), "--dev", str(dev), "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    rows = {row["label"]: round(score_of(row["scores"]), 4) for row in metrics["rows"]}
    best = max(rows, key=rows.get)
    return {"best_row": best, "score": rows[best], "rows": rows, "seconds": seconds}


def finetune_side(train: Path, dev: Path, out: Path) -> dict[str, Any]:
    seconds = cli(["finetune", "--data", str(train), "--dev", str(dev), "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    config = json.loads((out / "config.json").read_text())
    return {"score": round(float(metrics["best_metric"]), 4), "metric": metrics.get("best_metric_name"),
            "epochs": config["config"]["epochs"], "lr": config["config"]["lr"],
            "steps": metrics.get("global_step"), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="uner,conll2003,pos")
    parser.add_argument("--train", type=int, default=1500)
    parser.add_argument("--dev", type=int, default=1000)
    args = parser.parse_args()
    if not (UNER.is_dir() and POS.is_dir()):
        raise SystemExit(f"needs {UNER} and {POS}")
    result: dict[str, Any] = {"benchmark": "the first hour with words: default finetune vs best word probe",
                              "model": "minilm-offline (6 layers, hidden 384)", "train_sentences": args.train,
                              "dev_sentences": args.dev, "sets": {}, "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bertkit-first-hour-") as tmp:
        for name in args.sets.split(","):
            train, dev = write_set(name, Path(tmp), args.train, args.dev)
            probe = probe_side(train, dev, Path(tmp) / f"{name}-probe")
            tuned = finetune_side(train, dev, Path(tmp) / f"{name}-finetune")
            result["sets"][name] = {"probe": probe, "finetune": tuned,
                                    "finetune_minus_probe": round(tuned["score"] - probe["score"], 4)}
            print(f"[first hour] {name}: finetune {tuned['score']} vs best probe {probe['score']} "
                  f"({probe['best_row']})", flush=True)
    result.update(load_average_after=os.getloadavg(), cpu_count=os.cpu_count(),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    out = HERE / "results" / "tagger-first-hour.json"
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
