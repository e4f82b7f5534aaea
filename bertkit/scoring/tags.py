"""Tagging (one tag per word) as fine-tuning optimises and scores it: `TagObjective`, what the training loop asks for
a batch's loss and for the scores of the dev logits (the contract of `bertkit.scoring.shapes`: `loss(logits, rows)`,
`score(logits)`, `label_names`, `y_dev`, `table_metrics`), and the metric names of a tagging run.

The loss is cross-entropy over the labelled pieces of a batch's windows (`bertkit.encoding.word_labels`: each word's
first piece, or every piece with --label-all-pieces), in fp32. The scores are the words': each dev word's tag is the
argmax at its first piece in the window where it has the most context, scored with the recorded scheme
(`bertkit.scoring.entities.score_tags`). The names are run_ner's and seqeval's: `f1`, `precision`, `recall`
(entities, micro, counted as conlleval and run_ner count them: seqeval's default mode, where an I- after O opens an
entity), `macro_f1` (over entity types, with `macro_precision` and `macro_recall`), `accuracy` (words), with per-type
P/R/F1 (`per_type`), `f1_strict`, `precision_strict`, `recall_strict` (seqeval's strict mode: such an I- is no
entity), `entity_counting` (conlleval: how `f1` counts), the main score's 95% bootstrap interval over dev sentences and
`loss` (mean over dev words); plain tags (POS): `accuracy` and `macro_f1` (over tags). A score with nothing to count
(no gold entity) is None. A labelled --test split is scored the same way, by the objective made for its windows
(`TagObjective.for_split`). Records written before `entity_counting` existed hold strict scores under `f1`:
`read_tag_scores_record` reads them as such."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.rows import TokenRows
from bertkit.encoding.word_labels import IGNORE, LabelledWindows
from bertkit.errors import UserError
from bertkit.io import atomic
from bertkit.scoring.entities import BOOTSTRAP_RESAMPLES, score_tags
from bertkit.scoring.shapes import Scored
from bertkit.scoring.table import softmax

ENTITY_METRICS = ("f1", "precision", "recall", "macro_f1", "accuracy")
"""Dev metrics of entity tags: entity micro F1/P/R (conlleval's counting), entity macro F1, word accuracy (the first
picks best/)."""
STRICT_METRICS = ("f1_strict", "precision_strict", "recall_strict")
"""Entity micro F1/P/R in seqeval's strict mode: recorded beside the headline in every tagging record."""
PLAIN_METRICS = ("accuracy", "macro_f1")
"""Dev metrics of plain tags (POS): word accuracy, macro F1 over the tags (the first picks best/)."""


def tag_metrics(scheme: TagScheme) -> tuple[str, ...]:
    """The dev metrics a tagging run with `scheme` reports, the default --metric-for-best first."""
    return ENTITY_METRICS if scheme.has_entities else PLAIN_METRICS


def tag_metric_for_best(requested: str | None, scheme: TagScheme) -> str:
    """--metric-for-best on tagged data: one of the tag metrics or loss (None: entity F1, or word accuracy for plain
    tags); another is refused, naming the valid ones."""
    valid = (*tag_metrics(scheme), "loss")
    if requested is None:
        return valid[0]
    if requested not in valid:
        kind = "entity tags" if scheme.has_entities else "plain tags (no entities)"
        raise UserError(f"--metric-for-best {requested} is not a score of tagged data with {kind}: valid are "
                        f"{', '.join(valid)}. Pass one of them, or drop --metric-for-best (default {valid[0]}).")
    return requested


def tag_class_weights(tag_ids: np.ndarray, n_tags: int) -> np.ndarray:
    """--class-weight balanced on words: scikit-learn's inverse-frequency weights of the training words' tags (a tag
    no training word has: 1)."""
    from sklearn.utils.class_weight import compute_class_weight

    classes = np.arange(n_tags)
    present = np.isin(classes, tag_ids)
    weights = np.ones(n_tags)
    weights[present] = compute_class_weight("balanced", classes=classes[present], y=tag_ids)
    return weights


class TagObjective:
    """Cross-entropy over the labelled pieces of the training windows; dev scores per word (module docstring)."""

    def __init__(self, train_labels: TokenRows, dev: LabelledWindows, dev_words: Sequence[str],
                 tags: Sequence[str], scheme: TagScheme, class_weights: np.ndarray | None = None,
                 seed: int = 0) -> None:
        self.labels, self.dev, self.dev_words = train_labels, dev, list(dev_words)
        self.label_names, self.scheme, self.seed = list(tags), scheme, seed
        self.y_dev = dev.tag_ids
        self.table_metrics = ("f1", "precision", "recall", "accuracy") if scheme.has_entities else PLAIN_METRICS
        self._weights = class_weights
        self._weight: torch.Tensor | None = None

    @property
    def num_outputs(self) -> int:
        return len(self.label_names)

    def for_split(self, windows: LabelledWindows, words: Sequence[str]) -> TagObjective:
        """This objective scoring another split's windows (a labelled --test: at each new best and at the end) with
        the same tags, scheme and seed; its loss is the training windows' as here."""
        split = TagObjective(self.labels, windows, words, self.label_names, self.scheme, self._weights, self.seed)
        split._weight = self._weight  # on the device this one was moved to
        return split

    def to(self, device: torch.device) -> TagObjective:
        if self._weights is not None:
            self._weight = torch.tensor(self._weights, dtype=torch.float32, device=device)
        return self

    def loss(self, logits: torch.Tensor, rows: Any) -> torch.Tensor:
        """Mean cross-entropy over the labelled pieces of windows `rows` (weighted mean with class weights; a batch
        without any labelled piece gives 0), in fp32."""
        rows = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        labels = torch.as_tensor(self.labels.padded(rows, logits.shape[1], IGNORE)[0], device=logits.device)
        flat_labels = labels.reshape(-1)
        weight = None if self._weight is None else self._weight.to(logits.device)
        total = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), flat_labels,
                                                  weight=weight, ignore_index=IGNORE, reduction="sum")
        kept = flat_labels[flat_labels != IGNORE]
        count = weight[kept].sum() if weight is not None else torch.tensor(float(len(kept)), device=logits.device)
        return total / count.clamp(min=1e-12)

    def word_outputs(self, logits: np.ndarray) -> np.ndarray:
        """Each dev word's tag probabilities (words, tags) from the windows' logits (windows, pieces, tags)."""
        return softmax(np.asarray(logits, dtype=np.float64)[self.dev.word_window, self.dev.word_start])

    def score(self, logits: np.ndarray) -> Scored:
        """The dev words' scores (module docstring); outputs: their tag probabilities, decisions: their tag ids."""
        proba = self.word_outputs(logits)
        pred = proba.argmax(axis=1)
        y = self.y_dev
        loss = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-12, None)))) if len(y) else 0.0
        names = np.asarray(self.label_names, dtype=object)
        gold, predicted = self.sentences(names[y]), self.sentences(names[pred])
        metrics = tag_scores_record(score_tags(gold, predicted, self.scheme, BOOTSTRAP_RESAMPLES, self.seed))
        return Scored({**metrics, "loss": loss}, proba.astype(np.float32), pred)

    def sentences(self, flat: np.ndarray) -> list[list[str]]:
        """Per-word values cut into the dev sentences."""
        offsets = self.dev.sentence_offsets
        return [flat[offsets[s]:offsets[s + 1]].tolist() for s in range(len(offsets) - 1)]

    def write_errors(self, path: Path, proba: np.ndarray) -> int:
        """dev_errors.csv of a tagging run: one row per dev word whose predicted tag is wrong (sentence, word index,
        word, gold and predicted tag, the prediction's probability), most confident first. Returns the rows."""
        pred = proba.argmax(axis=1)
        wrong = np.flatnonzero(pred != self.y_dev)
        wrong = wrong[np.argsort(-proba[wrong, pred[wrong]], kind="stable")]
        sentence = np.searchsorted(self.dev.sentence_offsets, wrong, side="right") - 1
        with atomic.atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("sentence", "word_index", "word", "gold", "predicted", "probability"))
            for w, s in zip(wrong.tolist(), sentence.tolist(), strict=True):
                writer.writerow((s, w - int(self.dev.sentence_offsets[s]), self.dev_words[w],
                                 self.label_names[self.y_dev[w]], self.label_names[pred[w]],
                                 round(float(proba[w, pred[w]]), 6)))
        return len(wrong)


def tag_scores_record(scores: Any) -> dict[str, Any]:
    """A `TagScores` under the metric names of a tagging run (module docstring), with `n` words, `sentences`, the
    `scheme`, `per_type` (entity tags) and the main score's interval under `intervals`."""
    record: dict[str, Any] = {"accuracy": scores.token_accuracy, "n": scores.n_words, "sentences": scores.n_sentences,
                              "scheme": scores.scheme}
    entities = scores.entities
    if entities is None:
        record["macro_f1"] = scores.tag_macro_f1
    else:
        record.update(f1=entities.f1, precision=entities.precision, recall=entities.recall,
                      f1_strict=entities.f1_strict, precision_strict=entities.precision_strict,
                      recall_strict=entities.recall_strict, entity_counting=entities.counting,
                      macro_f1=entities.macro_f1, macro_precision=entities.macro_precision,
                      macro_recall=entities.macro_recall, tag_macro_f1=scores.tag_macro_f1, entities=entities.n_gold,
                      predicted_entities=entities.n_predicted,
                      per_type={name: asdict(row) for name, row in sorted(entities.per_type.items())})
    if scores.interval is not None:
        record["intervals"] = {"f1" if entities is not None else "accuracy": list(scores.interval)}
    return record


def read_tag_scores_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A tagging record (metrics.json's scores, evaluate's, a card's) as today's names mean: one written before the
    headline counted entities as conlleval does (no `entity_counting`) holds strict scores under `f1`, `precision`
    and `recall`: they move to `f1_strict`, `precision_strict`, `recall_strict`, the headline's become None (not
    recomputable from a record) and `entity_counting` says strict (its macro and per-type scores were counted so
    too). Plain tags and today's records are returned as they are."""
    out = dict(record)
    if out.get("entity_counting") is not None or "f1" not in out or out.get("scheme") == "none":
        return out
    for name in ("f1", "precision", "recall"):
        out[f"{name}_strict"] = out.pop(name)
        out[name] = None
    out["entity_counting"] = "strict"
    return out
