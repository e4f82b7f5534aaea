"""`bertkit embed` on tagged data (the word path): read and check the tagged splits (`data.tagged.read_tagged_splits`,
as `bertkit probe` does), load the encoder once, and write one word store per split (`features.word_store`):
chunks of sentences read from the file, embedded (`features.words.encode_word_chunk`) and appended to disk one at a
time, so memory stays flat in the corpus; a killed run resumes from its last whole chunk."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import __version__
from bertkit.data.tagged import DataSource, TaggedColumns, TaggedCorpus, read_tagged_splits, tagged_sources
from bertkit.data.tagged_splits import tagged_columns
from bertkit.encoding.reading import Reading
from bertkit.features.settings import Pooling, pieces_per_word
from bertkit.features.words import check_fits_model, encode_word_chunk, word_pooling
from bertkit.models.compute import Compute
from bertkit.models.metadata import read_as_saved

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WordStoreSplit:
    """What the word path did for one split's store."""

    split: str
    path: str
    status: str
    """'complete' (already complete: nothing done), 'resumed' or 'new'."""
    sentences: int
    words: int
    width: int
    chunks_total: int
    chunks_skipped: int
    """Chunks an interrupted run had already written (resumed, not embedded again)."""
    sentences_encoded: int
    words_encoded: int
    seconds: float
    size_bytes: int


@dataclass(frozen=True)
class WordEmbedRun:
    """The word stores of one `bertkit embed` run on tagged data and how they were made."""

    out: str
    model: str
    revision: str | None
    precision: str
    device: str
    reading: Reading
    pooling: Pooling
    columns: TaggedColumns
    scheme: str
    splits: tuple[WordStoreSplit, ...]

    @property
    def words_encoded(self) -> int:
        return sum(s.words_encoded for s in self.splits)

    @property
    def sentences(self) -> int:
        return sum(s.sentences for s in self.splits)

    @property
    def complete_already(self) -> bool:
        return all(s.status == "complete" for s in self.splits)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.splits)

    @property
    def sentences_per_s(self) -> float | None:
        done = sum(s.sentences_encoded for s in self.splits)
        return round(done / self.seconds, 1) if self.seconds and done else None

    @property
    def seconds(self) -> float:
        return round(sum(s.seconds for s in self.splits), 3)

    @property
    def words_per_s(self) -> float | None:
        return round(self.words_encoded / self.seconds, 1) if self.seconds and self.words_encoded else None


@dataclass(frozen=True)
class WordEncoder:
    """The encoder a word run embeds with, its tokenizer, and what its stores record about it."""

    model: Any
    tokenizer: Any
    name: str
    revision: str | None
    precision: str
    dtype: Any = None
    """The torch dtype the run computes in (bf16 on a CPU: under autocast, the weights staying fp32); None: the
    weights' dtype."""


def word_identity(encoder: WordEncoder, reading: Reading, pooling: Pooling, corpus: TaggedCorpus,
                  split: str, chunk_sentences: int) -> dict[str, Any]:
    """The settings that make a word store's content; a re-run must match them to resume or to count as done. The
    data is identified by its content (a file's size and sha256, a hub split's fingerprint), not its path."""
    return {"kind": "words", "model": encoder.name, "revision": encoder.revision, "dtype": encoder.precision,
            **reading.to_json(), **pooling.to_json(), "columns": corpus.columns.to_json(), "scheme": corpus.scheme.name,
            "split": split, **corpus.data_identity(), "sentences": corpus.n_sentences,
            "chunk_sentences": chunk_sentences}


def word_manifest(encoder: WordEncoder, reading: Reading, pooling: Pooling, corpus: TaggedCorpus,
                  split: str) -> dict[str, Any]:
    """What a split's manifest records besides its identity, counts and digests."""
    from bertkit.io.trail import package_versions

    config = encoder.model.config
    n_layers = int(config.num_hidden_layers)
    return {"bertkit_version": __version__, "model": encoder.name, "revision": encoder.revision,
            "tokenizer_class": type(encoder.tokenizer).__name__, "architecture": type(encoder.model).__name__,
            "n_layers": n_layers, "hidden_size": int(config.hidden_size), "precision": encoder.precision,
            "reading": reading.to_json(), "pooling": pooling.to_json(), "layer_indices": pooling.resolve(n_layers),
            "columns": corpus.columns.to_json(), "scheme": corpus.scheme.name, "tags": list(corpus.tags),
            "split": split, "data": str(corpus.source),
            "versions": {k: v for k, v in package_versions().items() if k in ("bertkit", "torch", "transformers")}}


def word_width(encoder: Any, reading: Reading, pooling: Pooling) -> int:
    """The length of one stored word vector."""
    config = encoder.config
    return pooling.width(int(config.num_hidden_layers),
                         int(config.hidden_size) * pieces_per_word(str(reading.word_pool)))


def embed_word_split(writer: Any, corpus: TaggedCorpus, encoder: WordEncoder, reading: Reading,
                     pooling: Pooling, batch_size: int | None, manifest: dict[str, Any], bar: Any) -> WordStoreSplit:
    """The missing chunks of one split embedded and written, then the store finalized (or found complete)."""
    from bertkit.features.word_store import iter_chunks, verified_manifest

    started = time.perf_counter()
    status = writer.prepare()
    pending = writer.pending_chunks() if status != "complete" else []
    words_encoded = sentences_encoded = 0
    if status != "complete":
        chunk_size = writer.ranges[0][1] - writer.ranges[0][0]
        for k, sentences in iter_chunks(corpus.chunks(chunk_size), pending):
            features = encode_word_chunk(encoder.model, encoder.tokenizer, [s.words for s in sentences], reading,
                                         [pooling], batch_size, encoder.dtype)
            writer.write_chunk(k, features.vectors[0], sentences)
            words_encoded += features.n_words
            sentences_encoded += len(sentences)
            if bar is not None:
                bar.update(len(sentences))
        written = writer.finalize(manifest)  # hashed as it was written
    else:
        written = verified_manifest(writer.path)
    counts = written["counts"]
    return WordStoreSplit(manifest["split"], str(writer.path), "resumed" if status == "partial" else status,
                          counts["sentences"], counts["words"], int(written["width"]), len(writer.ranges),
                          len(writer.ranges) - len(pending) if status != "complete" else len(writer.ranges),
                          sentences_encoded, words_encoded, round(time.perf_counter() - started, 3),
                          store_bytes(writer.path))


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def read_word_splits(named: list[tuple[str, str | DataSource]], columns: TaggedColumns,
                     unseen_tags: str = "refuse") -> list[tuple[str, TaggedCorpus]]:
    """(split, corpus) for train and any dev/test, each checked, their tags seen in training (else as `unseen_tags`,
    --unseen-tags, says)."""
    corpora = read_tagged_splits(named[0][1], [path for _, path in named[1:]], columns, unseen_tags=unseen_tags)
    return [(name, corpus) for (name, _), corpus in zip(named, corpora, strict=True)]


def run_word_embed(named: list[tuple[str, str | DataSource]], columns: TaggedColumns, reading: Reading, pooling: Pooling,
                   encoder: WordEncoder, out: Path, overwrite: bool, chunk_sentences: int, batch_size: int | None,
                   device: str, progress: bool = False, unseen_tags: str = "refuse") -> WordEmbedRun:
    """Every split to its word store under `out` (OUT, or OUT/<split> with dev/test): claimed, written, committed."""
    from bertkit.features.word_store import WordStoreWriter
    from bertkit.io import rundir
    from bertkit.models import infer

    check_fits_model(encoder.model, reading)
    pooling.resolve(int(encoder.model.config.num_hidden_layers))  # a layer the model lacks stops here
    corpora = read_word_splits(named, columns, unseen_tags)
    split_layout = len(corpora) > 1
    identities = {split: word_identity(encoder, reading, pooling, corpus, split, chunk_sentences)
                  for split, corpus in corpora}
    run = rundir.claim_run_dir(out, "embed", overwrite=overwrite,
                               compare=lambda path: stored_differences(path, identities, split_layout))
    width = word_width(encoder.model, reading, pooling)
    splits = []
    for split, corpus in corpora:
        path = run.path / split if split_layout else run.path
        writer = WordStoreWriter(path, identities[split], corpus.n_sentences, chunk_sentences, width)
        manifest = word_manifest(encoder, reading, pooling, corpus, split)
        with infer.closing(infer.progress_bar(corpus.n_sentences, f"embed {split}", progress, "sentences")) as bar:
            splits.append(embed_word_split(writer, corpus, encoder, reading, pooling, batch_size, manifest, bar))
    run.commit()  # with --overwrite: the new stores replace the previous ones only now
    final = tuple(_moved(s, out / s.split if split_layout else out) for s in splits)
    train = corpora[0][1]
    return WordEmbedRun(str(out), encoder.name, encoder.revision, encoder.precision, device, reading, pooling,
                        train.columns, train.scheme.name, final)


def _moved(split: WordStoreSplit, path: Path) -> WordStoreSplit:
    """The split where its store is now (not the staging folder it was built in)."""
    from dataclasses import replace

    return replace(split, path=str(path))


def stored_differences(root: Path, identities: dict[str, dict[str, Any]], split_layout: bool) -> list[str]:
    """What differs between the word store(s) in `root` and those this run would write (empty: the same run)."""
    from bertkit.features.word_store import identity_differences, stored_identity

    lines = []
    for split, identity in identities.items():
        old = stored_identity(root / split if split_layout else root)
        if old is not None:
            lines += [(f"{split} " if split_layout else "") + line for line in identity_differences(old, identity)]
    return lines


# ---------------------------------------------------------------- from `bertkit embed`'s options


def load_word_encoder(name: str, compute: Compute, trust_remote_code: bool = False) -> WordEncoder:
    """The encoder and fast tokenizer of `name`, where and in the precision `compute` says."""
    from bertkit.models import loading

    loading.check_model_folder(name)
    model = loading.cast_for_inference(loading.load_encoder(name, trust_remote_code).eval(), compute.torch_device,
                                       compute.dtype)
    return WordEncoder(model, loading.load_tokenizer(name, trust_remote_code), name, loading.model_revision(name),
                       loading.precision_name(model, compute.dtype), compute.dtype)


def run_word_embed_options(cfg: Any, compute: Compute, progress: bool = False) -> WordEmbedRun:
    """`bertkit embed` on tagged data (`cfg`: its config): --out checked before the model loads, then every split, its
    words read as a saved --model records (a tagger's window, overlap and word pooling), unless given."""
    from bertkit.io import ownership, rundir

    cfg = read_as_saved(cfg)
    out = Path(cfg.output.out).expanduser()
    rundir.inspect_run_dir(out, "embed", overwrite=cfg.output.overwrite, inputs=ownership.input_paths(cfg))  # read-only
    encoder = load_word_encoder(cfg.model, compute, cfg.trust_remote_code)
    others = [(name, str(value)) for name, value in (("dev", cfg.inputs.dev), ("test", cfg.inputs.test)) if value]
    found = tagged_sources(str(cfg.inputs.data), [value for _, value in others], cfg.inputs.data_config,
                           cfg.inputs.train_split)
    named = list(zip(["train", *(name for name, _ in others)], found, strict=True))
    columns = tagged_columns(cfg.inputs, cfg.tagged.tag_scheme)
    reading = Reading.of_words(cfg.tagged.word_pool, cfg.reading.max_length, cfg.reading.stride)
    return run_word_embed(named, columns, reading, word_pooling(cfg.pooling.layers, cfg.pooling.combine or "concat"),
                          encoder, out,
                          cfg.output.overwrite, cfg.output.shard_size, cfg.rows_per_batch, str(encoder.model.device),
                          progress, cfg.tagged.unseen_tags)
