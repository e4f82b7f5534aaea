"""Scores of tag sequences (one tag per word): token accuracy and macro-F1 over the gold tags for every tag set, and
for entity tags entity-level precision, recall and F1 counted two ways, with the corpus's recorded scheme (IOB2 or
IOBES; IOB1 files are read as IOB2 before they get here):

- the headline (`precision`, `recall`, `f1`, the macro averages and the per-type scores): conlleval's counting, the
  F1 the CoNLL shared task, the BERT paper and transformers' `run_ner.py` (seqeval's default mode) report, where an
  `I-X` after `O` (or after another type) opens an entity as a `B-X` would;
- beside it (`precision_strict`, `recall_strict`, `f1_strict`): seqeval's strict mode, where such an `I-X` breaks
  the scheme and is no entity at all.

On IOB2 predictions without stray `I-` tags the two are equal. A score with nothing to count is undefined (None),
never NaN and never a 0 that reads as a result: recall and F1 without any gold entity, a macro average without any
entity type. With a 95% bootstrap interval of the main score over sentences (`main_interval`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bertkit.data.tagscheme import TagScheme
from bertkit.scoring.intervals import resample_counts

BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the dev sentences behind a word table's intervals."""
CONLLEVAL = "conlleval"
STRICT = "strict"
ENTITY_COUNTINGS = (CONLLEVAL, STRICT)
"""How entities are read from tags: conlleval's way (the headline) and seqeval's strict mode (beside it)."""

Entity = tuple[str, int, int]
"""(type, first word, end word exclusive)."""


@dataclass(frozen=True)
class TypeScore:
    """One entity type's scores (conlleval counting); `support` is its gold entities, `predicted` its predicted
    ones. A type one side lacks scores 0 where undefined, as seqeval's report does."""

    precision: float
    recall: float
    f1: float
    support: int
    predicted: int


@dataclass(frozen=True)
class EntityScores:
    """Entity-level scores: micro over all entities, macro over types and per type, counted as conlleval counts
    (the headline); micro precision, recall and F1 in seqeval's strict mode beside them. None: undefined (no gold
    entity: recall and F1; no entity at all: precision; no type: the macro averages)."""

    precision: float | None
    recall: float | None
    f1: float | None
    macro_precision: float | None
    macro_recall: float | None
    macro_f1: float | None
    n_gold: int
    n_predicted: int
    per_type: Mapping[str, TypeScore] = field(default_factory=dict)
    precision_strict: float | None = None
    recall_strict: float | None = None
    f1_strict: float | None = None
    n_gold_strict: int = 0
    n_predicted_strict: int = 0
    counting: str = CONLLEVAL
    """How the headline counts entities (records without this key counted them strictly)."""


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
    """95% bootstrap interval of `main`, dev sentences resampled with replacement (None when not asked for, or when
    `main` is undefined)."""

    @property
    def main(self) -> float | None:
        """The number a table ranks by: entity F1 (conlleval counting; None without gold entities) for entity tags,
        else token accuracy."""
        return self.entities.f1 if self.entities is not None else self.token_accuracy

    @property
    def main_strict(self) -> float | None:
        """`main` with entities read in seqeval's strict mode (token accuracy for plain tags)."""
        return self.entities.f1_strict if self.entities is not None else self.token_accuracy

    @property
    def main_name(self) -> str:
        return "entity F1" if self.entities is not None else "token accuracy"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def seqeval_scheme(name: str) -> Any:
    from seqeval.scheme import IOB2, IOBES

    return {"IOB2": IOB2, "IOBES": IOBES}[name]


def read_entities(tags: Sequence[Sequence[str]], scheme: str, counting: str = CONLLEVAL) -> list[set[Entity]]:
    """Per sentence, the entities the tags mark, as (type, first word, end word exclusive): read as conlleval reads
    them (seqeval's default mode: an I- that continues no entity opens one) or, `counting` strict, as seqeval's strict
    mode with `scheme` reads them (such an I- is no entity)."""
    if counting == STRICT:
        from seqeval.scheme import Entities

        sentences = Entities([list(s) for s in tags], seqeval_scheme(scheme), suffix=False).entities
        return [{(e.tag, e.start, e.end) for e in sentence} for sentence in sentences]
    from seqeval.metrics.sequence_labeling import get_entities

    return [{(kind, start, end + 1) for kind, start, end in get_entities(list(sentence))} for sentence in tags]


def _ratio(hits: int, total: int) -> float | None:
    return hits / total if total else None


def _micro(gold: Sequence[set[Entity]], predicted: Sequence[set[Entity]]) -> tuple[Any, ...]:
    """(precision, recall, F1, gold entities, predicted entities): None where undefined (module docstring)."""
    hits = sum(len(g & p) for g, p in zip(gold, predicted, strict=True))
    n_gold, n_predicted = sum(map(len, gold)), sum(map(len, predicted))
    precision = hits / n_predicted if n_predicted else (0.0 if n_gold else None)  # seqeval's 0: nothing found
    return (precision, _ratio(hits, n_gold), _ratio(2 * hits, n_gold + n_predicted) if n_gold else None, n_gold,
            n_predicted)


def _per_type(gold: Sequence[set[Entity]], predicted: Sequence[set[Entity]]) -> dict[str, TypeScore]:
    """Every type of gold or predictions: precision, recall and F1 (0 where undefined: seqeval's zero_division)."""
    counts: dict[str, list[int]] = {}
    for gold_here, predicted_here in zip(gold, predicted, strict=True):
        for index, entities in enumerate((gold_here & predicted_here, gold_here, predicted_here)):
            for kind, _, _ in entities:
                counts.setdefault(kind, [0, 0, 0])[index] += 1
    return {kind: TypeScore(hits / n_pred if n_pred else 0.0, hits / n_gold if n_gold else 0.0,
                            2 * hits / (n_gold + n_pred), n_gold, n_pred)
            for kind, (hits, n_gold, n_pred) in sorted(counts.items())}


def score_entities(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: str) -> EntityScores:
    """Entity scores of `predicted` against `gold` with `scheme` (IOB2 or IOBES): conlleval's counting for the
    headline, micro, macro and per type (equal to seqeval's default mode), and seqeval's strict mode beside it."""
    read = {counting: (read_entities(gold, scheme, counting), read_entities(predicted, scheme, counting))
            for counting in ENTITY_COUNTINGS}
    precision, recall, f1, n_gold, n_predicted = _micro(*read[CONLLEVAL])
    strict = _micro(*read[STRICT])
    per_type = _per_type(*read[CONLLEVAL])

    def macro(name: str) -> float | None:
        return float(np.mean([getattr(row, name) for row in per_type.values()])) if per_type else None

    return EntityScores(precision, recall, f1, macro("precision"), macro("recall"), macro("f1"), n_gold, n_predicted,
                        per_type, strict[0], strict[1], strict[2], strict[3], strict[4])


def sentence_counts(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    scheme: TagScheme) -> np.ndarray:
    """(sentences, 3) counts whose sums give the main score as 2 * hits / (predicted + gold): per sentence the
    matched entities, predicted and gold entities as conlleval counts them (entity tags: micro F1), or the right
    words and the words twice (plain tags: 2c / 2n is token accuracy). Sums, so a resample of sentences is a
    weighted sum."""
    if not scheme.has_entities:
        right = [sum(g == p for g, p in zip(gs, ps, strict=True)) for gs, ps in zip(gold, predicted, strict=True)]
        sizes = [len(gs) for gs in gold]
        return np.array([right, sizes, sizes], dtype=np.float64).T.reshape(len(gold), 3)
    found = [read_entities(y, scheme.name) for y in (gold, predicted)]
    return np.array([[len(g & p), len(p), len(g)] for g, p in zip(*found, strict=True)],
                    dtype=np.float64).reshape(len(gold), 3)


def main_interval(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: TagScheme,
                  n_boot: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile 95% interval of the main score (entity F1 as conlleval counts, or token accuracy) over `n_boot`
    resamples of the sentences, not the words: words of a sentence are not independent draws. The same seed gives
    every row of a table the same resamples, so rows are compared on the same sentences. None with no sentences, or
    no gold entity (the score itself is undefined then)."""
    counts = sentence_counts(gold, predicted, scheme)
    if not len(counts) or n_boot < 1 or (scheme.has_entities and not counts[:, 2].sum()):
        return None
    sums = np.concatenate([w @ counts for w in resample_counts(len(counts), n_boot, seed)])
    denominator = sums[:, 1] + sums[:, 2]
    scores = np.divide(2 * sums[:, 0], denominator, out=np.zeros(len(sums)), where=denominator > 0)
    low, high = np.percentile(scores, [2.5, 97.5])
    return round(float(low), 6), round(float(high), 6)


def score_tags(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: TagScheme,
               n_boot: int = 0, seed: int = 0) -> TagScores:
    """Token accuracy, macro-F1 over gold tags and, for an entity scheme, entity scores (conlleval's counting, seqeval's
    strict mode beside it); with `n_boot` resamples, the main score's 95% interval over sentences (`main_interval`)."""
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
