"""Words <-> word pieces, once: `align_words` tokenizes sentences given as words with a fast tokenizer
(`is_split_into_words`, whose `word_ids` say which word each piece comes from), cuts a sentence longer than the
reading's `max_length` into windows at word boundaries sharing its `window_stride` pieces, and says for every word
which window gives its vector (the one where it is farthest from an edge) and where its pieces sit there (pooled into
one vector per word by `features.pooling.pool_word_vectors`, as the reading's `word_pool` says). The settings are
`bertkit.encoding.reading.Reading`'s (`Reading.of_words`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems

log = logging.getLogger(__name__)

EDGE = 1 << 30
"""The context a word has on a side where its window ends with the sentence: more than any window can give."""


@dataclass
class WordWindows:
    """A chunk of sentences as model inputs and the word -> piece map: window k is `ids[k]` ([CLS] ... [SEP]) of
    sentence `window_sentence[k]`; word i (in sentence order, all sentences flat) takes its vector from window
    `word_window[i]`, pieces `word_start[i]:word_end[i]` (positions in that window)."""

    ids: list[list[int]]
    window_sentence: np.ndarray
    word_window: np.ndarray
    word_start: np.ndarray
    word_end: np.ndarray
    sentence_offsets: np.ndarray
    """Sentence s's words are word_start[offsets[s]:offsets[s + 1]] and so on: n_sentences + 1 entries."""

    @property
    def n_words(self) -> int:
        return len(self.word_window)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(ids) for ids in self.ids], dtype=np.int64)


def word_pieces(tokenizer: Any, sentences: Sequence[Sequence[str]]) -> list[tuple[list[int], np.ndarray]]:
    """Per sentence: its piece ids and, per word, where its pieces start (n_words + 1 boundaries). A word the
    tokenizer drops (a zero-width space, an empty string) reads as the unknown token, so every word has a piece."""
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"Reading words needs a fast tokenizer (its word_ids map pieces to words); "
                        f"{type(tokenizer).__name__} is not one. Valid: a model folder with tokenizer.json. "
                        f"Save the tokenizer with transformers' fast tokenizer, or choose another model.")
    words = [list(s) for s in sentences]
    encoded = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    out = []
    for i, sentence in enumerate(words):
        ids, owners = encoded["input_ids"][i], encoded.word_ids(i)
        counts = np.bincount(np.asarray(owners, dtype=np.int64), minlength=len(sentence)) if ids else np.zeros(
            len(sentence), dtype=np.int64)
        if (counts == 0).any():
            log.info("%d word(s) have no word piece (e.g. %r): read as %s", int((counts == 0).sum()),
                     sentence[int(np.argmin(counts))], tokenizer.unk_token)
            fixed = [w if c else tokenizer.unk_token for w, c in zip(sentence, counts, strict=True)]
            return word_pieces(tokenizer, words[:i] + [fixed] + words[i + 1:])
        out.append((list(ids), np.concatenate([[0], np.cumsum(counts)])))
    return out


def plan_windows(bounds: np.ndarray, budget: int, overlap: int) -> list[tuple[int, int]]:
    """[first, last) word spans of a sentence's windows: as many whole words as fit in `budget` pieces, the next
    window starting at the first word within `overlap` pieces of the previous end (always moving on). A single
    word longer than the budget gets a window of its own (its pieces past the budget are not read)."""
    n = len(bounds) - 1
    spans: list[tuple[int, int]] = []
    first = 0
    while True:
        last = first
        while last < n and bounds[last + 1] - bounds[first] <= budget:
            last += 1
        last = max(last, first + 1)
        spans.append((first, last))
        if last >= n:
            return spans
        back = int(np.searchsorted(bounds[:last], bounds[last] - overlap, side="left"))
        first = max(back, first + 1)


def best_windows(bounds: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """For each word, the window (index into `spans`) where its context is largest: the fewer pieces between it
    and the nearer window edge, the worse; a window edge that is the sentence's own edge is no edge. Ties go to
    the earlier window."""
    n = len(bounds) - 1
    best = np.full(n, -1, dtype=np.int64)
    score = np.full(n, -1, dtype=np.int64)
    for k, (first, last) in enumerate(spans):
        words = np.arange(first, last)
        left = np.where(first == 0, EDGE, bounds[words] - bounds[first])
        right = np.where(last == n, EDGE, bounds[last] - bounds[words + 1])
        context = np.minimum(left, right)
        better = context > score[words]
        best[words[better]], score[words[better]] = k, context[better]
    return best


def align_words(tokenizer: Any, sentences: Sequence[Sequence[str]], reading: Reading) -> WordWindows:
    """Sentences (lists of words) -> windows of piece ids and each word's window and piece span there, as `reading`
    (a reading of words, `Reading.of_words`) says: windows of `word_budget` pieces sharing `window_stride`."""
    raise_if_problems(reading.word_problems(), "Invalid word reading")
    budget, overlap = reading.word_budget, reading.window_stride
    ids: list[list[int]] = []
    window_sentence, word_window, word_start, word_end, offsets = [], [], [], [], [0]
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    for s, (pieces, bounds) in enumerate(word_pieces(tokenizer, sentences)):
        spans = plan_windows(bounds, budget, overlap)
        chosen = best_windows(bounds, spans)
        base = len(ids)
        for first, last in spans:
            start = int(bounds[first])
            ids.append([cls_id, *pieces[start:min(int(bounds[last]), start + budget)], sep_id])
            window_sentence.append(s)
        for w, k in enumerate(chosen):
            shift = 1 - int(bounds[spans[k][0]])  # piece index -> position in its window, after [CLS]
            end = min(int(bounds[w + 1]) + shift, len(ids[base + k]) - 1)
            word_window.append(base + k)
            word_start.append(int(bounds[w]) + shift)
            word_end.append(max(end, int(bounds[w]) + shift + 1))
        offsets.append(offsets[-1] + len(bounds) - 1)
    as_array = np.asarray
    return WordWindows(ids, as_array(window_sentence, dtype=np.int64), as_array(word_window, dtype=np.int64),
                       as_array(word_start, dtype=np.int64), as_array(word_end, dtype=np.int64),
                       as_array(offsets, dtype=np.int64))
