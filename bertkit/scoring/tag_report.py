"""The evaluation of a tagging model (what `evaluate` prints for one tag per word): the scores `score_tags` gives
every word table (token accuracy, macro-F1 over gold tags; for entity tags the per-type report with micro and macro
averages as conlleval counts entities, and seqeval's strict micro scores beside them), and what a person reads next
to find the mistakes (entities counted as the headline counts them, `entities.read_entities`):

- entity tags: a confusion of entity types over entities with the same boundaries, with a `none` row for predicted
  entities no gold entity has the boundaries of and a `none` column for gold entities no prediction has the
  boundaries of; and the error counts (`EntityErrors`: missed, spurious, wrong type, wrong boundary, both);
- plain tags (POS, scheme none): precision, recall and F1 per tag and a tag x tag confusion over words.

Gold is read with the recorded scheme first (IOB1 rewritten as IOB2, I_ORG spelled I-ORG), as everything scored
from that corpus was. Predicted tags are only respelled, never rewritten from IOB1: a model trained on the scored
scheme predicts it. A predicted I- with no B- before it opens an entity in the headline (conlleval's reading, the
one `predict`'s spans and the transformers pipeline show) and is none in the strict scores beside it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bertkit.data.tagscheme import TagScheme, canonical_tags, normalised_tags
from bertkit.scoring.entities import TagScores, TypeScore, read_entities, score_tags

NONE = "none"
"""The confusion's row and column for an entity with no counterpart of the same boundaries."""

Entity = tuple[str, int, int]
"""(type, first word, end word exclusive), as `read_entities` gives them."""


@dataclass(frozen=True)
class Confusion:
    """Counts of gold labels (rows) against predicted labels (columns), both in the order of `labels`."""

    labels: tuple[str, ...]
    counts: tuple[tuple[int, ...], ...]

    def count(self, gold: str, predicted: str) -> int:
        """How often `gold` was predicted as `predicted` (0 for a label the confusion does not have)."""
        if gold not in self.labels or predicted not in self.labels:
            return 0
        return self.counts[self.labels.index(gold)][self.labels.index(predicted)]

    def to_json(self) -> dict[str, Any]:
        return {"labels": list(self.labels), "counts": [list(row) for row in self.counts]}


@dataclass(frozen=True)
class EntityErrors:
    """Each predicted entity counted once, by the first that holds: `correct` (a gold entity of the same type and
    boundaries), `wrong_type` (same boundaries, other type), `wrong_boundary` (overlaps a gold entity of its type),
    `wrong_type_and_boundary` (overlaps gold entities of other types only), `spurious` (overlaps none); and each gold
    entity no prediction overlaps counted as `missed`. So correct + the four prediction errors = predicted entities.
    Entities are the ones the headline F1 counts (conlleval's reading: a predicted I- with no B- before it opens
    one)."""

    correct: int
    missed: int
    spurious: int
    wrong_type: int
    wrong_boundary: int
    wrong_type_and_boundary: int

    @property
    def predicted(self) -> int:
        """The predicted entities: each counted once, as correct or as one of the four prediction errors."""
        return self.correct + self.false_positives

    @property
    def false_positives(self) -> int:
        """seqeval's false positives, split into the four prediction errors."""
        return self.wrong_type + self.wrong_boundary + self.wrong_type_and_boundary + self.spurious

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class TagMistakes:
    """Where the tags went wrong, beside the scores: the confusion (entity types with `none`, or tags), and the
    entity errors (entity tags) or the per-tag scores (plain tags, where entity errors do not apply)."""

    confusion: Confusion
    errors: EntityErrors | None = None
    """Entity tags only."""
    per_tag: Mapping[str, TypeScore] | None = None
    """Plain tags only: every tag of gold or predictions, `support` its gold words, `predicted` its predicted ones."""

    def to_json(self) -> dict[str, Any]:
        return {"confusion": self.confusion.to_json(),
                "errors": self.errors.to_json() if self.errors is not None else None,
                "per_tag": {tag: asdict(row) for tag, row in self.per_tag.items()} if self.per_tag is not None
                else None}


@dataclass(frozen=True)
class TagReport:
    """What `evaluate` prints for a tagging model: the word table's scores and its `TagMistakes`."""

    scores: TagScores
    mistakes: TagMistakes

    def to_json(self) -> dict[str, Any]:
        return {**self.scores.to_json(), "main": self.scores.main, "main_name": self.scores.main_name,
                **self.mistakes.to_json()}


def tag_report(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], scheme: TagScheme,
               n_boot: int = 0, seed: int = 0) -> TagReport:
    """The report of `predicted` against `gold` (one tag per word, sentence by sentence) in the recorded `scheme`;
    with `n_boot` resamples, the main score's 95% interval over sentences (`entities.main_interval`)."""
    gold = [normalised_tags(sentence, scheme) for sentence in gold]
    predicted = [canonical_tags(s) if scheme.has_entities else list(s) for s in predicted]
    scores = score_tags(gold, predicted, scheme, n_boot, seed)  # also refuses sentences of different lengths
    if not scheme.has_entities:
        return TagReport(scores, TagMistakes(tag_confusion(gold, predicted), per_tag=per_tag_scores(gold, predicted)))
    gold_entities, predicted_entities = read_entities(gold, scheme.name), read_entities(predicted, scheme.name)
    return TagReport(scores, TagMistakes(entity_confusion(gold_entities, predicted_entities),
                                         errors=entity_errors(gold_entities, predicted_entities)))


def _confusion(pairs: Iterable[tuple[str, str]], labels: Iterable[str]) -> Confusion:
    counted = Counter(pairs)
    order = tuple(labels)
    return Confusion(order, tuple(tuple(counted[(g, p)] for p in order) for g in order))


def tag_confusion(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> Confusion:
    """Words by gold tag (rows) and predicted tag (columns), tags sorted."""
    pairs = [(g, p) for gs, ps in zip(gold, predicted, strict=True) for g, p in zip(gs, ps, strict=True)]
    return _confusion(pairs, sorted({t for pair in pairs for t in pair}))


def entity_confusion(gold: Sequence[set[Entity]], predicted: Sequence[set[Entity]]) -> Confusion:
    """Entities by gold type (rows) and predicted type (columns), paired when their boundaries are the same; an
    entity with no counterpart of its boundaries counts in `none` (missed and spurious ones, and boundary errors
    too, which `EntityErrors` tells apart). Rows sum to each type's gold entities, columns to its predicted ones."""
    pairs: list[tuple[str, str]] = []
    for gold_here, predicted_here in zip(gold, predicted, strict=True):
        gold_at = {(start, end): kind for kind, start, end in gold_here}
        predicted_at = {(start, end): kind for kind, start, end in predicted_here}
        pairs += [(kind, predicted_at.get(at, NONE)) for at, kind in gold_at.items()]
        pairs += [(NONE, kind) for at, kind in predicted_at.items() if at not in gold_at]
    types = sorted({t for pair in pairs for t in pair} - {NONE})
    return _confusion(pairs, [*types, NONE])


def _overlaps(a: Entity, b: Entity) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def _prediction_kind(entity: Entity, gold: set[Entity]) -> str:
    """Which `EntityErrors` field (or `correct`) a predicted entity counts in, given its sentence's gold entities."""
    if entity in gold:
        return "correct"
    if any(g[1:] == entity[1:] for g in gold):
        return "wrong_type"
    overlapping = [g for g in gold if _overlaps(g, entity)]
    if any(g[0] == entity[0] for g in overlapping):
        return "wrong_boundary"
    return "wrong_type_and_boundary" if overlapping else "spurious"


def entity_errors(gold: Sequence[set[Entity]], predicted: Sequence[set[Entity]]) -> EntityErrors:
    """The error counts of `EntityErrors` over all sentences."""
    kinds: Counter[str] = Counter()
    for gold_here, predicted_here in zip(gold, predicted, strict=True):
        kinds.update(_prediction_kind(entity, gold_here) for entity in predicted_here)
        kinds["missed"] += sum(not any(_overlaps(g, p) for p in predicted_here) for g in gold_here)
    return EntityErrors(kinds["correct"], kinds["missed"], kinds["spurious"], kinds["wrong_type"],
                        kinds["wrong_boundary"], kinds["wrong_type_and_boundary"])


def per_tag_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, TypeScore]:
    """Precision, recall and F1 of every tag in gold or predictions, over words (sklearn's, 0 where undefined)."""
    from sklearn.metrics import precision_recall_fscore_support

    flat_gold = [t for s in gold for t in s]
    flat_predicted = [t for s in predicted for t in s]
    tags = sorted(set(flat_gold) | set(flat_predicted))
    if not tags:
        return {}
    precision, recall, f1, support = precision_recall_fscore_support(flat_gold, flat_predicted, labels=tags,
                                                                     zero_division=0)
    predicted_counts = Counter(flat_predicted)
    return {tag: TypeScore(float(precision[i]), float(recall[i]), float(f1[i]), int(support[i]),
                           predicted_counts[tag]) for i, tag in enumerate(tags)}
