"""SQuAD's exact match and F1, exactly as the official evaluation scripts compute them (evaluate-v1.1.py and
evaluate-v2.0.py), and what a person reads next to them: bootstrap intervals over questions, the kinds of errors,
F1 by question word, and the wrong answers most confident first.

Both scripts normalise an answer the same way (lower case, punctuation removed, the articles a/an/the removed,
whitespace collapsed), score a question by its best gold answer, and report percentages. They differ, and
`rules` chooses which: v1.1 takes every gold answer as written, and F1 is 0 when the normalised prediction and gold
share no token (so also when both are empty); v2.0 drops gold answers that normalise to nothing (a question left
without one has the single gold answer "", as an unanswerable one), F1 is 1 when both sides are empty and 0 when
only one is, and it reports the answerable (HasAns) and unanswerable (NoAns) questions apart, and with the
per-question null odds (--na-prob-file) the threshold that would score best (`find_best_thresh`).

A question without a prediction scores 0 and counts in the total (the v1.1 script's rule, for both: the v2.0
script leaves it out of the total and then fails on its breakdowns). `null_threshold` with `null_odds` applies the
v2.0 script's --na-prob-thresh: a question whose odds exceed it counts as answered "" whatever was predicted (v2.0
rules only; the search for the best threshold reads the predictions as given)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bertkit.data.squad import Question
from bertkit.errors import UserError
from bertkit.scoring.intervals import resample_counts

RULES = ("1.1", "2.0")
ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
PUNCTUATION = frozenset(string.punctuation)
QUESTION_WORDS = ("what", "who", "when", "where", "how", "which", "why")
"""The question words scores are broken down by (a question with none of them is "other")."""
WORD_ALIASES = {"whom": "who", "whose": "who"}
ERROR_KINDS = ("missing", "answered_unanswerable", "missed_answerable", "no_overlap", "partial_overlap")
"""What a wrong answer is, in the order a question is tested: no prediction; an answer to an unanswerable question;
no answer to an answerable one; an answer sharing no token with any gold answer; one sharing some."""


def normalize_answer(text: str) -> str:
    """The official scripts' normalize_answer: lower case, punctuation removed, articles removed, whitespace
    collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """evaluate-v1.1.py's f1_score: token F1 of the normalised texts, 0 when they share no token."""
    predicted, truth = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((Counter(predicted) & Counter(truth)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def f1_v2(prediction: str, gold: str) -> float:
    """evaluate-v2.0.py's compute_f1: as v1.1, but when either side normalises to nothing, 1 if both do, else 0."""
    predicted, truth = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not truth:
        return float(predicted == truth)
    return f1_v1(prediction, gold)


def gold_texts(question: Question, rules: str) -> list[str]:
    """The gold answers a question is scored against: v1.1 every one; v2.0 those that normalise to something, or
    [""] when none does."""
    texts = [a.text for a in question.answers]
    if rules == "1.1":
        return texts
    return [t for t in texts if normalize_answer(t)] or [""]


@dataclass(frozen=True)
class QuestionScore:
    """One question's scores (0 or 1, and F1 in [0, 1]), what was predicted (None: nothing), its gold answers as
    scored, whether it has an answer (the v2.0 script's has_ans: any gold answer), and what kind of answer it was:
    "correct" or one of `ERROR_KINDS`."""

    id: str
    question: str
    prediction: str | None
    gold: tuple[str, ...]
    has_answer: bool
    exact: float
    f1: float
    kind: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def answer_kind(has_answer: bool, prediction: str | None, exact: float, f1: float) -> str:
    if prediction is None:
        return "missing"
    if exact == 1:
        return "correct"
    if not has_answer:  # gold "" only: a wrong answer here is a prediction with text
        return "answered_unanswerable"
    if not normalize_answer(prediction):
        return "missed_answerable"
    return "no_overlap" if f1 == 0 else "partial_overlap"


def question_score(question: Question, prediction: str | None, rules: str) -> QuestionScore:
    """A question's best exact match and F1 over its gold answers under `rules` (0 and 0 without a prediction)."""
    if rules == "1.1" and not question.answers:
        raise UserError(f"Question {question.id!r} has no gold answer, which SQuAD v1.1 scoring cannot score. "
                        f"Valid: v1.1 rules for sets where every question has an answer. Score with the v2.0 rules.")
    gold = gold_texts(question, rules)
    f1 = f1_v1 if rules == "1.1" else f1_v2
    exact = 0.0 if prediction is None else max(exact_match(prediction, g) for g in gold)
    overlap = 0.0 if prediction is None else max(f1(prediction, g) for g in gold)
    has_answer = bool(question.answers)
    return QuestionScore(question.id, question.question, prediction, tuple(gold), has_answer, exact, overlap,
                         answer_kind(has_answer, prediction, exact, overlap))


def with_null_threshold(score: QuestionScore, odds: float | None, threshold: float) -> QuestionScore:
    """The v2.0 script's apply_no_ans_threshold: null odds above `threshold` count as the answer ""."""
    if odds is None or not odds > threshold or score.prediction is None:
        return score
    value = float(not score.has_answer)
    return QuestionScore(score.id, score.question, "", score.gold, score.has_answer, value, value,
                         answer_kind(score.has_answer, "", value, value))


def best_threshold(raw: Sequence[QuestionScore], odds: Mapping[str, float | None], metric: str) -> tuple[float, float]:
    """The v2.0 script's find_best_thresh on one metric ("exact" or "f1"): (the best score in %, its threshold).
    From every question counted as answered "", the questions are answered as predicted in order of rising null
    odds; the threshold is the odds where the total peaks. Questions without a prediction or without odds (None)
    stay at their start; the percentage is over every question."""
    current = sum(1.0 for s in raw if not s.has_answer and s.prediction is not None)
    best, threshold = current, 0.0
    ranked = sorted((s for s in raw if s.prediction is not None and odds.get(s.id) is not None),
                    key=lambda s: float(odds[s.id]))  # type: ignore[arg-type]
    for s in ranked:
        current += getattr(s, metric) if s.has_answer else (-1.0 if s.prediction else 0.0)
        if current > best:
            best, threshold = current, float(odds[s.id])  # type: ignore[arg-type]
    return 100.0 * best / max(len(raw), 1), threshold


@dataclass(frozen=True)
class Breakdown:
    """Exact match and F1 (in %) over `total` questions."""

    exact: float
    f1: float
    total: int


@dataclass(frozen=True)
class BestThreshold:
    """The v2.0 script's best_exact, best_exact_thresh, best_f1, best_f1_thresh."""

    exact: float
    exact_threshold: float
    f1: float
    f1_threshold: float


@dataclass(frozen=True)
class QuestionWordScore:
    word: str
    total: int
    exact: float
    f1: float


@dataclass(frozen=True)
class ErrorRow:
    """A wrong answer, for an errors CSV: the question, the prediction, its gold answers, the kind of error, its F1
    and how confident the model was (None when not known)."""

    id: str
    question: str
    prediction: str
    gold: tuple[str, ...]
    kind: str
    f1: float
    confidence: float | None

    def to_json(self) -> dict[str, Any]:
        """A flat row: the gold answers joined by " | "."""
        return {"id": self.id, "question": self.question, "prediction": self.prediction, "gold": " | ".join(self.gold),
                "kind": self.kind, "f1": round(self.f1, 6), "confidence": self.confidence}


@dataclass(frozen=True)
class SquadScores:
    """A set's official scores under `rules` (exact match and F1 in %), with the v2.0 breakdowns and threshold search
    where they apply, 95% bootstrap intervals over questions (None when not asked for), the scores by question word,
    the count of each kind of answer, and each question's score (`questions`, not in `to_json`)."""

    rules: str
    exact: float
    f1: float
    total: int
    n_missing: int
    has_answer: Breakdown | None
    no_answer: Breakdown | None
    best: BestThreshold | None
    exact_interval: tuple[float, float] | None
    f1_interval: tuple[float, float] | None
    by_question_word: tuple[QuestionWordScore, ...]
    kinds: Mapping[str, int]
    """Questions per kind of answer ("correct" and `ERROR_KINDS`), every kind listed."""
    questions: tuple[QuestionScore, ...] = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record.pop("questions")
        return record

    def official_json(self) -> dict[str, Any]:
        """What the official script prints: {exact_match, f1} (v1.1); exact, f1, total, HasAns_*, NoAns_* and best_*
        (v2.0, each where it applies)."""
        if self.rules == "1.1":
            return {"exact_match": self.exact, "f1": self.f1}
        out: dict[str, Any] = {"exact": self.exact, "f1": self.f1, "total": self.total}
        for prefix, part in (("HasAns", self.has_answer), ("NoAns", self.no_answer)):
            if part is not None:
                out.update({f"{prefix}_exact": part.exact, f"{prefix}_f1": part.f1, f"{prefix}_total": part.total})
        if self.best is not None:
            out.update(best_exact=self.best.exact, best_exact_thresh=self.best.exact_threshold, best_f1=self.best.f1,
                       best_f1_thresh=self.best.f1_threshold)
        return out


def breakdown(scores: Sequence[QuestionScore]) -> Breakdown | None:
    if not scores:
        return None
    n = len(scores)
    return Breakdown(100.0 * sum(s.exact for s in scores) / n, 100.0 * sum(s.f1 for s in scores) / n, n)


def question_word(text: str) -> str:
    """The first of `QUESTION_WORDS` in a question ("In what year" -> what; whom, whose -> who), else "other"."""
    for word in re.findall(r"[a-z]+", text.lower()):
        word = WORD_ALIASES.get(word, word)
        if word in QUESTION_WORDS:
            return word
    return "other"


def by_question_word(scores: Sequence[QuestionScore]) -> tuple[QuestionWordScore, ...]:
    """Scores per question word, in `QUESTION_WORDS` order then other; words no question has are left out."""
    groups: dict[str, list[QuestionScore]] = {}
    for s in scores:
        groups.setdefault(question_word(s.question), []).append(s)
    out = []
    for word in (*QUESTION_WORDS, "other"):
        part = breakdown(groups.get(word, []))
        if part is not None:
            out.append(QuestionWordScore(word, part.total, part.exact, part.f1))
    return tuple(out)


def percent_interval(values: np.ndarray, n_boot: int, seed: int) -> tuple[float, float] | None:
    """Percentile 95% interval of the mean of per-question `values`, in %, over `n_boot` resamples of the questions
    (`intervals.resample_counts`: the same seed, the same resamples for every metric)."""
    if not len(values) or n_boot < 1:
        return None
    means = np.concatenate([w @ values for w in resample_counts(len(values), n_boot, seed)]) / len(values)
    low, high = np.percentile(100.0 * means, [2.5, 97.5])
    return round(float(low), 6), round(float(high), 6)


def score_squad(questions: Sequence[Question], predictions: Mapping[str, str], *, rules: str = "1.1",
                null_odds: Mapping[str, float | None] | None = None, null_threshold: float | None = None,
                n_boot: int = 0, seed: int = 0) -> SquadScores:
    """The official scores of `predictions` ({question id: answer text}) on `questions` under `rules` ("1.1" or
    "2.0"; see the module docstring); with `null_odds` (v2.0) the best thresholds, and with `null_threshold` too
    the scores at that threshold; with `n_boot`, intervals over questions."""
    if rules not in RULES:
        raise UserError(f"SQuAD scoring rules {rules!r} are not one of {', '.join(RULES)}. Pass 1.1 or 2.0.")
    if rules == "1.1" and null_threshold is not None:
        raise UserError(f"A null threshold ({null_threshold}) decides which questions are unanswerable, which only "
                        f"SQuAD v2.0 scoring has; these questions are scored by the v1.1 rules. Drop the threshold, "
                        f"or score with the v2.0 rules.")
    raw = [question_score(q, predictions.get(q.id), rules) for q in questions]
    odds = null_odds or {}
    scored = raw if null_threshold is None else [with_null_threshold(s, odds.get(s.id), null_threshold) for s in raw]
    main = breakdown(scored) or Breakdown(0.0, 0.0, 0)
    best = None
    if rules == "2.0" and null_odds is not None:
        (best_exact, exact_at), (best_f1, f1_at) = (best_threshold(raw, odds, m) for m in ("exact", "f1"))
        best = BestThreshold(best_exact, exact_at, best_f1, f1_at)
    split = rules == "2.0"
    kinds = Counter(s.kind for s in scored)
    return SquadScores(
        rules, main.exact, main.f1, main.total, kinds["missing"],
        breakdown([s for s in scored if s.has_answer]) if split else None,
        breakdown([s for s in scored if not s.has_answer]) if split else None, best,
        percent_interval(np.array([s.exact for s in scored]), n_boot, seed),
        percent_interval(np.array([s.f1 for s in scored]), n_boot, seed),
        by_question_word(scored), {kind: kinds[kind] for kind in ("correct", *ERROR_KINDS)}, tuple(scored))


def error_rows(scores: SquadScores, confidence: Mapping[str, float | None] | None = None) -> list[ErrorRow]:
    """The questions not answered exactly (exact match 0), most confident first (`confidence`: {id: the answer's
    probability or score}; unknown ones last), then in question order."""
    confidence = confidence or {}
    wrong = [s for s in scores.questions if s.exact < 1]
    rows = [ErrorRow(s.id, s.question, s.prediction or "", s.gold, s.kind, s.f1, confidence.get(s.id)) for s in wrong]
    return sorted(rows, key=lambda r: (r.confidence is None, -(r.confidence or 0.0)))


SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
COMMON_WORDS = frozenset({*QUESTION_WORDS, *WORD_ALIASES, "is", "are", "was", "were", "be", "been", "do", "does", "did",
                          "of", "in", "on", "at", "to", "for", "from", "by", "with", "as", "and", "or", "it", "its",
                          "many", "much", "name", "called"})
"""Words too common to tell one sentence from another: the question words and the commonest function words."""


def overlap_sentence(question: Question) -> str:
    """The overlap baseline's answer: the passage sentence (split after . ! or ?) that holds the most distinct words
    of the question (normalised as the scores normalise answers, `COMMON_WORDS` left out); the first on a tie."""
    wanted = set(normalize_answer(question.question).split()) - COMMON_WORDS
    sentences = [s.strip() for s in SENTENCE_END.split(question.context) if s.strip()] or [question.context.strip()]
    counts = [len(wanted & set(normalize_answer(s).split())) for s in sentences]
    return sentences[int(np.argmax(counts))]


def overlap_answers(questions: Sequence[Question]) -> dict[str, str]:
    """{question id: `overlap_sentence`}: what a reader that only matches the question's words to the passage
    answers, the baseline a question-answering model must beat (scored by `score_squad` like any predictions)."""
    return {q.id: overlap_sentence(q) for q in questions}
