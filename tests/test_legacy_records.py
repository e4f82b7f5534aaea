"""Records made by bertkit before records carried a format version and a family (commit 3632259, by
`tests/legacy/make_records.py`): a sentence classifier, a tagger, both probes, both stores, both exports and two
unfinished runs. Today's bertkit must read every one of them as that bertkit did: the same predictions and scores,
the unfinished runs resumed where they stopped, the finished ones recognised as finished."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app

LEGACY = Path(__file__).resolve().parent / "legacy"
EXPECTED = json.loads((LEGACY / "expected.json").read_text(encoding="utf-8"))
TEXT = ["a truly wonderful film", "an awful movie"]
WORDS = '["alice", "met", "bob", "in", "paris"]'
TRAIN = ["--model", "model", "--epochs", "2", "--batch-size", "8", "--lr", "5e-3", "--precision", "fp32",
         "--max-length", "16", "--seed", "3"]
SENTENCES = ["--data", "data/train.tsv", "--dev", "data/dev.tsv"]
TAGS = ["--data", "data/train.iob2", "--dev", "data/dev.iob2"]
runner = CliRunner()


@pytest.fixture
def records(tmp_path, monkeypatch) -> Path:
    """A copy of the old records (a test may resume or re-run in them), the working folder set to it."""
    folder = tmp_path / "records"
    shutil.copytree(LEGACY / "records", folder)
    monkeypatch.chdir(folder)
    return folder


def answer(*argv: str) -> dict:
    result = runner.invoke(app, [*argv, "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def close(new: object, old: object, path: str = "") -> None:
    """Equal, numbers to 1e-5 (the same weights read the same way)."""
    if isinstance(old, float) or isinstance(new, float):
        assert new == pytest.approx(old, abs=1e-5), path
    elif isinstance(old, dict):
        assert isinstance(new, dict), path
        for key in old:
            close(new.get(key), old[key], f"{path}.{key}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), path
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            close(a, b, f"{path}[{i}]")
    else:
        assert new == old, path


@pytest.mark.parametrize(("name", "argv"), [
    ("sentences", ["predict", "--model", "runs/sentences/best", "--text", TEXT[0], "--text", TEXT[1]]),
    ("tagger", ["predict", "--model", "runs/tagger/best", "--words", WORDS]),
    ("probe_sentences", ["predict", "--probe", "runs/probe-sentences/probe", "--text", TEXT[0], "--text", TEXT[1]]),
    ("probe_words", ["predict", "--probe", "runs/probe-words/probe", "--words", WORDS]),
    ("export_sentences", ["predict", "--model", "exports/sentences", "--text", TEXT[0], "--text", TEXT[1]]),
    ("export_tagger", ["predict", "--model", "exports/tagger", "--words", WORDS]),
    ("evaluate_tagger", ["evaluate", "--model", "runs/tagger/best", "--data", "data/dev.iob2"]),
    ("evaluate_sentences", ["evaluate", "--model", "runs/sentences/best", "--data", "data/dev.tsv"]),
])
def test_old_models_probes_and_exports_answer_as_they_did(records, name, argv):
    close(answer(*argv), EXPECTED[name], name)


@pytest.mark.parametrize(("out", "data", "steps_done"), [("runs/sentences-unfinished", SENTENCES, 5),
                                                         ("runs/tagger-unfinished", TAGS, 3)])
def test_an_unfinished_old_run_resumes_where_it_stopped(records, out, data, steps_done):
    result = answer("finetune", *TRAIN, *data, "--out", out)
    assert result["already_finished"] is False
    assert result["restored"] is not None and result["restored"]["step"] == steps_done
    assert (records / out / "best" / "model.safetensors").is_file()
    assert not (records / out / "checkpoints").exists()


@pytest.mark.parametrize(("out", "data"), [("runs/sentences", SENTENCES), ("runs/tagger", TAGS)])
def test_a_finished_old_run_is_recognised_as_finished(records, out, data):
    before = (records / out / "metrics.json").read_bytes()
    result = answer("finetune", *TRAIN, *data, "--out", out)
    assert result["already_finished"] is True
    assert (records / out / "metrics.json").read_bytes() == before


@pytest.mark.parametrize("store", ["stores/sentences", "stores/words"])
def test_old_stores_are_complete_and_probe(records, store):
    data = SENTENCES if store.endswith("sentences") else TAGS
    again = answer("embed", "--model", "model", *data, "--precision", "fp32", "--max-length", "16", "--out", store)
    assert again["complete_already"] is True
    probed = answer("probe", "--features", store)
    best = probed["best"]
    assert best["dev"] if isinstance(best, dict) else best in [row["label"] for row in probed["rows"]]
