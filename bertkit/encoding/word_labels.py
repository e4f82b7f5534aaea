"""Tagged sentences as training rows of a token classifier: each sentence's windows of word pieces
(`bertkit.encoding.words.align_words`, the reading of words: a long sentence in windows of `max_length` sharing
`window_stride` pieces), and per window one label per piece. A word is labelled at its first piece in the window
where it is read (the one where it has the most context, where it is also scored), every other position gets
`IGNORE` (-100, which the loss skips, as run_ner's labels); a word that is context only in a window is not labelled
there, so each word is learnt once. `label_all_pieces` labels a word's other pieces too, as run_ner's
`label_all_tokens`: with the I- tag of the word's B- tag where the tags have one (a later piece continues the
entity), else with the word's tag."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.tagscheme import split_tag
from bertkit.encoding.encode import Encoded
from bertkit.encoding.reading import Reading
from bertkit.encoding.rows import TokenRows, offsets_of
from bertkit.encoding.words import align_words

IGNORE = -100
"""The label of a position the loss skips (PyTorch's cross-entropy `ignore_index`, transformers' convention)."""


@dataclass
class LabelledWindows:
    """Tagged sentences as model rows: the windows' piece ids ([CLS] ... [SEP], one row per window), a label per
    piece of each window (`IGNORE` where none), and where each word is read: window `word_window[i]`, piece
    `word_start[i]` there, its tag id `tag_ids[i]` (words of all sentences flat; sentence s holds words
    `sentence_offsets[s]:sentence_offsets[s + 1]`)."""

    encoded: Encoded
    labels: TokenRows
    word_window: np.ndarray
    word_start: np.ndarray
    tag_ids: np.ndarray
    sentence_offsets: np.ndarray

    @property
    def n_windows(self) -> int:
        return len(self.encoded.lengths)

    @property
    def n_words(self) -> int:
        return len(self.word_window)


def continuation_ids(tags: Sequence[str]) -> np.ndarray:
    """For each tag id, the label a word's later pieces take under `label_all_pieces`: the id of I-X for B-X where
    I-X is one of the tags, else the tag's own id (O, I-X, plain tags)."""
    index = {tag: i for i, tag in enumerate(tags)}
    out = np.arange(len(tags), dtype=np.int64)
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if prefix == "B" and f"I-{kind}" in index:
            out[i] = index[f"I-{kind}"]
    return out


def label_windows(tokenizer: Any, sentences: Sequence[Sequence[str]], tag_ids: Sequence[Sequence[int]],
                  reading: Reading, *, label_all_pieces: bool = False,
                  continuation: np.ndarray | None = None) -> LabelledWindows:
    """The sentences' windows as `reading` cuts them and their labels (see the module docstring); `continuation`
    (`continuation_ids` of the tags) is the label of a word's later pieces with `label_all_pieces`."""
    windows = align_words(tokenizer, sentences, reading)
    lengths = windows.lengths
    offsets = offsets_of(lengths)
    flat_tags = (np.concatenate([np.asarray(t, dtype=np.int64) for t in tag_ids]) if len(tag_ids)
                 else np.zeros(0, np.int64))
    values = np.full(int(offsets[-1]), IGNORE, dtype=np.int32)
    values[offsets[windows.word_window] + windows.word_start] = flat_tags
    if label_all_pieces:
        later = continuation[flat_tags] if continuation is not None else flat_tags
        for word in np.flatnonzero(windows.word_end - windows.word_start > 1):
            base = offsets[windows.word_window[word]]
            values[base + windows.word_start[word] + 1: base + windows.word_end[word]] = later[word]
    encoded = Encoded(windows.ids, None, lengths, lengths, reading.max_length)
    return LabelledWindows(encoded, TokenRows(values, offsets), windows.word_window, windows.word_start, flat_tags,
                           windows.sentence_offsets)
