"""A question-answering model's answers into files: predict's --out, chunk by chunk (`open_answer_predictions`: a
`.jsonl` holds one row per question - id, question, answer, its characters start:end in the context, score,
probability and the n-best candidates -, a `.json` the official SQuAD predictions mapping {id: answer}), and
evaluate's errors CSV (`write_answer_errors`: the questions not answered exactly, most confident first). Written to
a temp file renamed over the target at the end, so a failure leaves the previous file as it was."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.scoring.answers import PredictedAnswer
from bertkit.scoring.squad import ErrorRow

ANSWER_OUT_SUFFIXES = (".jsonl", ".json")
ERROR_COLUMNS = ("id", "question", "prediction", "gold", "kind", "f1", "confidence")


def answer_out_problems(out: str | None) -> list[str]:
    """--out for answers: .jsonl (a row per question) or .json (the official {id: answer} mapping)."""
    if out is None or Path(out).suffix.lower() in ANSWER_OUT_SUFFIXES:
        return []
    return [f"--out {out}: answers are written as .jsonl (one row per question: answer, character offsets, score, "
            f"n-best) or .json (the official SQuAD predictions {{id: answer}}). Pass --out "
            f"{Path(out).with_suffix('.jsonl').name} or --out {Path(out).with_suffix('.json').name}."]


def answer_row(answer: PredictedAnswer) -> dict[str, Any]:
    """A question's row in answers.jsonl (and predict --json): its answer ("" for none) with its characters start:end
    in the context (None for none), score and probability, the null odds (SQuAD v2.0 models) and the candidates."""
    row: dict[str, Any] = {"id": answer.id, "question": answer.question, "answer": answer.answer,
                           "start": answer.start, "end": answer.end, "score": answer.score,
                           "probability": answer.probability}
    if answer.null_score is not None:
        row["null_odds"] = answer.null_odds
    row["n_best"] = [{"text": c.text, "start": c.start, "end": c.end, "score": round(c.score, 6),
                      "probability": round(c.probability, 6)} for c in answer.n_best]
    return row


@contextmanager
def open_answer_predictions(path: Path, vouch: Callable[[tuple[int, str]], None] | None = None
                            ) -> Iterator[Callable[[Sequence[PredictedAnswer]], None]]:
    """`append(answers)`: write a chunk's answers (.jsonl: as they come; .json: the mapping, once all came)."""
    from bertkit.io import atomic

    problems = answer_out_problems(str(path))
    if problems:
        raise UserError(problems[0])
    mapping: dict[str, str] | None = {} if path.suffix.lower() == ".json" else None
    with atomic.atomic_path(path, vouch) as tmp, open(tmp, "w", encoding="utf-8") as handle:

        def append(answers: Sequence[PredictedAnswer]) -> None:
            if mapping is not None:
                mapping.update((a.id, a.answer) for a in answers)
            else:
                handle.writelines(json.dumps(answer_row(a), ensure_ascii=False) + "\n" for a in answers)

        yield append
        if mapping is not None:
            json.dump(mapping, handle, ensure_ascii=False, indent=1)
            handle.write("\n")


def write_answer_errors(path: Path, rows: Sequence[ErrorRow]) -> int:
    """The wrong answers as a CSV (`ERROR_COLUMNS`, gold answers joined by " | "), in the order given (most confident
    first: `scoring.squad.error_rows`). Returns the rows written."""
    from bertkit.io import atomic

    with atomic.atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ERROR_COLUMNS)
        writer.writeheader()
        writer.writerows(row.to_json() for row in rows)
    return len(rows)
