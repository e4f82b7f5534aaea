"""Entity spans from predicted word tags: `decode_spans` reads the entities as conlleval counts them
(`bertkit.scoring.entities.read_entities`, seqeval's default mode) — the very entities the headline entity F1
counts, so what `predict` shows is what that F1 scores, and what transformers' token-classification pipeline
(`aggregation_strategy="first"`) groups on the same tags: an I- that continues no entity (after O, or after another
type) opens one, a B- always opens one.

A span's character offsets point into the sentence's text: the `--text` as given (irregular spacing kept), or
the words joined by single spaces; `text[start:end]` is the span's text. Its score is the mean probability of its
words' predicted tags."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.tagscheme import TagScheme

WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Span:
    """One predicted entity: its type, text, character offsets [start, end), first and last word (inclusive,
    0-based) and score (the mean probability of its words' tags)."""

    type: str
    text: str
    start: int
    end: int
    first_word: int
    last_word: int
    score: float

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text, "start": self.start, "end": self.end,
                "first_word": self.first_word, "last_word": self.last_word, "score": round(self.score, 6)}


@dataclass(frozen=True)
class TaggedWords:
    """One sentence's predictions: its words, a tag per word, the probability of each tag, and the entity spans
    (none for plain tags such as POS)."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    probabilities: tuple[float, ...]
    spans: tuple[Span, ...]
    text: str
    """The text the spans' offsets index: --text as given, else the words joined by single spaces."""

    def to_json(self) -> dict[str, Any]:
        """The JSONL object: the same shape for a word probe and a fine-tuned tagger."""
        return {"words": list(self.words), "tags": list(self.tags), "spans": [s.to_json() for s in self.spans]}


def word_offsets(words: Sequence[str], text: str | None = None) -> tuple[str, list[tuple[int, int]]]:
    """(the text, each word's [start, end) in it): `text` split on whitespace must give `words`; without it, the
    words joined by single spaces."""
    if text is None:
        text = " ".join(words)
        offsets, at = [], 0
        for word in words:
            offsets.append((at, at + len(word)))
            at += len(word) + 1
        return text, offsets
    found = [(m.start(), m.end()) for m in WORD.finditer(text)]
    if [text[a:b] for a, b in found] != list(words):
        raise ValueError("the words must be the text split on whitespace")
    return text, found


def decode_spans(tags: Sequence[str], probabilities: Sequence[float], scheme: TagScheme, text: str,
                 offsets: Sequence[tuple[int, int]]) -> list[Span]:
    """The entities of one sentence's tags as conlleval counts them, in word order (none when the scheme marks no
    entities)."""
    if not scheme.has_entities or not tags:
        return []
    from bertkit.scoring.entities import read_entities

    spans = []
    for kind, first, stop in sorted(read_entities([tags], scheme.name)[0], key=lambda e: e[1]):  # stop: exclusive
        last = stop - 1
        start, end = offsets[first][0], offsets[last][1]
        score = float(np.mean(probabilities[first:last + 1]))
        spans.append(Span(kind, text[start:end], start, end, first, last, score))
    return spans


def tagged_words(words: Sequence[str], tags: Sequence[str], probabilities: Sequence[float], scheme: TagScheme,
                 text: str | None = None) -> TaggedWords:
    """A sentence's predictions with its spans, offsets into `text` (or the words joined by single spaces)."""
    text, offsets = word_offsets(words, text)
    spans = decode_spans(tags, probabilities, scheme, text, offsets)
    return TaggedWords(tuple(words), tuple(tags), tuple(float(p) for p in probabilities), tuple(spans), text)
