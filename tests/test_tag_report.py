"""A tagging model's evaluation report: seqeval's per-type report and averages in its default mode (conlleval's
counting; its strict micro scores beside them; IOB1 gold read as IOB2 first),
the entity-type confusion with its `none` row and column, each entity error kind counted on a crafted sentence,
and for plain tags (POS) sklearn's per-tag scores and confusion."""

from __future__ import annotations

import json

import pytest

from bertkit.data.tagscheme import TagScheme, to_iob2
from bertkit.scoring.tag_report import NONE, tag_report

seqeval_metrics = pytest.importorskip("seqeval.metrics")
IOB2 = pytest.importorskip("seqeval.scheme").IOB2

GOLD = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "I-ORG", "O", "B-PER"], ["O", "B-LOC", "I-LOC"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG", "O"], ["B-ORG", "I-ORG", "O", "O"], ["O", "B-LOC", "O"]]

# one sentence, one entity of each kind (gold -> predicted):
#   PER 0-1 -> PER 0-1 correct; LOC 3 -> ORG 3 wrong type; ORG 5-6 -> ORG 5 wrong boundary; PER 8 -> nothing, missed;
#   LOC 10-11 -> PER 10 wrong type and boundary; nothing -> LOC 13 spurious
CRAFTED_GOLD = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG", "I-ORG", "O", "B-PER", "O", "B-LOC", "I-LOC", "O",
                 "O"]]
CRAFTED_PRED = [["B-PER", "I-PER", "O", "B-ORG", "O", "B-ORG", "O", "O", "O", "O", "B-PER", "O", "O", "B-LOC"]]


def _assert_equals_seqeval_report(report, gold_iob2, pred):
    expected = seqeval_metrics.classification_report(gold_iob2, pred, output_dict=True, zero_division=0)
    entities = report.scores.entities
    for name, row in expected.items():
        if name.endswith(" avg"):
            continue
        ours = entities.per_type[name]
        assert (ours.precision, ours.recall, ours.f1, ours.support) == pytest.approx(
            (row["precision"], row["recall"], row["f1-score"], row["support"]))
    assert set(entities.per_type) == {n for n in expected if not n.endswith(" avg")}
    micro, macro = expected["micro avg"], expected["macro avg"]
    assert (entities.precision, entities.recall, entities.f1) == pytest.approx(
        (micro["precision"], micro["recall"], micro["f1-score"]))
    assert (entities.macro_precision, entities.macro_recall, entities.macro_f1) == pytest.approx(
        (macro["precision"], macro["recall"], macro["f1-score"]))
    assert entities.f1 == pytest.approx(seqeval_metrics.f1_score(gold_iob2, pred))
    assert entities.f1_strict == pytest.approx(seqeval_metrics.f1_score(gold_iob2, pred, mode="strict", scheme=IOB2))


def test_entity_scores_equal_seqevals_strict_report():
    report = tag_report(GOLD, PRED, TagScheme("IOB2", "IOB2"))
    _assert_equals_seqeval_report(report, GOLD, PRED)
    assert report.scores.entities.f1 == pytest.approx(2 * 2 / (5 + 4))  # 2 hits, 5 gold, 4 predicted
    assert report.scores.token_accuracy == pytest.approx(9 / 12) and report.scores.main == report.scores.entities.f1


def test_iob1_gold_is_read_as_iob2_before_scoring():
    gold_iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"], ["I-ORG", "O", "I-MISC", "I-MISC"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC"], ["B-ORG", "O", "B-MISC", "O"]]
    report = tag_report(gold_iob1, pred, TagScheme.read_as("IOB1"))
    gold_iob2 = [to_iob2(s) for s in gold_iob1]
    _assert_equals_seqeval_report(report, gold_iob2, pred)
    # conlleval-style seqeval reads the IOB1 file itself as the same entities
    assert report.scores.entities.f1 == pytest.approx(seqeval_metrics.f1_score(gold_iob1, pred))
    # against the IOB2 gold the model learnt (4 / 9 against the IOB1 spelling)
    assert report.scores.token_accuracy == pytest.approx(8 / 9)


def test_each_entity_error_kind_is_counted_on_a_crafted_sentence():
    errors = tag_report(CRAFTED_GOLD, CRAFTED_PRED, TagScheme("IOB2", "IOB2")).mistakes.errors
    assert errors.to_json() == {"correct": 1, "missed": 1, "spurious": 1, "wrong_type": 1, "wrong_boundary": 1,
                                "wrong_type_and_boundary": 1}


def test_a_prediction_that_breaks_the_scheme_opens_an_entity_as_conlleval_reads_it():
    report = tag_report([["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]], TagScheme("IOB2", "IOB2"))
    assert report.mistakes.errors.to_json() == {"correct": 1, "missed": 0, "spurious": 0, "wrong_type": 0,
                                       "wrong_boundary": 0, "wrong_type_and_boundary": 0}
    entities = report.scores.entities
    assert report.mistakes.confusion.count("PER", "PER") == 1 and entities.n_predicted == 1 and entities.f1 == 1.0
    assert (entities.n_predicted_strict, entities.f1_strict) == (0, 0.0)  # strict mode: no entity, the gold missed


def test_entity_type_confusion_pairs_entities_of_the_same_boundaries():
    report = tag_report(CRAFTED_GOLD, CRAFTED_PRED, TagScheme("IOB2", "IOB2"))
    confusion = report.mistakes.confusion
    assert confusion.labels == ("LOC", "ORG", "PER", NONE)
    assert [list(row) for row in confusion.counts] == [[0, 1, 0, 1],   # LOC: as ORG once, unmatched once
                                                        [0, 0, 0, 1],   # ORG: boundary error, no same-span partner
                                                        [0, 0, 1, 1],   # PER: right once, missed once
                                                        [1, 1, 1, 0]]   # predicted with no gold of their span
    entities = report.scores.entities
    for i, kind in enumerate(confusion.labels[:-1]):  # rows are gold entities, columns predicted ones
        assert sum(confusion.counts[i]) == entities.per_type[kind].support
        assert sum(row[i] for row in confusion.counts) == entities.per_type[kind].predicted
    assert sum(confusion.count(k, k) for k in ("LOC", "ORG", "PER")) == report.mistakes.errors.correct


def test_plain_tags_get_per_tag_scores_and_a_tag_confusion_equal_to_sklearns():
    from sklearn.metrics import classification_report, confusion_matrix, f1_score

    gold = [["NOUN", "VERB", "DET", "NOUN"], ["PRON", "VERB", "ADJ"]]
    pred = [["NOUN", "NOUN", "DET", "NOUN"], ["PRON", "VERB", "ADV"]]
    report = tag_report(gold, pred, TagScheme())
    flat_gold, flat_pred = sum(gold, []), sum(pred, [])
    expected = classification_report(flat_gold, flat_pred, output_dict=True, zero_division=0)
    assert set(report.mistakes.per_tag) == {"ADJ", "ADV", "DET", "NOUN", "PRON", "VERB"}
    for tag, row in report.mistakes.per_tag.items():
        assert (row.precision, row.recall, row.f1, row.support) == pytest.approx(
            (expected[tag]["precision"], expected[tag]["recall"], expected[tag]["f1-score"], expected[tag]["support"]))
    assert report.mistakes.per_tag["NOUN"].predicted == 3 and report.mistakes.per_tag["ADV"].support == 0
    gold_tags = sorted(set(flat_gold))  # macro over the gold tags: a tag only predicted does not dilute it
    assert report.scores.tag_macro_f1 == pytest.approx(f1_score(flat_gold, flat_pred, labels=gold_tags,
                                                                average="macro"))
    assert report.scores.token_accuracy == pytest.approx(5 / 7) and report.mistakes.errors is None
    labels = list(report.mistakes.confusion.labels)
    assert [list(r) for r in report.mistakes.confusion.counts] == confusion_matrix(flat_gold, flat_pred, labels=labels).tolist()
    assert report.mistakes.confusion.count("VERB", "NOUN") == 1 and report.mistakes.confusion.count("VERB", "X") == 0


def test_report_is_json_and_refuses_sentences_of_different_lengths():
    report = tag_report(CRAFTED_GOLD, CRAFTED_PRED, TagScheme("IOB2", "IOB2"), n_boot=50)
    record = json.loads(json.dumps(report.to_json()))
    assert record["errors"]["spurious"] == 1 and record["confusion"]["labels"][-1] == NONE
    assert record["main_name"] == "entity F1" and record["entities"]["per_type"]["PER"]["support"] == 2
    assert record["per_tag"] is None and len(record["interval"]) == 2
    with pytest.raises(ValueError):
        tag_report([["B-PER", "O"]], [["B-PER"]], TagScheme("IOB2", "IOB2"))


def test_on_real_entity_tags_the_counts_add_up_and_equal_seqeval(shared_data):
    """UNER dev tags with a fifth of the entities' first tags dropped (a broken I- run), retyped or widened, and a few
    new ones: the report is seqeval's, every predicted entity lands in one kind, every gold entity in one row."""
    import numpy as np

    from bertkit.data.tagged import TaggedColumns, read_tagged

    gold = [list(s.tags) for s in read_tagged(shared_data / "uner_ewt" / "dev.iob2", TaggedColumns()).head(500)]
    rng = np.random.default_rng(0)
    pred = []
    for sentence in gold:
        out = list(sentence)
        for i, tag in enumerate(sentence):
            if tag.startswith("B-") and rng.random() < 0.2:
                out[i] = rng.choice(["O", "B-MISC", "B-PER"])
            elif tag == "O" and i and sentence[i - 1] != "O" and rng.random() < 0.3:
                out[i] = "I-" + sentence[i - 1][2:]
            elif tag == "O" and rng.random() < 0.01:
                out[i] = "B-LOC"
        pred.append(out)
    report = tag_report(gold, pred, TagScheme("IOB2", "IOB2"))
    _assert_equals_seqeval_report(report, gold, pred)
    errors, entities = report.mistakes.errors, report.scores.entities
    assert errors.correct + errors.wrong_type + errors.wrong_boundary + errors.wrong_type_and_boundary \
        + errors.spurious == entities.n_predicted
    assert min(errors.to_json().values()) > 0
    confusion = report.mistakes.confusion
    assert [sum(row) for row in confusion.counts[:-1]] == [entities.per_type[k].support for k in confusion.labels[:-1]]
