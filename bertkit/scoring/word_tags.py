"""One tag per word from a token-classification model's per-piece logits (`--aggregate`), for one window of pieces
and its piece -> word map (`word_ids`: the word index of each piece, None for [CLS], [SEP] and padding).

The strategies are those of transformers' TokenClassificationPipeline `aggregation_strategy`, over a word's pieces'
probabilities (softmax of the logits):

- `first`: the first piece's tag and probability;
- `max`: the tag and probability of the piece most sure of its tag (the highest probability of any piece; on a tie
  the earlier piece);
- `average`: the pieces' probability vectors averaged, then the most probable tag and its averaged probability;
- `simple`: the same as `first`. The pipeline's `simple` tags every piece on its own and groups adjacent pieces into
  entities, so one word can come out split between two entities; here the words are given and each gets exactly one
  tag, and the piece a tagger is trained on (run_ner labels a word's first piece and masks the rest with -100) is
  the first, so that is the one read.

The pipeline tells pieces of a word apart by their `##` prefix; here the tokenizer's word_ids say it, so a word the
tokenizer maps to [UNK] is still one word. This reads one window only: a word whose pieces span two windows is
aggregated over the pieces in this one; joining windows is the caller's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.errors import UserError

AGGREGATIONS = ("simple", "first", "max", "average")
"""--aggregate: how a word's pieces give its tag (see the module docstring)."""


@dataclass(frozen=True, eq=False)
class WordTags:
    """The tag of each word a window's pieces cover, in word order: the word's index in its sentence, the tag's id,
    its probability (the `score`), and the probability vector the tag is the argmax of (n_words x n_tags)."""

    words: tuple[int, ...]
    tag_ids: tuple[int, ...]
    scores: tuple[float, ...]
    probabilities: np.ndarray
    aggregate: str

    def tags(self, id2label: Mapping[int, str]) -> list[str]:
        """The tags by name (a model config's id2label)."""
        return [id2label[i] for i in self.tag_ids]

    def to_json(self) -> dict[str, Any]:
        return {"aggregate": self.aggregate, "words": list(self.words), "tag_ids": list(self.tag_ids),
                "scores": [round(s, 6) for s in self.scores],
                "probabilities": np.round(self.probabilities, 6).tolist()}


def piece_probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float64 (logits may come as float16 or bfloat16-cast float32)."""
    shifted = np.asarray(logits, dtype=np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def word_pieces(word_ids: Sequence[int | None]) -> dict[int, list[int]]:
    """Word index -> positions of its pieces, words in order of their first piece (special tokens left out)."""
    pieces: dict[int, list[int]] = {}
    for position, word in enumerate(word_ids):
        if word is not None:
            pieces.setdefault(int(word), []).append(position)
    return pieces


def aggregate_problems(aggregate: str) -> list[str]:
    """--aggregate must be one of AGGREGATIONS."""
    if aggregate in AGGREGATIONS:
        return []
    return [f"--aggregate {aggregate!r} is not a way bertkit reads a word's tag from its pieces: the ways are "
            f"{', '.join(AGGREGATIONS)}. Pass --aggregate first (the piece taggers are trained on)."]


def word_distribution(probabilities: np.ndarray, aggregate: str) -> np.ndarray:
    """The probability vector one word's tag is read from, given its pieces' probabilities (pieces x tags)."""
    if aggregate in ("first", "simple"):
        return probabilities[0]
    if aggregate == "max":
        return probabilities[int(np.argmax(probabilities.max(axis=1)))]
    return probabilities.mean(axis=0)


def word_tags(logits: np.ndarray, word_ids: Sequence[int | None], aggregate: str = "first") -> WordTags:
    """Each word's tag from one window's piece logits (n_pieces x n_tags) and its `word_ids` (one per piece)."""
    if aggregate_problems(aggregate):
        raise UserError(aggregate_problems(aggregate)[0])
    logits = np.asarray(logits)
    if logits.ndim != 2 or len(logits) != len(word_ids):
        raise ValueError(f"logits must be (pieces, tags) with one row per word_ids entry: got {logits.shape} for "
                         f"{len(word_ids)} word ids")
    probabilities = piece_probabilities(logits)
    pieces = word_pieces(word_ids)
    distributions = np.stack([word_distribution(probabilities[at], aggregate) for at in pieces.values()]) \
        if pieces else np.zeros((0, logits.shape[1]))
    tag_ids = distributions.argmax(axis=1) if len(distributions) else np.zeros(0, dtype=np.int64)
    scores = distributions[np.arange(len(tag_ids)), tag_ids]
    return WordTags(tuple(pieces), tuple(int(t) for t in tag_ids), tuple(float(s) for s in scores), distributions,
                    aggregate)


def windowed_word_distributions(logits: np.ndarray, word_window: np.ndarray, word_start: np.ndarray,
                                word_end: np.ndarray, aggregate: str) -> np.ndarray:
    """Each word's tag probabilities (words x tags) by `aggregate`, from the piece logits of every window (windows x
    positions x tags) and where each word's pieces are (its window, pieces word_start:word_end there: the window
    where it has the most context)."""
    if not len(word_window):
        return np.zeros((0, logits.shape[-1]))
    if aggregate in ("first", "simple"):  # one piece a word: no per-word loop
        return piece_probabilities(logits[word_window, word_start])
    return np.stack([word_distribution(piece_probabilities(logits[w, a:b]), aggregate)
                     for w, a, b in zip(word_window.tolist(), word_start.tolist(), word_end.tolist(), strict=True)])
