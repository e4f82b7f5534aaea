"""Answering questions (issue 55): `bertkit predict` on SQuAD data against plain transformers at its best batch size,
side by side on the same model, questions and windows.

transformers 5 removed `pipeline("question-answering")`, so the plain side is its reading done by hand, batched as the
pipeline's `batch_size` batched it: each question's passage in windows (`truncation="only_second"`, the doc stride),
`batch_size` windows per forward in the order they come, padded to the longest of the batch, then the pipeline's span
decoding per window (`bench_spans.plain_transformers_answer`'s: softmax of starts and ends over the passage, the best
product of at most 30 tokens, the best window's span). It runs at `--batch-sizes` (1, 8 and 32) and its best is compared.
bertkit's side is the library call `bertkit predict --data dev.json` makes, timed whole (the model's loading
included, which only counts against it). Both read MiniLM with a new question-answering head (random: speed only;
the answers are not scored) saved as a plain transformers folder, fp32, windows of 384 tokens sharing 128. Rounds
alternate A B ... B A so a drift in the machine's load hits both sides alike.

    .venv/bin/python benchmarks/bench_qa_predict.py [--limit 440] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from anchor_common import load_avg, machine_record  # noqa: E402
from ner_trainer_side import minilm_folder  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "tydiqa_goldp_en"
MAX_LENGTH, DOC_STRIDE, MAX_ANSWER = 384, 128, 30
BATCH_SIZES = (1, 8, 32)


def qa_folder(out: Path) -> Path:
    """MiniLM with a new (random, seeded) question-answering head, saved as a plain transformers folder."""
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    torch.manual_seed(0)
    AutoModelForQuestionAnswering.from_pretrained(minilm_folder()).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm_folder()).save_pretrained(out)
    return out


def window_answers(enc, start_logits, end_logits, contexts) -> dict[int, tuple[float, str]]:
    """{question index: (the best window's span probability, its text)} over the windows of `enc`."""
    import numpy as np

    best: dict[int, tuple[float, str]] = {}
    for k in range(len(start_logits)):
        q = int(enc["overflow_to_sample_mapping"][k])
        passage = np.array([s == 1 for s in enc.sequence_ids(k)] + [False] * (len(start_logits[k]) - len(enc.sequence_ids(k))))
        probs = []
        for logits in (start_logits[k], end_logits[k]):
            masked = np.where(passage, logits, -10000.0)
            weights = np.exp(masked - masked.max())
            probs.append(weights / weights.sum())
        spans = np.tril(np.triu(np.outer(*probs)), MAX_ANSWER - 1)
        start, end = np.unravel_index(int(spans.argmax()), spans.shape)
        if spans[start, end] > best.get(q, (-1.0, ""))[0]:
            offsets = enc["offset_mapping"][k]
            best[q] = (float(spans[start, end]), contexts[q][int(offsets[start][0]):int(offsets[end][1])])
    return best


def plain_answers(model, tokenizer, questions, batch_size: int) -> list[str]:
    """Every question's answer as the removed pipeline gave it, `batch_size` windows per forward."""
    import torch

    enc = tokenizer([q.question.lstrip() for q in questions], [q.context for q in questions],
                    truncation="only_second", max_length=MAX_LENGTH, stride=DOC_STRIDE,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    starts, ends = [], []
    with torch.inference_mode():
        for first in range(0, len(enc["input_ids"]), batch_size):
            batch = tokenizer.pad({k: enc[k][first:first + batch_size] for k in names}, return_tensors="pt")
            out = model(**batch)
            starts += list(out.start_logits.numpy())
            ends += list(out.end_logits.numpy())
    best = window_answers(enc, starts, ends, [q.context for q in questions])
    return [best[i][1] for i in range(len(questions))]


def time_plain(folder: Path, questions, batch_size: int) -> dict:
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    model = AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    start = time.perf_counter()
    answers = plain_answers(model, tokenizer, questions, batch_size)
    seconds = time.perf_counter() - start
    return {"side": f"plain transformers, batch {batch_size}", "batch_size": batch_size, "seconds": round(seconds, 2),
            "questions_per_second": round(len(questions) / seconds, 2), "answers": len(answers)}


def time_bertkit(folder: Path, dev: Path, limit: int) -> dict:
    from bertkit.commands.predict import PredictConfig
    from bertkit.commands.predict import run as predict

    start = time.perf_counter()
    result = predict(PredictConfig.of(model=str(folder), data=str(dev), limit=limit, precision="fp32"), keep=None)
    seconds = time.perf_counter() - start
    return {"side": "bertkit predict", "seconds": round(seconds, 2), "questions_per_second": round(limit / seconds, 2),
            "answers": len(result.answers), "includes_model_loading": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=440)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-sizes", default=",".join(map(str, BATCH_SIZES)),
                        help="the plain side's batch sizes (comma-separated); its best is compared")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "qa-predict.json"))
    args = parser.parse_args()
    from bertkit.data.squad import read_squad

    dev = DATA / "dev.json"
    questions = list(read_squad(dev).questions[:args.limit])
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = qa_folder(Path(tmp) / "qa")
        sizes = tuple(int(b) for b in args.batch_sizes.split(","))
        sides = ["bertkit", *sizes]
        for round_ in range(args.rounds):
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                before = load_avg()
                run = (time_bertkit(folder, dev, len(questions)) if side == "bertkit" else
                       time_plain(folder, questions, int(side)))
                runs.append({**run, "round": round_, "load_before": before, "load_after": load_avg()})
                print(json.dumps(runs[-1]), flush=True)
    ours = max(r["questions_per_second"] for r in runs if r["side"] == "bertkit predict")
    plain = {b: max(r["questions_per_second"] for r in runs if r.get("batch_size") == b) for b in sizes}
    best = max(plain, key=plain.get)
    result = {"benchmark": "qa-predict", "issue": 55, "machine": machine_record(), "questions": len(questions),
              "data": str(dev), "model": "minilm-offline + a new question-answering head (random: speed only)",
              "max_length": MAX_LENGTH, "doc_stride": DOC_STRIDE, "precision": "fp32", "runs": runs,
              "bertkit_questions_per_second": ours, "plain_questions_per_second_by_batch": plain,
              "plain_best_batch_size": best, "bertkit_over_plain_at_its_best": round(ours / plain[best], 3)}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))


if __name__ == "__main__":
    main()
