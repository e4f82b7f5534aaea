"""Long documents: how much of a text longer than the window each --truncation / --long-text mode lets a fine-tuned
classifier read, and what it scores.

The documents are built from real sentences: the SST-2 test sentences (../shared/data/sst2/test.tsv) of one label,
shuffled (seed 0) and joined 24 at a time, so each document (~500-600 tokens, beyond BERT's 512) has the label of
all its sentences. A model fine-tuned on single SST-2 sentences then reads each document
  head        the first --max-length tokens (bertkit's default)
  tail        the last ones
  head+tail   the first quarter and the last three quarters of the budget (Sun et al. 2019)
  chunk       every token: windows of --max-length tokens sharing --stride tokens, logits max-pooled
and `bertkit evaluate` scores it. Writes benchmarks/results/long-documents.json.
    python benchmarks/bench_long_documents.py --model runs/sst2-minilm/best [--max-length 128] [--stride 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bertkit.measure.timing import Stopwatch  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SENTENCES = ROOT.parent / "shared" / "data" / "sst2" / "test.tsv"
PER_DOCUMENT = 24


def write_documents(path: Path, seed: int = 0) -> int:
    """Documents of PER_DOCUMENT same-label SST-2 test sentences, one per line of a `text<TAB>label` TSV."""
    by_label: dict[str, list[str]] = {}
    for line in SENTENCES.read_text(encoding="utf-8").splitlines():
        if line.strip():
            text, label = line.rsplit("\t", 1)
            by_label.setdefault(label, []).append(text)
    rng = random.Random(seed)
    rows = []
    for label, texts in sorted(by_label.items()):
        rng.shuffle(texts)
        rows += [(" ".join(texts[i:i + PER_DOCUMENT]), label)
                 for i in range(0, len(texts) - PER_DOCUMENT + 1, PER_DOCUMENT)]
    rng.shuffle(rows)
    path.write_text("text\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n", encoding="utf-8")
    return len(rows)


def main() -> None:
    from bertkit.commands import evaluate, tokens

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a fine-tuned SST-2 folder (bertkit finetune's best/)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--stride", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "sst2-documents.tsv"
        n_docs = write_documents(docs)
        report = tokens.run(tokens.TokensConfig.of(model=args.model, data=str(docs), max_length=args.max_length))
        lengths = dataclasses.asdict(report.reports[0])
        modes = {"head": {}, "tail": {"truncation": "tail"}, "head+tail": {"truncation": "head+tail"},
                 "chunk": {"long_text": "chunk", "stride": args.stride}}
        results = {}
        for name, options in modes.items():
            with Stopwatch() as watch:
                scores = evaluate.run(evaluate.EvaluateConfig.of(model=args.model, data=str(docs),
                                                              max_length=args.max_length, **options)).metrics.to_json()
            results[name] = {"accuracy": scores["accuracy"], "f1": scores["f1"], "mcc": scores["mcc"],
                             "seconds": round(watch.seconds, 1)}
            print(f"{name:10s} accuracy {scores['accuracy']:.3f}  macro-F1 {scores['f1']:.3f}  "
                  f"({results[name]['seconds']} s)", flush=True)
    report = {"documents": n_docs, "sentences_per_document": PER_DOCUMENT, "source": str(SENTENCES.name),
              "model": args.model, "max_length": args.max_length, "stride": args.stride,
              "tokens": {k: lengths[k] for k in ("min", "p50", "max", "truncated", "truncated_share")},
              "modes": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "long-documents.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS / 'long-documents.json'}")


if __name__ == "__main__":
    main()
