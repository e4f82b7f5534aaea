"""models/onnx.py and predict/export.py: `bertkit export` (fp32 and int8), the accuracy gate (accept, refuse, force),
the ONNX backend of predict/evaluate/embed, the folder loaded without bertkit, and bertkit without onnxruntime."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertkit.cli import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.data.dataset import TextDataset
from bertkit.encoding.reading import Reading
from bertkit.features.extract import extract_features
from bertkit.io import faults, ownership
from bertkit.models import infer, loading, onnx
from bertkit.models.compute import Compute
from bertkit.options import config_dict

pytest.importorskip("onnxruntime")
runner = CliRunner()
TEXTS = ["a wonderful film , truly superb", "an awful movie", "it was fine I guess, with a very long middle part "
         "that goes on and on about nothing much at all", "x"]


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _classifier(base: Path, folder: Path, kind: str) -> Path:
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(3)
    config = AutoConfig.from_pretrained(str(base), num_labels=2, id2label={0: "neg", 1: "pos"},
                                        label2id={"neg": 0, "pos": 1})
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():  # a head with a clear opinion, so labels are not coin flips of rounding
        model.classifier.weight.mul_(20)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=["bert", "distilbert"])
def classifier_dir(request, tiny_bert_dir, tiny_distilbert_dir, tmp_path_factory) -> Path:
    base = tiny_bert_dir if request.param == "bert" else tiny_distilbert_dir
    return _classifier(base, tmp_path_factory.mktemp(f"clf-{request.param}"), request.param)


@pytest.fixture(scope="module")
def gate_tsv(tmp_path_factory) -> Path:
    """40 labelled rows (some long), the gate's data."""
    words = ["great", "awful", "fine", "boring", "superb", "dull", "lovely", "bad"]
    rows = [(" ".join(words[(i + j) % 8] for j in range(3 + (i * 7) % 40)), "pos" if i % 2 else "neg")
            for i in range(40)]
    path = tmp_path_factory.mktemp("gate") / "gate.tsv"
    path.write_text("text\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n", encoding="utf-8")
    return path


def _export(model: Path, out: Path, *extra: str):
    return invoke("export", "--model", model, "--out", out, "-q", "--json", *extra)


def _report(out: Path) -> dict:
    return json.loads((out / onnx.REPORT_FILE).read_text())


# ---------------------------------------------------------------- classifiers


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_classifier_export_runs_like_torch_and_reports_the_gate(classifier_dir, gate_tsv, tmp_path, quantize):
    out = tmp_path / "export"
    result = _export(classifier_dir, out, "--data", gate_tsv, "--quantize", quantize)
    assert result.exit_code == 0, result.output
    report = _report(out)
    assert {"agreement", "max_abs_logit_diff", "rows", "metric", "metric_fp32", "metric_export", "passed",
            "forced"} <= set(report)
    assert report["rows"] == 40 and report["passed"] and not report["forced"] and report["metric"] == "accuracy"
    record = json.loads((out / "bertkit_model.json").read_text())
    info = record["onnx"]
    assert info["kind"] == "classifier" and info["quantized"] == (None if quantize == "none" else "int8")
    precision = "fp32" if quantize == "none" else "int8"  # the export's own compute, not the source's training one
    assert record["compute"] == {"device": "cpu", "precision": precision}
    assert infer.export_compute_of(str(out), "auto") == onnx.export_compute(out) == Compute("cpu", precision)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        p for p in onnx.FOLDER_FILES if (out / p).exists())
    model, tokenizer, labels = infer.load_for_inference(str(out), infer.export_compute_of(str(out), "fp32"))
    assert isinstance(model, onnx.OnnxModel) and tuple(labels.labels) == ("neg", "pos")
    dataset = TextDataset(TEXTS, source="t")
    exported = infer.classifier_logits(model, tokenizer, dataset, reading=Reading(16), batch_size=2, precision="fp32")
    torch_model = loading.load_classifier(str(classifier_dir), require_head=True)
    reference = infer.classifier_logits(torch_model, tokenizer, dataset, reading=Reading(16), batch_size=2, precision="fp32")
    tolerance = 1e-4 if quantize == "none" else 0.25 * max(1.0, float(np.abs(reference).max()))  # int8: measured ~5%
    np.testing.assert_allclose(exported, reference, atol=tolerance)
    if quantize == "none":
        assert report["agreement"] == 1.0 and report["max_abs_logit_diff"] < 1e-4
        assert report["metric_fp32"] == report["metric_export"]
    else:
        assert report["agreement"] >= 0.99


def test_predict_and_evaluate_read_an_fp32_export_as_the_torch_folder(classifier_dir, gate_tsv, tmp_path):
    out = tmp_path / "export"
    assert _export(classifier_dir, out, "--data", gate_tsv, "--quantize", "none").exit_code == 0
    for chunk in ([], ["--long-text", "chunk", "--max-length", "8"]):
        runs = [json.loads(invoke("evaluate", "--model", m, "--data", gate_tsv, "--json", "-q", *chunk).stdout)["metrics"]
                for m in (classifier_dir, out)]
        assert runs[0]["accuracy"] == runs[1]["accuracy"] and runs[0]["confusion_matrix"] == runs[1]["confusion_matrix"]
        rows = [json.loads(invoke("predict", "--model", m, "--data", gate_tsv, "--json", "-q", *chunk).stdout)
                ["predictions"] for m in (classifier_dir, out)]
        assert len(rows[0]) == 40 and [r["label"] for r in rows[0]] == [r["label"] for r in rows[1]]
    bad = invoke("predict", "--model", out, "--text", "hi", "--precision", "bf16")
    assert bad.exit_code == 2 and "--precision bf16 does not apply to the ONNX export" in bad.output


def test_the_folder_loads_with_plain_onnxruntime_and_the_tokenizer(classifier_dir, gate_tsv, tmp_path):
    """What the README shows: no bertkit, just onnxruntime + the tokenizer + config.json's labels."""
    import onnxruntime as ort
    from transformers import AutoConfig, AutoTokenizer

    out = tmp_path / "export"
    assert _export(classifier_dir, out, "--data", gate_tsv).exit_code == 0
    tokenizer = AutoTokenizer.from_pretrained(out)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    encoded = tokenizer(TEXTS, padding=True, truncation=True, max_length=128, return_tensors="np")
    logits = session.run(["logits"], {n: encoded[n].astype(np.int64) for n in names})[0]
    labels = [AutoConfig.from_pretrained(out).id2label[i] for i in logits.argmax(axis=1)]
    model, tok, _ = infer.load_for_inference(str(out), infer.export_compute_of(str(out), "fp32"))
    ours = infer.classifier_logits(model, tok, TextDataset(TEXTS, source="t"), reading=Reading(128), batch_size=8,
                                   precision="fp32")
    np.testing.assert_allclose(logits, ours, atol=1e-5)
    assert set(labels) <= {"neg", "pos"} and len(labels) == len(TEXTS)


# ---------------------------------------------------------------- the gate refuses, --force keeps


def _negate_head(monkeypatch):
    """A quantizer that breaks the model for real: the graph's logits negated (every label flips)."""
    import onnx as onnx_lib
    from onnx import helper

    real = onnx.quantize_int8

    def broken(source: Path, target: Path) -> None:
        real(source, target)
        model = onnx_lib.load(str(target))
        for node in model.graph.node:
            node.output[:] = ["raw_logits" if name == "logits" else name for name in node.output]
        model.graph.node.append(helper.make_node("Neg", ["raw_logits"], ["logits"]))
        onnx_lib.save(model, str(target))

    monkeypatch.setattr(onnx, "quantize_int8", broken)


def test_a_refused_export_keeps_nothing_and_the_previous_export_intact(classifier_dir, gate_tsv, tmp_path, monkeypatch):
    out = tmp_path / "export"
    assert _export(classifier_dir, out, "--data", gate_tsv).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    _negate_head(monkeypatch)
    result = invoke("export", "--model", classifier_dir, "--out", out, "--data", gate_tsv, "--overwrite", "-q")
    assert result.exit_code == 2
    assert "--quantize none" in result.output and "--force" in result.output and "Nothing was written" in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not (out / ".bertkit-next").exists()
    fresh = tmp_path / "fresh"
    assert invoke("export", "--model", classifier_dir, "--out", fresh, "--data", gate_tsv, "-q").exit_code == 2
    assert not fresh.exists()
    forced = _export(classifier_dir, fresh, "--data", gate_tsv, "--force")
    assert forced.exit_code == 0
    report = _report(fresh)
    assert report["forced"] and not report["passed"] and report["agreement"] < 0.5


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_a_killed_export_leaves_nothing_outside_out_and_a_rerun_removes_its_build(tiny_bert_dir, gate_tsv, tmp_path,
                                                                                   quantize):
    """Killed with the export built (in a temp folder recorded in --out's record), before its gate: the system temp
    folder holds nothing of it, --out holds only bertkit's own files, and the same command removes the build and
    finishes."""
    out, system_tmp = tmp_path / "e", tmp_path / "system-tmp"
    system_tmp.mkdir()
    argv = ["export", "--model", str(tiny_bert_dir), "--out", str(out), "--data", str(gate_tsv), "--quantize", quantize,
            "--min-cosine", "0", "-q"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(system_tmp), faults.ENV: "export.built",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # this checkout's bertkit, wherever the test runs
    proc = subprocess.run([sys.executable, "-m", "bertkit", *argv], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert _export_files(system_tmp) == []  # (a library's 51-byte session id may be there: not bertkit's)
    builds = [p.name for p in out.iterdir() if p.name.startswith(".build-")]
    assert len(builds) == 1 and (out / builds[0] / "export" / onnx.MODEL_FILE).is_file()
    assert ownership.unowned(out) == []  # every file of the killed build is bertkit's by the record
    assert invoke(*argv).exit_code == 0
    assert not [p for p in out.iterdir() if p.name.startswith((".build-", ".onnx-"))]
    assert ownership.unowned(out) == [] and _report(out)["kind"] == "features"


def test_a_refused_export_leaves_no_build_anywhere(tiny_bert_dir, gate_tsv, tmp_path, monkeypatch):
    """The gate refuses after the export is built inside --out: the build goes with the rest of the new --out, and
    nothing was made in the system temp folder."""
    import tempfile

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    result = invoke("export", "--model", tiny_bert_dir, "--out", tmp_path / "e", "--data", gate_tsv,
                    "--min-cosine", "1.0", "-q")
    assert result.exit_code == 2 and not (tmp_path / "e").exists() and _export_files(system_tmp) == []


def _export_files(folder: Path) -> list[Path]:
    """What bertkit's export made in `folder`: its build folders or any ONNX graph, at any depth."""
    return [p for p in folder.rglob("*") if p.name.startswith("bertkit-") or p.suffix == ".onnx"]


def test_features_gate_refuses_below_min_cosine(tiny_bert_dir, gate_tsv, tmp_path):
    result = invoke("export", "--model", tiny_bert_dir, "--out", tmp_path / "e", "--data", gate_tsv,
                    "--min-cosine", "1.0", "-q")  # int8 features are never exactly the fp32 ones
    assert result.exit_code == 2 and "mean cosine similarity" in result.output and "--min-cosine 1" in result.output
    assert not (tmp_path / "e").exists()


def test_no_gate_data_exits_2_and_a_finetune_runs_dev_set_is_the_default(classifier_dir, gate_tsv, tmp_path):
    result = invoke("export", "--model", classifier_dir, "--out", tmp_path / "e", "-q")
    assert result.exit_code == 2 and "--data" in result.output
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(classifier_dir, run / "best")
    cfg = FinetuneConfig.of(data=str(gate_tsv), model=str(classifier_dir), out=str(run), limit=30, dev_fraction=0.2)
    (run / "config.json").write_text(json.dumps({"command": "finetune", "config": config_dict(cfg)}))
    assert _export(run / "best", tmp_path / "e", "--quantize", "none").exit_code == 0
    report = _report(tmp_path / "e")
    assert report["rows"] == 6 and report["data"] == str(gate_tsv)


def test_a_runs_relative_dev_path_is_read_from_where_the_run_was_started(classifier_dir, gate_tsv, tmp_path,
                                                                         monkeypatch):
    started = gate_tsv.parent
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(classifier_dir, run / "best")
    cfg = FinetuneConfig.of(data=gate_tsv.name, model=str(classifier_dir), out=str(run), limit=30, dev_fraction=0.2)
    (run / "config.json").write_text(json.dumps({"command": "finetune", "config": config_dict(cfg),
                                                 "cwd": str(started)}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # gate_tsv.name does not resolve from here
    assert _export(run / "best", tmp_path / "e", "--quantize", "none").exit_code == 0
    report = _report(tmp_path / "e")
    assert report["rows"] == 6 and report["data"] == str(started / gate_tsv.name)


def test_write_export_refuses_a_folder_it_did_not_make(classifier_dir, tmp_path):
    existing = tmp_path / "theirs"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    model = loading.load_classifier(str(classifier_dir), require_head=True)
    with pytest.raises(FileExistsError):
        onnx.write_export(existing, model, loading.load_tokenizer(str(classifier_dir)), kind="classifier",
                          quantize=None, source=str(classifier_dir), revision="r", source_info={})
    assert (existing / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------- features


@pytest.mark.parametrize("base", ["tiny_bert_dir", "tiny_distilbert_dir"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_features_export_equals_torch_features(base, pool, request, gate_tsv, tmp_path):
    folder = request.getfixturevalue(base)
    out = tmp_path / "export"
    result = _export(folder, out, "--data", gate_tsv, "--quantize", "none", "--pool", pool, "--layers", "-2,-1")
    assert result.exit_code == 0, result.output
    report = _report(out)
    assert report["kind"] == "features" and report["min_cosine"] > 0.9999 and report["max_abs_diff"] < 1e-4
    model = onnx.load_export(out, "features")
    tokenizer = loading.load_tokenizer(str(out))
    dataset = TextDataset(TEXTS, source="t")
    ours = extract_features(model, tokenizer, dataset, pool=pool, layers="-2,-1", reading=Reading(16), batch_size=2,
                            device="cpu")
    reference = extract_features(loading.load_encoder(str(folder)), tokenizer, dataset, pool=pool, layers="-2,-1",
                                 reading=Reading(16), batch_size=2)
    assert ours.shape == (len(TEXTS), 64)
    np.testing.assert_allclose(ours, reference, atol=1e-4)


def test_int8_features_are_close_and_reported(tiny_bert_dir, gate_tsv, tmp_path):
    out = tmp_path / "export"
    result = _export(tiny_bert_dir, out, "--data", gate_tsv, "--min-cosine", "0.9")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["quantized"] == "int8" and shown["backend"] == "onnx-int8"
    gate = shown["gate"]
    assert 0.9 <= gate["mean_cosine"] < 1.0 and gate["min_cosine"] <= gate["mean_cosine"]


def test_embed_reads_a_features_export_with_its_baked_options(tiny_bert_dir, gate_tsv, tmp_path):
    out = tmp_path / "export"
    assert _export(tiny_bert_dir, out, "--data", gate_tsv, "--quantize", "none", "--pool", "mean",
                   "--normalize").exit_code == 0
    onnx_store, torch_store = tmp_path / "s-onnx", tmp_path / "s-torch"
    assert invoke("embed", "--model", out, "--data", gate_tsv, "--out", onnx_store, "-q").exit_code == 0
    assert invoke("embed", "--model", tiny_bert_dir, "--data", gate_tsv, "--out", torch_store, "--pool", "mean",
                  "--normalize", "--precision", "fp32", "-q").exit_code == 0
    np.testing.assert_allclose(np.load(onnx_store / "features.npy"), np.load(torch_store / "features.npy"), atol=1e-4)
    manifest = json.loads((onnx_store / "manifest.json").read_text())
    assert manifest["backend"] == "onnx" and manifest["pool"] == "mean" and manifest["normalize"] is True
    assert manifest["identity"]["backend"] == "onnx"
    mixed = invoke("embed", "--model", out, "--data", gate_tsv, "--out", torch_store, "-q")  # a store never mixes
    assert mixed.exit_code == 2 and "backend" in mixed.output
    clash = invoke("embed", "--model", out, "--data", gate_tsv, "--out", tmp_path / "s2", "--pool", "max")
    assert clash.exit_code == 2 and "--pool max (the export has mean)" in clash.output
    precision = invoke("embed", "--model", out, "--data", gate_tsv, "--out", tmp_path / "s3", "--precision", "bf16")
    assert precision.exit_code == 2 and "does not apply to the ONNX export" in precision.output
    wrong_kind = invoke("predict", "--model", out, "--text", "hi")
    assert wrong_kind.exit_code == 2 and "export of features" in wrong_kind.output


def test_kind_auto_and_a_changed_option_needs_overwrite(classifier_dir, tiny_bert_dir, gate_tsv, tmp_path):
    out = tmp_path / "export"
    assert _export(classifier_dir, out, "--data", gate_tsv, "--quantize", "none").exit_code == 0
    assert _report(out)["kind"] == "classifier"
    again = invoke("export", "--model", classifier_dir, "--out", out, "--data", gate_tsv, "-q")
    assert again.exit_code == 2 and "--quantize: 'none' -> 'int8'" in again.output and "--overwrite" in again.output
    assert _export(classifier_dir, out, "--data", gate_tsv, "--overwrite").exit_code == 0
    assert _report(out)["quantized"] == "int8"
    headless = invoke("export", "--model", tiny_bert_dir, "--kind", "classifier", "--out", tmp_path / "h",
                      "--data", gate_tsv, "-q")
    assert headless.exit_code == 2 and "No fine-tuned classification head" in headless.output


# ---------------------------------------------------------------- without onnxruntime


def test_without_onnxruntime_export_and_an_onnx_model_name_the_extra(classifier_dir, gate_tsv, tmp_path, monkeypatch):
    out = tmp_path / "export"
    assert _export(classifier_dir, out, "--data", gate_tsv, "--quantize", "none").exit_code == 0
    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime" or name.startswith("onnxruntime."):
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    for args in (["export", "--model", classifier_dir, "--out", tmp_path / "e2", "--data", gate_tsv],
                 ["predict", "--model", out, "--text", "hello"]):
        result = invoke(*args)
        assert result.exit_code == 2 and "pip install 'bertkit[onnx]'" in result.output
    assert invoke("predict", "--model", classifier_dir, "--text", "hello", "-q").exit_code == 0


# ---------------------------------------------------------------- options that do not apply; the refusal's digits


def test_options_an_export_kind_ignores_warn_and_stay_off_its_record_and_card(tiny_bert_dir, gate_tsv, tmp_path):
    clf = _classifier(tiny_bert_dir, tmp_path / "clf", "bert")
    out = tmp_path / "export"
    result = invoke("export", "--model", clf, "--out", out, "--data", gate_tsv, "--quantize", "none", "--pool", "mean",
                    "--normalize", "--min-cosine", "0.5", "-q")
    assert result.exit_code == 0, result.output
    warned = " ".join(result.stderr.split())
    for flag in ("--pool mean", "--normalize", "--min-cosine 0.5"):
        assert f"{flag} does not apply to the export of a classifier" in warned
    card = (out / "README.md").read_text()
    assert "bertkit export" in card and "--quantize none" in card
    assert "--pool" not in card and "--normalize" not in card and "--min-cosine" not in card
    config = _report(out)["config"]
    assert (config["pool"], config["normalize"], config["min_cosine"]) == ("cls", False, 0.98)
    features = invoke("export", "--model", tiny_bert_dir, "--out", tmp_path / "features", "--data", gate_tsv,
                      "--quantize", "none", "--min-agreement", "0.5", "-q")
    assert features.exit_code == 0, features.output
    assert "--min-agreement 0.5 does not apply to the export of an encoder's features" in " ".join(features.stderr.split())
    assert "--min-agreement" not in (tmp_path / "features" / "README.md").read_text()


def test_the_gate_refusal_shows_the_digits_that_put_it_below_the_threshold():
    from bertkit.commands.export import ExportConfig
    from bertkit.models.export_gate import GateReport, below, refusal_message

    assert below(0.999987, 0.99999) == "0.999987" and below(0.5, 0.99) == "0.5000"
    cosine = refusal_message(GateReport.of(statistic="mean_cosine", threshold=0.99999, rows=40, passed=False,
                                           mean_cosine=0.9999897, min_cosine=0.9999),
                             ExportConfig.of(model="m", out="o", min_cosine=0.99999))
    assert "mean cosine similarity 0.9999897 (lowest row 0.9999)" in cosine and "below --min-cosine 0.99999" in cosine
    assert "1.0000" not in cosine
    agreement = refusal_message(GateReport.of(statistic="agreement", threshold=0.99999, rows=50000, passed=False,
                                              agreement=49999 / 50000, disagreeing_rows=1, max_abs_logit_diff=0.25),
                                ExportConfig.of(model="m", out="o", min_agreement=0.99999))
    assert "on a share 0.99998 of 50000 gate rows (1 disagree), below --min-agreement 0.99999" in agreement
    assert "100.00%" not in agreement


def test_the_gate_report_is_typed_and_writes_back_export_reports_object():
    """`bertkit export` returns the gate as a typed record (cli/show.py reads its attributes); --json writes the
    object export_report.json holds, with no field the gate did not report."""
    import json

    from bertkit.io.atomic import to_json
    from bertkit.models.export_gate import GateReport

    record = {"statistic": "agreement", "threshold": 0.99, "rows": 40, "task": "single_label", "agreement": 1.0,
              "disagreeing_rows": 0, "max_abs_logit_diff": 0.01, "passed": True, "metric": "accuracy",
              "metric_fp32": 0.9, "metric_export": 0.9}
    gate = GateReport.from_json(record)
    assert (gate.statistic, gate.rows, gate.passed, gate.agreement, gate.metric_export) == ("agreement", 40, True,
                                                                                             1.0, 0.9)
    assert gate.mean_cosine is None
    assert json.loads(to_json({"gate": gate})) == {"gate": record}
    made = GateReport.of(**record)  # as a gate makes it: the same object back, field by field
    assert made == gate and json.loads(to_json(made)) == record
    with pytest.raises(TypeError):
        GateReport.of(**record, agreemnet=1.0)  # a misspelt number is an error, not an extra key


def test_the_export_report_refuses_a_key_that_its_gate_also_holds():
    """The gate's numbers sit at the top level of export_report.json beside the export's own keys: a gate key named
    like one of those would overwrite it (or be overwritten), so building the report refuses it."""
    from bertkit.models.export_gate import GateReport, export_report

    gate = GateReport.of(statistic="agreement", threshold=0.99, rows=4, passed=True, agreement=1.0)
    report = export_report({"model": "m", "kind": "classifier"}, gate, {"forced": False})
    assert report == {"model": "m", "kind": "classifier", "statistic": "agreement", "threshold": 0.99, "rows": 4,
                      "passed": True, "agreement": 1.0, "forced": False}
    with pytest.raises(ValueError, match="rows"):
        export_report({"model": "m", "rows": 9}, gate, {})


def test_an_export_folder_holds_only_the_formats_files_and_nothing_was_deleted_in_it(tiny_bert_dir, tmp_path,
                                                                                    monkeypatch):
    """write_export builds the fp32 graph and the saved tokenizer in a scratch folder and moves in only the
    format's files: nothing in the export folder is removed (but the temp names io's atomic writes use)."""
    import os
    import shutil

    from bertkit.models import loading, onnx

    removed: list[str] = []
    real_unlink, real_rmtree = os.unlink, shutil.rmtree
    monkeypatch.setattr(os, "unlink", lambda p, *a, **k: (removed.append(str(p)), real_unlink(p, *a, **k))[1])
    monkeypatch.setattr(shutil, "rmtree", lambda p, *a, **k: (removed.append(str(p)), real_rmtree(p, *a, **k))[1])
    model = loading.load_classifier(str(tiny_bert_dir), {0: "a", 1: "b"}).float().eval()
    folder = tmp_path / "export"
    onnx.write_export(folder, model, loading.load_tokenizer(str(tiny_bert_dir)), kind="classifier", quantize="int8",
                      source=str(tiny_bert_dir), revision="", source_info={})
    assert {p.name for p in folder.iterdir()} <= onnx.FOLDER_FILES
    assert (folder / onnx.MODEL_FILE).is_file() and (folder / "tokenizer.json").is_file()
    in_folder = [p for p in removed if str(folder) in p]  # only io's atomic writes drop their own temp names
    assert all(Path(p).name.startswith(".") and p.endswith(".tmp") for p in in_folder), in_folder
