"""`bertkit probe` on tagged data (the word path, issue 45): detected from the file or asked with --task tags, a table
of word probes per layer choice with baselines, metrics.json recording the reading and layers, the per-layer plot,
a typed ProbeResult; and every refusal exits 2 with nothing left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tagged_samples import DEV, SENTENCES, write_conll
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.probe import ProbeConfig, ProbeResult, run
from bertkit.data.tagged import is_tagged_file
from bertkit.encoding.reading import Reading
from bertkit.features import word_layers
from bertkit.features.settings import Pooling
from bertkit.models.compute import Compute
from bertkit.probe.words_run import WordProbeRun, table_rows

runner = CliRunner()

@pytest.fixture
def tagged(tmp_path) -> tuple[Path, Path]:
    return write_conll(tmp_path / "train.iob2", SENTENCES * 3), write_conll(tmp_path / "dev.iob2", DEV)


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_tagged_files_are_detected_by_extension_and_by_content(tmp_path, write_tsv):
    assert is_tagged_file(write_conll(tmp_path / "a.txt", SENTENCES))  # a column file under another name
    assert is_tagged_file(tmp_path / "missing.conll")
    sentences = write_tsv("s.tsv", [("a fine film", "1"), ("a dull film", "0")], header=("sentence", "label"))
    assert not is_tagged_file(sentences)


def test_default_rows_are_every_layer_then_the_papers_combinations():
    rows = table_rows(None, None, 2)
    assert [label for label, _ in rows] == ["embeddings (layer 0)", "layer 1 (second-to-last)", "layer 2 (last)",
                                            "sum of last 2", "concat of last 2", "sum of all layers"]
    assert [label for label, _ in table_rows("0,-1", None, 6)] == ["embeddings (layer 0)", "layer 6 (last)"]
    assert [(label, s.layers, s.combine) for label, s in table_rows("-2,-1", "concat", 6)] == [
        ("concat -2,-1", (-2, -1), "concat")]
    assert [label for label, _ in table_rows("last4", "sum", 6)] == ["sum of last four"]  # the paper's row, named
    assert [label for label, _ in table_rows("last4", "mean", 6)] == ["mean last4"]
    all_rows = table_rows("all", None, 2)  # --layers all: every hidden state, as everywhere
    assert [s.layers for _, s in all_rows] == [(0,), (1,), (2,)]
    assert table_rows(None, None, 6)[-1][1].resolve(6) == [1, 2, 3, 4, 5, 6]  # the paper's sum of all 6 layers


def test_probe_on_a_tagged_file_writes_the_word_table(tagged, tiny_bert_dir, tmp_path):
    train, dev = tagged
    out = tmp_path / "run"
    result = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--out", str(out),
                    "--word-pool", "mean", "--max-length", "16", "--stride", "4")
    assert result.exit_code == 0, result.output
    assert "entity F1" in result.stdout and "most frequent tag per word" in result.stdout
    assert "concat of last 2" in result.stdout and " *" in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "tags" and metrics["scheme"] == {"name": "IOB2", "source": "IOB2"}
    assert Reading.from_json(metrics["reading"]) == Reading.of_words("mean", 16, 4)
    assert metrics["reading"]["word_pool"] == "mean" and metrics["compute"]["device"] == "cpu"
    assert metrics["sentences"] == {"train": 12, "dev": 2} and metrics["words"] == {"train": 51, "dev": 5}
    assert len(metrics["rows"]) == 2 + 1 + 3  # tiny BERT: embeddings + 2 layers, and the 3 combinations
    assert {r["pooling"]["combine"] for r in metrics["rows"]} == {"concat", "sum"}
    assert {r["pooling"]["pool"] for r in metrics["rows"]} == {"word"}
    assert set(metrics["baselines"]) == {"majority tag", "most frequent tag per word", "random-init encoder"}
    assert metrics["best"] in {r["label"] for r in metrics["rows"]}
    assert metrics["random_encoder_row"] == metrics["best"]  # the random weights read the best row's layers
    singles = {r["label"] for r in metrics["rows"] if Pooling.from_json(r["pooling"]).single_layer}
    assert len(singles) == 3 and metrics["peak_layer"] in singles  # where the per-layer curve peaks
    for scores in [r["scores"] for r in metrics["rows"]] + list(metrics["baselines"].values()):
        low, high = scores["interval"]  # every row and baseline: a 95% interval over the dev sentences
        assert low <= scores["entities"]["f1"] <= high
    assert "95% CI" in result.stdout and "peak layer:" in result.stdout
    assert "baseline: random-init encoder (" in result.stdout
    assert (out / "probe_layers.png").stat().st_size > 0 and (out / "config.json").is_file()


def test_the_result_is_typed_and_json_matches(tagged, tiny_bert_dir):
    train, dev = tagged
    result = run(ProbeConfig.of(data=str(train), dev=str(dev), model=str(tiny_bert_dir), layers="-1",
                             text_column="0", label_column="1"))
    assert isinstance(result, ProbeResult) and isinstance(result.words, WordProbeRun)
    assert [row.label for row in result.words.table.rows] == ["layer 2 (last)"]
    assert result.best.layer == "layer 2 (last)" and result.sweep == [] and result.task == "tags"
    assert result.rows.train == 12 and result.labels == ["B-LOC", "B-PER", "I-PER", "O"]
    json_run = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--layers", "-2,-1",
                      "--combine", "sum", "--json", "--quiet")
    record = json.loads(json_run.stdout)
    assert record["rows"][0]["label"] == "sum -2,-1" and record["rows"][0]["pooling"] == {
        "pool": "word", "layers": "-2,-1", "combine": "sum", "normalize": False}


@pytest.mark.parametrize("native", ["0", "1"])
def test_word_probes_read_words_in_the_precision_asked(tagged, tiny_bert_dir, monkeypatch, native):
    """--precision on the word path, resolved once like the sentence probe's (on the CPU): auto is bf16 only where
    the CPU runs it natively; bf16 runs under autocast (the words' vectors in bf16, passed down as the run's dtype);
    the scores stay those of fp32 within bf16's rounding; the result and metrics record it."""
    import torch

    from bertkit.models import loading

    train, dev = tagged
    seen = []
    encode = word_layers.encode_word_chunk  # each split's words: one chunk here, written to the layer files
    monkeypatch.setattr(word_layers, "encode_word_chunk", lambda *a: seen.append(a[-1]) or encode(*a))
    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", native)
    try:
        results = {precision: run(ProbeConfig.of(data=str(train), dev=str(dev), model=str(tiny_bert_dir), layers="0,-1",
                                              precision=precision, baselines=False))
                   for precision in ("auto", "fp32", "bf16")}
    finally:
        loading.cpu_supports_bf16.cache_clear()
    auto = "bf16" if native == "1" else "fp32"
    assert {p: r.dtype for p, r in results.items()} == {"auto": auto, "fp32": "fp32", "bf16": "bf16"}
    assert results["bf16"].words.compute == Compute("cpu", "bf16") and results["bf16"].words.to_json()["compute"] == {
        "device": "cpu", "precision": "bf16"}
    assert seen == [torch.bfloat16 if auto == "bf16" else torch.float32] * 2 + [torch.float32] * 2 + [torch.bfloat16] * 2
    fp32, bf16 = (results[p].words.table.rows for p in ("fp32", "bf16"))
    for a, b in zip(fp32, bf16, strict=True):
        assert a.label == b.label and a.dim == b.dim
        assert abs(a.scores.token_accuracy - b.scores.token_accuracy) <= 0.2  # 5 dev words: one may flip


def test_plain_tags_are_scored_by_token_accuracy_with_task_tags(tmp_path, tiny_bert_dir):
    pos = [[(w, "NOUN" if t != "O" else "VERB") for w, t in s] for s in SENTENCES]
    train = write_conll(tmp_path / "train.tsv", pos * 2)
    dev = write_conll(tmp_path / "dev.tsv", [[(w, "NOUN" if t != "O" else "VERB") for w, t in s] for s in DEV])
    result = invoke("probe", "--task", "tags", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir),
                    "--layers", "0,-1")
    assert result.exit_code == 0, result.output
    assert "token acc" in result.stdout and "entity F1" not in result.stdout and "tags none" in result.stdout


@pytest.mark.parametrize(("args", "files", "expected"), [
    (["--cv", "3"], "tagged", "--cv does not apply to word probes"),
    (["--pool", "mean"], "tagged", "--pool does not apply to word probes"),
    (["--features", "store"], "tagged", "--data does not apply with --features store (a word store"),
    ([], "no-dev", "Pass --dev dev.iob2"),
    (["--task", "tags"], "sentences", "does not look like a tagged corpus"),
    (["--word-pool", "mean"], "sentences", "--word-pool applies to tagged data"),
    ([], "ragged", "line"),
    ([], "unseen", "never seen in training"),
])
def test_bad_word_inputs_exit_2_and_leave_nothing(tagged, tmp_path, tiny_bert_dir, write_tsv, args, files, expected):
    train, dev = tagged
    if files == "sentences":
        train = write_tsv("s.tsv", [("a fine film", "1"), ("a dull film", "0")] * 4, header=("sentence", "label"))
        dev = write_tsv("d.tsv", [("a fine film", "1"), ("a dull film", "0")], header=("sentence", "label"))
    elif files == "ragged":
        train.write_text(train.read_text() + "\nword\tO\nshort\n")
    elif files == "unseen":
        write_conll(dev, DEV + [[("Acme", "B-ORG")]])
    data = ["--data", str(train)] + ([] if files == "no-dev" else ["--dev", str(dev)])
    out = tmp_path / "out"
    result = invoke("probe", *data, "--model", str(tiny_bert_dir), "--out", str(out), *args)
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split()), result.output
    assert not out.exists()


def test_a_word_probe_holds_its_out_while_it_works_and_a_failure_leaves_nothing(tagged, tmp_path, tiny_bert_dir,
                                                                                 monkeypatch):
    """The word probe writes --out only at its end, but holds it from the start: a second run on the same --out is
    refused at once (exit 2, naming the first), not after its own extraction and fits; a run that fails leaves --out
    as it was (here: not there)."""
    import subprocess
    import sys

    from bertkit.families import word_runs
    from bertkit.io import runlock

    train, dev = tagged
    out = tmp_path / "run"
    args = ["probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--out", str(out),
            "--layers", "-1", "--no-baselines"]
    seen = {}

    def table():
        seen["holder"] = runlock.holder(out / runlock.LOCK)
        second = subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
        seen["second"] = (second.returncode, " ".join((second.stdout + second.stderr).split()))
        raise RuntimeError("the table failed")

    monkeypatch.setattr(word_runs, "word_probe_table", lambda cfg, progress: table)
    with pytest.raises(RuntimeError, match="the table failed"):
        invoke(*args)
    assert seen["holder"] == os.getpid()
    code, said = seen["second"]
    assert code == 2 and "is being written right now by another bertkit run" in said and "Traceback" not in said
    assert not out.exists()


@pytest.mark.parametrize(("policy", "n_dev", "note"), [("drop", 2, "left out"), ("O", 3, "B-ORG (1)")])
def test_unseen_dev_tags_are_handled_as_unseen_tags_says(tagged, tmp_path, tiny_bert_dir, policy, n_dev, note):
    """--unseen-tags reads the word probe's dev file as fine-tuning reads it: a sentence with a tag training never has
    left out (drop) or its tag read as O; what was done is in the run's notes."""
    train, dev = tagged
    write_conll(dev, DEV + [[("Acme", "B-ORG"), ("left", "O")]])
    out = tmp_path / "run"
    result = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--out", str(out),
                    "--layers", "-1", "--no-baselines", "--unseen-tags", policy)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["sentences"]["dev"] == n_dev
    assert any("--unseen-tags" in n and note in n for n in metrics["notes"]), metrics["notes"]
    refused = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--layers", "-1",
                     "--no-baselines", "--unseen-tags", "B-PER")
    assert refused.exit_code == 2 and "can only be read as O" in " ".join(refused.output.split()), refused.output


def test_a_limited_dev_set_without_entities_is_refused_naming_dev(tagged, tmp_path, tiny_bert_dir):
    train, dev = tagged
    write_conll(dev, [[("the", "O"), ("cat", "O")]] + DEV)
    result = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--layers", "-1",
                    "--no-baselines", "--limit", "1")
    assert result.exit_code == 2, result.output
    assert "(--dev, --limit 1) hold no entity" in " ".join(result.output.split()), result.output


@pytest.mark.slow
@pytest.mark.parametrize(("name", "train", "dev", "n_train"), [
    ("uner", "uner_ewt/train.iob2", "uner_ewt/dev.iob2", 600),  # the first 300 have no I-PER that dev has
    ("upos", "ud_ewt_pos/train.tsv", "ud_ewt_pos/dev.tsv", 300),
])
def test_minilm_word_probe_beats_the_most_frequent_tag_on_a_few_hundred_sentences(shared_data, minilm_dir, tmp_path,
                                                                                  name, train, dev, n_train):
    def head(source: Path, n: int) -> Path:
        blocks = source.read_text(encoding="utf-8").split("\n\n")
        return _write(tmp_path / f"{name}-{n}-{source.name}", "\n\n".join(blocks[:n]) + "\n")

    small_train, small_dev = head(shared_data / train, n_train), head(shared_data / dev, 150)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result = run(ProbeConfig.of(data=str(small_train), dev=str(small_dev), model=str(minilm_dir), layers="3,-1"))
    assert result.words is not None
    best = result.words.table.best().scores.main
    assert best > result.words.table.baselines["most frequent tag per word"].main, result.words.to_json()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_commands_that_do_not_read_words_refuse_task_tags(tmp_path, write_tsv):
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.errors import UserError

    data = write_tsv("t.tsv", [("a fine film", "1"), ("a dull film", "0")], header=("sentence", "label"))
    with pytest.raises(UserError, match="--task tags"):
        FinetuneConfig.of(data=str(data), task="tags")


def test_a_missing_data_file_with_word_options_is_refused_as_missing(tmp_path):
    """A recipe's word options (--word-pool) with a --data that is not there: the error names the missing file, not
    the word options (which only apply to tagged data)."""
    missing = tmp_path / "nowhere" / "train.tsv"
    result = invoke("probe", "--data", str(missing), "--dev", str(missing), "--word-pool", "first",
                    "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "does not exist" in result.output and "--word-pool reads" not in result.output
    assert not (tmp_path / "out").exists()
