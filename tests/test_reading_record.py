"""Settings travel with what they made: a model fine-tuned (or a probe fitted) at --max-length 16 records it, and
predict/evaluate/export/embed read it back - the same outputs with and without --max-length 16, other outputs with
--max-length 64, and a note when an explicit flag differs from the record."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from older_records import unsealed
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands import predict
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.predict import PredictConfig
from bertkit.encoding.reading import Reading
from bertkit.models.metadata import MODEL_INFO, saved_reading

runner = CliRunner()
FILLER = "the plot moves on and the cast keeps talking about the weather in the small town for a long while"
LONG_TEXTS = [f"a great film . {FILLER} . in the end it is dull", f"an awful movie . {FILLER} . yet the end is lovely",
              f"lovely . {FILLER} {FILLER} . terrible"]


@pytest.fixture(scope="module")
def long_rows() -> list[tuple[str, str]]:
    """Rows whose label sits in the first words and whose texts run far past 16 tokens (and 64, for some)."""
    good, bad = ["great", "wonderful", "lovely", "superb"], ["awful", "terrible", "boring", "dreadful"]
    rows = []
    for i in range(16):
        rows.append((f"a {good[i % 4]} film . {FILLER} {'!' * (i % 5)}", "pos"))
        rows.append((f"an {bad[i % 4]} movie . {FILLER} {'.' * (i % 7)}", "neg"))
    return rows


@pytest.fixture(scope="module")
def model_16(tiny_bert_dir, tmp_path_factory, long_rows) -> Path:
    """A tiny BERT fine-tuned at --max-length 16 on texts longer than that."""
    folder = tmp_path_factory.mktemp("reading")
    train = folder / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in long_rows) + "\n")
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(train), out=str(folder / "run"),
                         epochs=1, lr=5e-3, batch_size=8, save_every=None, max_length=16, precision="fp32")
    finetune(cfg, progress=False)
    return folder / "run" / "best"


def _proba(**options) -> np.ndarray:
    return predict.run(PredictConfig.of(text=tuple(LONG_TEXTS), precision="fp32", **options)).proba


def test_a_fine_tuned_model_records_how_it_read_texts(model_16):
    for folder in (model_16, model_16.parent / "final"):
        info = json.loads((folder / MODEL_INFO).read_text())
        assert info["reading"] == {"max_length": 16, "long_text": "cut", "truncation": "head", "stride": None}
        assert info["compute"] == {"device": "cpu", "precision": "fp32"}
        assert saved_reading(folder) == Reading(max_length=16)


def test_predict_reads_a_model_as_it_was_trained(model_16, caplog):
    as_recorded = _proba(model=str(model_16))
    with caplog.at_level(logging.WARNING):
        np.testing.assert_array_equal(as_recorded, _proba(model=str(model_16), max_length=16))
    assert not [r for r in caplog.records if "records" in r.getMessage()]  # the same value: no note
    with caplog.at_level(logging.WARNING):
        wider = _proba(model=str(model_16), max_length=64)
    assert not np.allclose(as_recorded, wider)
    assert any("--max-length 64: The model" in r.getMessage() and "records 16" in r.getMessage()
               for r in caplog.records)


def test_evaluate_reads_a_model_as_it_was_trained(model_16, tmp_path, long_rows):
    data = tmp_path / "dev.tsv"
    data.write_text("sentence\tlabel\n" + "\n".join(f"{t} . {FILLER}\t{y}" for t, y in long_rows[:12]) + "\n")

    def evaluated(*extra: str) -> dict:
        result = runner.invoke(app, ["evaluate", "--model", str(model_16), "--data", str(data), "--json", "--quiet",
                                     "--precision", "fp32", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    plain, sixteen = evaluated(), evaluated("--max-length", "16")
    assert plain["metrics"] == sixteen["metrics"]
    assert plain["max_length"] == 16


def test_an_explicit_flag_that_differs_from_the_record_is_applied_and_said_once(model_16):
    result = runner.invoke(app, ["predict", "--model", str(model_16), "--text", LONG_TEXTS[0], "--max-length", "64",
                                 "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    assert result.output.count("--max-length 64") == 1
    assert "records 16" in result.output


def test_a_model_saved_before_the_record_reads_with_the_defaults_and_a_note(model_16, tmp_path, caplog):
    import shutil

    from bertkit.io import digests
    from bertkit.models import metadata

    old = tmp_path / "old"
    shutil.copytree(model_16, old)
    tokenizer_config = json.loads((old / "tokenizer_config.json").read_text())
    (old / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "model_max_length": 512}))
    info = unsealed(json.loads((old / MODEL_INFO).read_text()), "bertkit-model/1")
    info.pop("reading")  # as an older bertkit saved it: no reading, the tokenizer's own limit
    info["files"].update(digests.folder_records(old, ["tokenizer_config.json"]))
    (old / MODEL_INFO).write_text(json.dumps(info))  # the folder still verifies
    assert saved_reading(old) is None and metadata.read_model_info(old)["reading"] is None
    with caplog.at_level(logging.WARNING):
        read_default = _proba(model=str(old))
    np.testing.assert_array_equal(read_default, _proba(model=str(model_16), max_length=128))
    assert any("before bertkit recorded how it reads texts" in r.getMessage() for r in caplog.records)
    assert metadata.saved_reading(tmp_path) is None  # not a folder bertkit saved: the defaults, no note


def _fitted_probe(model: Path, folder: Path, rows: list[tuple[str, str]], *options: str) -> Path:
    """A probe fitted (and saved with --out) on `rows`, features extracted with `options`."""
    data = folder / "train.tsv"
    data.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n")
    result = runner.invoke(app, ["probe", "--model", str(model), "--data", str(data), *options, "--no-baselines",
                                 "--out", str(folder / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    return folder / "run"


@pytest.fixture(scope="module")
def probe_16(tiny_bert_dir, tmp_path_factory, long_rows) -> Path:
    """A probe fitted on features extracted at --max-length 16 (saved with --out)."""
    return _fitted_probe(tiny_bert_dir, tmp_path_factory.mktemp("probe16"), long_rows, "--max-length", "16",
                         "--precision", "fp32")


def test_predict_reads_a_saved_probe_as_it_was_fitted(probe_16):
    as_recorded = _proba(probe=str(probe_16))
    np.testing.assert_array_equal(as_recorded, _proba(probe=str(probe_16), max_length=16))
    assert not np.allclose(as_recorded, _proba(probe=str(probe_16), max_length=64))


def test_a_probe_on_a_saved_model_extracts_as_the_model_was_trained(model_16, tmp_path, long_rows):
    from bertkit.commands.probe import ProbeConfig
    from bertkit.models.metadata import read_as_saved

    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in long_rows) + "\n")
    cfg = read_as_saved(ProbeConfig.of(model=str(model_16), data=str(data)))
    assert (cfg.reading.max_length, cfg.reading.truncation, cfg.reading.long_text) == (16, "head", "cut")
    assert read_as_saved(ProbeConfig.of(data=str(data))).reading.max_length == 128  # the packaged encoder: the default


# ---------------------------------------------------------------- compute: the precision features were made in


@pytest.mark.parametrize("native", ["0", "1"])
def test_compute_over_record_follows_the_record_where_this_device_runs_it(monkeypatch, native):
    from bertkit.models import loading
    from bertkit.models.compute import Compute

    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", native)
    try:
        auto_here = "bf16" if native == "1" else "fp32"
        assert Compute.over_record("cpu", "auto", None, "x") == (Compute("cpu", auto_here), [])
        assert Compute.over_record("cpu", "auto", Compute("cuda:0", "int8"), "x") == (Compute("cpu", "int8"), [])
        assert Compute.over_record("cpu", "auto", Compute("cpu", "fp32"), "x") == (Compute("cpu", "fp32"), [])
        compute, notes = Compute.over_record("cpu", "auto", Compute("cuda:0", "bf16"), "The probe p")
        if native == "1":
            assert (compute, notes) == (Compute("cpu", "bf16"), [])
        else:  # emulated bf16 would be slow: auto's own choice, said once
            assert compute == Compute("cpu", "fp32") and len(notes) == 1
            assert "The probe p records precision bf16" in notes[0] and "does not run natively" in notes[0]
        fp16 = Compute.over_record("cpu", "auto", Compute("cuda:0", "fp16"), "x")  # a GPU precision, on the CPU
        assert fp16[0] == Compute("cpu", auto_here) and len(fp16[1]) == 1
        asked = Compute.over_record("cpu", "fp32", Compute("cpu", "int8"), "The probe p")
        assert asked == (Compute("cpu", "fp32"), ["--precision fp32: The probe p records int8 (run in fp32, as asked)"])
    finally:
        loading.cpu_supports_bf16.cache_clear()


def test_records_before_compute_and_export_backends():
    from bertkit.models.compute import Compute

    assert Compute.recorded_in({"dtype": "int8"}) == Compute("cpu", "int8")  # a probe or store saved before `compute`
    assert Compute.recorded_in({"compute": {"device": "cuda:0", "precision": "bf16"}, "dtype": "bf16"}) == \
        Compute("cuda:0", "bf16")
    assert Compute.recorded_in({"dtype": "onnx-int8"}) is None  # an export's backend: not a torch precision
    assert Compute.recorded_in({}) is None and Compute.recorded_in(None) is None


@pytest.fixture(scope="module")
def probe_int8(tiny_bert_dir, tmp_path_factory, long_rows) -> Path:
    """A probe fitted on features extracted in int8 (dynamic int8 linear layers; CPU)."""
    return _fitted_probe(tiny_bert_dir, tmp_path_factory.mktemp("probe-int8"), long_rows, "--max-length", "32",
                         "--precision", "int8")


def test_predict_extracts_a_probes_features_in_the_precision_it_records(probe_int8, caplog):
    from bertkit.probe.saved import load_probe

    assert load_probe(probe_int8).meta["compute"] == {"device": "cpu", "precision": "int8"}

    def predicted(**options):
        return predict.run(PredictConfig.of(text=tuple(LONG_TEXTS), probe=str(probe_int8), **options))

    with caplog.at_level(logging.WARNING):
        as_recorded = predicted()  # --precision auto: as the probe's features were made
    assert as_recorded.dtype == "int8" and not [r for r in caplog.records if "records" in r.getMessage()]
    np.testing.assert_array_equal(as_recorded.proba, predicted(precision="int8").proba)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        fp32 = predicted(precision="fp32")
    assert fp32.dtype == "fp32" and not np.array_equal(as_recorded.proba, fp32.proba)
    assert [r.getMessage() for r in caplog.records if "records int8" in r.getMessage()] == [
        f"--precision fp32: The probe {load_probe(probe_int8).path} records int8 (run in fp32, as asked)"]


def test_a_store_records_its_compute_and_a_probe_on_it_keeps_the_stores(tiny_bert_dir, tmp_path, long_rows):
    from bertkit.features import store
    from bertkit.probe.saved import load_probe

    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in long_rows) + "\n")
    embedded = runner.invoke(app, ["embed", "--model", str(tiny_bert_dir), "--data", str(data), "--dev", str(data),
                                   "--label-column", "label", "--precision", "int8", "--out", str(tmp_path / "store"),
                                   "--quiet"])
    assert embedded.exit_code == 0, embedded.output
    for split in ("train", "dev"):
        manifest = store.open(tmp_path / "store" / split).manifest
        assert manifest["compute"] == {"device": "cpu", "precision": "int8"} and manifest["dtype"] == "int8"
    probed = runner.invoke(app, ["probe", "--features", str(tmp_path / "store"), "--no-baselines",
                                 "--out", str(tmp_path / "probe"), "--quiet"])
    assert probed.exit_code == 0, probed.output
    assert load_probe(tmp_path / "probe").meta["compute"] == {"device": "cpu", "precision": "int8"}


# ---------------------------------------------------------------- one Reading, read by every reader (issues 42, 43)


def test_reading_holds_the_long_text_settings_and_round_trips():
    chunked = Reading(64, "chunk", "tail", None)
    assert Reading.from_json(chunked.to_json()) == chunked and chunked.chunked and chunked.window_stride == 16
    assert chunked.long_text_json() == {"truncation": "tail", "long_text": "chunk", "stride": None}
    # a manifest or probe.json written before the long-text keys (or the window) were recorded: the defaults
    assert Reading.from_record({"max_length": 32}) == Reading(32)
    assert Reading.from_record({"truncation": "tail"}) == Reading(128, truncation="tail")
    assert not Reading(truncation="middle").known() and Reading().known()


@pytest.mark.parametrize("reading", [Reading.of_words(), Reading.of_words("first_last", 64, 8),
                                     Reading.of_words("mean", 16, 0), Reading(32, "chunk", "tail", 4, "last")])
def test_a_reading_of_words_round_trips(reading):
    assert Reading.from_json(reading.to_json()) == reading
    assert Reading.from_json(json.loads(json.dumps(reading.to_json()))) == reading  # through the file, too
    assert reading.to_json()["word_pool"] == reading.word_pool and reading.known() and reading.reads_words
    assert not Reading(word_pool="sum").known()


def test_a_saved_model_tells_plain_transformers_how_it_reads(model_16, tmp_path):
    from transformers import AutoTokenizer

    from bertkit.models.metadata import record_problems, write_tokenizer_reading

    config = json.loads((model_16 / "tokenizer_config.json").read_text())
    assert (config["model_max_length"], config["truncation_side"]) == (16, "right")
    assert record_problems(model_16) == []  # the file's digest is taken after the edit
    ids = AutoTokenizer.from_pretrained(str(model_16))(LONG_TEXTS[0], truncation=True)["input_ids"]
    assert len(ids) == 16  # what a pipeline() script feeds the model: bertkit's 16 head tokens
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    for truncation, side in (("tail", "left"), ("head+tail", "right")):  # head+tail: no transformers equivalent
        write_tokenizer_reading(tmp_path, Reading(24, truncation=truncation))
        written = json.loads((tmp_path / "tokenizer_config.json").read_text())
        assert (written["model_max_length"], written["truncation_side"]) == (24, side)


def test_a_model_recorded_at_16_may_still_be_read_at_64_when_asked(model_16):
    assert _proba(model=str(model_16), max_length=64).shape == (3, 2)  # the written 16 is no limit of the model


def test_tokens_reports_at_the_recorded_window_unless_asked(model_16, tmp_path, long_rows, caplog):
    from bertkit.commands import tokens

    data = tmp_path / "d.tsv"
    data.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in long_rows) + "\n")
    assert tokens.run(tokens.TokensConfig.of(model=str(model_16), data=str(data))).max_length == 16
    with caplog.at_level(logging.WARNING):
        asked = tokens.run(tokens.TokensConfig.of(model=str(model_16), data=str(data), max_length=128))
    assert asked.max_length == 128  # a flag equal to the default still counts as given
    assert any("--max-length 128" in r.getMessage() and "records 16" in r.getMessage() for r in caplog.records)


def test_bench_times_a_model_at_its_recorded_window(model_16):
    from bertkit.commands.bench import BenchConfig, read_as_recorded_models

    assert read_as_recorded_models(BenchConfig.of(models=str(model_16))).max_length == 16
    assert read_as_recorded_models(BenchConfig.of(models=f"minilm-offline,{model_16}")).max_length == 16
    assert read_as_recorded_models(BenchConfig.of(models="minilm-offline")).max_length == 128
    assert read_as_recorded_models(BenchConfig.of(models=str(model_16), max_length=64)).max_length == 64


def test_distill_reads_the_teacher_as_it_was_trained(model_16, tmp_path, long_rows):
    from bertkit.commands.distill import DistillConfig
    from bertkit.commands.distill import run as distill

    data = tmp_path / "d.tsv"
    data.write_text("sentence\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in long_rows) + "\n")
    cfg = DistillConfig.of(teacher=str(model_16), student_layers=1, data=str(data), dev=str(data), out=str(tmp_path / "s"),
                        epochs=1, batch_size=8, save_every=None, precision="fp32", report=False)
    distill(cfg, progress=False)
    cached = json.loads((tmp_path / "s" / "teacher_logits.json").read_text())
    assert (cached["max_length"], cached["truncation"]) == (16, "head")  # the soft targets: the teacher's reading
    assert saved_reading(tmp_path / "s" / "best") == Reading(16)  # and the student learns to read the same way


@pytest.mark.parametrize(("reading", "says"), [
    ({"max_length": "16x"}, "reading.max_length is '16x', not a positive whole number"),
    ({"max_length": 16, "truncation": "middle"}, "reading.truncation is 'middle', not one of head, tail, head+tail"),
    ({"max_length": 16, "long_text": "fold"}, "reading.long_text is 'fold'"),
    ({"max_length": 0}, "reading.max_length is 0"),
    ({"max_length": 16, "stride": -1}, "reading.stride is -1"),
    ([16], "its reading is list, not an object"),
])
def test_a_damaged_reading_record_is_named_as_damaged_not_blamed_on_a_flag(tmp_path, reading, says):
    """A model folder whose record holds a reading bertkit never writes is damaged (exit 2 naming the file and the
    value), never read as 128 tokens in silence nor reported as a --truncation the user did not give."""
    import json

    from bertkit.errors import UserError
    from bertkit.models import metadata

    (tmp_path / metadata.MODEL_INFO).write_text(json.dumps({"reading": reading, "files": {}}), encoding="utf-8")
    with pytest.raises(UserError, match="is damaged") as err:
        metadata.saved_reading(tmp_path)
    assert says in str(err.value) and "--truncation must" not in str(err.value)


def test_older_reading_records_without_long_text_keys_are_not_damaged():
    from bertkit.encoding.reading import Reading

    assert Reading.record_problems({"max_length": 64}) == []
    assert Reading.record_problems(Reading(16, "chunk", "tail", 4).to_json()) == []
