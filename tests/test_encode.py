"""encoding/encode.py + rows.py: flat token storage equals the list-based tokenization it replaces (rows, pairs,
token types, every truncation, long-text windows), spills to a memory-mapped file past the threshold, and pads
batches exactly as the per-row loop did."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertkit.data.dataset import TextDataset
from bertkit.encoding import encode, rows
from bertkit.encoding.batches import pad_batch
from bertkit.encoding.encode import Encoded, encode_dataset, encode_for, encode_windows
from bertkit.encoding.longtext import row_windows, truncate_row
from bertkit.encoding.reading import Reading
from bertkit.encoding.rows import FlatColumn, TokenRows

WORDS = "the a film movie good bad awful great plot actor scene long boring lovely , . ! really not".split()


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from bertkit.models.loading import load_tokenizer

    return load_tokenizer(str(tiny_bert_dir))


def texts(n: int, seed: int, longest: int = 120) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, longest))) for _ in range(n)]


def reference_rows(tokenizer, ds: TextDataset, max_length: int, truncation: str):
    """The list-based tokenization bertkit did before flat storage (one tokenizer call, rows cut one by one)."""
    enc = tokenizer(list(ds.texts), None if ds.pairs is None else list(ds.pairs), truncation=False,
                    return_token_type_ids=True)
    ids, types, full = [], [], []
    for i, row in enumerate(enc["input_ids"]):
        full.append(len(row))
        if len(row) <= max_length:
            ids.append(list(row))
            types.append(list(enc["token_type_ids"][i]))
        elif truncation == "head":
            cut = tokenizer([ds.texts[i]], None if ds.pairs is None else [ds.pairs[i]], truncation=True,
                            max_length=max_length, return_token_type_ids=True)  # a batch call, as bertkit's
            ids.append(cut["input_ids"][0])
            types.append(cut["token_type_ids"][0])
        else:
            kept, kept_types = truncate_row(row, enc["token_type_ids"][i], enc.sequence_ids(i), max_length, truncation)
            ids.append(kept)
            types.append(kept_types)
    return ids, types, full


@pytest.mark.parametrize("truncation", ["head", "tail", "head+tail"])
@pytest.mark.parametrize("paired", [False, True])
def test_flat_rows_equal_the_list_reference(tokenizer, truncation, paired):
    first = texts(57, seed=1)
    ds = TextDataset(first, pairs=texts(57, seed=2, longest=30) if paired else None)
    enc = encode_dataset(tokenizer, ds, 40, chunk=16, truncation=truncation)  # several chunks, a partial last one
    ids, types, full = reference_rows(tokenizer, ds, 40, truncation)
    assert enc.input_ids.tolist() == ids and enc.token_type_ids.tolist() == types
    assert [row.tolist() for row in enc.input_ids] == ids and enc.input_ids[-1].tolist() == ids[-1]
    assert enc.lengths.tolist() == [len(r) for r in ids] and enc.full_lengths.tolist() == full
    assert enc.n_truncated == sum(n > 40 for n in full) > 0
    assert enc.input_ids.values.dtype == np.int32 and enc.token_type_ids.values.dtype == np.int8


def test_windows_equal_the_list_reference(tokenizer):
    ds = TextDataset(texts(23, seed=3, longest=200), pairs=texts(23, seed=4, longest=5))
    windows = encode_windows(tokenizer, ds, 48, 8, chunk=5)
    enc = tokenizer(list(ds.texts), list(ds.pairs), truncation=False, return_token_type_ids=True)
    ids, types, owner = [], [], []
    for i, row in enumerate(enc["input_ids"]):
        for w_ids, w_types in row_windows(row, enc["token_type_ids"][i], enc.sequence_ids(i), 48, 8, "x"):
            ids.append(w_ids)
            types.append(w_types)
            owner.append(i)
    assert windows.encoded.input_ids.tolist() == ids and windows.encoded.token_type_ids.tolist() == types
    assert windows.owner.tolist() == owner and windows.n_rows == 23 and len(ids) > 23
    assert windows.encoded.lengths.tolist() == windows.encoded.full_lengths.tolist() == [len(r) for r in ids]
    assert windows.encoded.n_truncated == 0


def test_large_ids_spill_to_a_memory_mapped_file_with_the_same_rows(tokenizer, monkeypatch, tmp_path):
    ds = TextDataset(texts(40, seed=5), pairs=texts(40, seed=6, longest=10))
    in_memory = encode_dataset(tokenizer, ds, 32, chunk=8)
    monkeypatch.setattr(rows, "SPILL_TOKENS", 100)  # a few chunks in memory, then the file
    spilled = encode_for(tokenizer, ds, Reading(32), cache_dir=str(tmp_path)).encoded
    assert isinstance(spilled.input_ids.values, np.memmap) and isinstance(spilled.token_type_ids.values, np.memmap)
    assert not isinstance(in_memory.input_ids.values, np.memmap)
    assert spilled.input_ids.tolist() == in_memory.input_ids.tolist()
    assert spilled.token_type_ids.tolist() == in_memory.token_type_ids.tolist()
    assert (tmp_path / rows.SPILL_FOLDER).is_dir() and not list((tmp_path / rows.SPILL_FOLDER).iterdir())  # unlinked
    batch, again = (pad_batch(e, [3, 0, 7], 0) for e in (spilled, in_memory))
    assert all(np.array_equal(batch[k], again[k]) for k in again)
    windows = encode_for(tokenizer, ds, Reading(32, "chunk"), cache_dir=str(tmp_path))
    assert isinstance(windows.encoded.input_ids.values, np.memmap) and len(windows.owner) > len(ds)


def test_a_spill_the_disk_cannot_hold_is_refused_up_front(monkeypatch, tmp_path):
    from bertkit.errors import UserError
    from bertkit.io import disk

    monkeypatch.setattr(rows, "SPILL_TOKENS", 10)
    monkeypatch.setattr(disk, "free_bytes", lambda path: 1000)
    column = FlatColumn(np.int32, expected_rows=1000, cache_dir=str(tmp_path))
    with pytest.raises(UserError, match="disk full"):
        column.add(np.arange(20), rows=2)


def test_pad_batch_equals_the_per_row_loop(tokenizer):
    ds = TextDataset(texts(30, seed=7), pairs=texts(30, seed=8, longest=8))
    enc = encode_dataset(tokenizer, ds, 24)
    ids, types = enc.input_ids.tolist(), enc.token_type_ids.tolist()
    for pick, pad_to, multiple in (([4, 1, 9], None, None), ([2], 24, None), ([0, 29, 5, 5], None, 8)):
        batch = pad_batch(enc, pick, 7, pad_to, multiple)
        width = pad_to or max(len(ids[i]) for i in pick)
        width = -(-width // multiple) * multiple if multiple and not pad_to else width
        want_ids = np.full((len(pick), width), 7)
        want_mask, want_types = np.zeros((len(pick), width)), np.zeros((len(pick), width))
        for j, i in enumerate(pick):
            want_ids[j, : len(ids[i])], want_types[j, : len(ids[i])], want_mask[j, : len(ids[i])] = ids[i], types[i], 1
        assert batch["input_ids"].dtype == batch["attention_mask"].dtype == batch["token_type_ids"].dtype
        assert str(batch["input_ids"].dtype) == "torch.int64"
        assert np.array_equal(batch["input_ids"], want_ids) and np.array_equal(batch["attention_mask"], want_mask)
        assert np.array_equal(batch["token_type_ids"], want_types)


def test_encoded_accepts_lists_and_token_rows_index_like_a_list():
    enc = Encoded([[1, 2, 3], [], [4]], [[0, 0, 1], [], [0]], np.array([3, 0, 1]), np.array([3, 0, 1]), 8)
    assert isinstance(enc.input_ids, TokenRows) and enc.token_type_ids.values.dtype == encode.TYPE_DTYPE
    assert len(enc.input_ids) == 3 and enc.input_ids[-1].tolist() == [4] and enc.input_ids[1].tolist() == []
    assert [r.tolist() for r in enc.input_ids[0:2]] == [[1, 2, 3], []] and enc.input_ids.lengths.tolist() == [3, 0, 1]
    with pytest.raises(IndexError):
        enc.input_ids[3]
    assert pad_batch(enc, [1, 2], 0)["input_ids"].tolist() == [[0], [4]]
