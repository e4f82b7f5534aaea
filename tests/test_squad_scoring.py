"""SQuAD's official exact match and F1: hand-made predictions whose scores are computed by hand in the comments (v1.1
and v2.0 rules, the v2.0 threshold search and --na-prob-thresh), the official scripts' edge cases (answers that are
all punctuation, articles, several gold answers, empty gold in v2.0, missing predictions), the official functions
(transcribed below) on many pairs, intervals, question words and the errors CSV rows."""

from __future__ import annotations

import collections
import json
import re
import string

import pytest

from bertkit.data.squad import Answer, Question
from bertkit.errors import UserError
from bertkit.scoring.squad import (
    error_rows,
    exact_match,
    f1_v1,
    f1_v2,
    normalize_answer,
    question_word,
    score_squad,
)


def q(qid: str, question: str, *golds: str) -> Question:
    """A question whose gold answers are `golds` (none: unanswerable); the context is not read by scoring."""
    return Question(qid, "", "context", question, tuple(Answer(g, 0) for g in golds), not golds)


V11 = [
    q("who", "Who won Super Bowl 50?", "Denver Broncos", "The Denver Broncos", "Broncos"),
    q("when", "When was the game played?", "February 7, 2016", "2016"),
    q("where", "Where was it played?", "Levi's Stadium"),
    q("how", "How was it decided?", "by a vote"),
    q("what", "What did the crowd shout?", "!!!"),
    q("which", "Which fruit?", "an apple"),
]
V11_PREDICTIONS = {
    "who": "the Denver Broncos!",  # normalises to "denver broncos": EM 1, F1 1
    "when": "in 2016",             # [in, 2016] vs [2016]: P 1/2, R 1 -> F1 2/3 (vs the first gold: 0.4); EM 0
    "where": "Santa Clara",        # no shared token: EM 0, F1 0
    # "how": no prediction -> 0 and 0, counted
    "what": "",                    # gold "!!!" normalises to "": EM 1; v1.1 F1 0 (no shared token)
    "which": "Apple",              # "an apple" -> "apple": EM 1, F1 1
}


def test_v11_scores_by_hand():
    scores = score_squad(V11, V11_PREDICTIONS, rules="1.1")
    # EM: (1 + 0 + 0 + 0 + 1 + 1) / 6 = 50%; F1: (1 + 2/3 + 0 + 0 + 0 + 1) / 6 = 4/9 = 44.44%
    assert scores.exact == pytest.approx(50.0) and scores.f1 == pytest.approx(400 / 9)
    assert (scores.total, scores.n_missing) == (6, 1)
    assert scores.has_answer is None and scores.no_answer is None and scores.best is None  # v1.1 has no breakdowns
    assert scores.official_json() == {"exact_match": pytest.approx(50.0), "f1": pytest.approx(400 / 9)}
    by_word = {w.word: (w.total, round(w.exact, 2), round(w.f1, 2)) for w in scores.by_question_word}
    assert by_word == {"what": (1, 100.0, 0.0), "who": (1, 100.0, 100.0), "when": (1, 0.0, 66.67),
                       "where": (1, 0.0, 0.0), "how": (1, 0.0, 0.0), "which": (1, 100.0, 100.0)}
    assert scores.kinds == {"correct": 3, "missing": 1, "answered_unanswerable": 0, "missed_answerable": 0,
                            "no_overlap": 1, "partial_overlap": 1}
    assert json.loads(json.dumps(scores.to_json()))["f1"] == pytest.approx(400 / 9)


def test_v20_rules_drop_gold_answers_that_normalise_to_nothing():
    # "!!!" normalises to "": v2.0 scores the question against [""], so the empty prediction scores F1 1 (v1.1: 0)
    scores = score_squad(V11, V11_PREDICTIONS, rules="2.0")
    what = next(s for s in scores.questions if s.id == "what")
    assert (what.gold, what.exact, what.f1, what.has_answer) == (("",), 1.0, 1.0, True)
    assert scores.f1 == pytest.approx(100 * (1 + 2 / 3 + 0 + 0 + 1 + 1) / 6)
    assert scores.no_answer is None and scores.has_answer.total == 6  # every question has gold answers


V20 = [
    q("A", "Who won?", "Broncos"),
    q("B", "Where was it?", "Levi's Stadium"),
    q("C", "Who lost Super Bowl 60?"),
    q("D", "When was Super Bowl 0?"),
    q("E", "When was it developed?", "1920s"),
]
V20_PREDICTIONS = {"A": "Broncos", "B": "Stadium", "C": "Panthers", "D": "", "E": ""}
V20_ODDS = {"A": -3.0, "B": -1.0, "C": 0.5, "D": 2.0, "E": 1.0}


def test_v20_scores_breakdowns_and_best_thresholds_by_hand():
    scores = score_squad(V20, V20_PREDICTIONS, rules="2.0", null_odds=V20_ODDS)
    # A 1/1; B "stadium" vs "levis stadium": P 1, R 1/2 -> F1 2/3, EM 0; C answers an unanswerable: 0/0;
    # D "" on an unanswerable: 1/1; E "" on an answerable: 0/0
    assert scores.exact == pytest.approx(40.0) and scores.f1 == pytest.approx(100 * (8 / 3) / 5)
    assert (scores.has_answer.total, scores.has_answer.exact, scores.has_answer.f1) == (
        3, pytest.approx(100 / 3), pytest.approx(100 * 5 / 9))
    assert (scores.no_answer.total, scores.no_answer.exact, scores.no_answer.f1) == (2, 50.0, 50.0)
    # find_best_thresh, exact: start with every question answered "" = 2 (C, D); by rising odds A +1 -> 3 (best,
    # at -3), B +0, C -1, E +0, D +0: best 3/5 = 60% at -3.
    # f1: A +1 -> 3 (at -3), B +2/3 -> 3.67 (best, at -1), C -1, E 0, D 0: best 3.67/5 = 73.33% at -1.
    assert (scores.best.exact, scores.best.exact_threshold) == (pytest.approx(60.0), -3.0)
    assert (scores.best.f1, scores.best.f1_threshold) == (pytest.approx(100 * (11 / 3) / 5), -1.0)
    official = scores.official_json()
    assert list(official) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
                              "NoAns_f1", "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
    assert scores.kinds["answered_unanswerable"] == 1 and scores.kinds["missed_answerable"] == 1


def test_v20_null_threshold_counts_questions_over_it_as_unanswered():
    # --na-prob-thresh 0: C (0.5), E (1) and D (2) count as answered "": C becomes right (1), E stays 0, D stays 1
    scores = score_squad(V20, V20_PREDICTIONS, rules="2.0", null_odds=V20_ODDS, null_threshold=0.0)
    # exact: A 1, B 0, C 1, D 1, E 0 = 60%; f1: 1 + 2/3 + 1 + 1 + 0 = 11/3 -> 73.33%
    assert scores.exact == pytest.approx(60.0) and scores.f1 == pytest.approx(100 * (11 / 3) / 5)
    assert next(s for s in scores.questions if s.id == "C").to_json() == {
        "id": "C", "question": "Who lost Super Bowl 60?", "prediction": "", "gold": ("",), "has_answer": False,
        "exact": 1.0, "f1": 1.0, "kind": "correct"}
    assert scores.best.f1 == pytest.approx(100 * (11 / 3) / 5)  # the search reads the predictions, not the threshold


def test_a_missing_prediction_scores_zero_and_counts():
    scores = score_squad(V20, {k: v for k, v in V20_PREDICTIONS.items() if k != "D"}, rules="2.0")
    # D (unanswerable, would score 1) is missing: exact (1 + 0 + 0 + 0 + 0) / 5 = 20%
    assert (scores.exact, scores.total, scores.n_missing) == (pytest.approx(20.0), 5, 1)
    assert scores.kinds["missing"] == 1


def test_v11_rules_refuse_an_unanswerable_question_and_unknown_rules_are_refused():
    with pytest.raises(UserError, match="'C' has no gold answer.*Score with the v2.0 rules"):
        score_squad(V20, V20_PREDICTIONS, rules="1.1")
    with pytest.raises(UserError, match="rules '3'"):
        score_squad(V11, {}, rules="3")
    with pytest.raises(UserError, match="only SQuAD v2.0 scoring has"):
        score_squad(V11, V11_PREDICTIONS, rules="1.1", null_odds={"who": 1.0}, null_threshold=0.0)


def test_normalisation_edge_cases_of_the_official_scripts():
    assert normalize_answer("The  Eiffel-Tower, an icon!") == "eiffeltower icon"
    assert normalize_answer("A theatre") == "theatre"  # "the" inside a word stays
    assert exact_match("the Eiffel Tower", "Eiffel Tower") == 1.0
    assert f1_v1("...", "!!!") == 0.0 and f1_v2("...", "!!!") == 1.0  # both normalise to nothing
    assert f1_v2("", "Broncos") == 0.0 and f1_v2("Broncos", "") == 0.0
    # repeated tokens count as often as both sides have them: [a, b, b] vs [b, b, c]: 2 shared, P = R = 2/3
    assert f1_v1("x y y", "y y z") == pytest.approx(2 / 3)


def test_question_words():
    assert [question_word(t) for t in ("In what year?", "Whose car?", "However, who won?", "Is it?", "How many?",
                                       "Name the winner.")] == ["what", "who", "who", "other", "how", "other"]


def test_intervals_over_questions_are_seeded_and_hold_the_score():
    scores = score_squad(V11, V11_PREDICTIONS, rules="1.1", n_boot=200, seed=4)
    low, high = scores.f1_interval
    assert low <= scores.f1 <= high and low < high
    assert scores.exact_interval == score_squad(V11, V11_PREDICTIONS, rules="1.1", n_boot=200, seed=4).exact_interval
    assert score_squad(V11, V11_PREDICTIONS).f1_interval is None
    perfect = score_squad(V11[:1], {"who": "Broncos"}, n_boot=50)
    assert perfect.exact_interval == (100.0, 100.0)


def test_error_rows_are_the_wrong_answers_most_confident_first():
    scores = score_squad(V20, V20_PREDICTIONS, rules="2.0")
    rows = error_rows(scores, {"B": 0.3, "C": 0.9, "A": 0.99})
    assert [(r.id, r.kind) for r in rows] == [("C", "answered_unanswerable"), ("B", "partial_overlap"),
                                              ("E", "missed_answerable")]
    assert rows[1].to_json() == {"id": "B", "question": "Where was it?", "prediction": "Stadium",
                                 "gold": "Levi's Stadium", "kind": "partial_overlap", "f1": round(2 / 3, 6),
                                 "confidence": 0.3}


# ---------------------------------------------------------------- the official scripts, transcribed


def official_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1_v1(prediction, ground_truth):
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_compute_f1_v2(a_gold, a_pred):
    gold_toks = official_normalize_answer(a_gold).split() if a_gold else []
    pred_toks = official_normalize_answer(a_pred).split() if a_pred else []
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


TEXTS = ["", "The", "the cat", "a cat sat", "Cat!", "cat cat dog", "an apple a day", "...", "Élan vital", "über-Cat",
         "the the", "Denver Broncos", "broncos, denver", "A", "an", "x y y"]


@pytest.mark.parametrize("rules", ["1.1", "2.0"])
def test_every_pair_scores_as_the_official_script_scores_it(rules):
    questions = [q(f"{i}-{j}", "What?", gold, TEXTS[(i + 3) % len(TEXTS)]) for i, gold in enumerate(TEXTS)
                 for j in range(len(TEXTS))]
    predictions = {question.id: TEXTS[int(question.id.split("-")[1])] for question in questions}
    scores = {s.id: s for s in score_squad(questions, predictions, rules=rules).questions}
    for question in questions:
        golds, pred = [a.text for a in question.answers], predictions[question.id]
        if rules == "2.0":
            golds = [a for a in golds if official_normalize_answer(a)] or [""]
            f1 = max(official_compute_f1_v2(a, pred) for a in golds)
        else:
            f1 = max(official_f1_v1(pred, a) for a in golds)
        exact = max(int(official_normalize_answer(a) == official_normalize_answer(pred)) for a in golds)
        assert (scores[question.id].exact, scores[question.id].f1) == (exact, pytest.approx(f1)), question.id


def official_find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        elif preds[qid]:
            diff = -1
        else:
            diff = 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def test_the_threshold_search_is_the_official_one_on_many_questions():
    import numpy as np

    rng = np.random.default_rng(7)
    questions = [q(f"q{i}", "What?", *([TEXTS[i % len(TEXTS)] or "cat"] if i % 3 else [])) for i in range(60)]
    predictions = {x.id: TEXTS[int(rng.integers(len(TEXTS)))] for x in questions}
    odds = {x.id: float(rng.normal()) for x in questions}
    scores = score_squad(questions, predictions, rules="2.0", null_odds=odds)
    raw = {metric: {s.id: getattr(s, metric) for s in scores.questions} for metric in ("exact", "f1")}
    has_answer = {x.id: bool(x.answers) for x in questions}
    best_exact = official_find_best_thresh(predictions, raw["exact"], odds, has_answer)
    best_f1 = official_find_best_thresh(predictions, raw["f1"], odds, has_answer)
    assert (scores.best.exact, scores.best.exact_threshold) == (pytest.approx(best_exact[0]), best_exact[1])
    assert (scores.best.f1, scores.best.f1_threshold) == (pytest.approx(best_f1[0]), best_f1[1])
    assert scores.best.f1 > scores.f1  # the search finds a better threshold than answering everything


def test_the_recorded_threshold_sits_between_dev_questions_odds_not_on_one():
    from bertkit.scoring.answer_objective import clear_threshold
    from bertkit.scoring.answers import PredictedAnswer

    def answer(odds):
        return PredictedAnswer("q", "", "x", 0, 1, 1.0, 1.0, 0.0, odds, "x", ())

    answers = [answer(o) for o in (-2.0, 0.5, 1.5, None)]
    assert clear_threshold(answers, 0.5) == 1.0  # halfway to the next odds: 0.5 stays answered, 1.5 does not
    assert clear_threshold(answers, 1.5) == 2.5  # none above: any larger value keeps every question answered
