"""`bertkit probe --features DIR` on a word store (issue 45): the store verified on read, its reading, pooling,
scheme, columns and model read from its manifest; the table limited to the rows it holds (skipped ones named);
the baselines from its words and tags, the random-init encoder from the model it records (or a note why not); the
saved probe records the store's settings, so `predict --probe` reads words as the store did; and every flag the
store cannot honour is refused (exit 2) before any vector is read, with nothing left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tagged_samples import DEV, SENTENCES, write_conll
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.probe import ProbeConfig, run
from bertkit.encoding.reading import Reading
from bertkit.features.settings import Pooling

runner = CliRunner()

def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def tagged(tmp_path) -> tuple[Path, Path]:
    return write_conll(tmp_path / "train.iob2", SENTENCES * 3), write_conll(tmp_path / "dev.iob2", DEV)


def embed(tagged, model: Path, out: Path, *args: str) -> Path:
    train, dev = tagged
    result = invoke("embed", "--data", str(train), "--dev", str(dev), "--model", str(model), "--out", str(out),
                    "--precision", "fp32", "--word-pool", "mean", "--max-length", "16", "--stride", "4", *args)
    assert result.exit_code == 0, result.output
    return out


def test_a_store_of_every_state_gives_the_whole_table_as_the_data_path(tagged, tiny_bert_dir, tmp_path):
    store = embed(tagged, tiny_bert_dir, tmp_path / "words", "--layers", "all")
    out = tmp_path / "run"
    result = invoke("probe", "--features", str(store), "--out", str(out))
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["features"] == str(store) and metrics["train"] == str(store / "train")
    assert Reading.from_json(metrics["reading"]) == Reading.of_words("mean", 16, 4)  # the store's, not the defaults
    assert metrics["compute"] == {"device": "cpu", "precision": "fp32"}
    assert len(metrics["rows"]) == 3 + 3  # every state, then the paper's combinations
    assert set(metrics["baselines"]) == {"majority tag", "most frequent tag per word", "random-init encoder"}
    train, dev = tagged  # the same table from the files, read now in the store's settings
    direct = run(ProbeConfig.of(data=str(train), dev=str(dev), model=str(tiny_bert_dir), word_pool="mean",
                             max_length=16, stride=4, precision="fp32"))
    assert direct.words is not None
    assert [r["label"] for r in metrics["rows"]] == [r.label for r in direct.words.table.rows]
    for stored, read in zip(metrics["rows"], direct.words.table.rows, strict=True):
        assert stored["scores"]["entities"]["f1"] == pytest.approx(read.scores.main, abs=1e-6)
    probe = json.loads((out / "probe" / "probe.json").read_text())
    assert Reading.from_json(probe["reading"]) == Reading.of_words("mean", 16, 4)
    assert probe["model"] == str(tiny_bert_dir) and probe["compute"]["precision"] == "fp32"
    tagged_out = invoke("predict", "--probe", str(out), "--words", '["Anna","met","Bob"]', "--json")
    assert tagged_out.exit_code == 0, tagged_out.output
    assert len(json.loads(tagged_out.stdout.splitlines()[0])["tags"]) == 3


def test_a_store_of_one_layer_gives_that_row_and_names_the_rest(tagged, tiny_bert_dir, tmp_path):
    store = embed(tagged, tiny_bert_dir, tmp_path / "words", "--layers", "-1")
    result = run(ProbeConfig.of(features=str(store), baselines=False))
    assert result.words is not None and [r.label for r in result.words.table.rows] == ["layer 2 (last)"]
    assert any("5 of the table's rows skipped" in note and "hidden state 2 (--layers -1)" in note
               for note in result.notes), result.notes
    head = run(ProbeConfig.of(features=str(store), baselines=False, limit=5))  # the first 5 sentences of each split
    assert head.words is not None and dict(head.words.sentences) == {"train": 5, "dev": 2}
    assert head.words.table.n_train_words == sum(len(s) for s in SENTENCES) + len(SENTENCES[0])
    refused = invoke("probe", "--features", str(store), "--layers", "0,-1")
    assert refused.exit_code == 2 and "cannot give (embeddings (layer 0))" in " ".join(refused.output.split())


def test_a_store_of_summed_layers_gives_its_own_row(tagged, tiny_bert_dir, tmp_path):
    store = embed(tagged, tiny_bert_dir, tmp_path / "words", "--layers", "0,1", "--combine", "sum")
    result = run(ProbeConfig.of(features=str(store), baselines=False))
    assert result.words is not None
    assert [(r.label, r.pooling) for r in result.words.table.rows] == [("sum 0,1", Pooling("word", (0, 1), "sum"))]


def test_the_random_init_baseline_says_why_not_when_the_model_is_gone(tagged, tiny_bert_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    store = embed(tagged, model, tmp_path / "words", "--layers", "-1")
    shutil.rmtree(model)
    result = run(ProbeConfig.of(features=str(store)))
    assert result.words is not None and "random-init encoder" not in result.words.table.baselines
    assert "most frequent tag per word" in result.words.table.baselines
    assert any(note.startswith("random-init encoder baseline skipped") for note in result.notes), result.notes
    again = run(ProbeConfig.of(features=str(store), model=str(tiny_bert_dir)))  # the same weights, elsewhere
    assert again.words is not None and "random-init encoder" in again.words.table.baselines


@pytest.mark.parametrize(("args", "expected"), [
    (["--word-pool", "first"], "--word-pool first (the store: mean)"),
    (["--max-length", "32"], "--max-length 32 (the store: 16)"),
    (["--dev", "DEV"], "--dev does not apply with --features"),
    (["--data", "TRAIN"], "--data does not apply with --features"),
    (["--label-column", "1"], "--label-column does not apply with --features"),
    (["--model", "OTHER"], "not by --model"),
    (["--layers", "1", "--combine", "sum"], "cannot give"),
    (["--unseen-tags", "drop"], "--unseen-tags does not apply with --features"),
])
def test_flags_the_store_cannot_honour_are_refused(tagged, tiny_bert_dir, tiny_distilbert_dir, tmp_path, args,
                                                   expected):
    store = embed(tagged, tiny_bert_dir, tmp_path / "words", "--layers", "-1")
    values = {"DEV": str(tagged[1]), "TRAIN": str(tagged[0]), "OTHER": str(tiny_distilbert_dir)}
    out = tmp_path / "run"
    result = invoke("probe", "--features", str(store), "--out", str(out), *[values.get(a, a) for a in args])
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split()), result.output
    assert not out.exists()


def test_a_dev_split_without_entities_in_the_sentences_probed_is_refused(tmp_path, tiny_bert_dir):
    """Entity F1 needs an entity in dev: a store whose first --limit dev sentences hold none is refused, naming --dev
    and --limit, before any row is fitted."""
    train = write_conll(tmp_path / "train.iob2", SENTENCES * 3)
    dev = write_conll(tmp_path / "dev.iob2", [[("the", "O"), ("cat", "O")]] + DEV)
    store = embed((train, dev), tiny_bert_dir, tmp_path / "words", "--layers", "-1")
    out = tmp_path / "run"
    result = invoke("probe", "--features", str(store), "--out", str(out), "--limit", "1", "--no-baselines")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "holds no entity in its first 1 sentences (--limit 1)" in text and "--dev" in text, text
    assert not out.exists()


def test_a_damaged_or_incomplete_store_is_refused_naming_it(tagged, tiny_bert_dir, tmp_path):
    store = embed(tagged, tiny_bert_dir, tmp_path / "words", "--layers", "-1")
    vectors = store / "dev" / "vectors.npy"
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0xFF
    vectors.write_bytes(bytes(data))
    result = invoke("probe", "--features", str(store))
    assert result.exit_code == 2 and "vectors.npy" in result.output and "damaged" in result.output
    train_only = tmp_path / "train-only"
    assert invoke("embed", "--data", str(tagged[0]), "--model", str(tiny_bert_dir), "--out",
                  str(train_only)).exit_code == 0
    result = invoke("probe", "--features", str(train_only))
    assert result.exit_code == 2 and "has no dev split" in result.output
