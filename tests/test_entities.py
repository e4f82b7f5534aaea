"""Entity scores equal seqeval's: the headline its default mode (conlleval's counting, what run_ner and the BERT paper
report), strict mode beside it (recorded scheme; IOB1 gold read as IOB2); undefined scores are None, never NaN; token
accuracy for plain tags."""

from __future__ import annotations

import json
import random

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


def test_an_i_after_o_opens_an_entity_in_the_headline_and_none_in_strict_mode():
    gold, pred = [["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]  # no B-: conlleval opens PER, strict reads none
    scores = score_entities(gold, pred, "IOB2")
    assert (scores.n_predicted, scores.f1, scores.per_type["PER"].f1) == (1, 1.0, 1.0)
    assert (scores.n_predicted_strict, scores.f1_strict) == (0, 0.0)
    assert scores.counting == "conlleval"


@pytest.mark.parametrize("scheme", ["IOB2", "IOBES"])
def test_both_countings_equal_seqeval_on_random_tags_with_scheme_breaks(scheme):
    from seqeval.scheme import IOB2, IOBES

    tags = ["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"] + (["E-PER", "S-LOC", "E-LOC"] if scheme == "IOBES"
                                                                     else [])
    rng = random.Random(7)
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 9))] for _ in range(60)]
    pred = [[t if rng.random() < 0.6 else rng.choice(tags) for t in sentence] for sentence in gold]
    ours = score_entities(gold, pred, scheme)
    default = seqeval_metrics.classification_report(gold, pred, output_dict=True, zero_division=0)
    assert ours.f1 == pytest.approx(seqeval_metrics.f1_score(gold, pred))
    assert ours.precision == pytest.approx(seqeval_metrics.precision_score(gold, pred))
    assert ours.recall == pytest.approx(seqeval_metrics.recall_score(gold, pred))
    assert ours.macro_f1 == pytest.approx(default["macro avg"]["f1-score"])
    assert sorted(ours.per_type) == sorted(k for k in default if " avg" not in k)
    for name, row in ours.per_type.items():
        expected = default[name]
        assert (row.precision, row.recall, row.f1, row.support) == pytest.approx(
            (expected["precision"], expected["recall"], expected["f1-score"], expected["support"]))
    kind = {"IOB2": IOB2, "IOBES": IOBES}[scheme]
    assert ours.f1_strict == pytest.approx(seqeval_metrics.f1_score(gold, pred, mode="strict", scheme=kind))
    assert ours.precision_strict == pytest.approx(seqeval_metrics.precision_score(gold, pred, mode="strict",
                                                                                  scheme=kind))
    assert ours.recall_strict == pytest.approx(seqeval_metrics.recall_score(gold, pred, mode="strict", scheme=kind))
    assert ours.f1 != ours.f1_strict  # the scheme breaks make the two differ here


def test_without_gold_entities_f1_is_undefined_and_the_record_is_valid_json():
    from bertkit.scoring.tags import tag_scores_record

    scores = score_tags([["O", "O"], ["O"]], [["O", "B-PER"], ["O"]], TagScheme("IOB2", "IOB2"), n_boot=20)
    entities = scores.entities
    assert (entities.f1, entities.recall, entities.f1_strict, scores.main, scores.interval) == (None,) * 5
    assert entities.precision == 0.0 and entities.n_predicted == 1
    none = score_tags([["O"]], [["O"]], TagScheme("IOB2", "IOB2")).entities
    assert (none.precision, none.macro_f1, none.per_type) == (None, None, {})
    record = tag_scores_record(scores)
    assert record["f1"] is None and json.loads(json.dumps(record, allow_nan=False))["f1_strict"] is None


def test_a_record_from_before_the_conlleval_headline_reads_as_strict():
    from bertkit.scoring.tags import read_tag_scores_record, tag_scores_record

    old = {"f1": 0.5, "precision": 0.6, "recall": 0.4, "accuracy": 0.9, "scheme": "IOB2", "entities": 3}
    read = read_tag_scores_record(old)
    assert (read["f1"], read["f1_strict"], read["precision_strict"], read["entity_counting"]) == (None, 0.5, 0.6,
                                                                                                   "strict")
    new = tag_scores_record(score_tags(GOLD, PRED, TagScheme("IOB2", "IOB2")))
    assert read_tag_scores_record(new) == new and new["entity_counting"] == "conlleval"
    assert read_tag_scores_record({"accuracy": 0.9, "macro_f1": 0.8, "scheme": "none"})["macro_f1"] == 0.8


def test_iobes_scheme():
    gold, pred = [["S-PER", "O", "B-LOC", "E-LOC"]], [["S-PER", "O", "B-LOC", "I-LOC"]]
    from seqeval.scheme import IOBES

    scores = score_entities(gold, pred, "IOBES")
    assert scores.f1_strict == pytest.approx(seqeval_metrics.f1_score(gold, pred, mode="strict", scheme=IOBES))
    assert scores.f1 == pytest.approx(seqeval_metrics.f1_score(gold, pred)) == 1.0  # conlleval: B-LOC I-LOC is LOC
    assert scores.per_type["PER"].f1 == 1.0 and scores.per_type["LOC"].recall == 1.0


def test_plain_tags_are_scored_by_token_accuracy_and_macro_f1():
    gold, pred = [["NOUN", "VERB"], ["DET", "NOUN"]], [["NOUN", "NOUN"], ["DET", "NOUN"]]
    scores = score_tags(gold, pred, TagScheme())
    assert scores.entities is None and scores.main_name == "token accuracy"
    assert scores.token_accuracy == pytest.approx(0.75) and scores.main == scores.token_accuracy
    assert scores.tag_macro_f1 == pytest.approx((0.8 + 0.0 + 1.0) / 3)  # NOUN 2/(2+0.5), VERB 0, DET 1
    with pytest.raises(ValueError):
        score_tags(gold, [["NOUN"], ["DET", "NOUN"]], TagScheme())
