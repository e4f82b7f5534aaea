"""Question answering on TyDi QA GoldP English (issue 55): does `bertkit finetune` on SQuAD-format data learn?

Three readers of the same 440 dev questions (../shared/data/tydiqa_goldp_en/dev.json), scored by the official SQuAD
v1.1 exact match and F1 (`bertkit.scoring.squad`, in %):
  overlap     the passage sentence with the most question words (`scoring.squad.overlap_answers`): the baseline
  bertkit     `bertkit finetune` (defaults: 384-token windows sharing 128, --lr auto, batch 32) on the training
              questions, its best/ scored by `bertkit evaluate` (95% bootstrap intervals over questions)
  plain transformers  the same best/ folder in plain transformers (AutoModelForQuestionAnswering, AutoTokenizer, and
              the span decoding of transformers 4.x's question-answering pipeline, which transformers 5 removed) on
              the first --transformers-sample dev questions: how many of its answers are bertkit predict's, text for
              text
On a shared 2-core CPU the full defaults (3 epochs of 3,691 questions) take hours; --limit and --epochs say what ran
(the dev set is always whole: --limit N keeps the first N questions of each split, and dev has 440). Writes
benchmarks/results/spans-tydiqa.json.
    python benchmarks/bench_spans.py [--limit 2000] [--epochs 2] [--out runs/tydiqa]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from anchor_common import load_avg, machine_record  # noqa: E402

from bertkit.measure.timing import Stopwatch  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data" / "tydiqa_goldp_en"


def overlap_scores(dev: Path) -> dict[str, float]:
    """The overlap baseline's official scores on the dev questions."""
    from bertkit.data.squad import read_squad
    from bertkit.scoring.squad import overlap_answers, score_squad

    corpus = read_squad(dev)
    scores = score_squad(corpus.questions, overlap_answers(corpus.questions), rules=corpus.version, n_boot=1000)
    return {"exact_match": scores.exact, "f1": scores.f1, "f1_interval": scores.f1_interval}


def plain_transformers_answer(model: object, tokenizer: object, question: str, context: str, *, max_length: int,
                              doc_stride: int, max_answer_length: int = 30) -> str:
    """The answer plain transformers gives: the folder's `AutoModelForQuestionAnswering` and `AutoTokenizer`, read
    as transformers 4.x's question-answering pipeline read them (transformers 5 removed that pipeline): the passage
    in windows (`truncation="only_second"`, `stride`), in each the softmax of the start and of the end scores over
    the passage's tokens, the span with the largest product of at most `max_answer_length` tokens
    (`decode_spans`), the best window's span cut from the passage by its tokens' character offsets."""
    import numpy as np
    import torch

    enc = tokenizer(question.lstrip(), context, truncation="only_second", max_length=max_length, stride=doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt")
    inputs = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
    with torch.no_grad():
        out = model(**inputs)
    best, answer = -1.0, ""
    for k in range(len(enc["input_ids"])):
        passage = np.array([s == 1 for s in enc.sequence_ids(k)])
        probs = []
        for logits in (out.start_logits[k].numpy(), out.end_logits[k].numpy()):
            masked = np.where(passage, logits, -10000.0)
            weights = np.exp(masked - masked.max())
            probs.append(weights / weights.sum())
        spans = np.tril(np.triu(np.outer(*probs)), max_answer_length - 1)
        start, end = np.unravel_index(int(spans.argmax()), spans.shape)
        if spans[start, end] > best:
            offsets = enc["offset_mapping"][k]
            best, answer = float(spans[start, end]), context[int(offsets[start][0]):int(offsets[end][1])]
    return answer


def transformers_agreement(model: Path, dev: Path, sample: int) -> dict[str, object]:
    """How many of the first `sample` dev questions plain transformers (`plain_transformers_answer`, at the window and
    doc stride the folder records) answers with the text `bertkit predict` gives."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertkit.commands.predict import PredictConfig
    from bertkit.commands.predict import run as predict
    from bertkit.data.squad import read_squad
    from bertkit.models.metadata import saved_reading

    questions = read_squad(dev).questions[:sample]
    ours = {a.id: a.answer for a in predict(PredictConfig.of(model=str(model), data=str(dev), limit=sample),
                                            keep=None).answers}
    reading = saved_reading(model)
    assert reading is not None and reading.stride is not None
    network, tokenizer = AutoModelForQuestionAnswering.from_pretrained(str(model)).eval(), \
        AutoTokenizer.from_pretrained(str(model))
    theirs = {q.id: plain_transformers_answer(network, tokenizer, q.question, q.context,
                                              max_length=reading.max_length, doc_stride=reading.stride)
              for q in questions}
    differ = [{"id": q.id, "bertkit": ours[q.id], "transformers": theirs[q.id]} for q in questions
              if ours[q.id] != theirs[q.id]]
    return {"questions": len(questions), "same_answer": len(questions) - len(differ), "differ": differ}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm-offline")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each split (dev has 440)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default=None, help="the run's folder (default: a temporary one)")
    parser.add_argument("--transformers-sample", type=int, default=100)
    args = parser.parse_args()
    from bertkit.commands.evaluate import EvaluateConfig
    from bertkit.commands.evaluate import run as evaluate
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-spans-")) / "run"
    train, dev = DATA / "train.json", DATA / "dev.json"
    record: dict[str, object] = {"settings": {"model": args.model, "limit": args.limit, "epochs": args.epochs,
                                              "data": str(DATA.name), "out": str(out)}, **machine_record()}
    record["overlap_baseline"] = overlap_scores(dev)
    with Stopwatch() as watch:
        trained = finetune(FinetuneConfig.of(model=args.model, data=str(train), dev=str(dev), out=str(out),
                                             epochs=args.epochs, limit=args.limit), progress=True)
    summary = trained.metrics
    record["finetune"] = {"seconds": round(watch.seconds, 1), "load_avg_after": load_avg(),
                          "train_samples_per_second": summary["train_samples_per_second"],
                          "learning_rate": summary["learning_rate"], "epoch_table": summary["epoch_table"],
                          "best_step": summary["best_step"], "baseline": summary["baseline"]}
    scored = evaluate(EvaluateConfig.of(model=str(out / "best"), data=str(dev)))
    metrics = scored.metrics.to_json()
    record["bertkit"] = {key: metrics[key] for key in ("exact_match", "f1", "intervals", "n", "kinds",
                                                       "by_question_word")}
    record["plain_transformers"] = transformers_agreement(out / "best", dev, args.transformers_sample)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "spans-tydiqa.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("overlap_baseline", "bertkit")}, indent=1, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
