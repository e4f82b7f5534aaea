"""`bertkit evaluate` on a tagging model reports its mistakes (issue 46): on gold altered so a tiny tagger trained on
the easy synthetic set makes each entity error, the counts add up to seqeval's true/false positives and negatives,
equal the report of the tags it wrote to predictions.jsonl, reach metrics.json, --json and the printed tables, and
do not change with IOB1 gold; a POS tagger gets per-tag scores and a tag confusion instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tagged_samples import pos_sentences, synthetic_sentences, write_iob
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.evaluate import run as evaluate
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.data.tagscheme import TagScheme
from bertkit.scoring.tag_report import NONE, tag_report

pytestmark = pytest.mark.usefixtures("one_thread")

# gold relabelled so the model, which learnt the synthetic set, errs in every kind (word -> gold tag here)
RETYPED = {"alice": "B-ORG"}       # the model's PER over the same word: wrong type
MADE_UP = {"dog": "B-MISC"}        # a type it never predicts: missed
DROPPED = {"bob": "O"}             # its PER over no gold entity: spurious


def altered(sentences: list[tuple[list[str], list[str]]]) -> list[tuple[list[str], list[str]]]:
    """The sentences with the relabelling above; "new york" marked LOC on "new" only (its LOC over both words: wrong
    boundary) and "los angeles" PER on "angeles" only (its LOC over both: wrong type and boundary)."""
    out = []
    for words, tags in sentences:
        new = [RETYPED.get(w) or MADE_UP.get(w) or DROPPED.get(w) or t for w, t in zip(words, tags, strict=True)]
        for i in range(1, len(words)):
            if (words[i - 1], words[i]) == ("new", "york"):
                new[i] = "O"
            if (words[i - 1], words[i]) == ("los", "angeles"):
                new[i - 1], new[i] = "O", "B-PER"
        out.append((words, new))
    return out


def as_iob1(sentences: list[tuple[list[str], list[str]]]) -> list[tuple[list[str], list[str]]]:
    return [(words, [("I" + t[1:]) if t.startswith("B-") and (i == 0 or tags[i - 1][2:] != t[2:]) else t
                     for i, t in enumerate(tags)]) for words, tags in sentences]


@pytest.fixture(scope="module")
def tagger(tiny_tagger, tmp_path_factory) -> tuple[Path, Path]:
    """(a tiny entity tagger trained on the easy synthetic set, altered gold for it)."""
    best, _ = tiny_tagger
    return best, write_iob(tmp_path_factory.mktemp("gold") / "gold.iob2", altered(synthetic_sentences(40, 2)))


def seqeval_entities(tags: list[list[str]]) -> list[set[tuple[str, int, int]]]:
    from seqeval.scheme import IOB2, Entities

    return [{e.to_tuple()[1:] for e in sentence} for sentence in Entities(tags, IOB2, suffix=False).entities]


def overlaps(a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_the_error_counts_add_up_to_seqevals_and_are_the_written_predictions_report(tagger, tmp_path):
    model, gold_file = tagger
    result = evaluate(EvaluateConfig.of(model=str(model), data=str(gold_file), out=str(tmp_path / "eval")))
    errors, confusion = result.mistakes.errors, result.mistakes.confusion
    assert result.mistakes.per_tag is None
    assert min(errors.to_json().values()) > 0  # every kind happens on this gold
    gold = [tags for _, tags in altered(synthetic_sentences(40, 2))]
    lines = (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()
    predicted = [json.loads(line)["tags"] for line in lines]
    gold_entities, predicted_entities = seqeval_entities(gold), seqeval_entities(predicted)
    hits = sum(len(g & p) for g, p in zip(gold_entities, predicted_entities, strict=True))
    n_gold, n_predicted = sum(map(len, gold_entities)), sum(map(len, predicted_entities))
    assert errors.correct == hits and errors.predicted == n_predicted
    assert errors.false_positives == n_predicted - hits  # wrong type + boundary + both + spurious = seqeval's fp
    overlapped_unmatched = sum(g not in p and any(overlaps(g, q) for q in p)
                               for gs, p in zip(gold_entities, predicted_entities, strict=True) for g in gs)
    assert errors.missed + overlapped_unmatched == n_gold - hits  # seqeval's fn
    assert result.metrics.score("entities") == n_gold and result.metrics.score("predicted_entities") == n_predicted
    # the confusion: gold rows sum to each type's gold entities, columns to its predicted ones, the diagonal is correct
    types = confusion.labels[:-1]
    assert confusion.labels[-1] == NONE and "ORG" in types and "MISC" in types
    assert [sum(row) for row in confusion.counts[:-1]] == [result.per_type[t]["support"] for t in types]
    assert sum(confusion.count(t, t) for t in types) == hits and confusion.count("ORG", "PER") > 0
    assert confusion.count("MISC", "MISC") == 0 and confusion.count("MISC", NONE) == result.per_type["MISC"]["support"]
    # computed from the very tags it scored and wrote
    assert result.mistakes == tag_report(gold, predicted, TagScheme("IOB2", "IOB2")).mistakes
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert written["mistakes"] == json.loads(json.dumps(result.mistakes.to_json()))
    assert written["metrics"]["macro_precision"] == pytest.approx(
        sum(r["precision"] for r in result.per_type.values()) / len(result.per_type))


def test_iob1_gold_gives_the_same_mistakes(tagger, tmp_path):
    model, gold_file = tagger
    iob1 = write_iob(tmp_path / "gold.iob", as_iob1(altered(synthetic_sentences(40, 2))))
    as_read = evaluate(EvaluateConfig.of(model=str(model), data=str(iob1)))
    assert as_read.metrics.value("scheme") == "IOB2" and as_read.mistakes.errors.wrong_type > 0
    assert as_read.mistakes == evaluate(EvaluateConfig.of(model=str(model), data=str(gold_file))).mistakes


def test_the_cli_prints_the_report_and_json_carries_the_mistakes(tagger):
    model, gold_file = tagger
    runner = CliRunner()
    shown = runner.invoke(app, ["evaluate", "--model", str(model), "--data", str(gold_file)])
    assert shown.exit_code == 0, shown.output
    for line in ("per entity type", "micro avg", "macro avg", "entity errors", "wrong type (same boundaries)",
                 "wrong boundary (same type)", "spurious (overlaps no gold)", "missed (no prediction overlaps)",
                 "false positives", "confusion of entity types", "gold \\ predicted"):
        assert line in shown.stdout, line
    as_json = runner.invoke(app, ["evaluate", "--model", str(model), "--data", str(gold_file), "--json"])
    assert as_json.exit_code == 0, as_json.output
    record = json.loads(as_json.stdout)
    errors = record["mistakes"]["errors"]
    assert set(errors) == {"correct", "missed", "spurious", "wrong_type", "wrong_boundary", "wrong_type_and_boundary"}
    false_positives = sum(errors[k] for k in ("wrong_type", "wrong_boundary", "wrong_type_and_boundary", "spurious"))
    assert f"false positives {false_positives:,} = {errors['wrong_type']:,} wrong type" in shown.stdout
    assert record["mistakes"]["confusion"]["labels"][-1] == NONE and record["mistakes"]["per_tag"] is None


def test_a_pos_tagger_gets_per_tag_scores_and_a_tag_confusion(tiny_bert_dir, tmp_path):
    from sklearn.metrics import confusion_matrix

    rows = pos_sentences(60, 5)
    train, dev = write_iob(tmp_path / "train.conll", rows[:45]), write_iob(tmp_path / "dev.conll", rows[45:])
    finetune(FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(dev), out=str(tmp_path / "run"),
                            epochs=2, lr="5e-3", batch_size=8, save_every=None, precision="fp32"), progress=False)
    model = str(tmp_path / "run" / "best")
    result = evaluate(EvaluateConfig.of(model=model, data=str(dev), out=str(tmp_path / "eval")))
    mistakes = result.mistakes
    assert mistakes.errors is None and set(mistakes.per_tag) >= {"DET", "NOUN", "VERB", "ADJ"}
    gold = [t for _, tags in rows[45:] for t in tags]
    predicted = [t for line in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()
                 for t in json.loads(line)["tags"]]
    labels = list(mistakes.confusion.labels)
    assert [list(r) for r in mistakes.confusion.counts] == confusion_matrix(gold, predicted, labels=labels).tolist()
    assert mistakes.per_tag["NOUN"].support == gold.count("NOUN") and mistakes.per_tag["NOUN"].predicted == \
        predicted.count("NOUN")
    shown = CliRunner().invoke(app, ["evaluate", "--model", model, "--data", str(dev)])
    assert shown.exit_code == 0, shown.output
    assert "per tag (words)" in shown.stdout and "confusion of tags" in shown.stdout
    assert "entity errors" not in shown.stdout and "per entity type" not in shown.stdout


def test_a_wide_confusion_is_listed_as_its_largest_cells():
    from bertkit.cli.show_tag_report import MATRIX_LABELS, confusion_table
    from bertkit.scoring.tag_report import tag_confusion

    tags = [f"T{i:02d}" for i in range(MATRIX_LABELS + 2)]
    gold = [tags + ["T00", "T00"]]
    predicted = [tags[1:] + tags[:1] + ["T05", "T05"]]  # each tag as the next once, T00 as T05 twice
    shown = confusion_table(tag_confusion(gold, predicted), "tags")
    assert shown.title.startswith(f"most confused of {len(tags)} tags")
    cells = [[str(c) for c in column.cells] for column in shown.columns]
    assert list(zip(*cells, strict=True))[0] == ("T00", "T05", "2")  # the largest cell first
