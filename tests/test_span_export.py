"""`bertkit export` of a question-answering model (issue 55): the ONNX folder records the spans family and its
reading (window, doc stride), `predict`/`evaluate` read it back through the same windows and answers as the PyTorch
folder; the gate compares the export's answers with the fp32 model's on SQuAD questions (answer agreement, their
overlap, the drop of the official F1), refuses below --min-agreement or above --max-drop, and refuses options that do
not fit a question-answering model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from export_runs import export_report, fp32_export_of, invoke, predicted_lines
from squad_samples import long_passage

from bertkit.models import metadata, onnx

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def fp32_export(tiny_answerer, tmp_path_factory) -> Path:
    model, dev = tiny_answerer
    return fp32_export_of(model, dev, tmp_path_factory.mktemp("exports") / "fp32")


def test_an_fp32_export_records_the_answerer_and_its_gate(tiny_answerer, fp32_export):
    model, dev = tiny_answerer
    record, source = metadata.read_model_info(fp32_export), metadata.read_model_info(model)
    assert record["onnx"]["kind"] == "answerer" and record["onnx"]["output"] == "logits"
    assert record["family"] == "spans" and metadata.is_question_answerer(fp32_export) and onnx.is_export(fp32_export)
    assert record["reading"] == source["reading"] and record["reading"]["max_length"] == 64
    assert record["reading"]["stride"] == 16 and record["spans"] == source["spans"]
    assert "model.onnx" in record["files"]
    report = export_report(fp32_export)
    assert report["kind"] == "answerer" and report["task"] == "spans" and report["passed"]
    assert report["rows"] == 24 and report["agreement"] == 1.0 and report["disagreeing_rows"] == 0
    assert report["answer_f1_agreement"] == 1.0 and report["max_abs_logit_diff"] < 1e-4
    assert report["metric"] == "f1" and report["metric_fp32"] == report["metric_export"] and report["metric_drop"] == 0
    assert report["data"] == str(dev)


def test_predict_and_evaluate_read_the_export_as_the_pytorch_folder(tiny_answerer, fp32_export, tmp_path):
    model, dev = tiny_answerer
    context, colour, start = long_passage()  # the answer lies past the first window
    passage = tmp_path / "passage.txt"
    passage.write_text(context, encoding="utf-8")
    for args in (["--data", dev], ["--question", "what colour is it?", "--context-file", passage]):
        exported, source = predicted_lines(fp32_export, *args), predicted_lines(model, *args)
        keys = ("id", "answer", "start", "end")
        assert [[a[k] for k in keys] for a in exported] == [[a[k] for k in keys] for a in source]
        assert [a["score"] for a in exported] == pytest.approx([a["score"] for a in source], abs=1e-4)
    assert predicted_lines(fp32_export, "--question", "what colour is it?", "--context-file", passage)[0]["start"] == start
    scores = [json.loads(invoke("evaluate", "--model", m, "--data", dev, "--json", "-q").stdout)["metrics"]
              for m in (model, fp32_export)]
    assert scores[0]["f1"] == scores[1]["f1"] and scores[0]["exact_match"] == scores[1]["exact_match"]
    shown = invoke("predict", "--model", fp32_export, "--question", "what colour is it?", "--context", "the red car")
    assert shown.exit_code == 0 and "onnx" in shown.output


def test_an_int8_export_gated_on_the_runs_dev_set(tiny_answerer, tmp_path):
    """No --data: the gate reads the question-answering run's dev set; int8 weights, so the numbers are measured."""
    model, dev = tiny_answerer
    out = tmp_path / "int8"
    result = invoke("export", "--model", model, "--out", out, "--min-agreement", "0", "--max-drop", "1", "-q", "--json")
    assert result.exit_code == 0, result.output
    shown, report = json.loads(result.stdout), export_report(out)
    assert shown["kind"] == "answerer" and shown["backend"] == "onnx-int8" and shown["gate"]["rows"] == 24
    assert report["data"] == str(dev) and report["metric"] == "f1" and report["passed"]
    for key in ("agreement", "answer_f1_agreement", "metric_fp32", "metric_export", "metric_drop"):
        assert isinstance(report[key], float) and -1 <= report[key] <= 1, key
    assert metadata.read_model_info(out)["compute"] == {"device": "cpu", "precision": "int8"}
    assert len(predicted_lines(out, "--data", dev)) == 24
    human = invoke("export", "--model", model, "--out", out, "--min-agreement", "0", "--max-drop", "1", "--overwrite")
    assert human.exit_code == 0 and "answer agreement with fp32" in human.output
    refused = invoke("predict", "--model", out, "--question", "q?", "--context", "a b", "--precision", "bf16")
    assert refused.exit_code == 2 and "its precision was fixed when it was exported" in refused.output


def test_the_gate_refuses_an_export_whose_answers_differ_and_force_keeps_it(tiny_answerer, tmp_path, monkeypatch):
    """An export whose scores are shifted one token on answers other spans: below --min-agreement and above
    --max-drop, nothing written; --force keeps it with the failing numbers recorded."""
    model, dev = tiny_answerer
    real = onnx.answerer_function
    monkeypatch.setattr(onnx, "answerer_function", lambda m: (lambda b: real(m)(b).roll(1, dims=1)))
    out = tmp_path / "export"
    refused = invoke("export", "--model", model, "--out", out, "--quantize", "none", "--data", dev)
    assert refused.exit_code == 2 and "Nothing was written" in refused.output, refused.output
    assert "of 24 gate questions with the PyTorch fp32 model's answer text" in refused.output
    assert "below --min-agreement 0.99" in refused.output and "above --max-drop 0.01" in refused.output
    assert not out.exists()
    forced = invoke("export", "--model", model, "--out", out, "--quantize", "none", "--data", dev, "--force", "-q")
    assert forced.exit_code == 0, forced.output
    report = export_report(out)
    assert report["forced"] and not report["passed"] and report["agreement"] < 0.99
    assert report["metric_drop"] == pytest.approx(report["metric_fp32"] - report["metric_export"])
    assert report["metric_drop"] > 0.01
    card = (out / "README.md").read_text()
    assert "pipeline_tag: question-answering" in card and "LABEL_0" not in card and "answer f1 agreement" in card


def test_bad_export_input_is_refused_before_anything_is_written(tiny_answerer, tiny_bert_dir, tmp_path):
    model, dev = tiny_answerer
    out = tmp_path / "export"
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": "1.1", "data": []}))
    for args, message in ((["--kind", "classifier"], "--kind classifier does not apply to"),
                          (["--long-text", "cut"], "--long-text"), (["--stride", "8"], "--stride does not apply"),
                          (["--data", tmp_path / "nowhere.json"], "does not exist"),
                          (["--data", empty], "holds no question")):
        result = invoke("export", "--model", model, "--out", out, *(["--data", dev] if "--data" not in args else []),
                        *args)
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output and not out.exists()
    not_an_answerer = invoke("export", "--model", tiny_bert_dir, "--out", out, "--kind", "answerer", "--data", dev)
    assert not_an_answerer.exit_code == 2 and "--kind answerer exports a question-answering model" in \
        not_an_answerer.output
    assert not out.exists()


def test_a_tampered_export_is_refused_on_read(tiny_answerer, fp32_export, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(fp32_export, copy)
    with open(copy / "model.onnx", "ab") as handle:
        handle.write(b" ")
    result = invoke("predict", "--model", copy, "--question", "what colour is it?", "--context", "the red car")
    assert result.exit_code == 2 and "model.onnx" in result.output and "Traceback" not in result.output


def test_a_squad_v2_export_keeps_the_threshold_and_the_unanswered_questions(tiny_answerer_v2, tmp_path):
    """SQuAD v2.0: the export records the model's no-answer threshold, and predict and evaluate leave the same
    questions unanswered as the PyTorch folder (HasAns/NoAns scores equal)."""
    model, dev = tiny_answerer_v2
    exported = fp32_export_of(model, dev, tmp_path / "v2")
    record, source = metadata.read_model_info(exported), metadata.read_model_info(model)
    assert record["spans"]["version"] == "2.0" and record["threshold"] == source["threshold"]
    assert export_report(exported)["passed"]
    ours, theirs = predicted_lines(exported, "--data", dev), predicted_lines(model, "--data", dev)
    assert [(a["id"], a["answer"]) for a in ours] == [(a["id"], a["answer"]) for a in theirs]
    assert any(a["answer"] == "" for a in ours)  # some questions are left unanswered, by both
    scores = [json.loads(invoke("evaluate", "--model", m, "--data", dev, "--json", "-q").stdout)["metrics"]
              for m in (model, exported)]
    for key in ("f1", "exact_match", "HasAns_f1", "NoAns_f1"):
        assert scores[0][key] == scores[1][key], key
