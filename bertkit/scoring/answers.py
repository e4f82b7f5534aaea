"""A question-answering model's start and end logits per window -> one answer per question, as transformers'
run_qa.py post-processes them (`postprocess_qa_predictions`): in every window of a question the `n_best` highest
start and end logits are paired, a pair kept when both tokens are context tokens, the end is not before the start
and the span is at most `max_answer_length` tokens; a span scores its start logit plus its end logit; the `n_best`
best spans of all windows are the candidates, the best the answer, its text cut from the context by the tokens'
character offsets. With unanswerable questions (SQuAD v2.0, `allow_null`) the null answer scores the smallest
[CLS] start + end logit over the question's windows; the question is left unanswered ("") when the null score
exceeds the best span's by more than `null_threshold` (`null_odds` = null score - best span score > threshold).

Where run_qa.py invents an answer ("empty", scored 0) because no span passed the filters, the answer here is ""
with no score. Only numpy: the logits come in as arrays (one per window, or a padded window x width array)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bertkit.data.squad import Question
from bertkit.encoding.qa_windows import NOT_CONTEXT, QAWindows, qa_windows
from bertkit.encoding.reading import doc_stride_option
from bertkit.options import RUN, option


@dataclass(frozen=True)
class AnswerSettings:
    """How spans become answers: the candidates kept per question (`n_best`, run_qa.py's 20), the longest answer in
    tokens (`max_answer_length`, 30), whether a question may have no answer (`allow_null`: SQuAD v2.0) and the null
    score's margin (`null_threshold`, run_qa.py's `null_score_diff_threshold`, 0.0)."""

    n_best: int = 20
    max_answer_length: int = 30
    allow_null: bool = False
    null_threshold: float = 0.0

    KEYS = ("n_best", "max_answer_length", "allow_null", "null_threshold")

    def problems(self) -> list[str]:
        return [f"--{key.replace('_', '-')} {getattr(self, key)} must be at least 1. Pass a positive number."
                for key in ("n_best", "max_answer_length") if getattr(self, key) < 1]

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KEYS}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> AnswerSettings:
        kinds = {"n_best": int, "max_answer_length": int, "allow_null": bool, "null_threshold": float}
        return cls(**{key: kinds[key](record[key]) for key in cls.KEYS if key in record})


@dataclass(frozen=True)
class AnswerOptions:
    """How a question-answering model's scores become answers (predict, evaluate): the candidates, the longest
    answer, the no-answer threshold of a SQuAD v2.0 model, and the windows' overlap (--doc-stride)."""

    ADVANCED_OPTIONS = ("n_best", "doc_stride")

    n_best: int = option(20, "Questions on passages: candidate answers kept per question (run_qa.py's --n_best_size); "
                         "predict writes them as each answer's n_best.", panel=RUN, above=0, families=("spans",))
    max_answer_length: int = option(30, "Questions on passages: the longest answer, in tokens (run_qa.py's "
                                    "--max_answer_length).", panel=RUN, above=0, families=("spans",))
    null_threshold: float | None = option(None, "Questions on passages, a SQuAD v2.0 model: leave a question "
                                          "unanswered when the no-answer score beats the best span's by more than "
                                          "this (run_qa.py's --null_score_diff_threshold). Default: the threshold "
                                          "the model's dev set chose (its record), else 0.", panel=RUN,
                                          families=("spans",))
    doc_stride: int | None = doc_stride_option()

    def settings(self, allow_null: bool, recorded_threshold: float | None) -> AnswerSettings:
        """The answer settings these options ask for, a model that may leave questions unanswered (`allow_null`)
        keeping its `recorded_threshold` unless --null-threshold says otherwise."""
        threshold = self.null_threshold if self.null_threshold is not None else recorded_threshold
        return AnswerSettings(self.n_best, self.max_answer_length, allow_null, float(threshold or 0.0))


@dataclass(frozen=True)
class AnswerCandidate:
    """One of a question's `n_best` candidates: its text, its characters `start:end` in the context (None for the
    null answer), its score (start + end logit) and its probability (softmax over the candidates' scores)."""

    text: str
    start: int | None
    end: int | None
    score: float
    start_logit: float
    end_logit: float
    probability: float


@dataclass(frozen=True)
class PredictedAnswer:
    """A question's answer: its text ("" for none), characters `start:end` in the context (None for none), the
    chosen candidate's score and probability (the null answer's where it won; None without any candidate), the null
    answer's score and `null_odds` (null score - best span score; None without unanswerable questions or without a
    span), and the candidates, best first."""

    id: str
    question: str
    answer: str
    start: int | None
    end: int | None
    score: float | None
    probability: float | None
    null_score: float | None
    null_odds: float | None
    best_span: str
    """The best span's text even where the null answer won: what a null-threshold search scores."""
    n_best: tuple[AnswerCandidate, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def window_spans(start: np.ndarray, end: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 settings: AnswerSettings) -> tuple[np.ndarray, np.ndarray]:
    """(start tokens, end tokens) of one window's spans worth scoring, in run_qa.py's order (each of the `n_best`
    best starts, best first, with each of the `n_best` best ends): both context tokens, end >= start, at most
    `max_answer_length` tokens."""
    top_start = np.argsort(start)[-1:-settings.n_best - 1:-1]
    top_end = np.argsort(end)[-1:-settings.n_best - 1:-1]
    s, e = (grid.ravel() for grid in np.meshgrid(top_start, top_end, indexing="ij"))
    keep = (starts[s] != NOT_CONTEXT) & (ends[e] != NOT_CONTEXT) & (e >= s) & (e - s + 1 <= settings.max_answer_length)
    return s[keep], e[keep]


def _question_candidates(windows: QAWindows, ks: range, start_logits: Sequence[Any], end_logits: Sequence[Any],
                         settings: AnswerSettings) -> tuple[list[tuple[float, float, float, int, int]], Any]:
    """(every kept span of a question's windows as (score, start logit, end logit, first char, end char), in window
    order; the smallest null (score, start logit, end logit) over the windows)."""
    spans, null = [], None
    for k in ks:
        n = int(windows.lengths[k])
        start, end = np.asarray(start_logits[k])[:n], np.asarray(end_logits[k])[:n]
        cls = int(windows.cls_index[k])
        if null is None or null[0] > start[cls] + end[cls]:
            null = (start[cls] + end[cls], start[cls], end[cls])
        starts, ends = windows.char_starts[k], windows.char_ends[k]
        s, e = window_spans(start, end, starts, ends, settings)
        spans.extend(zip((start[s] + end[e]).tolist(), start[s].tolist(), end[e].tolist(), starts[s].tolist(),
                         ends[e].tolist(), strict=True))
    return spans, null


def question_answer(question: Question, windows: QAWindows, ks: range, start_logits: Sequence[Any],
                    end_logits: Sequence[Any], settings: AnswerSettings) -> PredictedAnswer:
    """One question's answer from its windows `ks` (see the module docstring)."""
    spans, null = _question_candidates(windows, ks, start_logits, end_logits, settings)
    null_row = (float(null[0]), float(null[1]), float(null[2]), None, None)
    rows: list[tuple[float, float, float, int | None, int | None]] = list(spans)
    if settings.allow_null:
        rows.append(null_row)
    order = np.argsort(-np.asarray([r[0] for r in rows], dtype=np.float64), kind="stable")[: settings.n_best]
    chosen = [rows[i] for i in order]
    if settings.allow_null and null_row not in chosen:
        chosen.append(null_row)
    scores = np.asarray([r[0] for r in chosen], dtype=np.float64)
    weights = np.exp(scores - scores.max()) if len(scores) else scores
    probs = weights / weights.sum() if len(scores) else scores
    candidates = tuple(AnswerCandidate("" if s is None else question.context[s:e], s, e, score, sl, el, float(p))
                       for (score, sl, el, s, e), p in zip(chosen, probs, strict=True))
    return _chosen(question, candidates, float(null[0]) if settings.allow_null else None, settings)


def _chosen(question: Question, candidates: tuple[AnswerCandidate, ...], null_score: float | None,
            settings: AnswerSettings) -> PredictedAnswer:
    """The answer among the candidates: the best one with text, unless the null answer beats it by more than the
    threshold (v2.0)."""
    best = next((c for c in candidates if c.text), None)
    if best is None:
        return PredictedAnswer(question.id, question.question, "", None, None, None, None, null_score, None, "",
                               candidates)
    odds = None if null_score is None else null_score - best.start_logit - best.end_logit
    if odds is not None and odds > settings.null_threshold:
        null = next(c for c in candidates if c.start is None)
        return PredictedAnswer(question.id, question.question, "", None, None, null.score, null.probability,
                               null_score, odds, best.text, candidates)
    return PredictedAnswer(question.id, question.question, best.text, best.start, best.end, best.score,
                           best.probability, null_score, odds, best.text, candidates)


def predicted_answers(questions: Sequence[Question], windows: QAWindows, start_logits: Sequence[Any],
                      end_logits: Sequence[Any], settings: AnswerSettings | None = None) -> list[PredictedAnswer]:
    """Every question's answer, in question order. `start_logits[k]`/`end_logits[k]`: window k's logits (its
    length, or padded wider: positions past the window's length are not read), as `qa_windows.window_rows` gives
    them or a (windows, width) array."""
    settings = settings or AnswerSettings()
    if len(questions) != windows.n_questions or len(start_logits) != windows.n_windows:
        raise ValueError(f"{len(questions)} questions and {len(start_logits)} windows of logits, but the windows "
                         f"were made of {windows.n_questions} questions in {windows.n_windows} windows")
    bounds = windows.question_bounds()
    return [question_answer(q, windows, range(int(bounds[i]), int(bounds[i + 1])), start_logits, end_logits, settings)
            for i, q in enumerate(questions)]


def official_predictions(answers: Sequence[PredictedAnswer]) -> dict[str, str]:
    """{question id: answer text}: the predictions file the official SQuAD evaluation scripts read."""
    return {a.id: a.answer for a in answers}


def null_odds(answers: Sequence[PredictedAnswer]) -> dict[str, float | None]:
    """{question id: null score - best span score} (run_qa.py's null_odds.json; the official v2.0 script's
    --na-prob-file); None where there is no null answer or no span."""
    return {a.id: a.null_odds for a in answers}


CHUNK_QUESTIONS = 256
"""Questions read, answered and written at a time: their windows' logits are the most predict, evaluate and a
distillation's report hold."""


def answered(answerer: Any, questions: Sequence[Question], settings: AnswerSettings, batch_size: int,
             bar: Any = None) -> Iterator[list[PredictedAnswer]]:
    """The questions' answers by `answerer` (a `models.answerer.SavedAnswerer`, or its ONNX export's),
    `CHUNK_QUESTIONS` at a time (each chunk's windows read, scored and post-processed)."""
    from bertkit.models.answerer import answer_logits  # torch

    for start in range(0, len(questions), CHUNK_QUESTIONS):
        chunk = questions[start:start + CHUNK_QUESTIONS]
        windows = qa_windows(answerer.tokenizer, chunk, answerer.reading)
        starts, ends = answer_logits(answerer, windows, batch_size)
        yield predicted_answers(chunk, windows, starts, ends, settings)
        if bar is not None:
            bar.update(len(chunk))
