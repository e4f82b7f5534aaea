"""Word-level embedding stores on disk (`bertkit embed` on tagged data): one vector per word, the sentence
boundaries, the words and their tags, and a manifest. Written in chunks of sentences, resumable, verified on read.

Layout of a complete store (a directory)::

    manifest.json          format (`bertkit-word-store/3`), the encoder (model, revision), the `Reading` (word
                           pool, max length, windows, stride), the `Pooling` (pool word, layers, combine), the tag
                           scheme and columns, counts, the size and sha256 of the three files below (`digests`,
                           taken as they are written), the family (`words`) and the sha256 of the manifest itself
                           (`record_sha256`: an edited one is refused); written last, so its presence means
                           "complete". `word_store_manifest` writes it, `read_manifest` reads it (older layouts
                           through `migrated_word_store_manifest`, the one place that knows them)
    vectors.npy            float32 (n_words, width): word i of the corpus, in file order; `np.load(mmap_mode="r")`
    sentence_offsets.npy   int64 (n_sentences + 1): sentence s's words are rows offsets[s]:offsets[s + 1]
    sentences.jsonl        one line per sentence: {"words": [...], "tags": [...]} (tags as scored: IOB1 as IOB2)

While a run is in progress the directory holds ``identity.json`` (what the store is being made from) and, per
chunk k of `chunk_sentences` sentences, ``shards/chunk-NNNNN.jsonl`` (its sentences), ``.json`` (its word counts)
and ``.npy`` (its vectors), each written atomically, the array last: its presence commits the chunk, so a killed
run leaves whole chunks only and a re-run skips them. `finalize` streams the chunks into the three files (plain
writes in blocks, hashed as they are copied: memory flat in the corpus), writes the manifest and removes the
chunks; the files are byte-identical whether or not the run was interrupted. The counted fault point is the
sentence store's ("embed.shard"), and its named kill points too.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tagged import TaggedColumns, TaggedSentence
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling
from bertkit.features.store import (
    SHARDS,
    ShardedWriter,
    copy_npy_data,
    remove_work_files,
)
from bertkit.features.store_manifests import (
    IDENTITY,
    MANIFEST,
    READABLE_FORMATS,
    read_manifest,
    verify_recorded_files,
    word_store_manifest,
)
from bertkit.features.words import word_pooling, word_pooling_from_json
from bertkit.io import digests, disk, faults
from bertkit.io.atomic import atomic_path, write_bytes_atomic, write_json_atomic

log = logging.getLogger(__name__)

VECTORS = "vectors.npy"
OFFSETS = "sentence_offsets.npy"
SENTENCES = "sentences.jsonl"
FILES = (VECTORS, OFFSETS, SENTENCES)
SPLITS = ("train", "dev", "test")
"""The folders of a store with splits (`bertkit embed --dev/--test`)."""
ALL_BEFORE = "every encoder layer (--layers all before bertkit-word-store/2)"
"""How an identity of format /1 with --layers all reads: its `all` did not hold the embeddings."""
DTYPE = np.dtype(np.float32)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class WordStore:
    """A complete word store opened for reading: `vectors` memory-mapped (n_words, width), `sentence_offsets`
    (n_sentences + 1), the words and tags per sentence, and the settings it was made with."""

    path: Path
    vectors: np.ndarray
    sentence_offsets: np.ndarray
    words: tuple[tuple[str, ...], ...]
    tags: tuple[tuple[str, ...], ...]
    model: str
    revision: str | None
    reading: Reading
    pooling: Pooling
    columns: TaggedColumns
    scheme: str
    """The tag scheme the tags are scored in (IOB2 for IOB1 files; none for plain tags)."""
    manifest: dict[str, Any] = field(default_factory=dict)
    """The whole record (its encoder's depth `n_layers`, the `precision` the words were read in, ...)."""

    @property
    def n_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    def read_columns(self, start: int, stop: int, n_words: int | None = None,
                     block_bytes: int = 16 << 20) -> np.ndarray:
        """Columns `start:stop` of the first `n_words` vectors (None: all), as a float32 array in memory, read from
        vectors.npy in blocks of rows by plain reads, not through the memory map: the process holds the result and
        one block of about `block_bytes`, never the pages of the whole file."""
        n, width = self.n_words if n_words is None else n_words, int(self.vectors.shape[1])
        out = np.empty((n, stop - start), dtype=DTYPE)
        block = np.empty((max(1, min(n, block_bytes // (width * DTYPE.itemsize))), width), dtype=DTYPE)
        with (self.path / VECTORS).open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            header(handle)  # the data starts where the header ends
            for first in range(0, n, len(block)):
                rows = block[:min(len(block), n - first)]
                if handle.readinto(memoryview(rows).cast("B")) != rows.nbytes:
                    raise UserError(f"Word store {self.path} is damaged: {VECTORS} ends early. Re-run `bertkit "
                                    f"embed` with --overwrite.")
                out[first:first + len(rows)] = rows[:, start:stop]
        return out

    @property
    def n_words(self) -> int:
        return int(self.sentence_offsets[-1])

    def sentence_vectors(self, s: int) -> np.ndarray:
        """The word vectors of sentence `s` (a view into the mapped file)."""
        return self.vectors[self.sentence_offsets[s]:self.sentence_offsets[s + 1]]


def is_word_store(path: str | Path) -> bool:
    """Whether `path` holds a finished word store (its manifest says so)."""
    manifest = Path(path).expanduser() / MANIFEST
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("format") in READABLE_FORMATS
    except (OSError, ValueError, AttributeError):
        return False


def open_word_store(path: str | Path, verify: bool = True) -> WordStore:
    """A complete word store; `verify`: every file against the manifest's digests first (off only for a store
    this process just wrote and hashed). A damaged store is a UserError naming the file."""
    root = Path(path).expanduser()
    manifest = read_manifest(root)
    if verify:
        verify_word_store(root, manifest)
    try:
        vectors = np.load(root / VECTORS, mmap_mode="r")
        offsets = np.load(root / OFFSETS)
        words, tags = read_sentences(root / SENTENCES)
    except (ValueError, OSError, EOFError, KeyError, TypeError) as exc:
        raise UserError(f"Word store {root} is damaged: its files cannot be read ({exc}). Re-run the `bertkit embed` "
                        f"command that made it, with --overwrite.") from None
    counts = manifest["counts"]
    expected = (vectors.shape, len(offsets) - 1, len(words), int(offsets[-1]) if len(offsets) else -1)
    if expected != ((counts["words"], manifest["width"]), counts["sentences"], counts["sentences"], counts["words"]):
        raise UserError(f"Word store {root} is damaged: {VECTORS} {vectors.shape}, {len(offsets) - 1} sentence offsets "
                        f"and {len(words)} sentences do not match the manifest's {counts}. Re-run `bertkit embed` "
                        f"with --overwrite.")
    reading, pooling = recorded_settings(manifest)
    return WordStore(root, vectors, offsets, words, tags, manifest["model"], manifest.get("revision"), reading,
                     pooling, TaggedColumns.from_json(manifest["columns"]), manifest["scheme"], manifest)


def word_store_splits(path: str | Path) -> dict[str, Path]:
    """{split: folder} of the word store(s) in `path`: `path` itself (one store: train), or its train/dev/test
    folders (`bertkit embed --dev/--test`); empty when it holds no word store (a manifest of another format, an
    unfinished store)."""
    root = Path(path).expanduser()
    if (root / MANIFEST).is_file():
        return {"train": root} if is_word_store(root) else {}
    return {name: root / name for name in SPLITS if is_word_store(root / name)}


def recorded_settings(manifest: dict[str, Any]) -> tuple[Reading, Pooling]:
    """The `Reading` and `Pooling` a word store's manifest (as `read_manifest` returns it) records."""
    reading = Reading.from_json(manifest.get("reading"))
    if reading is None:
        raise UserError(f"The word store manifest records no reading ({manifest.get('reading')!r}). Rebuild the store "
                        f"with `bertkit embed --overwrite`.")
    return reading, word_pooling_from_json(manifest.get("pooling") or {})


def read_sentences(path: Path) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """The words and tags of every sentence in a store's sentences.jsonl."""
    words, tags = [], []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            words.append(tuple(row["words"]))
            tags.append(tuple(row["tags"]))
    return tuple(words), tuple(tags)


def verified_manifest(root: Path) -> dict[str, Any]:
    """A complete store's manifest, its files checked against it (nothing else is read into memory)."""
    manifest = read_manifest(root)
    verify_word_store(root, manifest)
    return manifest


def verify_word_store(root: Path, manifest: dict[str, Any]) -> None:
    """Each file against the size and sha256 recorded as it was written; a manifest without them is damaged."""
    verify_recorded_files(root, manifest, "Word store", "it is not what it recorded", FILES)


# ---------------------------------------------------------------- writing


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` lines for the settings two identities do not share (an older identity read as written now,
    `current_identity`)."""
    old = current_identity(old)
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def current_identity(identity: dict[str, Any]) -> dict[str, Any]:
    """An identity as this bertkit writes it: one written before the word settings were `Reading` and `Pooling`
    (word_pool, max_length, stride, layers, combine) gets their records' keys, so a store made with the same settings
    still resumes and counts as done. Its layers `all` meant every encoder layer (the embeddings not included, where
    `all` is every hidden state now): named so, it differs from any layers asked for now."""
    if "pool" in identity or "word_pool" not in identity:
        return identity
    reading = Reading.from_json(identity)
    upgraded = {**identity, **reading.to_json()} if reading is not None else dict(identity)
    if str(identity.get("layers", "")).strip().lower() == "all":
        return {**upgraded, **word_pooling("-1", str(identity.get("combine"))).to_json(), "layers": ALL_BEFORE}
    try:
        return {**upgraded, **word_pooling_from_json(identity).to_json()}
    except UserError:  # a pooling this bertkit cannot read is listed as it differs
        return upgraded


def stored_identity(path: Path) -> dict[str, Any] | None:
    """The identity a complete or unfinished word store in `path` was made with; None when there is none."""
    if (path / MANIFEST).is_file():
        return dict(read_manifest(path).get("identity", {}))
    if not (path / IDENTITY).is_file():
        return None
    try:
        return dict(json.loads((path / IDENTITY).read_text(encoding="utf-8")))
    except (ValueError, TypeError, UnicodeDecodeError):
        return {"unreadable": True}


def sentences_jsonl(sentences: Sequence[TaggedSentence]) -> bytes:
    """A chunk's lines of sentences.jsonl (compact, non-ASCII kept)."""
    return b"".join(json.dumps({"words": list(s.words), "tags": list(s.tags)}, ensure_ascii=False,
                               separators=(",", ":")).encode("utf-8") + b"\n" for s in sentences)


class WordStoreWriter(ShardedWriter):
    """Writes one word store: `prepare` (identity check, resume), `write_chunk` per chunk, `finalize` at the end."""

    what = "a word store"
    unfinished = "an unfinished word store"

    def __init__(self, path: str | Path, identity: dict[str, Any], n_sentences: int, chunk_sentences: int,
                 width: int):
        super().__init__(path, identity, n_sentences, chunk_sentences)
        self.n_sentences = n_sentences
        self.width = width

    def finished_identity(self) -> dict[str, Any]:
        return read_manifest(self.path).get("identity", {})

    def differences(self, old: dict[str, Any]) -> list[str]:
        return identity_differences(old, self.identity)

    def chunk_file(self, k: int, suffix: str) -> Path:
        return self.path / SHARDS / f"chunk-{k:05d}{suffix}"

    def chunk_meta(self, k: int) -> dict[str, Any]:
        return json.loads(self.chunk_file(k, ".json").read_text(encoding="utf-8"))

    def chunk_done(self, k: int) -> bool:
        """A chunk is complete when its three files exist and the array has the words its metadata counts."""
        if not all(self.chunk_file(k, s).is_file() for s in (".jsonl", ".json", ".npy")):
            return False
        try:
            found = np.load(self.chunk_file(k, ".npy"), mmap_mode="r")
            n_words = int(self.chunk_meta(k)["words"])
        except (ValueError, OSError, KeyError, TypeError):
            return False
        return found.shape == (n_words, self.width) and found.dtype == DTYPE

    def pending_chunks(self) -> list[int]:
        return [k for k in range(len(self.ranges)) if not self.chunk_done(k)]

    def write_chunk(self, k: int, vectors: np.ndarray, sentences: Sequence[TaggedSentence]) -> None:
        """Chunk k atomically: its sentences, its word counts, and its vectors last (their presence commits it)."""
        start, end = self.ranges[k]
        lengths = [len(s.words) for s in sentences]
        if len(sentences) != end - start or vectors.shape != (sum(lengths), self.width):
            raise ValueError(f"chunk {k}: {len(sentences)} sentences, vectors {vectors.shape}; expected "
                             f"{end - start} sentences and ({sum(lengths)}, {self.width})")
        array = np.ascontiguousarray(vectors, dtype=DTYPE)
        with disk.writing(self.path / SHARDS, disk.with_margin(array.nbytes)):
            write_bytes_atomic(self.chunk_file(k, ".jsonl"), sentences_jsonl(sentences))
            write_json_atomic(self.chunk_file(k, ".json"), {"chunk": k, "sentences": [start, end],
                                                            "words": sum(lengths), "lengths": lengths})
            self.commit_array(self.chunk_file(k, ".npy"), array)

    def finalize(self, manifest: dict[str, Any], family: str = "words") -> dict[str, Any]:
        """Stream the chunks into the store's files, write the manifest (last; of `family`), remove the chunks; the
        manifest (nothing per sentence is read back: memory stays flat)."""
        missing = self.pending_chunks()
        if missing:
            raise RuntimeError(f"cannot finalize {self.path}: chunks {missing[:10]} are missing")
        n_words = sum(int(self.chunk_meta(k)["words"]) for k in range(len(self.ranges)))
        need = disk.with_margin(n_words * self.width * DTYPE.itemsize + 8 * (self.n_sentences + 1))
        with disk.writing(self.path, need):
            records = {VECTORS: self.merge_vectors(n_words), OFFSETS: self.merge_offsets(),
                       SENTENCES: self.merge_sentences()}
            full = word_store_manifest({**manifest, "identity": self.identity, "width": self.width,
                                        "dtype": str(DTYPE), "counts": {"sentences": self.n_sentences, "words": n_words},
                                        "files": {"vectors": VECTORS, "sentence_offsets": OFFSETS,
                                                  "sentences": SENTENCES}, "digests": records}, family)
            faults.kill_point("embed.finalize.before_manifest")
            write_json_atomic(self.path / MANIFEST, full)
        remove_work_files(self.path)  # chunks and identity, as the sentence store removes its shards
        return full

    def merge_vectors(self, n_words: int) -> dict[str, Any]:
        """vectors.npy: the header, then each chunk's bytes in order, copied in blocks; its record."""
        with atomic_path(self.path / VECTORS) as tmp, tmp.open("wb") as out:
            hashing = digests.HashingWriter(out)
            hashing.write(npy_header((n_words, self.width), DTYPE))
            for k in range(len(self.ranges)):
                with self.chunk_file(k, ".npy").open("rb") as chunk:
                    copy_npy_data(chunk, hashing, (int(self.chunk_meta(k)["words"]), self.width), DTYPE)
            return hashing.record()

    def merge_offsets(self) -> dict[str, Any]:
        """sentence_offsets.npy from each chunk's sentence lengths, one chunk in memory at a time; its record."""
        with atomic_path(self.path / OFFSETS) as tmp, tmp.open("wb") as out:
            hashing = digests.HashingWriter(out)
            hashing.write(npy_header((self.n_sentences + 1,), np.dtype(np.int64)))
            hashing.write(np.zeros(1, dtype=np.int64).tobytes())
            total = 0
            for k in range(len(self.ranges)):
                ends = total + np.cumsum(np.asarray(self.chunk_meta(k)["lengths"], dtype=np.int64))
                hashing.write(ends.tobytes())
                total = int(ends[-1]) if len(ends) else total
            return hashing.record()

    def merge_sentences(self) -> dict[str, Any]:
        """sentences.jsonl: the chunks' lines in order; its record."""
        with atomic_path(self.path / SENTENCES) as tmp, tmp.open("wb") as out:
            hashing = digests.HashingWriter(out)
            for k in range(len(self.ranges)):
                with self.chunk_file(k, ".jsonl").open("rb") as chunk:
                    shutil.copyfileobj(chunk, hashing)
            return hashing.record()


def npy_header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """The .npy header `np.save` writes for a C-ordered array of `shape` and `dtype`."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                  "fortran_order": False, "shape": shape})
    return header.getvalue()


def iter_chunks(sentences: Iterator[list[TaggedSentence]], pending: Sequence[int]) -> Iterator[
        tuple[int, list[TaggedSentence]]]:
    """(k, sentences) of the chunks still to write, read from the corpus in order (done chunks are skipped)."""
    todo = set(pending)
    for k, chunk in enumerate(sentences):
        if k in todo:
            yield k, chunk
