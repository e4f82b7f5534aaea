"""Texts -> token ids, the one way a command tokenizes a dataset (`encode_for`): one row per text, cut to
--max-length as --truncation says, or with --long-text chunk every text's overlapping windows (the cuts and
windows themselves: `bertkit.encoding.longtext`). No padding here: batches pad (`bertkit.encoding.batches`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.dataset import TextDataset
from bertkit.encoding.longtext import LongText, Windows, row_windows, truncate_row


@dataclass
class Encoded:
    """Token ids per row (unpadded), their lengths, and how many rows were truncated."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    lengths: np.ndarray
    full_lengths: np.ndarray
    """Lengths before truncation (for length reports)."""
    max_length: int

    @property
    def n_truncated(self) -> int:
        return int((self.full_lengths > self.max_length).sum())


@contextlib.contextmanager
def quiet_length_warnings() -> Iterator[None]:
    """Silence transformers' "longer than the maximum" warning: bertkit counts and reports cut rows per dataset."""
    quiet = logging.getLogger("transformers.tokenization_utils_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)


def encode_dataset(tokenizer: Any, dataset: TextDataset, max_length: int, chunk: int = 4096, *,
                   truncation: str = LongText.truncation) -> Encoded:
    """Tokenize every row (pairs as true pairs) with truncation to `max_length`; no padding.

    Rows are first tokenized untruncated to count truncation; only over-long rows are cut. `truncation` says
    which tokens an over-long row keeps (`--truncation`): head (the tokenizer's own truncation, as always), tail,
    or head+tail (see `longtext.kept_positions`); special tokens are kept either way.
    """
    want_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    ids: list[list[int]] = []
    types: list[list[int]] | None = [] if want_types else None
    full: list[int] = []
    with quiet_length_warnings():
        for _, part in dataset.chunks(chunk):
            enc = tokenizer(part.texts, part.pairs, truncation=False, return_token_type_ids=want_types)
            long_rows = [i for i, row in enumerate(enc["input_ids"]) if len(row) > max_length]
            full.extend(len(row) for row in enc["input_ids"])
            if long_rows and truncation == "head":
                cut = tokenizer(
                    [part.texts[i] for i in long_rows],
                    None if part.pairs is None else [part.pairs[i] for i in long_rows],
                    truncation=True, max_length=max_length, return_token_type_ids=want_types,
                )
                for j, i in enumerate(long_rows):
                    enc["input_ids"][i] = cut["input_ids"][j]
                    if want_types:
                        enc["token_type_ids"][i] = cut["token_type_ids"][j]
            elif long_rows:
                for i in long_rows:
                    row_types = enc["token_type_ids"][i] if want_types else None
                    enc["input_ids"][i], kept_types = truncate_row(enc["input_ids"][i], row_types, enc.sequence_ids(i),
                                                                   max_length, truncation)
                    if want_types:
                        enc["token_type_ids"][i] = kept_types
            ids.extend(enc["input_ids"])
            if types is not None:
                types.extend(enc["token_type_ids"])
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    return Encoded(ids, types, lengths, np.asarray(full, dtype=np.int64), max_length)


def encode_windows(tokenizer: Any, dataset: Any, max_length: int, stride: int, chunk: int = 1024) -> Windows:
    """Every row of `dataset` as overlapping windows of at most `max_length` tokens (see `row_windows`): no token
    of any text is cut (`Windows.encoded.n_truncated` is 0)."""
    want_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    ids: list[list[int]] = []
    types: list[list[int]] | None = [] if want_types else None
    owner: list[int] = []
    full: list[int] = []
    with quiet_length_warnings():
        for start, part in dataset.chunks(chunk):
            enc = tokenizer(part.texts, part.pairs, truncation=False, return_token_type_ids=want_types)
            for i, row in enumerate(enc["input_ids"]):
                where = f"Row {start + i + 1} of {dataset.source}"
                row_types = enc["token_type_ids"][i] if want_types else None
                for window_ids, window_types in row_windows(row, row_types, enc.sequence_ids(i), max_length,
                                                            stride, where):
                    ids.append(window_ids)
                    if types is not None and window_types is not None:
                        types.append(window_types)
                    owner.append(start + i)
                    full.append(len(window_ids))  # nothing is cut: n_truncated stays 0
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    encoded = Encoded(ids, types, lengths, np.asarray(full, dtype=np.int64), max_length)
    return Windows(encoded, np.asarray(owner, dtype=np.int64), len(dataset))


def encode_for(tokenizer: Any, dataset: Any, max_length: int, long_text: LongText | None = None) -> Windows:
    """The token ids a command runs its model on: one cut row per text (`--long-text cut`, cut by
    `--truncation`), or every text's windows (`--long-text chunk`), as `long_text` says (None: head-cut). Pool
    the model's outputs with `Windows.pool` (a no-op in cut mode)."""
    long_text = long_text or LongText()
    if long_text.chunked:
        return encode_windows(tokenizer, dataset, max_length, long_text.stride_for(max_length))
    encoded = encode_dataset(tokenizer, dataset, max_length, truncation=long_text.truncation)
    return Windows(encoded, np.arange(len(dataset), dtype=np.int64), len(dataset))
