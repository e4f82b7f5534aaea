"""The saved word probe (issue 45): `bertkit probe` on tagged data saves the best row's probe in OUT/probe, it
reloads to the same tags as the fitted one, `predict --probe` gives words, tags and spans (table, JSONL, --out
.jsonl/.csv) with character offsets that slice the text, and a damaged record is refused (exit 2, naming the file)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.words import word_pooling
from bertkit.io.record_format import record_digest
from bertkit.models.compute import Compute
from bertkit.probe.word_saved import (
    WordProbeFit,
    WordProbeSource,
    is_word_probe,
    load_word_probe,
    save_word_probe,
    word_probe_weights,
)
from bertkit.probe.words import fit_word_probe
from bertkit.scoring.entities import score_tags
from bertkit.scoring.spans import tagged_words, word_offsets
from tests.test_probe_words_cmd import DEV, SENTENCES, write_conll

runner = CliRunner()
IOB2 = TagScheme("IOB2", "IOB2")


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_span_offsets_slice_the_text_as_given():
    text = "  Anna   Smith met\tBob in  New York  "
    words = text.split()
    tags = ["B-PER", "I-PER", "O", "B-PER", "O", "B-LOC", "I-LOC"]
    sentence = tagged_words(words, tags, [0.9, 0.7, 0.99, 0.8, 0.9, 0.6, 0.4], IOB2, text)
    assert [(s.type, s.text, s.first_word, s.last_word) for s in sentence.spans] == [
        ("PER", "Anna   Smith", 0, 1), ("PER", "Bob", 3, 3), ("LOC", "New York", 5, 6)]
    assert all(text[s.start:s.end] == s.text for s in sentence.spans)
    assert sentence.spans[0].score == pytest.approx(0.8) and sentence.spans[2].score == pytest.approx(0.5)
    joined = tagged_words(words, tags, [1.0] * 7, IOB2)  # no text: the words joined by single spaces
    assert joined.text == " ".join(words)
    assert [joined.text[s.start:s.end] for s in joined.spans] == ["Anna Smith", "Bob", "New York"]


def test_spans_are_the_entities_the_headline_f1_counts():
    """A stray I- (no B- before it) opens a span, as conlleval (and the headline entity F1) counts it; IOBES read
    too."""
    sentence = tagged_words(["a", "b", "c"], ["I-PER", "O", "B-LOC"], [1.0] * 3, IOB2)
    assert [(s.type, s.text) for s in sentence.spans] == [("PER", "a"), ("LOC", "c")]
    iobes = tagged_words(["New", "York", "in", "Rome"], ["B-LOC", "E-LOC", "O", "S-LOC"], [1.0] * 4,
                         TagScheme("IOBES", "IOBES"))
    assert [s.text for s in iobes.spans] == ["New York", "Rome"]
    assert tagged_words(["a"], ["NOUN"], [1.0], TagScheme()).spans == ()
    with pytest.raises(ValueError):
        word_offsets(["a", "b"], "a c")


def _toy_fit(tmp_path, n_tags: int, model: str = "some/model"):
    rng = np.random.default_rng(0)
    tags = ["O", "B-PER", "I-PER"][:n_tags]
    X = rng.normal(size=(60, 8))
    y = [tags[i % n_tags] for i in range(60)]
    X[:, 0] += np.array([tags.index(t) for t in y]) * 3.0
    pipeline = fit_word_probe(X, y)
    fit = WordProbeFit(word_probe_weights(pipeline), "layer 1", word_pooling("1"), 1.0, 0.5, "entity F1")
    source = WordProbeSource(model, "abc", Reading.of_words("mean", 16, 4), IOB2, compute=Compute("cpu", "bf16"),
                             encoder_sha256="0" * 64)
    return pipeline, X, save_word_probe(tmp_path / "probe", fit, source)


@pytest.mark.parametrize("n_tags", [2, 3])
def test_a_saved_probe_reloads_and_predicts_the_fitted_tags(tmp_path, n_tags):
    pipeline, X, folder = _toy_fit(tmp_path, n_tags)
    assert is_word_probe(folder) and is_word_probe(tmp_path)  # the folder, or the run directory holding it
    saved = load_word_probe(tmp_path)
    predicted = np.asarray(saved.tags, dtype=object)[saved.predict_proba(X).argmax(axis=1)]
    assert predicted.tolist() == pipeline.predict(X).tolist()
    np.testing.assert_allclose(saved.predict_proba(X), pipeline.predict_proba(X), atol=1e-9)
    assert saved.source.reading == Reading.of_words("mean", 16, 4) and saved.source.scheme == IOB2
    assert saved.fit.pooling == word_pooling("1") and saved.source.compute == Compute("cpu", "bf16")
    assert saved.source.encoder_sha256 == "0" * 64


def test_a_probe_saved_before_the_fold_reads_as_it_meant(tmp_path, tiny_bert_dir):
    """A bertkit-word-probe/1 record (reading {word_pool, max_length, stride}, layers {layers, combine}, no compute)
    loads with the same settings; its layers `all` are its encoder's layers (the tiny model's 1 and 2)."""
    _, X, folder = _toy_fit(tmp_path, 3, str(tiny_bert_dir))
    record = json.loads((folder / "probe.json").read_text())
    older = {k: v for k, v in record.items() if k not in ("pooling", "compute", "record_sha256", "family")}
    older.update(format="bertkit-word-probe/1", reading={"word_pool": "mean", "max_length": 16, "stride": 4},
                 layers={"layers": "1", "combine": "concat"})
    (folder / "probe.json").write_text(json.dumps({**older, "record_sha256": record_digest(older)}))
    assert is_word_probe(folder)
    saved = load_word_probe(folder)
    assert saved.source.reading == Reading.of_words("mean", 16, 4) and saved.fit.pooling == word_pooling("1")
    assert saved.source.compute is None
    older["layers"] = {"layers": "all", "combine": "sum"}
    (folder / "probe.json").write_text(json.dumps({**older, "record_sha256": record_digest(older)}))
    assert load_word_probe(folder).fit.pooling == word_pooling("1,2", "sum")


@pytest.mark.parametrize("name", ["probe.json", "probe.safetensors"])
def test_a_flipped_byte_is_refused_naming_the_file(tmp_path, name):
    _, _, folder = _toy_fit(tmp_path, 3)
    file = folder / name
    data = bytearray(file.read_bytes())
    at = data.index(b"some/model") + 2 if name == "probe.json" else len(data) - 3
    data[at] ^= 0x01
    file.write_bytes(bytes(data))
    with pytest.raises(UserError) as caught:
        load_word_probe(folder)
    assert str(file) in str(caught.value) and "damaged" in str(caught.value)


@pytest.fixture(scope="module")
def word_run(tmp_path_factory, tiny_bert_dir):
    root = tmp_path_factory.mktemp("word-run")
    train, dev = write_conll(root / "train.iob2", SENTENCES * 3), write_conll(root / "dev.iob2", DEV)
    out = root / "run"
    result = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--out",
                    str(out), "--word-pool", "mean", "--max-length", "16", "--stride", "4", "--quiet")
    assert result.exit_code == 0, result.output
    return out, dev


def test_probe_saves_the_best_rows_probe_and_predict_reproduces_its_dev_score(word_run):
    out, dev = word_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["outputs"]["probe"] == str(out / "probe")
    record = json.loads((out / "probe" / "probe.json").read_text())
    assert record["format"] == "bertkit-word-probe/3" and record["row"] == metrics["best"]
    assert record["family"] == "words"
    assert Reading.from_json(record["reading"]) == Reading.of_words("mean", 16, 4) == Reading.from_json(
        metrics["reading"])
    assert record["reading"] == {"max_length": 16, "long_text": "chunk", "truncation": "head", "stride": 4,
                                 "word_pool": "mean"}
    best_row = next(r for r in metrics["rows"] if r["label"] == metrics["best"])
    assert record["pooling"] == best_row["pooling"] and record["pooling"]["pool"] == "word"
    assert record["compute"] == metrics["compute"] and record["compute"]["device"] == "cpu"
    assert record["scheme"] == {"name": "IOB2", "source": "IOB2"} and record["tags"] == metrics["tags"]
    result = invoke("predict", "--probe", str(out), "--data", str(dev), "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [s["words"] for s in lines] == [[w for w, _ in s] for s in DEV]
    gold = [[t for _, t in s] for s in DEV]
    best = next(r for r in metrics["rows"] if r["label"] == metrics["best"])
    scores = score_tags(gold, [s["tags"] for s in lines], IOB2)
    assert scores.entities.f1 == pytest.approx(best["scores"]["entities"]["f1"])
    assert scores.token_accuracy == pytest.approx(best["scores"]["token_accuracy"])


def test_predict_text_and_words_give_jsonl_with_spans(word_run):
    out, _ = word_run
    text = "Anna  met   Bob in Paris"
    result = invoke("predict", "--probe", str(out), "--text", text, "--json")
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    sentence = json.loads(line)
    assert set(sentence) == {"words", "tags", "spans"} and sentence["words"] == text.split()
    for span in sentence["spans"]:
        assert set(span) == {"type", "text", "start", "end", "first_word", "last_word", "score"}
        assert text[span["start"]:span["end"]] == span["text"] and 0 < span["score"] <= 1
    as_words = invoke("predict", "--probe", str(out), "--words", json.dumps(text.split()), "--json")
    assert json.loads(as_words.stdout)["tags"] == sentence["tags"]
    table = invoke("predict", "--probe", str(out), "--text", text)
    assert table.exit_code == 0 and "Anna/" in table.stdout


def test_predict_writes_jsonl_and_csv(word_run, tmp_path):
    out, dev = word_run
    for name in ("tags.jsonl", "tags.csv"):
        result = invoke("predict", "--probe", str(out / "probe"), "--data", str(dev), "--out", str(tmp_path / name),
                        "--quiet")
        assert result.exit_code == 0, result.output
    lines = (tmp_path / "tags.jsonl").read_text().splitlines()
    assert len(lines) == len(DEV) and json.loads(lines[0])["words"] == ["Anna", "saw", "Paris"]
    rows = (tmp_path / "tags.csv").read_text().splitlines()
    assert rows[0] == "sentence,word_index,word,tag,probability,span" and len(rows) == 1 + sum(map(len, DEV))
    bad = invoke("predict", "--probe", str(out), "--data", str(dev), "--out", str(tmp_path / "tags.txt"))
    assert bad.exit_code == 2 and ".jsonl" in bad.output and not (tmp_path / "tags.txt").exists()


def test_predict_refuses_a_damaged_word_probe(word_run, tmp_path):
    import shutil

    out, dev = word_run
    copy = tmp_path / "probe"
    shutil.copytree(out / "probe", copy)
    weights = copy / "probe.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    result = invoke("predict", "--probe", str(copy), "--text", "Anna met Bob")
    assert result.exit_code == 2 and "damaged" in result.output and "probe.safetensors" in result.output
    bad_words = invoke("predict", "--probe", str(out), "--words", "not json")
    assert bad_words.exit_code == 2 and "--words" in bad_words.output


@pytest.mark.parametrize("native", ["0", "1"])
def test_predict_reads_words_in_the_precision_the_probe_records(tmp_path, tiny_bert_dir, monkeypatch, native):
    """A probe fitted on bf16 word vectors: predict's --precision auto reads in bf16 where the CPU runs it natively,
    else in fp32 with a note; --precision fp32 is applied; the probabilities agree within bf16's rounding."""
    from bertkit.commands.predict import PredictConfig, run
    from bertkit.models import loading

    train, dev = write_conll(tmp_path / "train.iob2", SENTENCES * 3), write_conll(tmp_path / "dev.iob2", DEV)
    out = tmp_path / "run"
    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", native)
    try:
        fitted = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--layers",
                        "-1", "--no-baselines", "--precision", "bf16", "--out", str(out), "--quiet")
        assert fitted.exit_code == 0, fitted.output
        text = ("Anna met Bob in Paris",)
        auto, fp32 = (run(PredictConfig.of(probe=str(out), text=text, precision=p)) for p in ("auto", "fp32"))
    finally:
        loading.cpu_supports_bf16.cache_clear()
    assert json.loads((out / "probe" / "probe.json").read_text())["compute"] == {"device": "cpu", "precision": "bf16"}
    assert (auto.dtype, fp32.dtype) == ("bf16" if native == "1" else "fp32", "fp32")
    np.testing.assert_allclose(auto.sentences[0].probabilities, fp32.sentences[0].probabilities, atol=0.05)
    assert invoke("predict", "--probe", str(out), "--text", text[0], "--precision", "int8").exit_code == 2
