"""predict and evaluate on a tagging model (`bertkit finetune` on tagged data): tags and spans per word in the word
probe's JSONL shape, spans that slice the text given, long sentences in the windows the model was trained with,
evaluate's entity F1 equal to seqeval's on predict's own output (default mode, strict beside; IOB2 or IOB1
gold), and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tagged_samples import synthetic_sentences, write_iob
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.evaluate import run as evaluate
from bertkit.commands.predict import PredictConfig
from bertkit.commands.predict import run as predict
from bertkit.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tagger(tiny_tagger) -> tuple[Path, Path]:
    """(a tiny tagger trained at --max-length 16 on the easy synthetic set, its dev file)."""
    return tiny_tagger


def test_spans_slice_the_text_as_given_and_long_sentences_read_in_the_trained_windows(tagger):
    model, _ = tagger
    text = "alice   went to  new york with bob"
    result = predict(PredictConfig.of(model=str(model), text=(text,)))
    sentence = result.sentences[0]
    assert result.task == "tags" and result.max_length == 16 and result.n_sentences == 1
    assert sentence.words == tuple(text.split()) and len(sentence.tags) == 7
    assert {s.type for s in sentence.spans} <= {"PER", "LOC"} and sentence.spans
    for span in sentence.spans:
        assert text[span.start:span.end] == span.text == " ".join(sentence.words[span.first_word:span.last_word + 1])
    long = " ".join(["alice", "went", "to", "paris", "and", "the", "dog", "saw", "bob"] * 6)  # 54 words, > 16 pieces
    tagged = predict(PredictConfig.of(model=str(model), text=(long,))).sentences[0]
    assert len(tagged.tags) == 54 and tagged.tags[:4] == tagged.tags[27:31]  # read in windows of 16, every word tagged


def test_predict_writes_the_word_probes_jsonl_shape_and_evaluate_f1_equals_seqeval_on_it(tagger, tmp_path):
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    model, dev = tagger
    out = tmp_path / "predictions.jsonl"
    predict(PredictConfig.of(model=str(model), data=str(dev), out=str(out)))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    gold = [tags for _, tags in synthetic_sentences(30, 1)]
    assert len(lines) == 30 and set(lines[0]) == {"words", "tags", "spans"}
    predicted = [line["tags"] for line in lines]
    result = evaluate(EvaluateConfig.of(model=str(model), data=str(dev), out=str(tmp_path / "eval")))
    scores = result.metrics
    assert result.task == "tags" and result.rows == sum(len(t) for t in gold)
    assert scores.score("f1") == pytest.approx(f1_score(gold, predicted))  # conlleval's counting: run_ner's
    assert scores.score("precision") == pytest.approx(precision_score(gold, predicted))
    assert scores.score("recall") == pytest.approx(recall_score(gold, predicted))
    assert scores.score("f1_strict") == pytest.approx(f1_score(gold, predicted, mode="strict", scheme=IOB2))
    assert scores.score("precision_strict") == pytest.approx(precision_score(gold, predicted, mode="strict",
                                                                             scheme=IOB2))
    assert scores.score("recall_strict") == pytest.approx(recall_score(gold, predicted, mode="strict", scheme=IOB2))
    assert scores.score("f1") > 0.5 and set(result.per_type) <= {"LOC", "PER"}
    written = [json.loads(line) for line in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()]
    assert written == lines
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["metrics"]["f1"] == scores.score("f1")


def test_iob1_gold_scores_as_its_iob2_reading(tagger, tmp_path):
    model, dev = tagger
    sentences = synthetic_sentences(30, 1)
    iob1 = [(words, [("I" + t[1:]) if t.startswith("B-") and (i == 0 or tags[i - 1][2:] != t[2:]) else t
                     for i, t in enumerate(tags)]) for words, tags in sentences]
    gold1 = write_iob(tmp_path / "dev.iob", iob1)
    as_iob1 = evaluate(EvaluateConfig.of(model=str(model), data=str(gold1)))
    as_iob2 = evaluate(EvaluateConfig.of(model=str(model), data=str(dev)))
    assert as_iob1.metrics.score("f1") == as_iob2.metrics.score("f1")


def test_gold_in_another_scheme_and_options_a_tagger_does_not_read_are_refused(tagger, tmp_path):
    model, _ = tagger
    pos = write_iob(tmp_path / "pos.conll", [(["the", "dog"], ["DET", "NOUN"])])
    with pytest.raises(UserError, match=r"reads as none tags but the model .* was trained on IOB2"):
        evaluate(EvaluateConfig.of(model=str(model), data=str(pos), out=str(tmp_path / "eval")))
    assert not (tmp_path / "eval").exists()
    with pytest.raises(UserError, match=r"--truncation does not apply to a tagging model"):
        predict(PredictConfig.of(model=str(model), text=("alice went home",), truncation="tail"))
    with pytest.raises(UserError, match=r"word predictions are written as \.jsonl"):
        predict(PredictConfig.of(model=str(model), text=("alice went home",), out=str(tmp_path / "p.txt")))


def test_the_cli_prints_jsonl_and_the_per_type_table(tagger):
    model, dev = tagger
    runner = CliRunner()
    shown = runner.invoke(app, ["predict", "--model", str(model), "--words", '["bob", "met", "alice"]', "--json"])
    assert shown.exit_code == 0, shown.output
    first = json.loads(shown.stdout.splitlines()[0])
    assert first["words"] == ["bob", "met", "alice"] and len(first["tags"]) == 3
    scored = runner.invoke(app, ["evaluate", "--model", str(model), "--data", str(dev)])
    assert scored.exit_code == 0, scored.output
    assert "per entity type" in scored.stdout and "f1" in scored.stdout


def test_aggregate_reads_a_words_tag_from_its_pieces_as_the_pipeline_does(tagger, tiny_bert_dir):
    """--aggregate first is the default; max and average read every piece of a word split in several, with the
    probabilities `scoring.word_tags` computes from the tagger's own window logits; a model that is not a tagger
    refuses the flag."""
    import numpy as np

    from bertkit.models.compute import Compute
    from bertkit.models.tagger import load_tagger, window_logits
    from bertkit.scoring.word_tags import piece_probabilities, word_distribution

    model, _ = tagger
    text = "alicexqzj went to newyorkish with bobbington"
    first = predict(PredictConfig.of(model=str(model), text=(text,))).sentences[0]
    assert predict(PredictConfig.of(model=str(model), text=(text,), aggregate="first")).sentences[0] == first
    saved = load_tagger(str(model), Compute.resolve("cpu", "fp32"), None)
    logits, windows = window_logits(saved, [text.split()], 8)
    pieces = [piece_probabilities(logits[w, a:b]) for w, a, b in
              zip(windows.word_window, windows.word_start, windows.word_end, strict=True)]
    assert max(len(p) for p in pieces) > 1  # some word has several pieces: the ways can differ
    for way in ("max", "average"):
        result = predict(PredictConfig.of(model=str(model), text=(text,), aggregate=way))
        tagged = result.sentences[0]
        assert result.aggregate == way  # the result (and the CLI's summary line) says how words were read
        expected = [word_distribution(p, way) for p in pieces]
        assert list(tagged.tags) == [saved.tags[int(np.argmax(e))] for e in expected]
        assert np.allclose(tagged.probabilities, [float(e.max()) for e in expected], atol=1e-6)
    with pytest.raises(UserError, match="--aggregate applies to a tagging model .* is a sentence classifier"):
        predict(PredictConfig.of(model=str(tiny_bert_dir), text=("a sentence",), aggregate="max"))
