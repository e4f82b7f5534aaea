"""bertkit predict and evaluate with a question-answering model (issue 55): answers whose character offsets slice the
passage to the answer, an answer past the first window found, answers.jsonl rows and the official predictions.json,
--json lines; the official scores of the model or of a --predictions file (a missing id scores 0 and is counted),
with intervals, the kinds of errors, F1 by question word and the errors CSV most confident first; a SQuAD v2.0 model
records its no-answer threshold and predict applies it."""

from __future__ import annotations

import csv
import json

import pytest
from squad_samples import MAX_LENGTH, long_passage
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.evaluate import run as evaluate
from bertkit.commands.predict import PredictConfig
from bertkit.commands.predict import run as predict
from bertkit.data.squad import read_squad

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()


def test_offsets_slice_the_passage_to_the_answer(tiny_answerer, tmp_path):
    model, dev = tiny_answerer
    result = predict(PredictConfig.of(model=str(model), data=str(dev)), keep=None)
    questions = {q.id: q for q in read_squad(dev).questions}
    assert result.family == "spans" and result.n_questions == len(questions) == len(result.answers)
    for answer in result.answers:
        context = questions[answer.id].context
        assert answer.answer and context[answer.start:answer.end] == answer.answer
        assert answer.n_best[0].text == answer.answer and len(answer.n_best) <= 20
        assert all(c.start is None or context[c.start:c.end] == c.text for c in answer.n_best)


def test_an_answer_past_the_first_window_is_found(tiny_answerer, tmp_path):
    from transformers import AutoTokenizer

    from bertkit.data.squad import Question
    from bertkit.encoding.qa_windows import QAReading, qa_windows

    model, _ = tiny_answerer
    context, colour, start = long_passage()
    windows = qa_windows(AutoTokenizer.from_pretrained(str(model)), [Question("x", "", context, "what colour is it?",
                                                                              ())], QAReading(MAX_LENGTH, 16))
    first_window_end = int(windows.char_ends[0].max())
    assert windows.n_windows >= 4 and start > first_window_end  # the colour is not in the first window
    context_file = tmp_path / "passage.txt"
    context_file.write_text(context, encoding="utf-8")
    result = predict(PredictConfig.of(model=str(model), question="what colour is it?", context_file=str(context_file)),
                     keep=None)
    answer = result.answers[0]
    assert (answer.answer, answer.start, answer.end) == (colour, start, start + len(colour))


def test_answers_jsonl_the_official_mapping_and_json_lines(tiny_answerer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, dev = tiny_answerer
    out = runner.invoke(app, ["predict", "--model", str(model), "--data", str(dev), "--out", "answers.jsonl",
                              "--n-best", "3"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and set(rows[0]) == {"id", "question", "answer", "start", "end", "score", "probability",
                                                "n_best"}
    assert all(len(row["n_best"]) <= 3 for row in rows) and "what colour is it?" in out.output
    mapping = runner.invoke(app, ["predict", "--model", str(model), "--data", str(dev), "--out", "predictions.json"])
    assert mapping.exit_code == 0, mapping.output
    assert json.loads((tmp_path / "predictions.json").read_text()) == {row["id"]: row["answer"] for row in rows}
    streamed = runner.invoke(app, ["predict", "--model", str(model), "--question", "what colour is it?", "--context",
                                   "the red car", "--json"])
    line = json.loads(streamed.stdout.strip())
    assert streamed.exit_code == 0 and line["id"] == "q1" and line["answer"] == "red" and line["start"] == 4


def test_evaluate_scores_the_model_officially_with_its_files(tiny_answerer, tmp_path):
    model, dev = tiny_answerer
    result = evaluate(EvaluateConfig.of(model=str(model), data=str(dev), out=str(tmp_path / "e")))
    metrics = result.metrics.to_json()
    assert result.task == "spans" and result.rows == 24 and metrics["rules"] == "1.1"
    assert metrics["f1"] > 90 and metrics["intervals"]["exact_match"][1] <= 100
    assert sum(metrics["kinds"].values()) == 24 and metrics["by_question_word"][0]["word"] in ("what", "which")
    saved = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert saved["metrics"]["f1"] == metrics["f1"] and saved["max_length"] == MAX_LENGTH and saved["doc_stride"] == 16
    assert set(json.loads((tmp_path / "e" / "predictions.json").read_text())) == {q.id for q in read_squad(dev).questions}
    assert (tmp_path / "e" / "answers.jsonl").is_file() and (tmp_path / "e" / "errors.csv").is_file()


def test_a_predictions_file_is_scored_as_the_official_script_scores_it(tiny_answerer, tmp_path):
    _, dev = tiny_answerer
    questions = read_squad(dev).questions
    predictions = {questions[0].id: questions[0].answers[0].text, questions[1].id: "the " + questions[1].answers[0].text,
                   questions[2].id: "dog", questions[3].id: questions[3].answers[0].text + " car",
                   "not-a-question": "red"}
    file = tmp_path / "predictions.json"
    file.write_text(json.dumps(predictions), encoding="utf-8")
    out = runner.invoke(app, ["evaluate", "--predictions", str(file), "--data", str(dev), "--out", str(tmp_path / "e")])
    assert out.exit_code == 0, out.output
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text())["metrics"]
    # exact: 2 of 24 (an article is ignored); F1: 1 + 1 + 0 + 2/3; 20 questions missing, each scored 0 and counted
    assert metrics["n"] == 24 and metrics["missing"] == 20
    assert metrics["exact_match"] == pytest.approx(100 * 2 / 24) and metrics["f1"] == pytest.approx(100 * (8 / 3) / 24)
    with open(tmp_path / "e" / "errors.csv", encoding="utf-8") as handle:
        kinds = [row["kind"] for row in csv.DictReader(handle)]
    assert kinds.count("missing") == 20 and "no_overlap" in kinds and "partial_overlap" in kinds
    assert "missing 20" in out.output


def test_a_v2_model_records_its_threshold_and_predict_applies_it(tiny_answerer_v2):
    model, dev = tiny_answerer_v2
    record = json.loads((model / "bertkit_model.json").read_text())
    assert record["spans"]["version"] == "2.0" and isinstance(record["threshold"], float)
    metrics = json.loads((model.parent / "metrics.json").read_text())["best_dev"]
    assert {"HasAns_f1", "NoAns_f1", "best_f1", "best_f1_threshold"} <= set(metrics)
    assert metrics["threshold"] == record["threshold"] > metrics["best_f1_threshold"]  # off the dev question it sits on
    scored = evaluate(EvaluateConfig.of(model=str(model), data=str(dev))).metrics
    assert scored.score("f1") == pytest.approx(metrics["best_f1"])  # the recorded threshold is the best one on dev
    answers = predict(PredictConfig.of(model=str(model), data=str(dev)), keep=None)
    assert answers.allow_null and answers.threshold == record["threshold"]
    odds = {a.id: a.null_odds for a in answers.answers}
    assert all((a.answer == "") == (odds[a.id] > record["threshold"]) for a in answers.answers)
    never = predict(PredictConfig.of(model=str(model), data=str(dev), null_threshold=1e9), keep=None)
    assert all(a.answer for a in never.answers)
