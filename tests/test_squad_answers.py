"""Start and end logits per window -> answers: run_qa.py's postprocess_qa_predictions (transcribed below as the
reference) on random logits, and hand-made windows where the answer is known: spans outside the context, reversed
or too long are skipped, the best span of all windows wins, v2.0's null answer and its threshold."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.data.squad import Answer, Question
from bertkit.encoding.encode import Encoded
from bertkit.encoding.qa_windows import NOT_CONTEXT, QAReading, QAWindows, qa_windows
from bertkit.encoding.rows import TokenRows
from bertkit.scoring.answers import (
    AnswerSettings,
    PredictedAnswer,
    null_odds,
    official_predictions,
    predicted_answers,
)

CONTEXT = "Rollo led the Normans to Normandy in 911."
#          0    5   9   13      21 24       33 36 (characters)
WORDS = [(0, 5), (6, 9), (10, 13), (14, 21), (22, 24), (25, 33), (34, 36), (37, 40), (40, 41)]
"""The context's tokens as (start, end) characters: Rollo led the Normans to Normandy in 911 ."""


def hand_windows(spans_per_window: list[list[tuple[int, int]]], n_questions: int = 1,
                 owners: list[int] | None = None) -> QAWindows:
    """Windows of `[CLS] q q [SEP] <context tokens> [SEP]` over the given context token spans (ids are dummies)."""
    starts, ends, lengths = [], [], []
    for spans in spans_per_window:
        starts.append([NOT_CONTEXT] * 4 + [s for s, _ in spans] + [NOT_CONTEXT])
        ends.append([NOT_CONTEXT] * 4 + [e for _, e in spans] + [NOT_CONTEXT])
        lengths.append(len(spans) + 5)
    ids = [[101] + [7] * (n - 2) + [102] for n in lengths]
    n = len(lengths)
    encoded = Encoded(ids, None, np.array(lengths), np.array(lengths), 64)
    zeros = np.zeros(n, dtype=np.int64)
    owners = owners if owners is not None else [0] * n
    return QAWindows(encoded, np.array(owners), TokenRows.from_lists(starts), TokenRows.from_lists(ends), zeros, zeros,
                     zeros, n_questions, 0)


def logits(length: int, high: dict[int, float], base: float = 0.0) -> np.ndarray:
    out = np.full(length, base, dtype=np.float32)
    for position, value in high.items():
        out[position] = value
    return out


QUESTION = Question("q", "", CONTEXT, "Who led the Normans?", (Answer("Rollo", 0),))


def test_the_best_start_and_end_in_the_context_is_the_answer_with_its_characters():
    windows = hand_windows([WORDS])  # context tokens at positions 4..12
    # the highest start logit is a question token (position 1), which no answer may start at; then Rollo (4)
    start, end = logits(14, {1: 9.0, 4: 5.0, 7: 1.0}), logits(14, {4: 4.0, 7: 2.0})
    answer = predicted_answers([QUESTION], windows, [start], [end])[0]
    assert isinstance(answer, PredictedAnswer)
    assert (answer.answer, answer.start, answer.end, answer.score) == ("Rollo", 0, 5, 9.0)  # 5 + 4
    assert answer.n_best[0].text == "Rollo" and answer.null_odds is None and answer.null_score is None
    assert abs(sum(c.probability for c in answer.n_best) - 1.0) < 1e-9
    assert json.loads(json.dumps(answer.to_json()))["answer"] == "Rollo"


def test_reversed_and_too_long_spans_are_skipped():
    windows = hand_windows([WORDS])
    # best end (Rollo, 4) comes before the best start (911, 11): reversed; the next end, 911's '.' (12), fits
    start, end = logits(14, {11: 5.0, 4: 1.0}), logits(14, {4: 6.0, 12: 3.0})
    assert predicted_answers([QUESTION], windows, [start], [end])[0].answer == "911."
    # Rollo (4) .. 911 (11) is 8 tokens: too long for max_answer_length 3, so the best span is Rollo alone
    start, end = logits(14, {4: 5.0}), logits(14, {11: 6.0, 4: 1.0})
    short = AnswerSettings(max_answer_length=3)
    assert predicted_answers([QUESTION], windows, [start], [end], short)[0].answer == "Rollo"
    longest = predicted_answers([QUESTION], windows, [start], [end])[0]
    assert longest.answer == "Rollo led the Normans to Normandy in 911"


def test_the_best_span_of_all_windows_wins_and_padding_past_a_window_is_not_read():
    windows = hand_windows([WORDS[:5], WORDS[3:]])  # two windows sharing Normans, to
    first = (logits(10, {4: 2.0}), logits(10, {4: 2.0}))                 # Rollo: 4
    second = (logits(11, {4 + 2: 3.0}), logits(11, {4 + 2: 3.0}))        # Normandy (the second's third token): 6
    padded_start = np.stack([np.pad(first[0], (0, 3), constant_values=50.0), np.pad(second[0], (0, 2))])
    padded_end = np.stack([np.pad(first[1], (0, 3), constant_values=50.0), np.pad(second[1], (0, 2))])
    answer = predicted_answers([QUESTION], windows, padded_start, padded_end)[0]
    assert (answer.answer, answer.start, answer.end, answer.score) == ("Normandy", 25, 33, 6.0)


def test_v2_null_score_is_the_smallest_cls_score_over_windows_and_the_threshold_decides():
    windows = hand_windows([WORDS[:5], WORDS[3:]])
    start = [logits(10, {0: 4.0, 4: 3.0}), logits(11, {0: 1.0})]   # CLS start 4 and 1
    end = [logits(10, {0: 4.0, 4: 3.0}), logits(11, {0: 1.5})]     # CLS end 4 and 1.5: null = min(8, 2.5) = 2.5
    settings = AnswerSettings(allow_null=True)
    answer = predicted_answers([QUESTION], windows, start, end, settings)[0]
    # best span Rollo scores 6; null odds 2.5 - 6 = -3.5 <= 0: answered
    assert (answer.answer, answer.null_score, answer.null_odds) == ("Rollo", 2.5, -3.5)
    assert any(c.start is None and c.text == "" for c in answer.n_best)
    strict = AnswerSettings(allow_null=True, null_threshold=-4.0)  # -3.5 > -4: left unanswered
    unanswered = predicted_answers([QUESTION], windows, start, end, strict)[0]
    assert (unanswered.answer, unanswered.start, unanswered.best_span, unanswered.score) == ("", None, "Rollo", 2.5)
    assert official_predictions([answer, unanswered]) == {"q": ""}
    assert null_odds([answer]) == {"q": -3.5}


def test_no_span_in_the_context_leaves_the_question_unanswered_without_an_invented_answer():
    windows = hand_windows([WORDS[:2]])
    start, end = logits(7, {}), logits(7, {})
    answer = predicted_answers([QUESTION], windows, [start], [end], AnswerSettings(max_answer_length=1, n_best=1))[0]
    # the single best start and end are both position 0 ([CLS]): nothing passes, run_qa.py would answer "empty"
    assert (answer.answer, answer.score, answer.n_best) == ("", None, ())


def test_settings_round_trip_and_refuse_nonsense():
    settings = AnswerSettings(n_best=5, max_answer_length=12, allow_null=True, null_threshold=-1.5)
    assert AnswerSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings
    assert AnswerSettings(n_best=0).problems() == ["--n-best 0 must be at least 1. Pass a positive number."]
    with pytest.raises(ValueError, match="were made of 1 questions"):
        predicted_answers([QUESTION, QUESTION], hand_windows([WORDS]), [logits(14, {})], [logits(14, {})])


def run_qa_postprocess(questions, windows, all_start, all_end, n_best_size, max_answer_length, v2, threshold):
    """run_qa.py's postprocess_qa_predictions (utils_qa.py), transcribed: {id: (answer, n-best texts, n-best scores,
    null odds)}."""
    bounds = windows.question_bounds()
    out = {}
    for i, q in enumerate(questions):
        min_null_prediction, prelim = None, []
        for k in range(bounds[i], bounds[i + 1]):
            start_logits, end_logits, offset_mapping = all_start[k], all_end[k], windows.offsets(k)
            feature_null_score = start_logits[0] + end_logits[0]
            if min_null_prediction is None or min_null_prediction["score"] > feature_null_score:
                min_null_prediction = {"offsets": (0, 0), "score": feature_null_score,
                                       "start_logit": start_logits[0], "end_logit": end_logits[0]}
            start_indexes = np.argsort(start_logits)[-1: -n_best_size - 1: -1].tolist()
            end_indexes = np.argsort(end_logits)[-1: -n_best_size - 1: -1].tolist()
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if (start_index >= len(offset_mapping) or end_index >= len(offset_mapping)
                            or offset_mapping[start_index] is None or offset_mapping[end_index] is None):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim.append({"offsets": (offset_mapping[start_index][0], offset_mapping[end_index][1]),
                                   "score": start_logits[start_index] + end_logits[end_index],
                                   "start_logit": start_logits[start_index], "end_logit": end_logits[end_index]})
        if v2:
            prelim.append(min_null_prediction)
            null_score = min_null_prediction["score"]
        predictions = sorted(prelim, key=lambda x: x["score"], reverse=True)[:n_best_size]
        if v2 and not any(p["offsets"] == (0, 0) for p in predictions):
            predictions.append(min_null_prediction)
        for pred in predictions:
            pred["text"] = q.context[pred["offsets"][0]: pred["offsets"][1]]
        texts, scores = [p["text"] for p in predictions], [float(p["score"]) for p in predictions]
        if not v2:
            out[q.id] = (predictions[0]["text"], texts, scores, None)
            continue
        best = next(p for p in predictions if p["text"] != "")
        diff = float(null_score - best["start_logit"] - best["end_logit"])
        out[q.id] = ("" if diff > threshold else best["text"], texts, scores, diff)
    return out


@pytest.mark.parametrize("v2, threshold", [(False, 0.0), (True, 0.0), (True, "median")])
def test_random_logits_give_run_qa_s_answers(minilm_dir, v2, threshold):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir))
    passage = " ".join(f"Word{i} is the {i}th of the many words in this long passage." for i in range(30))
    questions = [Question(f"q{i}", "", passage, f"Which is word {i}?", (Answer(f"Word{i}", passage.index(f"Word{i}")),))
                 for i in range(6)]
    windows = qa_windows(tokenizer, questions, QAReading(max_length=64, doc_stride=16))
    rng = np.random.default_rng(3)
    start = [rng.normal(size=n).astype(np.float32) for n in windows.lengths]
    end = [rng.normal(size=n).astype(np.float32) for n in windows.lengths]
    if threshold == "median":  # half the questions left unanswered: both sides of the threshold are compared
        probe = AnswerSettings(n_best=7, max_answer_length=8, allow_null=True)
        odds = [a.null_odds for a in predicted_answers(questions, windows, start, end, probe)]
        threshold = float(np.median(odds))
    settings = AnswerSettings(n_best=7, max_answer_length=8, allow_null=v2, null_threshold=threshold)
    ours = predicted_answers(questions, windows, start, end, settings)
    reference = run_qa_postprocess(questions, windows, start, end, 7, 8, v2, threshold)
    assert windows.n_windows > len(questions)
    for answer in ours:
        expected = reference[answer.id]
        assert (answer.answer, [c.text for c in answer.n_best], [c.score for c in answer.n_best]) == expected[:3]
        assert answer.null_odds == pytest.approx(expected[3]) if v2 else answer.null_odds is None
    if v2 and threshold != 0.0:
        assert 0 < sum(a.answer == "" for a in ours) < len(ours)
