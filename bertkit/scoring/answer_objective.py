"""Extractive question answering as fine-tuning optimises and scores it: `AnswerObjective`, what the training loop asks
for a batch's loss and for the scores of the dev logits (the contract of `bertkit.scoring.shapes`: `loss(logits,
rows)`, `score(logits)`, `label_names`, `y_dev`, `table_metrics`), the metric names of a question-answering run and
its baseline (`overlap_baseline`: the passage sentence with the most question words).

The logits are a window's start and end scores per token, stacked (windows, tokens, 2: `models.answerer.SpanLogits`).
The loss is BertForQuestionAnswering's: the mean of the start and end cross-entropies against each window's labels
(`encoding.qa_windows`: the answer's first and last token, or [CLS] where the window does not hold it), in fp32. The
scores are the questions': each question's answer from its windows as run_qa.py post-processes them
(`scoring.answers`), scored by the official SQuAD rules of the dev set's version (`scoring.squad`), in %:
`exact_match` and `f1` with their 95% bootstrap intervals over questions, and for SQuAD v2.0 the answerable (HasAns)
and unanswerable (NoAns) parts, the best no-answer threshold and the scores there (`best_*`; the threshold is
recorded in best/ as the model's `threshold`, which predict and evaluate apply). `loss` is the mean over dev windows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.squad import Question
from bertkit.data.squad_splits import OUTPUTS
from bertkit.encoding.qa_windows import QAWindows
from bertkit.errors import UserError
from bertkit.scoring.answers import AnswerSettings, PredictedAnswer, null_odds, predicted_answers
from bertkit.scoring.baseline import Baseline
from bertkit.scoring.shapes import Scored
from bertkit.scoring.squad import SquadScores, error_rows, overlap_answers, score_squad

BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the dev questions behind each score's 95% interval."""
SPAN_METRICS_V1 = ("f1", "exact_match")
"""A question-answering run's dev metrics (the first picks best/ by default), with `loss`."""
SPAN_METRICS_V2 = (*SPAN_METRICS_V1, "best_f1", "best_exact", "HasAns_f1", "HasAns_exact", "NoAns_f1", "NoAns_exact")
"""With SQuAD v2.0 dev data: also the scores at the best no-answer threshold and the answerable/unanswerable parts."""
OVERLAP_BASELINE = "the passage sentence with the most question words"
OUTPUT_COLUMNS = ("start", "end", "probability", "null_odds")
"""What a scoring keeps per question (`AnswerObjective.score`'s outputs, best_dev_proba.npy): the answer's characters
in the context (-1, -1: no answer), its probability and the null odds (NaN where there are none)."""


def span_metric_for_best(requested: str | None, version: str) -> str:
    """--metric-for-best on questions: one of the dev metrics of its version or loss (None: f1); another is refused,
    naming the valid ones."""
    valid = (*(SPAN_METRICS_V2 if version == "2.0" else SPAN_METRICS_V1), "loss")
    if requested is None:
        return valid[0]
    if requested not in valid:
        raise UserError(f"--metric-for-best {requested} is not a score of SQuAD v{version} dev questions: valid are "
                        f"{', '.join(valid)}. Pass one of them, or drop --metric-for-best (default f1).")
    return requested


def answer_scores_record(scores: SquadScores) -> dict[str, Any]:
    """A `SquadScores` under the metric names of a question-answering run (module docstring), with `n` questions,
    the `rules`, the intervals, the counts of each kind of answer and the scores by question word."""
    record: dict[str, Any] = {"task": "spans", "rules": scores.rules, "exact_match": scores.exact, "f1": scores.f1,
                              "n": scores.total, "missing": scores.n_missing, "kinds": dict(scores.kinds),
                              "by_question_word": [asdict(w) for w in scores.by_question_word]}
    for prefix, part in (("HasAns", scores.has_answer), ("NoAns", scores.no_answer)):
        if part is not None:
            record.update({f"{prefix}_exact": part.exact, f"{prefix}_f1": part.f1, f"{prefix}_total": part.total})
    if scores.best is not None:
        record.update(best_exact=scores.best.exact, best_exact_threshold=scores.best.exact_threshold,
                      best_f1=scores.best.f1, best_f1_threshold=scores.best.f1_threshold)
    intervals = {name: list(iv) for name, iv in (("exact_match", scores.exact_interval), ("f1", scores.f1_interval))
                 if iv is not None}
    if intervals:
        record["intervals"] = intervals
    return record


def clear_threshold(answers: Sequence[PredictedAnswer], at: float) -> float:
    """The no-answer threshold a model records: `at` (the v2.0 script's best threshold, the null odds of a dev question
    it keeps answered) moved halfway to the next larger null odds of `answers`. Dev scores the same (no question's
    odds lie between), but that question no longer flips to "no answer" on a rounding difference (an fp32 ONNX export's
    1e-6 logits, another device): at `at` itself it sat exactly on the line."""
    above = [float(a.null_odds) for a in answers if a.null_odds is not None and a.null_odds > at]
    return (at + min(above)) / 2 if above else at + 1.0


def answer_at(answer: PredictedAnswer, threshold: float | None) -> tuple[int, int, float]:
    """(start, end, probability) of the answer a question gets at no-answer `threshold` (None: as predicted): the
    best span, or no answer (-1, -1, the null answer's probability) where the null odds exceed the threshold."""
    span = next((c for c in answer.n_best if c.text), None)
    if threshold is None:
        unanswered = answer.start is None
    else:
        unanswered = span is None or (answer.null_odds is not None and answer.null_odds > threshold)
    if unanswered:
        null = next((c for c in answer.n_best if c.start is None), None)
        return -1, -1, null.probability if null is not None else float("nan")
    if threshold is None or span is None:
        return int(answer.start or 0), int(answer.end or 0), float(answer.probability or 0.0)
    return int(span.start or 0), int(span.end or 0), span.probability


class AnswerObjective:
    """The mean start/end cross-entropy of the training windows; dev scores per question (module docstring)."""

    def __init__(self, train: QAWindows, dev: QAWindows, dev_questions: Sequence[Question], rules: str,
                 settings: AnswerSettings, seed: int = 0, n_boot: int = BOOTSTRAP_RESAMPLES) -> None:
        self.train, self.dev, self.questions = train, dev, list(dev_questions)
        self.rules, self.settings, self.seed, self.n_boot = rules, settings, seed, n_boot
        self.label_names = list(OUTPUTS)
        self.num_outputs = len(OUTPUTS)
        self.y_dev = np.arange(len(self.questions))
        self.table_metrics = ("exact_match", "f1")
        self.tuned: AnswerObjective | None = None
        """A test split's: the dev objective whose no-answer threshold it applies."""
        self.threshold: float | None = None
        """SQuAD v2.0: the no-answer threshold the last scoring chose (dev) or applied (a test split)."""

    def for_split(self, windows: QAWindows, questions: Sequence[Question], rules: str) -> AnswerObjective:
        """This objective scoring another split's questions (a labelled --test: at each new best and at the end) with
        the same settings, at the no-answer threshold dev chose; its loss is the training windows' as here."""
        split = AnswerObjective(self.train, windows, questions, rules, self.settings, self.seed, self.n_boot)
        split.tuned = self
        return split

    def to(self, device: torch.device) -> AnswerObjective:
        return self

    def loss(self, logits: torch.Tensor, rows: Any) -> torch.Tensor:
        """The mean of the start and end cross-entropies of windows `rows` (BertForQuestionAnswering's loss), fp32."""
        rows = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        logits = logits.float()
        start = torch.as_tensor(self.train.start_positions[rows], device=logits.device)
        end = torch.as_tensor(self.train.end_positions[rows], device=logits.device)
        cross_entropy = torch.nn.functional.cross_entropy
        return (cross_entropy(logits[..., 0], start) + cross_entropy(logits[..., 1], end)) / 2

    def window_loss(self, logits: np.ndarray) -> float:
        """The loss of the dev windows (each read to its length), mean over windows."""
        windows = self.dev
        if not windows.n_windows:
            return 0.0
        inside = np.arange(logits.shape[1])[None, :] < windows.lengths[:, None]
        total = 0.0
        for j, gold in enumerate((windows.start_positions, windows.end_positions)):
            scores = np.where(inside, logits[..., j].astype(np.float64), -np.inf)
            top = scores.max(axis=1)
            log_total = top + np.log(np.exp(scores - top[:, None]).sum(axis=1))
            total += float(np.mean(log_total - scores[np.arange(windows.n_windows), gold]))
        return total / 2

    def squad_scores(self, answers: Sequence[PredictedAnswer]) -> SquadScores:
        """The official scores of `answers` (`scored_answers`) at the no-answer threshold of the settings (dev: the
        best one is searched and kept in `threshold`) or the one dev chose (a test split)."""
        tuned = self.tuned.threshold if self.tuned is not None else None
        threshold = self.settings.null_threshold if tuned is None else tuned
        scores = scored_answers(self.questions, answers, self.rules, replace(self.settings, null_threshold=threshold),
                                self.n_boot, self.seed)
        if self.settings.allow_null and self.rules == "2.0":
            best = clear_threshold(answers, scores.best.f1_threshold) if scores.best is not None else threshold
            self.threshold = best if self.tuned is None else threshold
        return scores

    def score(self, logits: np.ndarray) -> Scored:
        """The dev questions' scores (module docstring); outputs: per question its answer at the chosen no-answer
        threshold (`OUTPUT_COLUMNS`)."""
        logits = np.asarray(logits, dtype=np.float32)
        answers = predicted_answers(self.questions, self.dev, logits[..., 0], logits[..., 1], self.settings)
        self.threshold = None
        record = {**answer_scores_record(self.squad_scores(answers)), "loss": self.window_loss(logits)}
        if self.threshold is not None:
            record["threshold"] = self.threshold
        outputs = np.asarray([(*answer_at(a, self.threshold), np.nan if a.null_odds is None else a.null_odds)
                              for a in answers], dtype=np.float64).reshape(-1, len(OUTPUT_COLUMNS))
        return Scored(record, outputs.astype(np.float32), self.y_dev)

    def write_errors(self, path: Path, outputs: np.ndarray) -> int:
        """dev_errors.csv of a question-answering run: the dev questions not answered exactly by the best model
        (`outputs`: its scoring's), most confident first (`scoring.answer_outputs.write_answer_errors`)."""
        from bertkit.scoring.answer_outputs import write_answer_errors

        predictions, confidence = {}, {}
        for question, row in zip(self.questions, np.asarray(outputs, dtype=np.float64), strict=True):
            start, end = int(row[0]), int(row[1])
            predictions[question.id] = question.context[start:end] if start >= 0 else ""
            confidence[question.id] = None if np.isnan(row[2]) else round(float(row[2]), 6)
        scores = score_squad(self.questions, predictions, rules=self.rules)
        return write_answer_errors(path, error_rows(scores, confidence))


def scored_answers(questions: Sequence[Question], answers: Sequence[PredictedAnswer], rules: str,
                   settings: AnswerSettings, n_boot: int, seed: int) -> SquadScores:
    """The official scores of a model's `answers` under `rules`: as answered; or, for a model that may leave questions
    unanswered on v2.0 data, its best spans and null odds at the settings' no-answer threshold (the same answers),
    so the v2.0 search for the best threshold sees every span."""
    if not (settings.allow_null and rules == "2.0"):
        return score_squad(questions, {a.id: a.answer for a in answers}, rules=rules, n_boot=n_boot, seed=seed)
    return score_squad(questions, {a.id: a.best_span for a in answers}, rules="2.0", null_odds=null_odds(answers),
                       null_threshold=settings.null_threshold, n_boot=n_boot, seed=seed)


def overlap_baseline(objective: AnswerObjective, metric: str) -> Baseline | None:
    """The overlap baseline on the objective's dev questions for --metric-for-best `metric` (`squad.overlap_answers`:
    the passage sentence with the most question words, scored like the model; None for the loss, or no questions)."""
    if not objective.questions:
        return None
    scores = score_squad(objective.questions, overlap_answers(objective.questions), rules=objective.rules)
    value = answer_scores_record(scores).get(metric)
    if not isinstance(value, (int, float)):
        return None
    return Baseline(metric, float(value), None, OVERLAP_BASELINE)
