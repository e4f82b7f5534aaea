"""Issue 57 through the CLI: tagged data read wrong used to be a traceback or a silent misreading; now each case exits 2
with the file and line named and the fix, leaves no --out behind (or, for what reads right now, answers right): a
latin-1 file in every command that reads tagged data, a missing tag in a CoNLL `.txt`, one malformed tag, a declared
scheme the tags contradict; `bertkit tokens` on a `.iob2` file; plain text and a headed table given to a tagger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tagged_samples import DEV, SENTENCES, write_conll
from typer.testing import CliRunner

from bertkit.cli.app import app

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()

CONLL_MISSING_TAG = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP\ncall NN B-NP O\n\n"
                     "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n")


def refused(argv: list[str], *patterns: str) -> str:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # a UserError, shown: no traceback
    for pattern in patterns:
        assert pattern in result.output, f"{pattern!r} not in:\n{result.output}"
    return result.output


@pytest.fixture
def latin(tmp_path) -> Path:
    path = tmp_path / "latin.iob2"
    path.write_bytes("Anna\tB-PER\nmet\tO\nJos\xe9\tB-PER\n\n".encode("latin-1"))
    return path


@pytest.fixture
def dev(tmp_path) -> Path:
    return write_conll(tmp_path / "dev.iob2", DEV)


@pytest.mark.parametrize("command", ["probe", "finetune", "embed"])
def test_a_latin1_file_names_its_line_and_the_encoding_flag(command, latin, dev, tmp_path, tiny_bert_dir):
    argv = [command, "--model", str(tiny_bert_dir), "--data", str(latin), "--out", str(tmp_path / "out")]
    refused(argv + (["--dev", str(dev)] if command != "embed" else []), "latin.iob2 line 3 is not utf-8 text",
            "--encoding latin-1")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_latin1_file_given_to_a_tagger_names_its_line(command, latin, tiny_tagger):
    model, _ = tiny_tagger
    refused([command, "--model", str(model), "--data", str(latin)], "latin.iob2 line 3", "--encoding latin-1")


@pytest.mark.parametrize("task", [[], ["--task", "tags"]])
def test_a_missing_tag_in_a_conll_txt_names_its_line(task, tmp_path, tiny_bert_dir):
    train = tmp_path / "eng.txt"
    train.write_text(CONLL_MISSING_TAG, encoding="utf-8")
    refused(["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(train), *task],
            "eng.txt line 4: 3 column(s) (rejects | VBZ | B-VP)", "a missing tag")


def test_one_malformed_dev_tag_is_refused_by_line_before_training(tmp_path, tiny_bert_dir):
    train = write_conll(tmp_path / "train.iob2", SENTENCES)
    odd = [list(s) for s in DEV]
    odd[1][0] = ("Bob", "X-PER")
    dev = write_conll(tmp_path / "dev.iob2", odd)
    refused(["finetune", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev), "--out",
             str(tmp_path / "run")], "dev.iob2 line 5: 'X-PER' is not an entity tag", "--tag-scheme none")
    assert not (tmp_path / "run").exists()


def test_a_declared_scheme_the_tags_contradict_is_refused_before_training(tmp_path, tiny_bert_dir, dev):
    train = write_conll(tmp_path / "train.iob2", SENTENCES)
    refused(["finetune", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev), "--tag-scheme",
             "IOBES", "--out", str(tmp_path / "run")], "train.iob2 line 1: 'B-PER' opens or continues an entity",
            "Pass --tag-scheme IOB2")
    assert not (tmp_path / "run").exists()


def test_tokens_reads_a_tagged_files_sentences_as_text(tmp_path, tiny_bert_dir):
    data = write_conll(tmp_path / "train.iob2", SENTENCES)
    result = runner.invoke(app, ["tokens", "--model", str(tiny_bert_dir), "--data", str(data), "--json", "-q"])
    assert result.exit_code == 0, result.output
    split = json.loads(result.stdout)["splits"][0]
    assert split["split"] == "train" and split["rows"] == len(SENTENCES)


def test_a_tagger_tags_every_word_of_plain_text_and_of_a_tables_text_column(tmp_path, tiny_tagger):
    model, _ = tiny_tagger
    plain = tmp_path / "plain.txt"
    plain.write_text("alice went to paris today\n\nbob met carol in london\n", encoding="utf-8")
    table = tmp_path / "table.tsv"
    table.write_text("label\ttext\npos\talice went to paris\nneg\tbob met carol\n", encoding="utf-8")
    for path, words in ((plain, [5, 5]), (table, [4, 3])):
        result = runner.invoke(app, ["predict", "--model", str(model), "--data", str(path), "--json"])
        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        assert [len(line["tags"]) for line in lines] == words
        assert "label" not in lines[0]["words"] and "pos" not in lines[0]["words"]
