"""Word vectors one hidden state at a time: where a word probe reads its rows from, so that a table of many rows
holds one row's matrix in memory, not every hidden state of every word.

`WordLayers` gives, for a row's `Pooling` (one hidden state, or a sum / mean / concat of several), the row's
(n_words, width) float32 matrix, a new array the caller owns (`matrix`), or the same row for a range of words
(`rows`: what a fit reads block by block when the whole row would not fit in memory), built from the single hidden
states it holds (`row_matrix`: the arithmetic of `features.settings.combine_layers`, so the vectors are those an
in-memory extraction makes, bit for bit):
- `MemoryLayers`: states extracted into memory (`features.words.WordFeatures`), for small runs and tests;
- `LayerFiles`: states written once, chunk by chunk, into unlinked temporary files (one per hidden state, float32,
  words in order) and read back one state at a time; a killed process leaves nothing behind (the files have no
  name); `write_layer_files` streams an encoder's states into them (memory: one chunk of words);
- `StoreLayers` (`features.word_store`): a word store's vectors, read one block of columns at a time.

Float32 on disk, as in memory: the table's scores are then those of the in-memory path (float16 would halve the
disk but round every feature to 11 bits, and the fit reads float32 anyway)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from bertkit.data.cachedir import cache_root
from bertkit.encoding.reading import Reading
from bertkit.features.settings import Pooling, pieces_per_word
from bertkit.features.word_store import WordStore
from bertkit.features.words import (
    CHUNK_SENTENCES,
    WordFeatures,
    check_fits_model,
    encode_word_chunk,
    word_pooling,
)
from bertkit.io import disk

DTYPE = np.dtype(np.float32)
SCRATCH = "scratch"
"""The folder of the cache (`data.cachedir.cache_root`) that holds the unlinked layer files."""


def row_matrix(layer: Callable[[int], np.ndarray], indices: Sequence[int], combine: str) -> np.ndarray:
    """A row's word vectors from the single hidden states `indices` (`layer(i)`: state i's (n_words, d) float32):
    that state itself, or the states summed, averaged (in order, as `features.settings.combine_layers` adds them) or
    concatenated. At most the row and one state are in memory at a time."""
    if len(indices) == 1:
        return layer(indices[0])
    if combine == "concat":
        parts = None
        for k, state in enumerate(indices):
            block = layer(state)
            if parts is None:
                parts = np.empty((block.shape[0], block.shape[1] * len(indices)), dtype=block.dtype)
            parts[:, k * block.shape[1]:(k + 1) * block.shape[1]] = block
        return parts
    total = np.array(layer(indices[0]), dtype=DTYPE, copy=True)
    for state in indices[1:]:
        total += layer(state)
    if combine == "mean":
        total /= len(indices)
    return total


@dataclass
class WordLayers:
    """Single hidden states of a run of words (`states`, of a model of `n_layers` layers), one at a time; the words
    of sentence s are rows `sentence_offsets[s]:sentence_offsets[s + 1]`."""

    n_layers: int
    states: tuple[int, ...]
    sentence_offsets: np.ndarray

    @property
    def n_words(self) -> int:
        return int(self.sentence_offsets[-1])

    def layer(self, state: int) -> np.ndarray:
        raise NotImplementedError

    def missing(self, spec: Pooling) -> list[int]:
        """The hidden states `spec` needs that these layers lack (empty: `matrix` gives it)."""
        return [i for i in spec.resolve(self.n_layers) if i not in self.states]

    def matrix(self, spec: Pooling) -> np.ndarray:
        """The row `spec` (a word pooling) as an (n_words, width) float32 matrix."""
        return row_matrix(self.layer, spec.resolve(self.n_layers), spec.combine)

    reads_states: bool = field(default=True, init=False, repr=False)
    """Whether `state_rows` reads a state's block apart (a store reads its rows whole: `RowReader` asks `rows`)."""

    def state_rows(self, state: int, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Words start:stop of state `state`, (stop - start, d) float32 (into `out` when given)."""
        block = self.layer(state)[start:stop]
        if out is None:
            return block
        np.copyto(out, block)
        return out

    def rows(self, spec: Pooling, start: int, stop: int) -> np.ndarray:
        """Words start:stop of the row `spec`, (stop - start, width) float32: what `matrix` holds there."""
        return row_matrix(lambda state: self.state_rows(state, start, stop), spec.resolve(self.n_layers),
                          spec.combine)

    def row_width(self, spec: Pooling) -> int:
        """The row's vector size."""
        return int(self.rows(spec, 0, min(1, self.n_words)).shape[1])

    def close(self) -> None:
        """Give back what the states hold outside memory (nothing here)."""

    def __enter__(self) -> WordLayers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class MemoryLayers(WordLayers):
    """States held in memory: `features` extracted for single-state poolings (`word_pooling(str(i))`)."""

    features: WordFeatures | None = None

    @classmethod
    def of(cls, features: WordFeatures, n_layers: int) -> MemoryLayers:
        states = tuple(spec.resolve(n_layers)[0] for spec in features.layers)
        return cls(n_layers, states, features.sentence_offsets, features)

    def layer(self, state: int) -> np.ndarray:
        assert self.features is not None
        return self.features.vectors[self.states.index(state)]

    def matrix(self, spec: Pooling) -> np.ndarray:
        """The row `spec`, a copy where it is one state (the caller owns it: a fit may standardise it in place)."""
        out = super().matrix(spec)
        return out.copy() if len(spec.resolve(self.n_layers)) == 1 else out


@dataclass
class LayerFiles(WordLayers):
    """States in unlinked temporary files, one per state ((n_words, width) float32, words in order), each read
    whole when asked for. Close them (`close`, or `with`) to give their disk space back."""

    width: int = 0
    files: dict[int, BinaryIO] = field(default_factory=dict)

    def layer(self, state: int) -> np.ndarray:
        handle = self.files[state]
        out = np.empty((self.n_words, self.width), dtype=DTYPE)
        handle.seek(0)
        view, done = memoryview(out).cast("B"), 0
        while done < out.nbytes:
            got = handle.readinto(view[done:])
            if not got:
                raise OSError(f"a layer file holds {done} of {out.nbytes} bytes")
            done += got
        return out

    def state_rows(self, state: int, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Words start:stop of state `state`, read at their offset in its file (no memory map: the process holds
        the block only), into `out` when given."""
        out = np.empty((stop - start, self.width), dtype=DTYPE) if out is None else out
        read_at(self.files[state].fileno(), out, start * self.width * DTYPE.itemsize)
        return out

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
        self.files = {}


class RowReader:
    """A row's words start:stop (`reader(start, stop)`), block after block, into two buffers made once and reused
    (the row's block, and one state's to build a sum or concat from): a fit that reads a big row at every pass
    allocates nothing per block. The block returned is overwritten by the next call. The values are `matrix`'s,
    bit for bit (the same additions in the same order)."""

    def __init__(self, layers: WordLayers, spec: Pooling) -> None:
        self.layers, self.spec = layers, spec
        self.indices = spec.resolve(layers.n_layers)
        self.buffers: dict[str, np.ndarray] = {}

    def buffer(self, name: str, rows: int, width: int) -> np.ndarray:
        held = self.buffers.get(name)
        if held is None or held.shape[0] < rows:
            held = self.buffers[name] = np.empty((rows, width), dtype=DTYPE)
        return held[:rows]

    def __call__(self, start: int, stop: int) -> np.ndarray:
        layers, indices, n = self.layers, self.indices, stop - start
        if not layers.reads_states:
            return layers.rows(self.spec, start, stop)
        width = int(layers.state_rows(indices[0], 0, 1).shape[1])
        concat = self.spec.combine == "concat" and len(indices) > 1
        out = self.buffer("row", n, width * len(indices) if concat else width)
        if len(indices) == 1:
            return layers.state_rows(indices[0], start, stop, out)
        state = self.buffer("state", n, width)
        if concat:
            for k, i in enumerate(indices):
                out[:, k * width:(k + 1) * width] = layers.state_rows(i, start, stop, state)
            return out
        layers.state_rows(indices[0], start, stop, out)
        for i in indices[1:]:
            out += layers.state_rows(i, start, stop, state)
        if self.spec.combine == "mean":
            out /= len(indices)
        return out


def read_at(fd: int, out: np.ndarray, offset: int) -> None:
    """Fill `out` with the bytes of file `fd` from `offset` (positional reads: the file's position stays)."""
    view, done = memoryview(out).cast("B"), 0
    while done < out.nbytes:
        got = os.preadv(fd, [view[done:]], offset + done)
        if not got:
            raise OSError(f"a layer file holds {done} of the {out.nbytes} bytes asked for at {offset}")
        done += got


def stored_states(stored: Pooling, n_layers: int) -> tuple[int, ...]:
    """The hidden states a word store of pooling `stored` holds apart: each of its layers when it is one layer or
    several concatenated; none when they were summed or averaged into one vector."""
    indices = stored.resolve(n_layers)
    return tuple(indices) if len(indices) == 1 or stored.combine == "concat" else ()


def is_stored_row(stored: Pooling, n_layers: int, spec: Pooling) -> bool:
    """Whether the row `spec` is a store's own vectors (of pooling `stored`) as they are."""
    asked = spec.resolve(n_layers)
    return asked == stored.resolve(n_layers) and (len(asked) == 1 or spec.combine == stored.combine)


def store_gives(stored: Pooling, n_layers: int, spec: Pooling) -> bool:
    """Whether a word store of pooling `stored` can give the row `spec`: its own vectors, or a row of states it
    holds apart."""
    held = stored_states(stored, n_layers)
    return is_stored_row(stored, n_layers, spec) or all(i in held for i in spec.resolve(n_layers))


@dataclass
class StoreLayers(WordLayers):
    """A word store's vectors (`features.word_store.WordStore`; its first `n_words` words): each hidden state it
    holds apart (`stored_states`: a block of columns each), read one block of columns at a time; a store of layers
    summed or averaged gives its own row only (`is_stored_row`)."""

    store: WordStore | None = None
    block: int = 0
    reads_states: bool = field(default=False, init=False, repr=False)
    """The width of one state's columns (0: the vectors are one combination, not split into states)."""

    @classmethod
    def of(cls, store: WordStore, n_sentences: int | None = None) -> StoreLayers:
        """The store's layers, its first `n_sentences` sentences (None: all)."""
        n_layers = int(store.manifest["n_layers"])
        states = stored_states(store.pooling, n_layers)
        offsets = store.sentence_offsets[:n_sentences + 1] if n_sentences is not None else store.sentence_offsets
        width = int(store.vectors.shape[1])
        return cls(n_layers, states, np.asarray(offsets), store, width // len(states) if states else 0)

    def layer(self, state: int) -> np.ndarray:
        assert self.store is not None
        at = self.states.index(state) * self.block
        return self.store.read_columns(at, at + self.block, self.n_words)

    def missing(self, spec: Pooling) -> list[int]:
        assert self.store is not None
        return [] if is_stored_row(self.store.pooling, self.n_layers, spec) else super().missing(spec)

    def matrix(self, spec: Pooling) -> np.ndarray:
        assert self.store is not None
        if is_stored_row(self.store.pooling, self.n_layers, spec):
            return self.store.read_columns(0, int(self.store.vectors.shape[1]), self.n_words)
        return super().matrix(spec)

    def rows(self, spec: Pooling, start: int, stop: int) -> np.ndarray:
        """Words start:stop of the row `spec`: their stored vectors read once, by a positional read of
        vectors.npy (no memory map), and the row's states taken from them."""
        assert self.store is not None
        stored = np.empty((stop - start, int(self.store.vectors.shape[1])), dtype=DTYPE)
        data_start = npy_data_offset(self.store.path / "vectors.npy")
        with (self.store.path / "vectors.npy").open("rb") as handle:
            read_at(handle.fileno(), stored, data_start + start * stored.shape[1] * DTYPE.itemsize)
        if is_stored_row(self.store.pooling, self.n_layers, spec):
            return stored
        return row_matrix(lambda state: stored[:, self.states.index(state) * self.block:][:, :self.block],
                          spec.resolve(self.n_layers), spec.combine)


def npy_data_offset(path: Path) -> int:
    """Where the data of the .npy file `path` starts (after its header)."""
    with path.open("rb") as handle:
        version = np.lib.format.read_magic(handle)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        header(handle)
        return handle.tell()


def scratch_folder(cache_dir: str | None) -> Path:
    """Where layer files are made: the cache's scratch folder (--cache-dir, else $BERTKIT_CACHE_DIR or
    ~/.cache/bertkit), not the system's temp folder, which may be memory (tmpfs)."""
    folder = cache_root(cache_dir) / SCRATCH
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_layer_files(encoder: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], reading: Reading,
                      states: Sequence[int], cache_dir: str | None = None, batch_size: int | None = 32,
                      dtype: Any = None, chunk_sentences: int = CHUNK_SENTENCES) -> LayerFiles:
    """Every hidden state in `states` of every word of `sentences`, extracted once (one forward pass per batch, in
    `dtype`: the run's precision) chunk by chunk into unlinked files in the scratch folder (`scratch_folder`).
    Memory holds one chunk's vectors (`chunk_sentences` sentences, all their states: 1,000 sentences of 16 words
    are about 165 MiB for 7 states of 384); the disk needs n_words x states x width x 4 bytes, checked before the first
    write. The chunks are `features.words.extract_word_features`'s, so the batches and the vectors are too, bit for
    bit."""
    check_fits_model(encoder, reading)
    n_layers = int(encoder.config.num_hidden_layers)
    width = int(encoder.config.hidden_size) * pieces_per_word(str(reading.word_pool))
    lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)])
    folder = scratch_folder(cache_dir)
    need = disk.with_margin(int(offsets[-1]) * len(states) * width * DTYPE.itemsize)
    layers = LayerFiles(n_layers, tuple(states), offsets, width)
    with contextlib.ExitStack() as undo, disk.writing(folder, need):
        undo.callback(layers.close)  # an error on the way gives the disk back
        layers.files = {i: tempfile.TemporaryFile(dir=folder, prefix="bertkit-word-layer-") for i in states}
        singles = [word_pooling(str(i)) for i in states]
        for chunk in (sentences[i:i + chunk_sentences] for i in range(0, len(sentences), chunk_sentences)):
            part = encode_word_chunk(encoder, tokenizer, chunk, reading, singles, batch_size, dtype)
            for state, vectors in zip(states, part.vectors, strict=True):
                layers.files[state].write(memoryview(np.ascontiguousarray(vectors, dtype=DTYPE)).cast("B"))
        for handle in layers.files.values():
            handle.flush()
        undo.pop_all()
    return layers
