"""bertkit finetune on tagged data with --test and --stride: the tagged test split scored at each new best and at the
end (metrics.json's best_test and final_test, the best/ and final/ cards), equal to evaluate's and seqeval's scores of
the saved model; a test tag unseen in training refused before anything is written; --stride recorded in the model's
reading, which predict reads back, and refused where it cannot apply."""

from __future__ import annotations

import json

import pytest
from tagged_samples import synthetic_sentences, write_iob
from test_tag_finetune import tag_cfg
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_tagged_test_split_is_scored_at_best_and_end_as_evaluate_and_seqeval_score_the_saved_model(
        tiny_bert_dir, tmp_path):
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    from bertkit.commands.evaluate import EvaluateConfig
    from bertkit.commands.evaluate import run as evaluate
    from bertkit.commands.predict import PredictConfig
    from bertkit.commands.predict import run as predict

    train = write_iob(tmp_path / "train.iob2", synthetic_sentences(60, 0))
    dev = write_iob(tmp_path / "dev.iob2", synthetic_sentences(20, 1))
    test_sentences = synthetic_sentences(15, 7, words=(10, 30))  # longer than the dev's: wider windows
    test = write_iob(tmp_path / "test.iob2", test_sentences)
    run = tmp_path / "run"
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, run, test=str(test), epochs=2), progress=False)
    on_disk = json.loads((run / "metrics.json").read_text())
    for key in ("best_test", "final_test"):
        scores = on_disk[key]
        assert set(scores["per_type"]) == {"LOC", "PER"} and scores["scheme"] == "IOB2"
        assert scores["n"] == sum(len(words) for words, _ in test_sentences)
    best = on_disk["best_test"]
    assert 0 < best["f1"] < 1 and best == result.metrics["best_test"]  # not perfect: the equalities below tell
    scored = evaluate(EvaluateConfig.of(model=str(run / "best"), data=str(test)))
    for name in ("f1", "precision", "recall", "accuracy"):
        assert scored.metrics.score(name) == pytest.approx(best[name]), name
    predicted = predict(PredictConfig.of(model=str(run / "best"), data=str(test))).sentences
    gold = [tags for _, tags in test_sentences]
    tags = [list(s.tags) for s in predicted]
    assert f1_score(gold, tags) == pytest.approx(best["f1"])  # conlleval's counting, as run_ner reports it
    assert f1_score(gold, tags, mode="strict", scheme=IOB2) == pytest.approx(best["f1_strict"])
    for folder in ("best", "final"):
        card = (run / folder / "README.md").read_text()
        assert "| test | `test.iob2` |" in card and f"## Test metrics ({best['n']} words, {test})" in card


def test_a_test_tag_unseen_in_training_is_refused_and_nothing_is_written(tmp_path):
    train = write_iob(tmp_path / "train.iob2", synthetic_sentences(20, 0))
    dev = write_iob(tmp_path / "dev.iob2", synthetic_sentences(5, 1))
    test = write_iob(tmp_path / "odd.iob2", [(["zurich", "the"], ["B-CITY", "O"])])
    refused = CliRunner().invoke(app, ["finetune", "--data", str(train), "--dev", str(dev), "--test", str(test),
                                       "--out", str(tmp_path / "run")])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "odd.iob2 has tags never seen in training" in refused.output and "B-CITY" in refused.output
    assert not (tmp_path / "run").exists()


def test_stride_is_recorded_in_the_tagger_and_read_back_by_predict(tiny_bert_dir, tmp_path, write_tsv, toy_rows):
    from bertkit.commands.predict import PredictConfig
    from bertkit.commands.predict import run as predict
    from bertkit.models.metadata import read_as_saved, saved_reading

    train = write_iob(tmp_path / "train.iob2", synthetic_sentences(20, 2, words=(20, 30)))
    dev = write_iob(tmp_path / "dev.iob2", synthetic_sentences(4, 3, words=(20, 30)))
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", max_length=16, stride=3, epochs=1),
                      progress=False)
    best = tmp_path / "run" / "best"
    assert saved_reading(str(best)) == Reading.of_words("first", 16, 3)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["stride"] == 3
    assert "| `--stride` | 3 |" in (best / "README.md").read_text()
    long = " ".join(["alice", "went", "to", "paris", "and", "the", "dog", "saw", "bob"] * 6)
    asked = read_as_saved(PredictConfig.of(model=str(best), text=(long,)))
    assert (asked.reading.max_length, asked.reading.stride) == (16, 3)  # predict reads in the windows it was trained in
    assert len(predict(PredictConfig.of(model=str(best), text=(long,))).sentences[0].tags) == 54
    assert result.metrics["best_dev"]["n"] == sum(len(s[0]) for s in synthetic_sentences(4, 3, words=(20, 30)))
    again = read_as_saved(FinetuneConfig.of(data=str(train), dev=str(dev), model=str(best), out=str(tmp_path / "t2")))
    assert (again.reading.max_length, again.reading.stride) == (16, 3)  # a tagger fine-tuned on from it reads in the same windows
    rows = write_tsv("rows.tsv", toy_rows, ("sentence", "label"))
    text = read_as_saved(FinetuneConfig.of(data=str(rows), model=str(best), out=str(tmp_path / "t3")))
    assert (text.reading.max_length, text.reading.stride) == (16, None)  # rows of text from its encoder: no tagger's --stride


@pytest.mark.parametrize(("overrides", "message"), [
    ({"max_length": 16, "stride": 14}, r"--stride 14 must be between 0 and 13"),
    ({"stride": -1}, r"stride must be at least 0"),
])
def test_a_stride_that_never_moves_on_is_refused_before_anything_is_written(tiny_bert_dir, tmp_path, overrides,
                                                                            message):
    train = write_iob(tmp_path / "train.iob2", synthetic_sentences(10, 0))
    dev = write_iob(tmp_path / "dev.iob2", synthetic_sentences(4, 1))
    with pytest.raises(UserError, match=message):
        finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", **overrides), progress=False)
    assert not (tmp_path / "run").exists()


def test_stride_on_rows_of_text_is_refused_and_not_in_the_resume_key(tmp_path, write_tsv, toy_rows):
    from bertkit.training.resume import resume_key

    rows = write_tsv("rows.tsv", toy_rows, ("sentence", "label"))
    with pytest.raises(UserError, match=r"--stride applies to tagged data"):
        FinetuneConfig.of(data=str(rows), out=str(tmp_path / "run"), stride=8)
    assert "stride" not in resume_key(FinetuneConfig.of(data=str(rows), out=str(tmp_path / "run")), {})["config"]
