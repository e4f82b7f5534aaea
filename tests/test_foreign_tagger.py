"""A token-classification model bertkit did not save (a plain `save_pretrained` folder, or a tagger whose
bertkit_model.json was removed) is read by what its config.json says: a tagger (its architecture), its tags and their
scheme (its id2label), with the one-line "not made by bertkit" note - not as a sentence classifier with a new head."""

from __future__ import annotations

import json
import shutil

import pytest
from tagged_samples import synthetic_sentences, write_iob
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.families.registry import family_of
from bertkit.models.metadata import is_tagger, saved_tag_scheme

runner = CliRunner()
TAGS = ["O", "B-PER", "B-LOC", "I-LOC"]


@pytest.fixture(scope="module")
def plain_tagger(tiny_bert_dir, tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, BertForTokenClassification

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("plain-tagger")
    model = BertForTokenClassification.from_pretrained(str(tiny_bert_dir), num_labels=len(TAGS),
                                                       id2label=dict(enumerate(TAGS)),
                                                       label2id={t: i for i, t in enumerate(TAGS)})
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(folder)
    return folder


def test_a_plain_token_classifier_is_a_tagger_with_its_labels_scheme(plain_tagger):
    assert is_tagger(plain_tagger) and family_of(model=str(plain_tagger)).name == "words"
    assert saved_tag_scheme(plain_tagger).name == "IOB2"


def test_predict_and_evaluate_read_it_as_a_tagger_with_the_note(plain_tagger, tmp_path):
    dev = write_iob(tmp_path / "dev.iob2", synthetic_sentences(6, 1))
    predicted = runner.invoke(app, ["predict", "--model", str(plain_tagger), "--words", '["alice", "in", "paris"]',
                                    "--json"])
    assert predicted.exit_code == 0, predicted.output
    row = json.loads(predicted.stdout.splitlines()[0])
    assert row["words"] == ["alice", "in", "paris"] and set(row["tags"]) <= set(TAGS)
    assert "was not made by bertkit" in predicted.output
    scored = runner.invoke(app, ["evaluate", "--model", str(plain_tagger), "--data", str(dev), "--json"])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["metrics"]["task"] == "tags"


def test_a_tagger_whose_record_was_removed_reads_by_its_config(tiny_tagger, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(tiny_tagger[0], folder)
    (folder / "bertkit_model.json").unlink()
    assert family_of(model=str(folder)).name == "words"
    result = runner.invoke(app, ["predict", "--model", str(folder), "--text", "alice went to paris", "--max-length", "16"])
    assert result.exit_code == 0 and "alice/B-PER" in result.output, result.output
