"""The spans family (extractive question answering, issue 55): SQuAD data and question-answering models recognised
(by content, by hub name, by --task spans, by a record or a foreign folder's architecture), its options refused for
other families and theirs for it, and every bad input refused with exit 2 - the question id and the fix named -
before torch is imported and before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from squad_samples import squad_questions, write_squad
from test_fast_start import run_cli
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.predict import PredictConfig
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.families.base import DataAt
from bertkit.families.registry import FAMILIES, family_of

runner = CliRunner()


@pytest.fixture
def squad(tmp_path) -> tuple[Path, Path]:
    return (write_squad(tmp_path / "train.json", squad_questions(12, 0)),
            write_squad(tmp_path / "dev.json", squad_questions(4, 1)))


def refused(argv: list[str]) -> str:
    """The CLI's output for `argv`, which must exit 2 with no traceback."""
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_the_family_is_registered_ahead_of_sentences_and_reads_squad_by_content(squad, tmp_path):
    names = [f.name for f in FAMILIES]
    assert names.index("spans") < names.index("sentences") == len(names) - 1
    train, _ = squad
    flat = tmp_path / "flat.jsonl"
    flat.write_text(json.dumps({"id": "a", "title": "", "context": "red sky", "question": "what?",
                                "answers": {"text": ["red"], "answer_start": [0]}}) + "\n", encoding="utf-8")
    table = tmp_path / "rows.tsv"
    table.write_text("sentence\tlabel\na red sky\tpos\n", encoding="utf-8")
    assert family_of(data=DataAt(str(train))).name == "spans"
    assert family_of(data=DataAt(str(flat))).name == "spans"
    assert family_of(data=DataAt("squad_v2")).name == "spans" and family_of(data=DataAt("rajpurkar/squad")).name == "spans"
    assert family_of(data=DataAt(str(table))).name == "sentences"
    assert family_of(data=DataAt(str(table)), task="spans").name == "spans"  # --task spans forces it


def test_a_foreign_question_answering_folder_is_recognised_by_its_architecture(tmp_path):
    folder = tmp_path / "foreign"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertForQuestionAnswering"]}), encoding="utf-8")
    assert family_of(model=str(folder)).name == "spans"
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}),
                                        encoding="utf-8")
    assert family_of(model=str(folder)).name == "sentences"


def test_the_window_defaults_to_384_for_questions_and_128_for_rows(squad, tmp_path):
    train, dev = squad
    spans = FinetuneConfig.of(data=str(train), dev=str(dev), out=str(tmp_path / "o"))
    assert spans.family.name == "spans" and Reading.from_options(spans).max_length == 384
    table = tmp_path / "rows.tsv"
    table.write_text("sentence\tlabel\na red sky\tpos\n", encoding="utf-8")
    assert Reading.from_options(FinetuneConfig.of(data=str(table), out=str(tmp_path / "o"))).max_length == 128


def test_spans_options_are_refused_for_other_families_and_theirs_for_spans(squad, tmp_path):
    train, dev = squad
    table = tmp_path / "rows.tsv"
    table.write_text("sentence\tlabel\na red sky\tpos\nan awful sky\tneg\n", encoding="utf-8")
    with pytest.raises(UserError, match="--doc-stride applies to questions on passages"):
        FinetuneConfig.of(data=str(table), out=str(tmp_path / "o"), doc_stride=64)
    with pytest.raises(UserError, match="--text-column does not apply to fine-tuning on questions"):
        FinetuneConfig.of(data=str(train), dev=str(dev), out=str(tmp_path / "o"), text_column="context")
    with pytest.raises(UserError, match="--predictions applies to a question-answering model"):
        EvaluateConfig.of(data=str(table), predictions=str(tmp_path / "p.json"))


@pytest.mark.parametrize(("qas", "version", "problem"), [
    ([{"id": "x1", "question": "what?", "answers": [{"text": "red", "answer_start": 3}]}], "1.1",
     r"'x1'.*answer_start 0 is right"),
    ([{"id": "d", "question": "what?", "answers": [{"text": "red", "answer_start": 0}]},
      {"id": "d", "question": "which?", "answers": [{"text": "red", "answer_start": 0}]}], "1.1",
     r"id used before.*'d'.*Give every question its own id"),
    ([{"id": "e1", "question": "  ", "answers": [{"text": "red", "answer_start": 0}]}], "1.1",
     r"empty question.*'e1'"),
    ([{"id": "n1", "question": "what?", "answers": []}], "1.1", r"have no answer.*'n1'.*Add the answer"),
])
def test_a_bad_squad_set_is_refused_before_torch_naming_the_question(tmp_path, qas, version, problem):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": version, "data": [{"title": "t", "paragraphs": [
        {"context": "red sky at night", "qas": qas}]}]}), encoding="utf-8")
    dev = write_squad(tmp_path / "dev.json", squad_questions(3, 1))
    import re

    output = refused(["finetune", "--model", "minilm-offline", "--data", str(bad), "--dev", str(dev), "--out",
                      str(tmp_path / "out")])
    assert re.search(problem, output), output
    assert not (tmp_path / "out").exists()


def test_an_empty_context_is_refused_before_torch_and_leaves_nothing(tmp_path):
    bad = write_squad(tmp_path / "bad.json", [{"context": " ", "qa": {"id": "c1", "question": "what?",
                                                                      "answers": [{"text": "red", "answer_start": 0}]}}])
    dev = write_squad(tmp_path / "dev.json", squad_questions(3, 1))
    code, output, imported = run_cli("finetune", "--model", "minilm-offline", "--data", str(bad), "--dev", str(dev),
                                     "--out", "out", cwd=tmp_path)
    assert code == 2 and "empty context" in output and "'c1'" in output and "Traceback" not in output
    assert imported == [] and not (tmp_path / "out").exists()


def test_fine_tuning_questions_needs_a_dev_set_and_windows_with_room(squad, tmp_path):
    train, dev = squad
    output = refused(["finetune", "--model", "minilm-offline", "--data", str(train), "--out", str(tmp_path / "o")])
    assert "needs --dev" in output
    output = refused(["finetune", "--model", "minilm-offline", "--data", str(train), "--dev", str(dev), "--out",
                      str(tmp_path / "o"), "--max-length", "64", "--doc-stride", "128"])
    assert "--doc-stride 128 leaves no room" in output and "--max-length 64" in output
    shared = write_squad(tmp_path / "shared.json", squad_questions(4, 0))  # the training set's first ids
    output = refused(["finetune", "--model", "minilm-offline", "--data", str(train), "--dev", str(shared), "--out",
                      str(tmp_path / "o")])
    assert "in both the training set" in output and "'q0-0'" in output
    assert not (tmp_path / "o").exists()


def test_task_spans_refuses_data_that_is_not_squad(tmp_path):
    table = tmp_path / "rows.csv"
    table.write_text("sentence,label\na red sky,pos\n", encoding="utf-8")
    output = refused(["finetune", "--model", "minilm-offline", "--data", str(table), "--dev", str(table), "--task",
                      "spans", "--out", str(tmp_path / "o")])
    assert "does not look like a SQuAD set" in output and "drop --task spans" in output


@pytest.mark.parametrize(("argv", "problem"), [
    (["--question", "what?"], "--question needs its passage"),
    (["--question", "what?", "--context", "red", "--context-file", "c.txt"], "exactly one of --context"),
    (["--context", "red sky"], "--question (with --context, question-answering models)"),
    (["--question", "what?", "--context", "red", "--out", "answers.csv"], "answers are written as .jsonl"),
    (["--question", "what?", "--context-file", "missing.txt"], "--context-file missing.txt does not exist"),
    (["--text", "red sky"], "--text does not apply to a question-answering model"),
])
def test_predict_refuses_bad_question_options(tiny_answerer, tmp_path, monkeypatch, argv, problem):
    monkeypatch.chdir(tmp_path)
    model, _ = tiny_answerer
    assert problem in refused(["predict", "--model", str(model), *argv])
    assert not (tmp_path / "answers.csv").exists()


def test_question_options_are_refused_for_a_sentence_model(tmp_path):
    folder = tmp_path / "clf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}),
                                        encoding="utf-8")
    with pytest.raises(UserError, match="--question applies to a question-answering model"):
        PredictConfig.of(model=str(folder), question="what?", context="red sky")


@pytest.mark.parametrize(("content", "extra", "problem"), [
    ("[1, 2]", [], "holds a JSON list, not an object"),
    ('{"q1-0": 3}', [], "question 'q1-0'"),
    ("not json", [], "is not valid JSON"),
    ('{"q1-0": "red"}', ["--n-best", "5"], "--n-best read a model's answers"),
    ('{"q1-0": "red"}', ["--model", "MODEL"], "Give one of --model"),
])
def test_evaluate_refuses_bad_predictions_files(tiny_answerer, tmp_path, content, extra, problem):
    model, dev = tiny_answerer
    predictions = tmp_path / "p.json"
    predictions.write_text(content, encoding="utf-8")
    extra = [str(model) if a == "MODEL" else a for a in extra]
    output = refused(["evaluate", "--predictions", str(predictions), "--data", str(dev), "--out", str(tmp_path / "e"),
                      *extra])
    assert problem in output and not (tmp_path / "e").exists()


def test_null_odds_go_with_predictions(tiny_answerer, tmp_path):
    model, dev = tiny_answerer
    odds = tmp_path / "odds.json"
    odds.write_text("{}", encoding="utf-8")
    assert "--null-odds goes with --predictions" in refused(["evaluate", "--model", str(model), "--data", str(dev),
                                                             "--null-odds", str(odds)])
