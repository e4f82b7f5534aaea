"""Texts longer than the model's window: which tokens a cut keeps (`--truncation`), and overlapping windows over
a whole text with their outputs pooled back to one row per text (`--long-text chunk --stride N`). The settings that
choose between them are `bertkit.encoding.reading.Reading`'s; the functions here take their plain values.

Everything here works on the token ids of one tokenized row and the tokenizer's `sequence_ids` (None for a
special token, 0 for the first text, 1 for the second): the special tokens ([CLS], [SEP], RoBERTa's <s></s>, ...)
stay where the tokenizer put them and only the texts' own tokens are cut or windowed, so it works for any fast
tokenizer without knowing its special-token layout.

Pooling across a text's windows:
- features (embed): the **mean** of the windows' vectors. A document's representation should weigh all of its
  parts; the mean of window features is what sentence-embedding and long-document baselines use, and it keeps
  the features in the space a probe trained on single windows expects.
- logits (predict/evaluate): the **max** over windows, per class. The evidence for a label is usually local (one
  paragraph decides a review or a topic); averaging logits lets many neutral windows drown one decisive window,
  the max keeps it. Probabilities are the softmax of the pooled logits. A regression model's output is a number,
  not evidence for a class: its windows' predictions are **averaged** (the max would bias every long text upward).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.errors import UserError

TRUNCATIONS = ("head", "tail", "head+tail")
"""--truncation's values; the first is the default."""
LONG_TEXT_MODES = ("cut", "chunk")
"""--long-text's values; the first is the default."""
HEAD_SHARE = 128 / 510
"""head+tail keeps this share of the budget from the start: Sun et al. 2019 ("How to Fine-Tune BERT for Text
Classification?") found head 128 + tail 382 of 510 tokens best on IMDb."""


# ---------------------------------------------------------------- which tokens a cut keeps


def kept_positions(n: int, keep: int, truncation: str) -> list[int]:
    """Positions (in order) of the `keep` tokens of an `n`-token text that `truncation` keeps.

    head: the first `keep`; tail: the last `keep`; head+tail: the first k = round(keep x 128/510) and the
    last keep - k (Sun et al. 2019). All `n` when `keep >= n`.
    """
    if keep >= n:
        return list(range(n))
    keep = max(keep, 0)
    if truncation == "head":
        return list(range(keep))
    if truncation == "tail":
        return list(range(n - keep, n))
    if truncation == "head+tail":
        head = int(round(keep * HEAD_SHARE))
        return list(range(head)) + list(range(n - (keep - head), n))
    raise ValueError(f"unknown truncation {truncation!r}; one of {', '.join(TRUNCATIONS)}")


def pair_budgets(first: int, second: int, budget: int) -> tuple[int, int]:
    """Tokens each text of a pair keeps when together they may have `budget`: what the tokenizers' `longest_first`
    keeps (tokens come off the longer text), so head truncation of a pair keeps exactly what the tokenizer's own
    truncation keeps (tests/test_longtext.py checks this against the tokenizer)."""
    if first + second <= budget:
        return first, second
    shorter = min(first, second)
    if shorter <= budget - shorter:  # the shorter text fits whole next to the rest of the longer one
        return (first, budget - first) if first < second else (budget - second, second)
    half = budget // 2  # both cut to half; the odd token stays with the longer text (the second on a tie)
    return (budget - half, half) if first > second else (half, budget - half)


def _segments(sequence_ids: Sequence[int | None]) -> dict[int, list[int]]:
    """Positions of each text's tokens (0: first text, 1: second) in a tokenized row."""
    found: dict[int, list[int]] = {}
    for position, segment in enumerate(sequence_ids):
        if segment is not None:
            found.setdefault(segment, []).append(position)
    return found


def _take(row: Sequence[int] | None, positions: Sequence[int]) -> list[int] | None:
    return None if row is None else [row[p] for p in positions]


def truncate_row(ids: Sequence[int], types: Sequence[int] | None, sequence_ids: Sequence[int | None],
                 max_length: int, truncation: str) -> tuple[list[int], list[int] | None]:
    """One tokenized row (with its special tokens) cut to `max_length` tokens by `truncation`: special tokens
    stay, each text keeps `kept_positions` of its tokens (a pair shares the budget as `pair_budgets` says)."""
    span = _one_text_span(sequence_ids)
    if span is not None:  # one text between its special tokens: slices, no per-token Python
        return _cut_one_text(ids, types, span, max_length, truncation)
    segments = _segments(sequence_ids)
    specials = len(ids) - sum(len(p) for p in segments.values())
    budget = max_length - specials
    lengths = [len(segments.get(s, [])) for s in (0, 1)]
    keeps = pair_budgets(lengths[0], lengths[1], budget) if 1 in segments else (budget, 0)
    dropped: set[int] = set()
    for segment, keep in zip((0, 1), keeps, strict=True):
        positions = segments.get(segment, [])
        kept = set(kept_positions(len(positions), keep, truncation))
        dropped.update(p for i, p in enumerate(positions) if i not in kept)
    positions = [p for p in range(len(ids)) if p not in dropped]
    return [ids[p] for p in positions], _take(types, positions)


def _one_text_span(sequence_ids: Sequence[int | None]) -> tuple[int, int] | None:
    """[start, end) of the text's tokens when the row is one text with special tokens only before and after it
    (BERT's [CLS] ... [SEP]); None for a pair, an empty text or special tokens inside the text."""
    ids = list(sequence_ids)
    if 1 in ids or 0 not in ids:
        return None
    start, end = ids.index(0), len(ids) - ids[::-1].index(0)
    return (start, end) if ids.count(None) == start + len(ids) - end else None


def _cut_one_text(ids: Sequence[int], types: Sequence[int] | None, span: tuple[int, int], max_length: int,
                  truncation: str) -> tuple[list[int], list[int] | None]:
    """`truncate_row` for a row `_one_text_span` found: the text keeps `kept_positions` of its tokens."""
    start, end = span
    n, keep = end - start, max(max_length - (len(ids) - (end - start)), 0)
    if keep >= n:
        pieces = [(0, len(ids))]
    elif truncation == "head":
        pieces = [(0, start + keep), (end, len(ids))]
    elif truncation == "tail":
        pieces = [(0, start), (end - keep, len(ids))]
    elif truncation == "head+tail":
        head = int(round(keep * HEAD_SHARE))
        pieces = [(0, start + head), (end - (keep - head), len(ids))]
    else:
        raise ValueError(f"unknown truncation {truncation!r}; one of {', '.join(TRUNCATIONS)}")

    def cut(row: Sequence[int]) -> list[int]:
        kept: list[int] = []
        for a, b in pieces:
            kept.extend(row[a:b])
        return kept

    return cut(ids), None if types is None else cut(types)


# ---------------------------------------------------------------- windows over a whole text


def window_spans(n: int, size: int, stride: int) -> list[tuple[int, int]]:
    """[start, end) spans of windows of `size` tokens over `n` tokens, neighbours sharing `stride` tokens (the
    meaning transformers gives `stride`), the last one ending at `n`; every token is in at least one window."""
    if size <= stride:
        raise ValueError(f"window {size} must be larger than the stride {stride}")
    if n <= size:
        return [(0, n)]
    spans, start = [], 0
    while start + size < n:
        spans.append((start, start + size))
        start += size - stride
    spans.append((n - size, n))  # the last window ends at the text's end, full size (more context, more overlap)
    return spans


def row_windows(ids: Sequence[int], types: Sequence[int] | None, sequence_ids: Sequence[int | None],
                max_length: int, stride: int, where: str) -> list[tuple[list[int], list[int] | None]]:
    """The windows of one tokenized row: at most `max_length` tokens each, the special tokens and a pair's second
    text in every window, the first text's tokens split into `window_spans`. A row that fits is one window, the
    row itself."""
    if len(ids) <= max_length:
        return [(list(ids), None if types is None else list(types))]
    segments = _segments(sequence_ids)
    first, second = segments.get(0, []), segments.get(1, [])
    size = max_length - (len(ids) - len(first))  # what is left for the first text next to everything else
    if size <= stride:
        raise UserError(
            f"{where}: a window of --max-length {max_length} tokens leaves {max(size, 0)} tokens for the text next to "
            f"the special tokens{' and the second text of the pair' if second else ''}, not more than --stride "
            f"{stride}, so windows could not move forward. Pass a smaller --stride or a larger --max-length."
        )
    before, after = first[0], first[-1] + 1
    windows = []
    for start, end in window_spans(len(first), size, stride):
        positions = [*range(before), *first[start:end], *range(after, len(ids))]
        windows.append(([ids[p] for p in positions], _take(types, positions)))
    return windows


@dataclass
class Windows:
    """Token ids of every window (`encoded`, an `encoding.encode.Encoded` with one entry per window) and the row
    each window belongs to (`owner`, ascending), for `n_rows` rows. In cut mode each row is one window."""

    encoded: Any
    owner: np.ndarray
    n_rows: int

    def pool(self, values: np.ndarray, how: str) -> np.ndarray:
        """One output per row from one per window (rows of `values` in window order): mean or max."""
        return pool_windows(values, self.owner, self.n_rows, how)

    @property
    def counts(self) -> np.ndarray:
        """Windows per row."""
        return np.bincount(self.owner, minlength=self.n_rows)


def pool_windows(values: np.ndarray, owner: np.ndarray, n_rows: int, how: str) -> np.ndarray:
    """Per-row mean or max of per-window `values` (any trailing shape); `owner[i]` is window i's row."""
    values = np.asarray(values)
    if len(owner) == n_rows:  # one window per row (owner ascending: 0..n-1): nothing to pool
        return values
    if how == "mean":
        summed = np.zeros((n_rows, *values.shape[1:]), dtype=np.float64)
        np.add.at(summed, owner, values)
        counts = np.bincount(owner, minlength=n_rows).reshape(-1, *([1] * (values.ndim - 1)))
        return (summed / counts).astype(values.dtype)
    if how == "max":
        pooled = np.full((n_rows, *values.shape[1:]), -np.inf, dtype=values.dtype)
        np.maximum.at(pooled, owner, values)
        return pooled
    raise ValueError(f"unknown pooling {how!r}: mean or max")


def default_stride(max_length: int) -> int:
    """--stride when not given: a quarter of the window, so each window's edges are seen in a neighbour's middle."""
    return max(max_length // 4, 0)
