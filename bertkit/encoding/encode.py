"""Texts -> token ids, the one way a command tokenizes a dataset (`encode_for`): one row per text, cut to
--max-length as --truncation says, or with --long-text chunk every text's overlapping windows (the cuts and
windows themselves: `bertkit.encoding.longtext`). No padding here: batches pad (`bertkit.encoding.batches`).

The dataset is read one chunk at a time (`TextDataset.chunks`); each chunk's tokenizer output becomes flat numpy
arrays at once (`bertkit.encoding.rows`), so no Python list per row outlives its chunk and a large corpus's ids
spill to a memory-mapped temporary file in the cache folder."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.dataset import CHUNK_ROWS, TextDataset
from bertkit.encoding.longtext import TRUNCATIONS, Windows, row_windows, truncate_row
from bertkit.encoding.reading import Reading
from bertkit.encoding.rows import FlatColumn, TokenRows, flatten, offsets_of
from bertkit.logs import quieted

TYPE_DTYPE = np.int8
"""Token type ids are 0 or 1: one byte each."""


@dataclass
class Encoded:
    """Token ids per row (unpadded, `TokenRows`: `input_ids[i]` is row i's ids as a numpy array), their lengths,
    and how many rows were truncated. Lists of lists are accepted and stored flat."""

    input_ids: TokenRows
    token_type_ids: TokenRows | None
    lengths: np.ndarray
    full_lengths: np.ndarray
    """Lengths before truncation (for length reports)."""
    max_length: int

    def __post_init__(self) -> None:
        if not isinstance(self.input_ids, TokenRows):
            self.input_ids = TokenRows.from_lists(self.input_ids)
        if self.token_type_ids is not None and not isinstance(self.token_type_ids, TokenRows):
            self.token_type_ids = TokenRows.from_lists(self.token_type_ids, TYPE_DTYPE)

    @property
    def n_truncated(self) -> int:
        return int((self.full_lengths > self.max_length).sum())


@dataclass
class RowsCut:
    """Rows read and rows cut at the max length, added up over the windows of rows a command reads (predict and
    evaluate report it)."""

    rows: int = 0
    cut: int = 0

    def add(self, rows: int, cut: int) -> None:
        self.rows += rows
        self.cut += cut


PARALLELISM_ENV = "TOKENIZERS_PARALLELISM"
_parallelism_set_here = False


@contextlib.contextmanager
def tokenizer_threads() -> Iterator[None]:
    """bertkit's batch tokenizer calls on every core (the fast tokenizer's own threads), unless the user set
    TOKENIZERS_PARALLELISM. Afterwards it is set to false, as before: the tokenizers library then stays quiet when a
    tracker or launcher forks (it warns at a fork after parallel use only while the variable is unset)."""
    global _parallelism_set_here
    if os.environ.get(PARALLELISM_ENV) is not None and not _parallelism_set_here:
        yield
        return
    os.environ[PARALLELISM_ENV] = "true"
    try:
        yield
    finally:
        os.environ[PARALLELISM_ENV] = "false"
        _parallelism_set_here = True


def quiet_length_warnings() -> contextlib.AbstractContextManager:
    """Silence transformers' "longer than the maximum" warning: bertkit counts and reports cut rows per dataset."""
    return quieted("transformers.tokenization_utils_base")


class _Collector:
    """Chunks of tokenized rows -> one `Encoded`: ids and token types as flat columns (spilled to the cache folder
    when large), lengths as int32 arrays; per chunk, the Python lists are converted and dropped."""

    def __init__(self, want_types: bool, expected_rows: int, cache_dir: str | None) -> None:
        self.ids = FlatColumn(np.int32, expected_rows, cache_dir)
        self.types = FlatColumn(TYPE_DTYPE, expected_rows, cache_dir) if want_types else None
        self.lengths: list[np.ndarray] = []
        self.full: list[np.ndarray] = []

    def add(self, ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None, full: Sequence[int],
            rows: int) -> None:
        """One chunk: `ids`/`types` per output row, `full` their untruncated lengths, `rows` the input rows read."""
        values, lengths = flatten(ids, np.int32)
        self.ids.add(values, rows)
        if self.types is not None and types is not None:
            self.types.add(flatten(types, TYPE_DTYPE)[0], rows)
        self.lengths.append(lengths)
        self.full.append(np.asarray(full, dtype=np.int32))

    def encoded(self, max_length: int) -> Encoded:
        lengths = np.concatenate(self.lengths) if self.lengths else np.empty(0, dtype=np.int32)
        full = np.concatenate(self.full) if self.full else np.empty(0, dtype=np.int32)
        offsets = offsets_of(lengths)
        types = None if self.types is None else TokenRows(self.types.finish(), offsets)
        return Encoded(TokenRows(self.ids.finish(), offsets), types, lengths, full, max_length)


def _cut_long_rows(tokenizer: Any, part: TextDataset, enc: Any, max_length: int, truncation: str,
                   want_types: bool) -> None:
    """Cut the rows of `enc` (one chunk's untruncated tokenizer output) longer than `max_length`, in place. From a
    fast tokenizer's backend the ids are cut as they are (`truncate_row`: what its own truncation keeps, pairs
    included); a slow tokenizer is asked again with truncation for the head cut."""
    long_rows = [i for i, row in enumerate(enc["input_ids"]) if len(row) > max_length]
    if long_rows and truncation == "head" and not isinstance(enc, _BackendBatch):
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


class _BackendBatch:
    """The untruncated ids of a chunk straight from the fast tokenizer's Rust `encode_batch` (what transformers'
    own call runs), read without transformers converting every row into a dict of lists first; it answers the
    three things `_cut_long_rows` and `_Collector.add` ask of a BatchEncoding."""

    def __init__(self, backend: Any, texts: Sequence[str], pairs: Sequence[str] | None, want_types: bool) -> None:
        if backend.truncation is not None:  # transformers leaves these as its last call set them
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        inputs = list(texts) if pairs is None else list(zip(texts, pairs, strict=True))
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        self.encodings = encode(inputs, add_special_tokens=True)
        self.rows = {"input_ids": [e.ids for e in self.encodings]}
        if want_types:
            self.rows["token_type_ids"] = [e.type_ids for e in self.encodings]

    def __getitem__(self, name: str) -> list[list[int]]:
        return self.rows[name]

    def sequence_ids(self, i: int) -> list[int | None]:
        return self.encodings[i].sequence_ids


def _tokenized(tokenizer: Any, part: TextDataset, want_types: bool) -> Any:
    """A chunk tokenized without truncation: through the fast tokenizer's backend where it has one (the same ids,
    less Python per row), else the tokenizer's own call."""
    backend = getattr(tokenizer, "_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None and hasattr(backend, "encode_batch"):
        return _BackendBatch(backend, part.texts, part.pairs, want_types)
    return tokenizer(part.texts, part.pairs, truncation=False, return_token_type_ids=want_types)


def encode_dataset(tokenizer: Any, dataset: TextDataset, max_length: int, chunk: int = CHUNK_ROWS, *,
                   truncation: str = TRUNCATIONS[0], cache_dir: str | None = None) -> Encoded:
    """Tokenize every row (pairs as true pairs) with truncation to `max_length`; no padding.

    Rows are first tokenized untruncated to count truncation; only over-long rows are cut. `truncation` says
    which tokens an over-long row keeps (`--truncation`): head (the tokenizer's own truncation, as always), tail,
    or head+tail (see `longtext.kept_positions`); special tokens are kept either way. `cache_dir` (--cache-dir) is
    where a large dataset's ids spill (`bertkit.encoding.rows.SPILL_TOKENS`).
    """
    want_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    out = _Collector(want_types, len(dataset), cache_dir)
    with quiet_length_warnings(), tokenizer_threads():
        for _, part in dataset.chunks(chunk):
            enc = _tokenized(tokenizer, part, want_types)
            full = [len(row) for row in enc["input_ids"]]
            _cut_long_rows(tokenizer, part, enc, max_length, truncation, want_types)
            out.add(enc["input_ids"], enc["token_type_ids"] if want_types else None, full, len(part))
    return out.encoded(max_length)


def encode_windows(tokenizer: Any, dataset: TextDataset, max_length: int, stride: int, chunk: int = 1024, *,
                   cache_dir: str | None = None) -> Windows:
    """Every row of `dataset` as overlapping windows of at most `max_length` tokens (see `row_windows`): no token
    of any text is cut (`Windows.encoded.n_truncated` is 0)."""
    want_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    out = _Collector(want_types, len(dataset), cache_dir)
    owners: list[np.ndarray] = []
    with quiet_length_warnings(), tokenizer_threads():
        for start, part in dataset.chunks(chunk):
            enc = _tokenized(tokenizer, part, want_types)
            ids: list[list[int]] = []
            types: list[list[int]] | None = [] if want_types else None
            owner: list[int] = []
            for i, row in enumerate(enc["input_ids"]):
                where = f"Row {start + i + 1} of {dataset.source}"
                row_types = enc["token_type_ids"][i] if want_types else None
                for window_ids, window_types in row_windows(row, row_types, enc.sequence_ids(i), max_length,
                                                            stride, where):
                    ids.append(window_ids)
                    if types is not None and window_types is not None:
                        types.append(window_types)
                    owner.append(start + i)
            out.add(ids, types, [len(w) for w in ids], len(part))  # nothing is cut: n_truncated stays 0
            owners.append(np.asarray(owner, dtype=np.int64))
    owner_all = np.concatenate(owners) if owners else np.empty(0, dtype=np.int64)
    return Windows(out.encoded(max_length), owner_all, len(dataset))


def encode_for(tokenizer: Any, dataset: Any, reading: Reading, *, cache_dir: str | None = None) -> Windows:
    """The token ids a command runs its model on, read as `reading` says: one row per text cut to its
    `max_length` (by its `truncation`), or every text's windows (`long_text` chunk). Pool the model's outputs with
    `Windows.pool` (a no-op in cut mode). A large dataset's ids live in a memory-mapped temporary file under
    `cache_dir` (--cache-dir; None: `bertkit.data.cachedir.cache_root`'s default)."""
    if reading.chunked:
        return encode_windows(tokenizer, dataset, reading.max_length, reading.window_stride, cache_dir=cache_dir)
    encoded = encode_dataset(tokenizer, dataset, reading.max_length, truncation=reading.truncation,
                             cache_dir=cache_dir)
    return Windows(encoded, np.arange(len(dataset), dtype=np.int64), len(dataset))
