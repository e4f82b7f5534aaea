"""`bertkit predict` and `bertkit evaluate` with a question-answering model: the answers as a table (question, answer,
its characters in the passage, probability and score), or `--json` one JSON object per question per line (JSONL,
printed as the chunks come); evaluate's official scores with their intervals, the v2.0 parts and best threshold, F1
by question word and the kinds of errors."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.markup import escape

from bertkit.cli.output import View, emit_json, info, out_console, table
from bertkit.commands.evaluate import EvaluateConfig, EvaluateResult
from bertkit.commands.predict import PredictConfig, PredictResult
from bertkit.families.span_runs import AnsweredChunk
from bertkit.scoring.answer_outputs import answer_row


def print_answers_jsonl(chunk: AnsweredChunk) -> None:
    """`on_chunk` of `predict.run` under --json: one line per question."""
    sys.stdout.writelines(json.dumps(answer_row(a), ensure_ascii=False) + "\n" for a in chunk.answers)
    sys.stdout.flush()


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def show_answer_predictions(result: PredictResult, cfg: PredictConfig, view: View) -> None:
    """The kept answers as a table (--json: they were printed as JSONL already), and how the passages were read."""
    total = result.n_questions or 0
    if not view.json:
        shown = result.answers
        rows = [[escape(_short(a.question)), escape(_short(a.answer)) if a.answer else "(no answer)",
                 "" if a.start is None else f"{a.start}:{a.end}", a.probability, a.score] for a in shown]
        title = f"{total} question(s)" + (f" (first {len(shown)})" if len(shown) < total else "")
        out_console.print(table(title, ["question", "answer", "chars", "probability", "score"], rows,
                                prose=("question", "answer")))
    null = f"; no answer when its score beats the best span's by more than {result.threshold:g}" \
        if result.allow_null else ""
    info(f"question-answering model: windows of {result.max_length} tokens sharing {result.doc_stride}, "
         f"{result.dtype}{null}", view.quiet)
    if cfg.out:
        kind = "the official {id: answer} mapping" if cfg.out.lower().endswith(".json") else "one row per question"
        info(f"wrote {cfg.out} ({total} questions, {kind})", view.quiet)


def _interval(record: Any, name: str) -> str:
    low_high = (record.get("intervals") or {}).get(name)
    return f"{low_high[0]:.1f}-{low_high[1]:.1f}" if low_high else ""


def show_answer_evaluation(result: EvaluateResult, cfg: EvaluateConfig, view: View) -> None:
    """The official scores (in %) with their 95% intervals over questions, the v2.0 parts and best threshold, F1 by
    question word, the kinds of answers, and the files written."""
    if view.json:
        emit_json(result)
        return
    record = result.metrics.to_json()
    rows = [[name, record[name], _interval(record, name)] for name in ("exact_match", "f1")]
    rows += [[name, record[name], ""] for name in ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact",
                                                   "best_f1") if name in record]
    title = f"{result.model} on {result.data} ({result.rows} questions, SQuAD v{record.get('rules')} rules, in %)"
    out_console.print(table(title, ["metric", "value", "95% interval"], rows))
    words = record.get("by_question_word") or []
    out_console.print(table("by question word", ["word", "questions", "exact_match", "f1"],
                            [[w["word"], w["total"], w["exact"], w["f1"]] for w in words]))
    kinds = record.get("kinds") or {}
    info("answers: " + ", ".join(f"{kind.replace('_', ' ')} {count}" for kind, count in kinds.items()), view.quiet)
    if "best_f1_threshold" in record:
        applied = f"; scored at {record['threshold']:g}" if "threshold" in record else ""
        info(f"best no-answer threshold: {record['best_f1_threshold']:g} (F1), {record['best_exact_threshold']:g} "
             f"(exact match){applied}", view.quiet)
    if result.max_length is not None:
        info(f"read in windows of {result.max_length} tokens sharing {result.doc_stride}, {result.dtype}", view.quiet)
    if cfg.out:
        files = "errors.csv" if cfg.predictions is not None else "predictions.json, answers.jsonl, errors.csv"
        info(f"wrote {cfg.out}/metrics.json, {files}", view.quiet)
