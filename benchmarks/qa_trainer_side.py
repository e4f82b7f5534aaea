"""The Trainer side of the question-answering anchor: an extractive question-answering model fine-tuned the way
transformers' `examples/pytorch/question-answering/run_qa.py` does it, with `transformers.Trainer` at its best on this
machine, so `bertkit finetune` on SQuAD data has a number to meet. `bench_qa_anchor.py` runs it and bertkit on the
same questions in one process; run alone, it writes the Trainer side's result only.

The run_qa idiom, written here (it is the anchor: nothing of bertkit runs on the model side):
- `prepare_train_features`: each question stripped of leading whitespace, `tokenizer(question, context,
  truncation="only_second", max_length, stride=doc_stride, return_overflowing_tokens=True,
  return_offsets_mapping=True)`, each window labelled with the first gold answer's first and last token, or the [CLS]
  index when the window does not hold the whole answer;
- `prepare_validation_features`: the same windows, each with its question id and its offsets kept for context tokens
  only (None elsewhere);
- `postprocess_qa_predictions` (SQuAD v1.1: no null answer): per question, over its windows, the 20 best start and
  20 best end logits, spans inside the context, end not before start, at most 30 tokens, scored start + end logit;
  the best span's text cut from the context by its offsets ("" when no window has a valid span).
Dev is scored by `bertkit.scoring.squad.score_squad` (the official evaluate-v1.1.py rules, tested against it), the
scorer bertkit's own dev F1 uses, so both sides are scored identically.

Trainer at its best on a CPU: dynamic padding (`DataCollatorWithPadding`, run_qa's `--pad_to_max_length False`
path, instead of its default of padding every window to 384) with batches grouped by length
(`train_sampling_strategy="group_by_length"`, so little padding), no evaluation or saving during training (one
prediction pass over dev at the end), fused AdamW (`optim="adamw_torch_fused"`, Trainer's default, named), no
dataloader workers (they would share the compute cores) and no pinned memory off a GPU, bf16 only where it runs
natively (`--bf16 auto`, as in ner_trainer_side.py).

Where this parts from run_qa, and why:
- Hyper-parameters default to bertkit's for question answering (lr 1e-4: bertkit's `--lr auto` for MiniLM's width
  384; weight decay 0.01, warmup 0.1, batch 32), not run_qa's (lr 5e-5 from the command line, weight decay 0, no
  warmup), so both sides of the anchor train the same way.
- Dev windows are predicted in order of length (less padding) and put back in window order before post-processing.

Samples: training windows (not questions) x epochs / Trainer's train_runtime, as bertkit counts its training rows.

    .venv/bin/python benchmarks/qa_trainer_side.py --limit 300 --dev-limit 100 --epochs 1 --out /tmp/qa-trainer.json
"""

from __future__ import annotations

import argparse
import collections
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from anchor_common import bf16_is_native, trainer_side_result  # noqa: E402
from ner_trainer_side import in_file_order, minilm_folder  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "tydiqa_goldp_en"
N_BEST = 20
MAX_ANSWER_LENGTH = 30


def read_squad_rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` questions (all with None) of a SQuAD v1.1 JSON file in the flat layout run_qa reads (the
    `datasets` squad script's): id, title, context, question, answers {text, answer_start}."""
    rows = []
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if limit is not None and len(rows) == limit:
                    return rows
                rows.append({"id": qa["id"], "title": article.get("title", ""), "context": paragraph["context"],
                             "question": qa["question"],
                             "answers": {"text": [a["text"] for a in qa["answers"]],
                                         "answer_start": [a["answer_start"] for a in qa["answers"]]}})
    return rows


def tokenize_windows(tokenizer: Any, rows: list[dict[str, Any]], args: argparse.Namespace) -> Any:
    """run_qa's tokenizer call: question first (leading whitespace stripped), only the context cut, overflowing
    windows sharing `doc_stride` tokens, offsets kept; no padding (the collator pads each batch)."""
    return tokenizer([r["question"].lstrip() for r in rows], [r["context"] for r in rows], truncation="only_second",
                     max_length=args.max_length, stride=args.doc_stride, return_overflowing_tokens=True,
                     return_offsets_mapping=True, padding=False)


def answer_positions(tokenized: Any, i: int, answers: dict[str, list[Any]], cls_id: int) -> tuple[int, int]:
    """run_qa's prepare_train_features labels for window `i`: the first answer's first and last token, or the
    [CLS] index twice when there is no answer or the window does not hold it whole."""
    input_ids, offsets = tokenized["input_ids"][i], tokenized["offset_mapping"][i]
    cls_index = input_ids.index(cls_id) if cls_id in input_ids else 0
    if not answers["answer_start"]:
        return cls_index, cls_index
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    sequence_ids = tokenized.sequence_ids(i)
    token_start = 0
    while sequence_ids[token_start] != 1:
        token_start += 1
    token_end = len(input_ids) - 1
    while sequence_ids[token_end] != 1:
        token_end -= 1
    if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
        return cls_index, cls_index
    while token_start < len(offsets) and offsets[token_start][0] <= start_char:
        token_start += 1
    while offsets[token_end][1] >= end_char:
        token_end -= 1
    return token_start - 1, token_end + 1


def prepare_train_features(tokenizer: Any, rows: list[dict[str, Any]], args: argparse.Namespace) -> Any:
    """run_qa's prepare_train_features as a Dataset: the model inputs and start/end positions of every window."""
    from datasets import Dataset

    tokenized = tokenize_windows(tokenizer, rows, args)
    samples = tokenized["overflow_to_sample_mapping"]
    positions = [answer_positions(tokenized, i, rows[samples[i]]["answers"], tokenizer.cls_token_id)
                 for i in range(len(tokenized["input_ids"]))]
    columns = {k: tokenized[k] for k in ("input_ids", "token_type_ids", "attention_mask") if k in tokenized}
    return Dataset.from_dict({**columns, "start_positions": [p[0] for p in positions],
                              "end_positions": [p[1] for p in positions]})


def prepare_validation_features(tokenizer: Any, rows: list[dict[str, Any]], args: argparse.Namespace
                                ) -> tuple[dict[str, list[Any]], list[str], list[list[Any]]]:
    """run_qa's prepare_validation_features: (the windows' model inputs, each window's question id, each window's
    offsets with None for tokens outside the context)."""
    tokenized = tokenize_windows(tokenizer, rows, args)
    samples = tokenized["overflow_to_sample_mapping"]
    example_ids, offsets = [], []
    for i, window_offsets in enumerate(tokenized["offset_mapping"]):
        sequence_ids = tokenized.sequence_ids(i)
        example_ids.append(rows[samples[i]]["id"])
        offsets.append([o if sequence_ids[t] == 1 else None for t, o in enumerate(window_offsets)])
    columns = {k: tokenized[k] for k in ("input_ids", "token_type_ids", "attention_mask") if k in tokenized}
    return columns, example_ids, offsets


def window_spans(start_logits: Any, end_logits: Any, offsets: list[Any]) -> list[tuple[float, int, int]]:
    """run_qa's candidate spans of one window: (start + end logit, first character, end character) of the pairs
    among the `N_BEST` best starts and ends that lie in the context, end not before start, at most
    `MAX_ANSWER_LENGTH` tokens."""
    import numpy as np

    spans = []
    starts = np.argsort(start_logits)[-1:-N_BEST - 1:-1].tolist()
    ends = np.argsort(end_logits)[-1:-N_BEST - 1:-1].tolist()
    for start in starts:
        for end in ends:
            if (start >= len(offsets) or end >= len(offsets) or offsets[start] is None or len(offsets[start]) < 2
                    or offsets[end] is None or len(offsets[end]) < 2):
                continue  # padding, or a token outside the context
            if end < start or end - start + 1 > MAX_ANSWER_LENGTH:
                continue
            spans.append((float(start_logits[start] + end_logits[end]), offsets[start][0], offsets[end][1]))
    return spans


def postprocess_qa_predictions(rows: list[dict[str, Any]], example_ids: list[str], offsets: list[list[Any]],
                               start_logits: Any, end_logits: Any) -> dict[str, str]:
    """run_qa's postprocess_qa_predictions (SQuAD v1.1, no null answer): {question id: the text of the best-scored
    span over the question's windows}, "" where no window has a valid span (run_qa answers "empty")."""
    windows_of: dict[str, list[int]] = collections.defaultdict(list)
    for k, example_id in enumerate(example_ids):
        windows_of[example_id].append(k)
    answers = {}
    for row in rows:
        spans = [s for k in windows_of[row["id"]] for s in window_spans(start_logits[k], end_logits[k], offsets[k])]
        best = max(spans, default=None, key=lambda s: s[0])
        answers[row["id"]] = "" if best is None else row["context"][best[1]:best[2]]
    return answers


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


def predict_dev(trainer: Any, columns: dict[str, list[Any]]) -> tuple[list[Any], list[Any]]:
    """Each dev window's start and end logits (cut to its length), in window order: predicted longest first (little
    padding per batch), then put back."""
    from datasets import Dataset

    order = sorted(range(len(columns["input_ids"])), key=lambda k: -len(columns["input_ids"][k]))
    dev_set = Dataset.from_dict({key: [values[k] for k in order] for key, values in columns.items()})
    trainer.args.train_sampling_strategy = "sequential"  # keep the length order, to put it back
    start, end = trainer.predict(dev_set).predictions[:2]
    lengths = [len(columns["input_ids"][k]) for k in order]
    return (in_file_order([s[:n] for s, n in zip(start, lengths, strict=True)], order),
            in_file_order([e[:n] for e, n in zip(end, lengths, strict=True)], order))


def dev_scores(dev_path: Path, dev_limit: int | None, predictions: dict[str, str]) -> dict[str, Any]:
    """The official SQuAD v1.1 scores (in %) of `predictions` on the first `dev_limit` dev questions."""
    from bertkit.data.squad import read_squad
    from bertkit.scoring.squad import score_squad

    questions = read_squad(dev_path).questions[:dev_limit]
    scores = score_squad(questions, predictions, rules="1.1")
    return {"f1": round(scores.f1, 3), "exact_match": round(scores.exact, 3), "questions": scores.total}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Read, fine-tune, predict dev, post-process, score: the result record."""
    started = time.perf_counter()
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        set_seed,
    )

    train_rows = read_squad_rows(Path(args.train), args.limit)
    dev_rows = read_squad_rows(Path(args.dev), args.dev_limit)
    set_seed(args.seed)  # before the head is made, so its initial weights follow --seed
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForQuestionAnswering.from_pretrained(args.model)
    train_set = prepare_train_features(tokenizer, train_rows, args)
    dev_columns, example_ids, offsets = prepare_validation_features(tokenizer, dev_rows, args)
    bf16 = bf16_is_native() if args.bf16 == "auto" else args.bf16 == "on"
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(model=model, args=training_arguments(args, out, bf16), train_dataset=train_set,
                          processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer))
        train_seconds = trainer.train().metrics["train_runtime"]
        eval_start = time.perf_counter()
        start_logits, end_logits = predict_dev(trainer, dev_columns)
        predictions = postprocess_qa_predictions(dev_rows, example_ids, offsets, start_logits, end_logits)
        eval_seconds = time.perf_counter() - eval_start
    windows = len(train_set)
    return {"dev": dev_scores(Path(args.dev), args.dev_limit, predictions),
            "train_samples_per_second": round(windows * args.epochs / train_seconds, 3),
            "train_seconds": round(train_seconds, 2), "dev_predict_seconds": round(eval_seconds, 2),
            "wall_seconds": round(time.perf_counter() - started, 2), "bf16": bf16,
            "train_questions": len(train_rows), "train_windows": windows, "dev_questions": len(dev_rows),
            "dev_windows": len(example_ids)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the packaged MiniLM encoder)")
    parser.add_argument("--train", default=str(DATA / "train.json"))
    parser.add_argument("--dev", default=str(DATA / "dev.json"))
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4, help="bertkit's --lr auto for MiniLM (hidden 384)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.01, help="bertkit's default (run_qa's: 0)")
    parser.add_argument("--limit", type=int, default=None, help="train on the first LIMIT questions only")
    parser.add_argument("--dev-limit", type=int, default=None, help="score the first DEV_LIMIT dev questions only")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                        help="auto: bf16 where it runs natively (see the module docstring)")
    parser.add_argument("--out", default=None, help="also write the result JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.model = args.model or minilm_folder()
    return trainer_side_result("question-answering trainer side (run_qa idiom, Trainer at its best)", args, run(args))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
