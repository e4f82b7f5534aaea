"""Scores of tag sequences (one tag per word): token accuracy and macro-F1 over the gold tags for every tag set,
and for entity tags seqeval's entity-level precision, recall and F1 in strict mode with the corpus's recorded
scheme (IOB2 or IOBES; IOB1 files are read as IOB2 before they get here), micro, macro and per type; with a 95%
bootstrap interval of the main score over sentences (`main_interval`), from the predictions as they are."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bertkit.data.tagscheme import TagScheme
from bertkit.scoring.intervals import resample_counts

BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the dev sentences behind a word table's intervals."""


@dataclass(frozen=True)
class TypeScore:
    """One entity type's strict scores; `support` is its gold entities, `predicted` its predicted ones."""

    precision: float
    recall: float
    f1: float
    support: int
    predicted: int


@dataclass(frozen=True)
class EntityScores:
    """Entity-level scores (seqeval, strict): micro over all entities, macro over types, and per type."""

    precision: float
    recall: float
    f1: float
    macro_precision: float
    macro_recall: float
    macro_f1: float
    n_gold: int
    n_predicted: int
    per_type: Mapping[str, TypeScore] = field(default_factory=dict)


@dataclass(frozen=True)
class TagScores:
    """The scores of predicted tags against gold tags: per word always, per entity when the tags mark entities."""

    scheme: str
    n_sentences: int
    n_words: int
    token_accuracy: float
    tag_macro_f1: float
    """F1 per gold tag, averaged: rare tags count as much as common ones."""
    entities: EntityScores | None = None
    interval: tuple[float, float] | None = None
    """95% bootstrap interval of `main`, dev sentences resampled with replacement (None when not asked for)."""

    @property
    def main(self) -> float:
        """The number a table ranks by: entity F1 for entity tags, else token accuracy."""
        return self.entities.f1 if self.entities is not None else self.token_accuracy

    @property
    def main_name(self) -> str:
        return "entity F1" if self.entities is not None else "token accuracy"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def seqeval_scheme(name: str) -> Any:
    from seqeval.scheme import IOB2, IOBES

    return {"IOB2": IOB2, "IOBES": IOBES}[name]


def score_entities(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: str) -> EntityScores:
    """seqeval's strict entity scores with `scheme` (IOB2 or IOBES). A predicted entity that breaks the scheme
    (an I- with no B- before it) is not an entity in strict mode: it counts as nothing, not as a guess."""
    from seqeval.metrics import classification_report
    from seqeval.scheme import Entities

    y_true, y_pred = [list(s) for s in gold], [list(s) for s in predicted]
    kind = seqeval_scheme(scheme)
    report = classification_report(y_true, y_pred, mode="strict", scheme=kind, output_dict=True, zero_division=0)
    counted = {name: _type_counts(Entities(y, kind, suffix=False).entities) for name, y in
               (("gold", y_true), ("predicted", y_pred))}
    per_type = {name: TypeScore(float(row["precision"]), float(row["recall"]), float(row["f1-score"]),
                                counted["gold"].get(name, 0), counted["predicted"].get(name, 0))
                for name, row in report.items() if not name.endswith(" avg")}
    micro, macro = report.get("micro avg", {}), report.get("macro avg", {})
    return EntityScores(float(micro.get("precision", 0.0)), float(micro.get("recall", 0.0)),
                        float(micro.get("f1-score", 0.0)), float(macro.get("precision", 0.0)),
                        float(macro.get("recall", 0.0)), float(macro.get("f1-score", 0.0)),
                        sum(counted["gold"].values()), sum(counted["predicted"].values()), per_type)


def read_entities(tags: Sequence[Sequence[str]], scheme: str) -> list[set[tuple[str, int, int]]]:
    """Per sentence, the entities strict seqeval reads with `scheme` as (type, first word, end word exclusive): the
    entities every score here counts, so an I- with no B- before it is none of them."""
    from seqeval.scheme import Entities

    sentences = Entities([list(s) for s in tags], seqeval_scheme(scheme), suffix=False).entities
    return [{(e.tag, e.start, e.end) for e in sentence} for sentence in sentences]


def _type_counts(entities: list[list[Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sentence in entities:
        for entity in sentence:
            counts[entity.tag] = counts.get(entity.tag, 0) + 1
    return counts


def sentence_counts(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    scheme: TagScheme) -> np.ndarray:
    """(sentences, 3) counts whose sums give the main score as 2 * hits / (predicted + gold): per sentence the
    strictly matched entities, predicted and gold entities (entity tags: micro F1), or the right words and the
    words twice (plain tags: 2c / 2n is token accuracy). Sums, so a resample of sentences is a weighted sum."""
    if not scheme.has_entities:
        right = [sum(g == p for g, p in zip(gs, ps, strict=True)) for gs, ps in zip(gold, predicted, strict=True)]
        sizes = [len(gs) for gs in gold]
        return np.array([right, sizes, sizes], dtype=np.float64).T.reshape(len(gold), 3)
    found = [read_entities(y, scheme.name) for y in (gold, predicted)]
    return np.array([[len(g & p), len(p), len(g)] for g, p in zip(*found, strict=True)],
                    dtype=np.float64).reshape(len(gold), 3)


def main_interval(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: TagScheme,
                  n_boot: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile 95% interval of the main score (strict entity F1, or token accuracy) over `n_boot` resamples of
    the sentences, not the words: words of a sentence are not independent draws. The same seed gives every row of
    a table the same resamples, so rows are compared on the same sentences. None with no sentences."""
    counts = sentence_counts(gold, predicted, scheme)
    if not len(counts) or n_boot < 1:
        return None
    sums = np.concatenate([w @ counts for w in resample_counts(len(counts), n_boot, seed)])
    denominator = sums[:, 1] + sums[:, 2]
    scores = np.divide(2 * sums[:, 0], denominator, out=np.zeros(len(sums)), where=denominator > 0)
    low, high = np.percentile(scores, [2.5, 97.5])
    return round(float(low), 6), round(float(high), 6)


def score_tags(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: TagScheme,
               n_boot: int = 0, seed: int = 0) -> TagScores:
    """Token accuracy, macro-F1 over gold tags and, for an entity scheme, strict entity scores; with `n_boot`
    resamples, the main score's 95% interval over sentences (`main_interval`)."""
    from sklearn.metrics import f1_score

    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted, strict=False)):
        raise ValueError("gold and predicted tags must have the same sentences and the same number of words")
    flat_gold = np.array([t for s in gold for t in s], dtype=object)
    flat_pred = np.array([t for s in predicted for t in s], dtype=object)
    accuracy = float((flat_gold == flat_pred).mean()) if len(flat_gold) else 0.0
    labels = sorted(set(flat_gold.tolist()))
    macro = float(f1_score(flat_gold, flat_pred, labels=labels, average="macro", zero_division=0)) if labels else 0.0
    entities = score_entities(gold, predicted, scheme.name) if scheme.has_entities else None
    interval = main_interval(gold, predicted, scheme, n_boot, seed) if n_boot > 0 else None
    return TagScores(scheme.name, len(gold), len(flat_gold), accuracy, macro, entities, interval)
