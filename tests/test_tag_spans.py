"""Predict's spans are the entities the headline F1 counts (conlleval's reading: an I- that continues no entity opens
one) and the very groups transformers' token-classification pipeline makes with aggregation_strategy="first" on a
saved tagger, stray I- predictions included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from older_records import resealed

from bertkit.commands.predict import PredictConfig
from bertkit.commands.predict import run as predict
from bertkit.data.tagscheme import TagScheme
from bertkit.scoring.entities import read_entities
from bertkit.scoring.spans import tagged_words

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["alice went to new york with bob", "the dog saw carol in los angeles today",
             "bob and dave met in paris", "a dog from london went to paris with alice"]


def test_spans_open_an_entity_at_a_stray_i_and_split_at_a_type_change():
    tags = ["I-LOC", "I-LOC", "O", "I-PER", "B-PER", "I-LOC", "B-LOC", "B-LOC"]
    words = [f"w{i}" for i in range(len(tags))]
    spans = tagged_words(words, tags, [0.5] * len(tags), TagScheme("IOB2", "IOB2")).spans
    assert [(s.type, s.first_word, s.last_word) for s in spans] == [("LOC", 0, 1), ("PER", 3, 3), ("PER", 4, 4),
                                                                   ("LOC", 5, 5), ("LOC", 6, 6), ("LOC", 7, 7)]


def _stray_tagger(model: Path, folder: Path) -> Path:
    """A copy of the tiny tagger whose I-LOC bias is raised until about half the words take it (so I-LOC follows O
    and B-PER: stray I- tags), its record's digest of the weights brought up to date."""
    from safetensors.torch import load_file, save_file

    from bertkit.io.digests import file_record

    shutil.copytree(model, folder)
    weights = load_file(folder / "model.safetensors")
    labels = json.loads((folder / "config.json").read_text())["label2id"]
    bias = weights["classifier.bias"].clone()
    bias[labels["I-LOC"]] += 2.5
    weights["classifier.bias"] = bias
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    record = json.loads((folder / "bertkit_model.json").read_text())
    record["files"]["model.safetensors"] = file_record(folder / "model.safetensors")
    (folder / "bertkit_model.json").write_text(json.dumps(resealed(record)))  # as a writer of these weights seals it
    return folder


def test_predicts_spans_equal_the_pipelines_first_aggregation_on_stray_i_predictions(tiny_tagger, tmp_path):
    from transformers import pipeline

    model, _ = tiny_tagger
    stray = _stray_tagger(model, tmp_path / "stray")
    result = predict(PredictConfig.of(model=str(stray), text=tuple(SENTENCES)))
    ours = [[(s.type, s.start, s.end) for s in sentence.spans] for sentence in result.sentences]
    tags = [sentence.tags for sentence in result.sentences]
    assert any(t == "I-LOC" and (i == 0 or s[i - 1] in ("O", "B-PER")) for s in tags for i, t in enumerate(s))
    tagger = pipeline("token-classification", model=str(stray), aggregation_strategy="first", device="cpu")
    theirs = [[(e["entity_group"], e["start"], e["end"]) for e in found] for found in tagger(SENTENCES)]
    assert ours == theirs
    strict = read_entities(tags, "IOB2", "strict")  # the stray I- runs strict mode reads as no entity
    assert sum(map(len, strict)) < sum(map(len, ours))
