"""`bertkit export` of a tagging model (issue 46): the ONNX folder records the tagger (task, scheme, reading of words,
tags) and `predict`/`evaluate` read it back through the same windows and word tags as the PyTorch folder; the gate
compares the export's tags with the fp32 model's (tag agreement, entity agreement, entity F1 on gold tags), refuses
below --min-agreement or above --max-drop, and refuses options that do not fit a tagger; a tampered export is refused
on read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from export_runs import export_report, fp32_export_of, invoke, predicted_lines
from tagged_samples import synthetic_sentences, write_iob

from bertkit.data.tagscheme import TagScheme
from bertkit.models import metadata, onnx

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("one_thread")
LONG = " ".join(["alice", "went", "to", "paris", "and", "the", "dog", "saw", "bob"] * 6)
"""54 words: more pieces than the tagger's window of 16, read in several windows."""


@pytest.fixture(scope="module")
def tagger(tiny_tagger) -> tuple[Path, Path]:
    """(a tiny tagger trained at --max-length 16 on the easy synthetic set, its dev file)."""
    return tiny_tagger


@pytest.fixture(scope="module")
def fp32_export(tagger, tmp_path_factory) -> Path:
    model, dev = tagger
    return fp32_export_of(model, dev, tmp_path_factory.mktemp("exports") / "fp32")


def _without_scores(lines: list[dict]) -> list[dict]:
    return [{**line, "spans": [{k: v for k, v in span.items() if k != "score"} for span in line["spans"]]}
            for line in lines]


def test_an_fp32_export_records_the_tagger_and_its_gate(tagger, fp32_export):
    model, dev = tagger
    record = metadata.read_model_info(fp32_export)
    source = metadata.read_model_info(model)
    assert record["onnx"]["kind"] == "tagger" and record["onnx"]["output"] == "logits"
    assert metadata.is_tagger(fp32_export) and onnx.is_export(fp32_export)
    assert record["tag_scheme"] == source["tag_scheme"] and record["reading"] == source["reading"]
    assert record["reading"]["max_length"] == 16
    assert json.loads((fp32_export / "config.json").read_text())["id2label"] == \
        json.loads((model / "config.json").read_text())["id2label"]
    report = export_report(fp32_export)
    assert report["kind"] == "tagger" and report["statistic"] == "agreement" and report["passed"]
    assert report["rows"] == 30 and report["words"] == sum(len(w) for w, _ in synthetic_sentences(30, 1))
    assert report["entity_agreement"] == 1.0 and report["agreement"] == 1.0 and report["disagreeing_words"] == 0
    assert report["max_abs_logit_diff"] < 1e-4
    assert report["metric"] == "f1" and report["metric_fp32"] == report["metric_export"] > 0.5
    assert report["metric_drop"] == 0.0 and report["max_drop"] == 0.01
    assert report["data"] == str(dev)


def test_predict_and_evaluate_read_the_export_as_the_pytorch_folder(tagger, fp32_export, tmp_path):
    model, dev = tagger
    for args in (["--data", dev], ["--text", LONG], ["--text", "alicexqzj went to newyorkish", "--aggregate", "max"]):
        exported, source = predicted_lines(fp32_export, *args), predicted_lines(model, *args)
        assert _without_scores(exported) == _without_scores(source)  # the same words, tags and spans
        scores = [[span["score"] for line in lines for span in line["spans"]] for lines in (exported, source)]
        assert scores[0] == pytest.approx(scores[1], abs=1e-5)  # fp32 ONNX and PyTorch: about 1e-6 apart
    long = predicted_lines(fp32_export, "--text", LONG)[0]
    assert len(long["tags"]) == 54 and long["spans"]
    scores = [json.loads(invoke("evaluate", "--model", m, "--data", dev, "--json", "-q").stdout)["metrics"]
              for m in (model, fp32_export)]
    assert scores[0]["f1"] == scores[1]["f1"] and scores[0]["per_type"] == scores[1]["per_type"]
    shown = invoke("predict", "--model", fp32_export, "--text", "bob met alice")
    assert shown.exit_code == 0 and "onnx" in shown.output


def test_an_int8_export_of_the_runs_dev_set_records_both_entity_f1s(tagger, tmp_path):
    """No --data: the gate reads the tagging run's dev set; int8 weights, so the numbers are measured, not equal."""
    model, dev = tagger
    out = tmp_path / "int8"
    result = invoke("export", "--model", model, "--out", out, "--min-agreement", "0", "--max-drop", "1", "-q", "--json")
    assert result.exit_code == 0, result.output
    report = export_report(out)
    shown = json.loads(result.stdout)
    assert shown["quantized"] == "int8" and shown["backend"] == "onnx-int8" and shown["gate"]["words"] == report["words"]
    assert report["data"] == str(dev) and report["rows"] == 30 and report["metric"] == "f1"
    for key in ("entity_agreement", "agreement", "metric_fp32", "metric_export", "metric_drop", "max_abs_logit_diff"):
        assert isinstance(report[key], float), key
    assert 0 <= report["entity_agreement"] <= 1 and report["passed"]
    assert metadata.read_model_info(out)["compute"] == {"device": "cpu", "precision": "int8"}
    card = (out / "README.md").read_text()
    assert "pipeline_tag: token-classification" in card and "entity agreement: " in card and "metric drop: " in card
    predicted = predicted_lines(out, "--data", dev)
    assert len(predicted) == 30 and all(len(p["tags"]) == len(w) for p, (w, _) in
                                        zip(predicted, synthetic_sentences(30, 1), strict=True))
    refused = invoke("predict", "--model", out, "--text", "bob met alice", "--precision", "bf16")
    assert refused.exit_code == 2 and "its precision was fixed when it was exported" in refused.output


def _shift_tags(monkeypatch):
    """An export that tags every piece with the next tag: its entities are not the fp32 model's."""
    real = onnx.tagger_function

    def shifted(model):
        function = real(model)
        return lambda batch: function(batch).roll(1, dims=-1)

    monkeypatch.setattr(onnx, "tagger_function", shifted)


def test_the_gate_refuses_an_export_whose_tags_differ_and_force_keeps_it(tagger, tmp_path, monkeypatch):
    """Below --min-agreement (tags per word) or above --max-drop (entity F1 on gold tags), each on its own."""
    model, dev = tagger
    _shift_tags(monkeypatch)
    out = tmp_path / "export"
    refused = invoke("export", "--model", model, "--out", out, "--quantize", "none", "--data", dev)
    assert refused.exit_code == 2 and "Nothing was written" in refused.output
    assert "words (30 gate sentences) as the PyTorch fp32 model does, below --min-agreement 0.99" in refused.output
    assert "above --max-drop 0.01" in refused.output and "its entities agree with" in refused.output
    assert not out.exists()
    by_drop = invoke("export", "--model", model, "--out", out, "--quantize", "none", "--data", dev, "--min-agreement", "0")
    assert by_drop.exit_code == 2 and "above --max-drop" in by_drop.output and "below --min-agreement" not in by_drop.output
    forced = invoke("export", "--model", model, "--out", out, "--quantize", "none", "--data", dev, "--force", "-q")
    assert forced.exit_code == 0, forced.output
    report = export_report(out)
    assert report["forced"] and not report["passed"] and report["agreement"] < 0.99 and report["entity_agreement"] < 0.99
    assert report["metric_drop"] == report["metric_fp32"] - report["metric_export"] > 0.01


def test_plain_tags_are_gated_by_tag_agreement_on_sentences_without_gold(tagger, tmp_path):
    """A tagger whose record says plain tags (POS-like): no entity agreement; a text file of sentences is gate data
    without gold tags (no metric, no drop)."""
    model, _ = tagger
    plain = tmp_path / "plain"
    shutil.copytree(model, plain)
    metadata.add_model_info(plain, {"tag_scheme": TagScheme().to_json()})
    lines = tmp_path / "sentences.txt"
    lines.write_text("alice went to paris\n\nbob saw the dog\n" + LONG + "\n", encoding="utf-8")
    out = tmp_path / "export"
    result = invoke("export", "--model", plain, "--out", out, "--quantize", "none", "--data", lines, "-q")
    assert result.exit_code == 0, result.output
    report = export_report(out)
    assert report["statistic"] == "agreement" and report["entity_agreement"] is None and report["agreement"] == 1.0
    assert report["rows"] == 3 and report["words"] == 4 + 4 + 54 and "metric" not in report and report["passed"]
    assert predicted_lines(out, "--text", "alice went to paris")[0]["spans"] == []


def test_options_that_do_not_fit_a_tagger_are_refused_before_anything_is_written(tagger, tiny_bert_dir, tmp_path):
    model, dev = tagger
    out = tmp_path / "export"
    for args, message in ((["--kind", "classifier"], "--kind classifier does not apply to"),
                          (["--long-text", "cut"], "--long-text does not apply to a tagging model"),
                          (["--truncation", "tail"], "--truncation does not apply to a tagging model")):
        result = invoke("export", "--model", model, "--out", out, "--data", dev, *args)
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output and not out.exists()
    not_a_tagger = invoke("export", "--model", tiny_bert_dir, "--out", out, "--kind", "tagger", "--data", dev)
    assert not_a_tagger.exit_code == 2 and "--kind tagger exports a tagging model" in not_a_tagger.output
    pos = write_iob(tmp_path / "pos.conll", [(["the", "dog"], ["DET", "NOUN"])])
    other_scheme = invoke("export", "--model", model, "--out", out, "--data", pos)
    assert other_scheme.exit_code == 2 and "reads as none tags but the model" in other_scheme.output
    missing = invoke("export", "--model", model, "--out", out, "--data", tmp_path / "nowhere.iob2")
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert not out.exists()


@pytest.mark.parametrize("damage", ["model.onnx", "config.json", "bertkit_model.json"])
def test_a_tampered_export_is_refused_on_read(tagger, fp32_export, tmp_path, damage):
    copy = tmp_path / "copy"
    shutil.copytree(fp32_export, copy)
    if damage == "bertkit_model.json":  # the record itself: its digests no longer vouch for the folder
        record = json.loads((copy / damage).read_text())
        del record["files"]["model.onnx"]
        (copy / damage).write_text(json.dumps(record))
    else:
        with open(copy / damage, "ab") as handle:
            handle.write(b" ")
    for command in (["predict", "--text", "bob met alice"], ["evaluate", "--data", str(tagger[1])]):
        result = invoke(command[0], "--model", copy, *command[1:])
        assert result.exit_code == 2 and "not the one bertkit saved" in result.output, result.output
