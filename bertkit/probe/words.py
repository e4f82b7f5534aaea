"""Word probes: a logistic regression per word (the sentence probe's standardised features + logistic regression,
fitted by the same engine, `bertkit.probe.engine`) fitted on the training words' vectors of each layer or layer
combination and scored on dev as the tags need (`bertkit.scoring.entities`: entity F1 for entity tags, token accuracy for plain
ones). `probe_word_layers` gives the table, one row per combination, with two baselines that need no encoder:
the majority tag, and each word's most frequent training tag (the classic POS baseline). Every row and baseline
carries a 95% bootstrap interval of its main score over the dev sentences, from the predictions it made (no refit);
one seed, so every row is resampled on the same sentences.

A row's training vectors are a matrix in memory (standardised where it lies when the caller hands it over,
`owned`) or, when they would not fit, a `StreamedMatrix` read block by block from the layer files at every pass of
the fit: memory then holds one block of them. A row's fit can start from the row before's solution (`init`)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertkit.data.tagged import TaggedSentence
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling
from bertkit.features.words import WordFeatures, extract_word_features, paper_rows
from bertkit.probe import engine
from bertkit.probe.fit import DEFAULT_C, fit_logistic
from bertkit.probe.heads import LogisticHead, ProbeModel, Standardizer
from bertkit.probe.layer_rows import LayerRows
from bertkit.scoring.entities import BOOTSTRAP_RESAMPLES, TagScores, score_tags


@dataclass(frozen=True)
class WordProbeRow:
    """One layer choice's probe (its word `Pooling`): its dev scores, its training-word accuracy (how far it fits)
    and vector size."""

    label: str
    pooling: Pooling
    dim: int
    scores: TagScores
    train_accuracy: float
    fit_seconds: float


@dataclass(frozen=True)
class WordProbeTable(LayerRows):
    """Word probes side by side: one row per layer choice, baselines, and what they were fitted and scored on."""

    rows: tuple[WordProbeRow, ...]
    scheme: TagScheme
    tags: tuple[str, ...]
    n_train_words: int
    n_dev_words: int
    baselines: Mapping[str, TagScores] = field(default_factory=dict)
    random_encoder_row: str | None = None
    """The row whose layers the random-init encoder baseline was probed on (the best row), when it ran."""

    def row_score(self, row: WordProbeRow) -> float:
        """Rows rank by their main score (entity F1 or token accuracy)."""
        return row.scores.main

    def to_json(self) -> dict[str, Any]:
        return {"scheme": self.scheme.to_json(), "tags": list(self.tags), "n_train_words": self.n_train_words,
                "n_dev_words": self.n_dev_words,
                "rows": [{"label": r.label, "pooling": r.pooling.to_json(), "dim": r.dim, "train_accuracy":
                          r.train_accuracy, "fit_seconds": r.fit_seconds, "scores": r.scores.to_json()}
                         for r in self.rows],
                "baselines": {name: s.to_json() for name, s in self.baselines.items()},
                "peak_layer": peak.label if (peak := self.peak_layer()) is not None else None,
                **({"random_encoder_row": self.random_encoder_row} if self.random_encoder_row else {})}


def flat_tags(sentences: Sequence[TaggedSentence]) -> list[str]:
    return [tag for sentence in sentences for tag in sentence.tags]


def as_sentences(flat: Sequence[str], offsets: np.ndarray) -> list[list[str]]:
    """Flat per-word tags back into sentences (`offsets`: n_sentences + 1 word boundaries)."""
    return [list(flat[offsets[s]:offsets[s + 1]]) for s in range(len(offsets) - 1)]


@dataclass(frozen=True)
class StreamedMatrix:
    """A row's training vectors too big to hold: `read(start, stop)` gives words start:stop, (stop - start, dim)
    float32, read afresh at every pass of the fit."""

    read: Callable[[int, int], np.ndarray]
    n: int
    dim: int


def check_tags(tags: Sequence[str]) -> None:
    if len(set(tags)) < 2:
        raise UserError(f"The training words carry one tag only ({tags[0] if tags else 'none'}): a probe needs two "
                        f"or more. Valid: a training file with several tags. Check --label-column and the file.")


def fit_word_probe(X: np.ndarray, tags: Sequence[str], C: float = DEFAULT_C, seed: int = 0) -> ProbeModel:
    """A fitted standardiser + logistic regression (`heads.ProbeModel`) predicting each word's tag from its
    vector (`seed`: kept for the callers; the fit is deterministic)."""
    check_tags(tags)
    return fit_logistic(X, np.asarray(tags, dtype=object), C)[0]


def standardized_rows(X: np.ndarray | StreamedMatrix, owned: bool) -> tuple[Standardizer, Any]:
    """The standardiser of a row's training vectors and the vectors as the engine reads them: in memory
    (standardised in place when `owned`, else in a copy), or streamed (standardised block by block)."""
    if isinstance(X, StreamedMatrix):
        blocks = (X.read(start, min(X.n, start + engine.block_rows_for(X.dim)))
                  for start in range(0, X.n, engine.block_rows_for(X.dim)))
        scaler = engine.standardizer_of(blocks)
        return scaler, engine.StreamedRows(X.read, X.n, scaler)
    scaler = engine.standardizer_of(engine.array_blocks(X))
    mine = owned and X.dtype == np.float32 and X.flags.c_contiguous and X.flags.writeable
    Z = X if mine else np.array(X, dtype=np.float32, order="C")
    return scaler, engine.MemoryRows(scaler.transform_in_place(Z))


def fit_word_tags(X: np.ndarray | StreamedMatrix, y_train: Sequence[str], C: float, init: Any = None,
                  owned: bool = False) -> tuple[ProbeModel, engine.LinearSolution, float]:
    """The fitted probe of a row's training vectors, the engine's solution (where the next row can start) and the
    training words' accuracy (how far it fits)."""
    check_tags(y_train)
    classes, ids = np.unique(np.asarray(y_train, dtype=object), return_inverse=True)
    ids = ids.reshape(-1)
    scaler, rows = standardized_rows(X, owned)
    solution = engine.fit_linear(rows, engine.Targets.classes(ids, len(classes)), C, init=init)
    predicted = engine.decisions(rows, solution.coef, solution.intercept)
    hits = (predicted[:, 0] > 0) == (ids == 1) if len(classes) == 2 else predicted.argmax(axis=1) == ids
    head = LogisticHead(solution.coef, solution.intercept, classes, C, None, np.asarray([solution.n_iter], np.int32))
    return ProbeModel.of(scaler, head), solution, float(hits.mean())


def majority_tags(train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence]) -> list[list[str]]:
    """Every dev word tagged with the most common training tag."""
    top = Counter(flat_tags(train)).most_common(1)[0][0]
    return [[top] * len(s.words) for s in dev]


def most_frequent_tags(train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence]) -> list[list[str]]:
    """Each dev word tagged with its most frequent training tag; an unseen word with the majority tag."""
    seen: dict[str, Counter] = defaultdict(Counter)
    for sentence in train:
        for word, tag in zip(sentence.words, sentence.tags, strict=True):
            seen[word][tag] += 1
    top = Counter(flat_tags(train)).most_common(1)[0][0]
    return [[seen[w].most_common(1)[0][0] if w in seen else top for w in s.words] for s in dev]


def baseline_scores(train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence], scheme: TagScheme,
                    n_boot: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict[str, TagScores]:
    """The baselines that need no encoder, scored (and bootstrapped) as the rows are."""
    gold = [list(s.tags) for s in dev]
    return {"majority tag": score_tags(gold, majority_tags(train, dev), scheme, n_boot, seed),
            "most frequent tag per word": score_tags(gold, most_frequent_tags(train, dev), scheme, n_boot, seed)}


@dataclass(frozen=True)
class FittedRow:
    """A table row with its fitted probe and the engine's solution (where the next row's fit can start)."""

    row: WordProbeRow
    model: ProbeModel
    solution: engine.LinearSolution


def fit_word_row(label: str, pooling: Pooling, X: np.ndarray | StreamedMatrix, y_train: Sequence[str],
                 X_dev: np.ndarray, gold: Sequence[Sequence[str]], dev_offsets: np.ndarray, scheme: TagScheme,
                 C: float = DEFAULT_C, seed: int = 0, n_boot: int = BOOTSTRAP_RESAMPLES, init: Any = None,
                 owned: bool = False) -> FittedRow:
    """One row of the table and its fitted probe (standardiser + logistic regression): fitted on the training
    words' vectors `X` (from `init`, a neighbouring row's solution, when given; `owned`: `X` may be standardised
    where it lies), scored on the dev words' `X_dev` (sentence s's words are rows `dev_offsets[s]:dev_offsets[s +
    1]`) against the `gold` tags, with the main score's interval over `n_boot` resamples of the dev sentences
    (seeded by `seed`). `fit_seconds`: the fit, standardisation included."""
    start = time.perf_counter()
    model, solution, train_accuracy = fit_word_tags(X, y_train, C, init, owned)
    seconds = time.perf_counter() - start
    predicted = as_sentences(model.predict(X_dev).tolist(), dev_offsets)
    scores = score_tags(gold, predicted, scheme, n_boot, seed)
    dim = X.dim if isinstance(X, StreamedMatrix) else int(X.shape[1])
    return FittedRow(WordProbeRow(label, pooling, dim, scores, train_accuracy, seconds), model, solution)


def probe_word_row(label: str, pooling: Pooling, X: np.ndarray, y_train: Sequence[str], X_dev: np.ndarray,
                   gold: Sequence[Sequence[str]], dev_offsets: np.ndarray, scheme: TagScheme, C: float = DEFAULT_C,
                   seed: int = 0, n_boot: int = BOOTSTRAP_RESAMPLES) -> WordProbeRow:
    """One row of the table (`fit_word_row` without its probe)."""
    return fit_word_row(label, pooling, X, y_train, X_dev, gold, dev_offsets, scheme, C, seed, n_boot).row


def probe_word_layers(train: Sequence[TaggedSentence], train_features: WordFeatures,
                      dev: Sequence[TaggedSentence], dev_features: WordFeatures, scheme: TagScheme,
                      labels: Sequence[str] | None = None, C: float = DEFAULT_C, seed: int = 0) -> WordProbeTable:
    """One probe per entry of the features' layers (the same layers for train and dev), scored on dev."""
    if train_features.layers != dev_features.layers:
        raise ValueError("train and dev features must hold the same layer choices")
    y_train, gold = flat_tags(train), [list(s.tags) for s in dev]
    if len(y_train) != train_features.n_words or len(flat_tags(dev)) != dev_features.n_words:
        raise ValueError("features and sentences must hold the same words")
    labels = list(labels) if labels is not None else [pooling.label for pooling in train_features.layers]
    rows = [probe_word_row(label, pooling, X, y_train, X_dev, gold, dev_features.sentence_offsets, scheme, C, seed)
            for label, pooling, X, X_dev in zip(labels, train_features.layers, train_features.vectors,
                                                dev_features.vectors, strict=True)]
    return WordProbeTable(tuple(rows), scheme, tuple(sorted(set(y_train))), len(y_train), len(flat_tags(dev)),
                          baseline_scores(train, dev, scheme, seed=seed))


def probe_words(encoder: Any, tokenizer: Any, train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence],
                scheme: TagScheme, reading: Reading | None = None,
                rows: Sequence[tuple[str, Pooling]] | None = None, batch_size: int = 32,
                C: float = DEFAULT_C, seed: int = 0) -> WordProbeTable:
    """Extract every row's word vectors (one forward pass per batch for all rows) and probe them: the paper's
    feature-based table (`paper_rows`) by default."""
    reading = reading or Reading.of_words()
    rows = rows if rows is not None else paper_rows(int(encoder.config.num_hidden_layers))
    layers = [spec for _, spec in rows]
    features = [extract_word_features(encoder, tokenizer, [s.words for s in part], reading, layers, batch_size)
                for part in (train, dev)]
    return probe_word_layers(train, features[0], dev, features[1], scheme, [label for label, _ in rows], C, seed)
