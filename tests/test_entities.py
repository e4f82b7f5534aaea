"""Entity scores equal seqeval's (strict, recorded scheme; IOB1 gold read as IOB2), token accuracy for plain tags."""

from __future__ import annotations

import json

import pytest

from bertkit.data.tagscheme import TagScheme, to_iob2
from bertkit.scoring.entities import score_entities, score_tags

seqeval_metrics = pytest.importorskip("seqeval.metrics")

GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O", "B-PER"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "O", "O", "B-PER"]]


def test_hand_counted_entity_scores():
    scores = score_tags(GOLD, PRED, TagScheme("IOB2", "IOB2"))
    entities = scores.entities
    assert (entities.n_gold, entities.n_predicted) == (4, 4)
    assert entities.precision == pytest.approx(2 / 4) and entities.recall == pytest.approx(2 / 4)
    assert entities.per_type["PER"].f1 == 1.0 and entities.per_type["LOC"].f1 == 0.0
    assert entities.per_type["ORG"].support == 1 and entities.per_type["ORG"].predicted == 2
    assert entities.macro_f1 == pytest.approx((1.0 + 0.0 + 0.0) / 3)
    assert scores.token_accuracy == pytest.approx(7 / 9) and scores.main == entities.f1
    assert scores.main_name == "entity F1"
    assert json.loads(json.dumps(scores.to_json()))["entities"]["per_type"]["PER"]["f1"] == 1.0


def test_equals_seqeval_on_iob1_gold_read_as_iob2():
    gold_iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"], ["I-ORG", "O", "I-MISC", "I-MISC"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"], ["B-ORG", "O", "B-MISC", "O"]]
    gold = [to_iob2(s) for s in gold_iob1]
    ours = score_entities(gold, pred, "IOB2")
    # conlleval-style seqeval on the IOB1 file itself reads the same entities
    assert ours.f1 == pytest.approx(seqeval_metrics.f1_score(gold_iob1, pred))
    assert ours.precision == pytest.approx(seqeval_metrics.precision_score(gold_iob1, pred))
    from seqeval.scheme import IOB2

    assert ours.f1 == pytest.approx(seqeval_metrics.f1_score(gold, pred, mode="strict", scheme=IOB2))
    assert ours.recall == pytest.approx(seqeval_metrics.recall_score(gold, pred, mode="strict", scheme=IOB2))


def test_strict_mode_drops_predictions_that_break_the_scheme():
    gold, pred = [["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]  # no B-: not an entity in strict IOB2
    scores = score_entities(gold, pred, "IOB2")
    assert (scores.n_predicted, scores.f1) == (0, 0.0)


def test_iobes_scheme():
    gold, pred = [["S-PER", "O", "B-LOC", "E-LOC"]], [["S-PER", "O", "B-LOC", "I-LOC"]]
    from seqeval.scheme import IOBES

    scores = score_entities(gold, pred, "IOBES")
    assert scores.f1 == pytest.approx(seqeval_metrics.f1_score(gold, pred, mode="strict", scheme=IOBES))
    assert scores.per_type["PER"].f1 == 1.0 and scores.per_type["LOC"].recall == 0.0


def test_plain_tags_are_scored_by_token_accuracy_and_macro_f1():
    gold, pred = [["NOUN", "VERB"], ["DET", "NOUN"]], [["NOUN", "NOUN"], ["DET", "NOUN"]]
    scores = score_tags(gold, pred, TagScheme())
    assert scores.entities is None and scores.main_name == "token accuracy"
    assert scores.token_accuracy == pytest.approx(0.75) and scores.main == scores.token_accuracy
    assert scores.tag_macro_f1 == pytest.approx((0.8 + 0.0 + 1.0) / 3)  # NOUN 2/(2+0.5), VERB 0, DET 1
    with pytest.raises(ValueError):
        score_tags(gold, [["NOUN"], ["DET", "NOUN"]], TagScheme())
