"""Records trusted as written (issue 57): every record carries the sha256 of its own content, so an edit or damage is
refused (exit 2, naming the record) before any value in it is used, for a PyTorch model folder, an ONNX export, a
saved probe and a store; an older, unsealed record is read by its migration as it is; a probe whose encoder changed is
refused as a store is; a value read from a record is never blamed on a flag the user did not give. A refusal leaves
everything as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from older_records import unsealed
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.features.store_manifests import migrated_word_store_manifest, word_store_manifest
from bertkit.io import digests
from bertkit.io.record_format import RecordKind, RecordProblem, checked_version, record_digest, sealed
from bertkit.models import metadata, onnx
from bertkit.probe.saved import PROBE_RECORD, migrated_probe_record

LEGACY = Path(__file__).resolve().parent / "legacy" / "records"
WORDS = '["alice", "met", "bob", "in", "paris"]'
runner = CliRunner()


@pytest.fixture
def records(tmp_path, monkeypatch) -> Path:
    """A copy of the records made before the seal, the working folder set to it."""
    folder = tmp_path / "records"
    shutil.copytree(LEGACY, folder)
    monkeypatch.chdir(folder)
    return folder


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` by its sha256: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(folder: Path, *argv: str) -> str:
    """The output of a command refused with exit 2, having changed nothing under `folder`."""
    before = tree(folder)
    result = runner.invoke(app, list(argv))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert tree(folder) == before
    return result.output


def edit_json(file: Path, change: Callable[[dict], None]) -> None:
    record = json.loads(file.read_text())
    change(record)
    file.write_text(json.dumps(record, indent=2))


# ---------------------------------------------------------------- the seal itself


KIND = RecordKind("bertkit-test", current=2, sealed_since=2, family_since=2)


def test_a_sealed_record_reads_back_and_any_edit_or_an_older_layout_claiming_its_keys_is_refused():
    record = sealed({"task": "tags", "n": 1.5, "path": Path("a")}, KIND, "words")
    assert record["format"] == "bertkit-test/2" and record["family"] == "words" and record["path"] == "a"
    assert checked_version(json.loads(json.dumps(record)), KIND) == 2
    for edit in ({"task": "single_label"}, {"family": "sentences"}, {"n": 1.25}):
        with pytest.raises(RecordProblem, match="does not match the sha256"):
            checked_version({**record, **edit}, KIND)
    with pytest.raises(RecordProblem, match="no record_sha256"):
        checked_version({k: v for k, v in record.items() if k != "record_sha256"}, KIND)
    with pytest.raises(RecordProblem, match="holds record_sha256 and family: it was edited since"):
        checked_version({**record, "format": "bertkit-test/1"}, KIND)
    with pytest.raises(RecordProblem, match="made by a newer bertkit"):
        checked_version({**record, "format": "bertkit-test/3"}, KIND)
    with pytest.raises(ValueError, match="family"):
        sealed({}, KIND, "spans-of-nothing")
    assert checked_version(unsealed(record, "bertkit-test/1"), KIND) == 1


def test_a_file_of_another_size_is_called_changed_not_truncated(tmp_path):
    file = tmp_path / "config.json"
    file.write_text('{"id2label": {"0": "negative", "1": "positive"}}')
    record = digests.file_record(file)
    file.write_text('{"id2label": {"0": "pos", "1": "neg"}}')  # edited: shorter, not cut
    problem = digests.record_problem(file, record)
    assert problem is not None and "changed since it was written" in problem and "truncated" not in problem


# ---------------------------------------------------------------- bertkit_model.json: PyTorch folders and exports


def resealed(folder: Path) -> None:
    """The folder's layout-1 record written again in the current layout (sealed), as bertkit now saves it."""
    metadata.add_model_info(folder, {})
    assert json.loads((folder / metadata.MODEL_INFO).read_text())["format"] == "bertkit-model/2"


@pytest.mark.parametrize("folder", ["runs/tagger/best", "exports/tagger"])
@pytest.mark.parametrize(("what", "change"), [
    ("tag_scheme edited", lambda r: r.update(tag_scheme={"name": "none", "source": "none"})),
    ("task removed", lambda r: r.pop("task")),
    ("reading.max_length 4", lambda r: r["reading"].update(max_length=4)),
])
def test_an_edited_tagger_record_is_refused_naming_it(records, folder, what, change):
    resealed(records / folder)
    assert metadata.read_model_info(records / folder)["family"] == "words"
    edit_json(records / folder / metadata.MODEL_INFO, change)
    text = refused(records, "predict", "--model", folder, "--words", WORDS)
    assert "bertkit_model.json" in text and "does not match the sha256" in text, what
    text = refused(records, "predict", "--model", folder, "--text", "alice met bob")
    assert "bertkit_model.json" in text, what


def test_an_old_unsealed_model_record_is_read_with_its_family_from_its_task(records):
    assert metadata.read_model_info(records / "runs/tagger/best")["family"] == "words"
    assert metadata.read_model_info(records / "runs/sentences/best")["family"] == "sentences"
    exported = metadata.read_model_info(records / "exports/sentences")
    assert exported["family"] == "sentences" and exported["compute"] == {"device": "cpu", "precision": "fp32"}
    assert "record_sha256" not in exported  # what a reader gets is the current layout, not the file


def test_a_recorded_stride_is_named_as_the_records_never_as_a_flag(records):
    file = records / "runs/tagger/best" / metadata.MODEL_INFO  # layout 1: unsealed, read as it is
    edit_json(file, lambda r: r["reading"].update(stride=500))
    text = refused(records, "predict", "--model", "runs/tagger/best", "--words", WORDS)
    assert "bertkit_model.json is damaged: reading.stride 500" in text and "--stride 500" not in text
    edit_json(file, lambda r: r["reading"].update(stride=10))
    text = refused(records, "predict", "--model", "runs/tagger/best", "--words", WORDS, "--max-length", "8")
    assert "records stride 10" in text and "--stride 10" not in text and "Pass a smaller --stride" in text


def test_an_export_report_is_sealed_and_read_in_one_layout(records):
    old = onnx.read_export_report(records / "exports/tagger")
    assert old is not None and old["family"] == "words" and old["format"] == "bertkit-export-report/2"
    report = {k: v for k, v in json.loads((records / "exports/sentences" / onnx.REPORT_FILE).read_text()).items()}
    written = onnx.export_report_record(report, "sentences")
    (records / "exports/sentences" / onnx.REPORT_FILE).write_text(json.dumps({**written, "passed": False}))
    with pytest.raises(Exception, match=r"export_report\.json is damaged \(its content does not match"):
        onnx.read_export_report(records / "exports/sentences")


# ---------------------------------------------------------------- probes


def test_an_edited_sentence_probe_record_is_refused_and_an_old_one_read(records):
    probe = records / "runs/probe-sentences/probe/probe.json"
    old = json.loads(probe.read_text())
    assert migrated_probe_record(old)["family"] == "sentences"
    current = sealed({k: v for k, v in migrated_probe_record(old).items() if k != "format"}, PROBE_RECORD, "sentences")
    probe.write_text(json.dumps({**current, "max_length": 4}))
    text = refused(records, "predict", "--probe", "runs/probe-sentences/probe", "--text", "a fine film")
    assert "probe.json is damaged (its content does not match the sha256" in text


def test_recorded_layers_beyond_the_encoder_are_named_as_the_probes_never_as_a_flag(records):
    edit_json(records / "runs/probe-sentences/probe/probe.json", lambda r: r.update(layers="7"))  # layout 1
    text = refused(records, "predict", "--probe", "runs/probe-sentences/probe", "--text", "a fine film")
    assert "probe.json is damaged (it records layers 7" in text and "--layers 7" not in text


def test_a_probe_whose_encoder_changed_in_the_middle_of_its_weights_is_refused(records):
    weights = records / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    text = refused(records, "predict", "--probe", "runs/probe-sentences/probe", "--text", "a fine film")
    assert "The encoder model of the probe" in text and "has changed since the probe was fitted" in text
    recorded = json.loads((records / "runs/probe-sentences/probe/probe.json").read_text())["encoder_sha256"]
    assert recorded in text


# ---------------------------------------------------------------- stores


def test_an_edited_word_store_manifest_is_refused_before_a_probe_is_fitted_on_it(records):
    for split in ("train", "dev"):  # the stores as bertkit now writes them: sealed
        file = records / "stores/words" / split / "manifest.json"
        current = migrated_word_store_manifest(json.loads(file.read_text()))
        file.write_text(json.dumps(word_store_manifest({k: v for k, v in current.items() if k != "format"})))
    edit_json(records / "stores/words/dev/manifest.json", lambda m: m["reading"].update(word_pool="mean"))
    text = refused(records, "probe", "--features", "stores/words", "--out", "runs/probe-edited")
    assert "stores/words/dev is damaged: its manifest.json: its content does not match the sha256" in text
    assert not (records / "runs/probe-edited").exists()


def test_an_old_store_manifest_reads_with_its_family(records):
    from bertkit.features.store_manifests import read_manifest, read_store_manifest

    assert read_store_manifest(records / "stores/sentences/train")["family"] == "sentences"
    assert read_manifest(records / "stores/words/train")["family"] == "words"
    assert record_digest({"b": 1, "a": 2}) == record_digest({"a": 2, "b": 1})


# ---------------------------------------------------------------- sweep.json


def test_sweep_json_is_sealed_and_an_older_one_reads_with_a_family(tmp_path):
    from bertkit.training.trials_report import SWEEP_RECORD, SweepSummary, read_sweep_summary

    row = {"trial": "000_lr=0.001_seed=7", "lr": 0.001, "seed": 7, "status": "complete", "metric": "f1", "best": 0.9,
           "best_step": 4, "steps": 4, "epochs_run": 1, "train_seconds": 0.5, "samples_per_second": 80.0}
    older = {"search": "grid", "space": [{"option": "lr", "values": [0.001]}], "metric": "f1", "seeds": 1,
             "best": {**row, "rank": 1, "model": "best"}, "rows": [row],
             "ranking": [{"params": {"lr": 0.001}, "trials": [row["trial"]], "seeds": [7], "values": [0.9],
                          "mean": 0.9, "std": 0.0, "pruned": False, "rank": 1}]}
    (tmp_path / "sweep.json").write_text(json.dumps(older))  # layout 1: no format, no seal
    summary = read_sweep_summary(tmp_path, "words")
    assert summary == SweepSummary.from_json(older)
    written = sealed(summary.to_json(), SWEEP_RECORD, "words")
    (tmp_path / "sweep.json").write_text(json.dumps(written))
    assert read_sweep_summary(tmp_path) == summary
    (tmp_path / "sweep.json").write_text(json.dumps({**written, "metric": "accuracy"}))
    with pytest.raises(RecordProblem, match="does not match the sha256"):
        read_sweep_summary(tmp_path)
