"""Tagged data in shapes bertkit's tests never wrote, end to end: does the default `bertkit finetune` learn, and beat
the best frozen word probe on the same rows (issue 46)?

Universal NER English-EWT (../shared/data/uner_ewt: PER, LOC, ORG, IOB2) is written out here in two other
shapes, each read by content alone (no --tag-scheme, no column flags):

* `conll2003`: CoNLL-2003's four space-separated columns (word, POS, chunk, entity), a -DOCSTART- line, entities in
  IOB1 (an entity opens with I-; B- only where it directly follows one of the same type);
* `wnut17`: WNUT-17's two TAB-separated columns, IOB2, its lower-case type names with a hyphen (person, geo-loc,
  corporation), no comment lines.

On each, two fresh CLI processes run with their defaults: `bertkit probe` (a word probe on every hidden state of
the packaged MiniLM and the BERT paper's layer combinations; the best row is "the best frozen word probe") and
`bertkit finetune` (the packaged MiniLM fine-tuned as a tagger: 3 epochs, --lr auto, best/ on dev entity F1).
Both score strict seqeval entity F1 on the same dev words. Writes benchmarks/results/tag-unseen.json
(tag-unseen-quick.json with --limit).

    .venv/bin/python benchmarks/bench_tag_unseen.py --limit 500        # a quick look (500: the first slice whose dev
                                                                       # tags all occur in training; short runs may stay all-O)
    .venv/bin/python benchmarks/bench_tag_unseen.py                    # all 2,001 train / 2,077 dev sentences
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.measure.timing import Stopwatch  # noqa: E402

UNER = ROOT.parent / "shared" / "data" / "uner_ewt"
WNUT_TYPES = {"PER": "person", "LOC": "geo-loc", "ORG": "corporation"}
"""UNER's types under WNUT-17's names (geo-loc: a type name with a hyphen, as WNUT's creative-work)."""


def uner_sentences(path: Path, limit: int | None = None) -> Iterator[list[tuple[str, str]]]:
    """(word, IOB2 tag) per word of each sentence of a UNER file (`index word tag - annotator`, `#` comments)."""
    sentence: list[tuple[str, str]] = []
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if sentence:
                yield sentence
                count += 1
                if limit is not None and count >= limit:
                    return
            sentence = []
            continue
        fields = line.split("\t")
        sentence.append((fields[1], fields[2]))
    if sentence:
        yield sentence


def iob1(tags: list[str]) -> list[str]:
    """IOB2 tags as IOB1: every entity word I-, except the first word of an entity directly after another of the
    same type (B-)."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-") and not (i and tags[i - 1] != "O" and tags[i - 1][2:] == tag[2:]):
            tag = "I-" + tag[2:]
        out.append(tag)
    return out


def conll2003_text(sentences: Iterator[list[tuple[str, str]]]) -> str:
    """CoNLL-2003's shape: -DOCSTART-, then `word POS chunk tag` per word (POS and chunk placeholders as the
    shared task's columns hold them), a blank line after each sentence."""
    blocks = ["-DOCSTART- -X- -X- O\n"]
    for sentence in sentences:
        words, tags = zip(*sentence, strict=True)
        blocks.append("".join(f"{word} NN I-NP {tag}\n" for word, tag in zip(words, iob1(list(tags)), strict=True)))
    return "\n".join(blocks) + "\n"


def wnut_tag(tag: str) -> str:
    return tag if tag == "O" else f"{tag[:2]}{WNUT_TYPES[tag[2:]]}"


def wnut17_text(sentences: Iterator[list[tuple[str, str]]]) -> str:
    """WNUT-17's shape: `word<TAB>tag`, IOB2 with its type names, a blank line after each sentence."""
    return "\n".join("".join(f"{word}\t{wnut_tag(tag)}\n" for word, tag in sentence) for sentence in sentences) + "\n"


SHAPES = {"conll2003": (conll2003_text, ".conll"), "wnut17": (wnut17_text, ".txt")}


def write_shape(name: str, folder: Path, limit: int | None) -> tuple[Path, Path]:
    """train and dev of UNER written in shape `name` under `folder`."""
    render, suffix = SHAPES[name]
    paths = []
    for split in ("train", "dev"):
        path = folder / f"{name}-{split}{suffix}"
        path.write_text(render(uner_sentences(UNER / f"{split}.iob2", limit)), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def cli(args: list[str]) -> float:
    """One bertkit command in a fresh process (as a user runs it); its wall seconds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with Stopwatch() as watch:
        done = subprocess.run([sys.executable, "-m", "bertkit", *args, "-q"], cwd=ROOT, env=env, capture_output=True,
                              text=True)
    if done.returncode != 0:
        raise SystemExit(f"bertkit {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return round(watch.seconds, 1)


def probe_side(train: Path, dev: Path, out: Path) -> dict[str, Any]:
    seconds = cli(["probe", "--data", str(train), "--dev", str(dev), "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    rows = {row["label"]: row["scores"]["entities"]["f1"] for row in metrics["rows"]}
    best = max(rows, key=rows.get)
    return {"best_row": best, "entity_f1": round(rows[best], 4), "rows": {k: round(v, 4) for k, v in rows.items()},
            "scheme": metrics.get("scheme"), "tags": metrics.get("tags"), "seconds": seconds}


def finetune_side(train: Path, dev: Path, out: Path) -> dict[str, Any]:
    seconds = cli(["finetune", "--data", str(train), "--dev", str(dev), "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    record = json.loads((out / "best" / "bertkit_model.json").read_text())
    return {"entity_f1": round(float(metrics["best_metric"]), 4), "metric": metrics.get("best_metric_name"),
            "train_samples_per_second": metrics.get("train_samples_per_second"),
            "scheme": record.get("tag_scheme"), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N train and dev sentences")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma list of: " + ", ".join(SHAPES))
    args = parser.parse_args()
    if not UNER.is_dir():
        raise SystemExit(f"needs {UNER}")
    result: dict[str, Any] = {"benchmark": "tagged data in unseen shapes: default finetune vs best word probe",
                              "model": "minilm-offline (6 layers, hidden 384)", "limit": args.limit, "shapes": {},
                              "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bertkit-unseen-") as tmp:
        for name in args.shapes.split(","):
            train, dev = write_shape(name, Path(tmp), args.limit)
            probe = probe_side(train, dev, Path(tmp) / f"{name}-probe")
            tuned = finetune_side(train, dev, Path(tmp) / f"{name}-finetune")
            result["shapes"][name] = {"probe": probe, "finetune": tuned,
                                      "finetune_minus_probe": round(tuned["entity_f1"] - probe["entity_f1"], 4)}
            print(f"[unseen] {name}: finetune {tuned['entity_f1']} vs best probe {probe['entity_f1']} "
                  f"({probe['best_row']})", flush=True)
    result.update(load_average_after=os.getloadavg(), cpu_count=os.cpu_count(),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    out = HERE / "results" / ("tag-unseen-quick.json" if args.limit else "tag-unseen.json")
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
