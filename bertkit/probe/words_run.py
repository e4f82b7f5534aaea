"""`bertkit probe` on tagged corpora (the word path): read and check train/dev once, load the encoder once, extract
every hidden state the table needs for all words once (one forward pass per batch), into unlinked files on disk
(`bertkit.features.word_layers`: memory holds one chunk of words while they are written), then for each row build
its vectors from those states (a single layer, or a sum / concat of several), fit and score its word probe
(`bertkit.probe.words`) and drop them: memory holds one row's matrices at a time, not every state of every word;
a row bigger than `ROW_MEMORY_BYTES` (the concat of the last four layers of ~200k words) is not built at all: its
fit reads it from the layer files block by block at every pass (`words.StreamedMatrix`). Each row's fit starts
from the row before's solution where their vectors have the same size (neighbouring layers' standardised states
are alike: fewer iterations to the same optimum).
`bertkit.probe.word_store_run` runs the same table on a word store (`probe --features`). Then the run is written
(metrics.json with the reading and layer settings, the per-layer plot, the best row's probe).

The table's rows by default: every single hidden state (the per-layer curve: POS peaks lower than entities) and
the BERT paper's combinations (sum of the last four, concat of the last four, sum of all layers); the paper's
single rows (embeddings, second-to-last, last) are layers of the curve. Baselines (--baselines): the majority tag, the
most frequent tag per word, and the same architecture with random weights probed on the best row's layers (what
the pretrained weights add); every row and baseline with a 95% bootstrap interval over the dev sentences."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bertkit.data.tagged import DataSource, TaggedColumns, TaggedCorpus, TaggedSentence, read_tagged_splits
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import LAST4, Pooling
from bertkit.features.word_layers import MemoryLayers, RowReader, WordLayers, write_layer_files
from bertkit.features.words import extract_word_features, paper_rows, word_pooling
from bertkit.models.compute import Compute
from bertkit.probe.engine import LinearSolution
from bertkit.probe.fit import DEFAULT_C
from bertkit.probe.word_saved import WordProbeFit, WordProbeSource, fitted_word_probe, save_word_probe
from bertkit.probe.words import (
    StreamedMatrix,
    WordProbeRow,
    WordProbeTable,
    baseline_scores,
    fit_word_row,
    flat_tags,
)

log = logging.getLogger(__name__)

COMBINED_PAPER_ROWS = 3
"""The last rows of `features.words.paper_rows` combine layers (sum and concat of the last four, sum of all encoder
layers); the paper's single-layer rows (embeddings, second-to-last, last) are on the curve."""
RANDOM_ENCODER = "random-init encoder"
"""The baseline's name in the table, metrics.json and the plot (as the sentence probe's, `probe.baselines`)."""
ROW_MEMORY_BYTES = 768 << 20
"""A row's training matrix up to this size is built in memory for its fit; a bigger one is streamed from the layer
files (`row_features`). 768 MiB: one layer of ~500k words of width 384, or ~200k of width 768, in memory; the peak
of a 200k-word table (the concat row, 1.2 GiB, streamed) under 2 GB."""
BASELINE_KEYS = {"majority tag": "majority", "most frequent tag per word": "most_frequent_tag",
                 RANDOM_ENCODER: "random_encoder"}


@dataclass(frozen=True)
class WordProbeRun:
    """What the word path found and how: the table (rows, baselines, scheme, tags, word counts), the files and
    columns read, the reading and the rows' layer settings, the encoder, and the files written."""

    JSON_RECORD: ClassVar[bool] = True  # written as `to_json` says (metrics.json and --json)

    model: str
    revision: str | None
    train: str
    dev: str
    columns: TaggedColumns
    """The word and tag columns as resolved, and the tag scheme as the files have it."""
    reading: Reading
    C: float
    sentences: Mapping[str, int]
    """Sentences per split (train, dev)."""
    table: WordProbeTable
    notes: tuple[str, ...] = ()
    outputs: Mapping[str, str] = field(default_factory=dict)
    best_probe: WordProbeFit | None = None
    """The best row's probe, saved as OUT/probe (`bertkit.probe.word_saved`)."""
    compute: Compute = Compute()
    """Where and in what precision the words were read (the command's --precision, resolved once; a word store's:
    the precision it records)."""
    features: str | None = None
    """The word store probed (`probe --features`); None: the words were read from `train` and `dev` now."""
    encoder_sha256: str | None = None
    """The sha256 of the encoder's whole weights (`loading.weights_digest`; None: a hub encoder, or a word store that
    does not record it): the saved probe records it, and `predict --probe` refuses an encoder changed since."""

    def to_json(self) -> dict[str, Any]:
        table = self.table.to_json()
        best = self.table.best()
        return {"task": "tags", "model": self.model, "revision": self.revision, "train": self.train, "dev": self.dev,
                "columns": self.columns.to_json(), "reading": self.reading.to_json(),
                "compute": self.compute.to_json(), "C": self.C,
                "sentences": dict(self.sentences), "words": {"train": table.pop("n_train_words"),
                                                             "dev": table.pop("n_dev_words")},
                **({"features": self.features} if self.features else {}),
                "metric": best.scores.main_name, "best": best.label, **table, "notes": list(self.notes),
                **({"outputs": dict(self.outputs)} if self.outputs else {})}


def layer_label(index: int, n_layers: int) -> str:
    """A single hidden state's row name, with the paper's name where it has one."""
    named = {0: "embeddings (layer 0)", n_layers - 1: f"layer {n_layers - 1} (second-to-last)",
             n_layers: f"layer {n_layers} (last)"}
    return named.get(index, f"layer {index}")


def combination_rows(n_layers: int) -> tuple[tuple[str, Pooling], ...]:
    """The paper's rows that combine layers, as a model of `n_layers` can give them (`fitting`)."""
    return tuple(fitting(label, spec, n_layers) for label, spec in paper_rows(n_layers)[-COMBINED_PAPER_ROWS:])


def table_rows(layers: str | None, combine: str | None, n_layers: int) -> list[tuple[str, Pooling]]:
    """(label, pooling) of each row. Neither given: every hidden state, then the paper's combinations. --combine:
    one row, the --layers (default last4) combined. --layers alone: each of its layers a row (`all`: every hidden
    state, embeddings included, as everywhere)."""
    if combine is not None:
        spec = word_pooling(layers or "last4", combine)
        spec.resolve(n_layers)  # a layer the model lacks stops here
        known = {s: label for label, s in combination_rows(n_layers)}
        return [(known.get(spec, spec.label), spec)]
    singles = word_pooling(layers or "all").resolve(n_layers)
    rows = [(layer_label(i, n_layers), word_pooling(str(i))) for i in singles]
    return rows + (list(combination_rows(n_layers)) if layers is None else [])


def fitting(label: str, spec: Pooling, n_layers: int) -> tuple[str, Pooling]:
    """A default row as a model of `n_layers` can give it: fewer than four layers, "the last four" are all of them."""
    if spec.layers != LAST4 or n_layers >= 4:
        return label, spec
    every = ",".join(str(i) for i in range(1, n_layers + 1))
    return label.replace("last four", f"last {n_layers}"), word_pooling(every, spec.combine)


def read_train_dev(train: str | DataSource, dev: str | DataSource, columns: TaggedColumns,
                   unseen_tags: str = "refuse") -> tuple[TaggedCorpus, TaggedCorpus]:
    """Both corpora (files or hub splits) checked (ragged rows, tag columns, schemes; the columns detected in each
    unless given), and every dev tag seen in training or handled as --unseen-tags says (`unseen_tags`: refuse, drop
    or a training tag; `data.tagged.read_tagged_splits`, as fine-tuning reads them)."""
    train_corpus, dev_corpus = read_tagged_splits(train, [dev], columns, unseen_tags)
    return train_corpus, dev_corpus


def needed_states(rows: Sequence[tuple[str, Pooling]], n_layers: int) -> list[int]:
    """Every single hidden state the rows read, in order."""
    return sorted({i for _, spec in rows for i in spec.resolve(n_layers)})


def read_word_layers(encoder: Any, tokenizer: Any, parts: Sequence[Sequence[TaggedSentence]], reading: Reading,
                     states: Sequence[int], batch_size: int | None, dtype: Any = None, cache_dir: str | None = None,
                     in_memory: bool = False) -> list[WordLayers]:
    """The hidden states `states` of every word of each part (train, dev), extracted once, one forward pass per
    batch: into unlinked files in the cache's scratch folder (`features.word_layers.write_layer_files`: memory
    holds one chunk of words), or with `in_memory` all in memory (every state of every word at once)."""
    n_layers = int(encoder.config.num_hidden_layers)
    if in_memory:
        singles = [word_pooling(str(i)) for i in states]
        return [MemoryLayers.of(extract_word_features(encoder, tokenizer, [s.words for s in part], reading, singles,
                                                      batch_size, dtype=dtype), n_layers) for part in parts]
    made: list[WordLayers] = []
    try:
        for part in parts:
            made.append(write_layer_files(encoder, tokenizer, [s.words for s in part], reading, states, cache_dir,
                                          batch_size, dtype))
    except BaseException:
        for layers in made:
            layers.close()
        raise
    return made


def row_features(layers: WordLayers, spec: Pooling, memory_bytes: int = ROW_MEMORY_BYTES) -> Any:
    """A row's vectors as its fit reads them: the (n_words, width) matrix (a new array: the fit may standardise it in
    place), or, above `memory_bytes`, a `StreamedMatrix` reading them from the layers block by block into reused
    buffers (`features.word_layers.RowReader`)."""
    width = layers.row_width(spec)
    if layers.n_words * width * 4 <= memory_bytes:
        return layers.matrix(spec)
    return StreamedMatrix(RowReader(layers, spec), layers.n_words, width)


def concat_start(spec: Pooling, n_layers: int, singles: dict[int, LinearSolution]) -> LinearSolution | None:
    """Where a concat row's fit starts: its states' own solutions side by side, each divided by their number (its
    logits then start as the mean of theirs: a row's standardised concat is its states' standardised vectors side
    by side). None: not a concat row, or a state not fitted alone."""
    states = spec.resolve(n_layers)
    if spec.combine != "concat" or len(states) < 2 or any(i not in singles for i in states):
        return None
    parts = [singles[i] for i in states]
    return LinearSolution(np.concatenate([p.coef for p in parts], axis=1) / len(parts),
                          np.mean([p.intercept for p in parts], axis=0), 0, False, math.nan)


def probe_word_table(train_layers: WordLayers, dev_layers: WordLayers, train: Sequence[TaggedSentence],
                     dev: Sequence[TaggedSentence], scheme: TagScheme, rows: Sequence[tuple[str, Pooling]],
                     C: float = DEFAULT_C, seed: int = 0, baselines: bool = True,
                     say: Callable[[str], None] | None = None) -> tuple[WordProbeTable, WordProbeFit]:
    """One probe per row, its vectors built from the layers just before its fit and dropped after it
    (`row_features`: memory holds one row's train and dev matrices at a time, or a block of a big row's), each fit
    from the previous row's solution when the sizes agree (a concat row: from its states' solutions,
    `concat_start`). Scored on dev; the best row's fitted probe kept, to save."""
    y_train, gold = flat_tags(train), [list(s.tags) for s in dev]
    table_rows_, best, best_model, previous = [], None, None, None
    singles: dict[int, LinearSolution] = {}
    for label, spec in rows:
        X, X_dev = row_features(train_layers, spec), dev_layers.matrix(spec)
        start = concat_start(spec, train_layers.n_layers, singles) or previous
        fitted = fit_word_row(label, spec, X, y_train, X_dev, gold, dev_layers.sentence_offsets, scheme, C, seed,
                              init=start, owned=True)
        del X, X_dev  # before the next row's are built
        row, previous = fitted.row, fitted.solution
        if spec.single_layer:
            singles[spec.resolve(train_layers.n_layers)[0]] = fitted.solution
        if say is not None:
            say(f"{label}: dev {row.scores.main_name} {row.scores.main:.3f} ({row.dim} dims, {row.fit_seconds:.1f}s)")
        table_rows_.append(row)
        if best is None or row.scores.main > best.scores.main:  # the first on a tie, as `WordProbeTable.best`
            best, best_model = row, fitted.model
    table = WordProbeTable(tuple(table_rows_), scheme, tuple(sorted(set(y_train))), len(y_train),
                           len(flat_tags(dev)), baseline_scores(train, dev, scheme, seed=seed) if baselines else {})
    assert best is not None
    return table, fitted_word_probe(best, best_model, C)


def random_encoder_row(model: str, tokenizer: Any, train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence],
                       scheme: TagScheme, best: WordProbeRow, reading: Reading, batch_size: int | None,
                       C: float = DEFAULT_C, seed: int = 0, trust_remote_code: bool = False,
                       compute: Compute = Compute(), cache_dir: str | None = None,
                       in_memory: bool = False) -> WordProbeRow:
    """The best row's probe again on the same architecture with fresh weights, built as the sentence probe's
    random-init baseline builds it (seeded before the model, `loading.load_encoder(random_init=True)`): what the
    pretrained weights add at that row. Reads train and dev once more, for the best row's layers only, where and in
    the precision `compute` says, as the table's pass did (`read_word_layers`)."""
    import torch

    from bertkit.models import loading

    torch.manual_seed(seed)
    encoder = loading.cast_for_inference(loading.load_encoder(model, trust_remote_code, random_init=True).eval(),
                                         compute.torch_device, compute.dtype)
    states = best.pooling.resolve(int(encoder.config.num_hidden_layers))
    train_layers, dev_layers = read_word_layers(encoder, tokenizer, (train, dev), reading, states, batch_size,
                                                compute.dtype, cache_dir, in_memory)
    del encoder
    with train_layers, dev_layers:
        return fit_word_row(f"{RANDOM_ENCODER} ({best.label})", best.pooling, row_features(train_layers, best.pooling),
                            flat_tags(train), dev_layers.matrix(best.pooling), [list(s.tags) for s in dev],
                            dev_layers.sentence_offsets, scheme, C, seed, owned=True).row


def with_random_encoder(table: WordProbeTable, row: WordProbeRow) -> tuple[WordProbeTable, tuple[str, ...]]:
    """The table with the random-init baseline added, and a warning (with the fix) when the best row does not beat
    it: then the pretrained weights add nothing the probe can read there."""
    best = table.best()
    table = replace(table, baselines={**table.baselines, RANDOM_ENCODER: row.scores}, random_encoder_row=best.label)
    if best.scores.main > row.scores.main:
        return table, ()
    return table, (f"warning: the best row ({best.label}, dev {best.scores.main_name} {best.scores.main:.3f}) does "
                   f"not beat the same encoder with random weights ({row.scores.main:.3f}): the pretrained weights "
                   f"add nothing there. Fix: check that --model is the trained model you meant, or give more "
                   f"training sentences.",)


def run_word_probe(train: str | DataSource, dev: str | DataSource, columns: TaggedColumns, reading: Reading,
                   model: str, layers: str | None = None, combine: str | None = None, batch_size: int = 32,
                   C: float = DEFAULT_C, seed: int = 0, baselines: bool = True, trust_remote_code: bool = False,
                   say: Callable[[str], None] | None = None, limit: int | None = None,
                   compute: Compute = Compute(), cache_dir: str | None = None, in_memory: bool = False,
                   unseen_tags: str = "refuse") -> WordProbeRun:
    """Read and check the tagged files (dev tags unseen in training as `unseen_tags` says; what was dropped or
    mapped, and the files' other notes, in the run's notes), load the encoder once (where and in the precision `compute` says: the
    command's --precision, resolved once), extract every hidden state the rows (`table_rows`) need once
    (`read_word_layers`: to disk, or `in_memory`), and probe each row on its words (the first `limit` sentences of
    each file, when given); with `baselines`, the random-init encoder last."""
    from bertkit.models import loading

    loading.check_model_folder(model)
    train_corpus, dev_corpus = read_train_dev(train, dev, columns, unseen_tags)
    train_sentences, dev_sentences = (list(c.sentences()) if limit is None else c.head(limit)
                                      for c in (train_corpus, dev_corpus))
    if limit is not None and dev_corpus.scheme.has_entities and not any(t != "O" for s in dev_sentences for t in s.tags):
        raise UserError(f"The first {limit:,} sentences of {dev_corpus.source} (--dev, --limit {limit}) hold no entity "
                        f"(every tag is O): entity F1 is undefined on them. Pass a larger --limit, or --dev data with "
                        f"entities in its first sentences, or --tag-scheme none to score the tags by word accuracy.")
    tokenizer = loading.load_tokenizer(model, trust_remote_code)
    encoder = loading.cast_for_inference(loading.load_encoder(model, trust_remote_code).eval(), compute.torch_device,
                                         compute.dtype)
    n_layers = int(encoder.config.num_hidden_layers)
    rows = table_rows(layers, combine, n_layers)
    if say is not None:
        say(f"{len(train_sentences):,} train / {len(dev_sentences):,} dev sentences "
            f"({len(flat_tags(train_sentences)):,} / {len(flat_tags(dev_sentences)):,} words, tags "
            f"{train_corpus.scheme.name}); {len(rows)} rows")
    train_layers, dev_layers = read_word_layers(encoder, tokenizer, (train_sentences, dev_sentences), reading,
                                                needed_states(rows, n_layers), batch_size, compute.dtype, cache_dir,
                                                in_memory)
    del encoder  # the fits need the vectors only
    with train_layers, dev_layers:
        table, best = probe_word_table(train_layers, dev_layers, train_sentences, dev_sentences, train_corpus.scheme,
                                       rows, C, seed, baselines, say)
    notes: tuple[str, ...] = (*train_corpus.notes, *dev_corpus.notes)
    if baselines:
        random_row = random_encoder_row(model, tokenizer, train_sentences, dev_sentences, train_corpus.scheme,
                                        table.best(), reading, batch_size, C, seed, trust_remote_code, compute,
                                        cache_dir, in_memory)
        if say is not None:
            say(f"{random_row.label}: dev {random_row.scores.main_name} {random_row.scores.main:.3f}")
        table, warning = with_random_encoder(table, random_row)
        notes += warning
    return WordProbeRun(model, loading.model_revision(model), str(train), str(dev), train_corpus.columns, reading, C,
                        {"train": len(train_sentences), "dev": len(dev_sentences)}, table, notes, best_probe=best,
                        compute=compute, encoder_sha256=loading.weights_digest(model))


def write_word_probe_run(run_dir: Path, run: WordProbeRun, config: dict[str, Any],
                         final_dir: Path | None = None) -> WordProbeRun:
    """config.json, metrics.json and probe_layers.png written into `run_dir`; the run with the paths it will have
    in `final_dir` (where a staged run ends up)."""
    from bertkit import plots
    from bertkit.io import atomic, trail

    final = final_dir or run_dir
    trail.write_run_config(run_dir, "probe", config, words={"reading": run.reading.to_json(),
                                                             "columns": run.columns.to_json(), "model": run.model,
                                                             "compute": run.compute.to_json()})
    best = run.table.best()
    curve_rows = [{"pool": f"word {run.reading.word_pool}" if r.pooling.single_layer else "combined layers",
                   "layer_name": r.label, "score": r.scores.main, "best": r is best} for r in run.table.rows]
    baselines = {name: scores.main for name, scores in run.table.baselines.items()}
    curve = plots.probe_layer_curve(curve_rows, baselines, run_dir / "probe_layers.png",
                                    f"Word probe per layer — {Path(run.model).name}", metric="score")
    outputs = {"config": str(final / "config.json"), "metrics": str(final / "metrics.json"),
               "layer_curve": str(final / curve.name)}
    if run.best_probe is not None:  # the best row's probe, for `predict --probe`
        source = WordProbeSource(run.model, run.revision, run.reading, run.table.scheme, compute=run.compute,
                                 encoder_sha256=run.encoder_sha256)
        save_word_probe(run_dir / "probe", run.best_probe, source)
        outputs["probe"] = str(final / "probe")
    run = replace(run, outputs=outputs)
    atomic.write_json_atomic(run_dir / "metrics.json", run.to_json())
    return run

