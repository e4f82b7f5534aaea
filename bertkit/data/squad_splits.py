"""A question-answering run's data: its training, dev and (optional) test questions (`QATraining`), read and checked
whole by `bertkit.data.squad.read_squad` before torch is imported (`load_qa_training`): --data a SQuAD file or a hub
dataset (squad, squad_v2), --dev and --test files or splits of that hub dataset, the first --limit questions of
each kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.data.labels import SPANS_TASK, LabelMap
from bertkit.data.squad import DataSource, QACorpus, Question, read_squad
from bertkit.data.tagged import is_file_value
from bertkit.errors import UserError

OUTPUTS = ("start", "end")
"""A question-answering head's two outputs per token: the answer's first and last token."""


@dataclass(frozen=True)
class QATraining:
    """A run's training, dev and (optional) test questions: the sets as checked and the questions kept of each
    (within --limit). The model learns unanswerable questions when its training set is SQuAD v2.0 (`allow_null`);
    dev and test are scored by their own version's rules."""

    train: QACorpus
    dev: QACorpus
    train_questions: tuple[Question, ...]
    dev_questions: tuple[Question, ...]
    test: QACorpus | None = None
    """--test: scored like dev at each new best and at the end; None without --test."""
    test_questions: tuple[Question, ...] = ()

    @property
    def allow_null(self) -> bool:
        """Whether the model may answer "no answer" (SQuAD v2.0 training data)."""
        return self.train.version == "2.0"

    @property
    def label_map(self) -> LabelMap:
        """The model's outputs: a start and an end score per token."""
        return LabelMap(OUTPUTS, SPANS_TASK)

    @property
    def notes(self) -> list[str]:
        """What the run's summary says of how the sets' versions meet (as the fine-tuning loop reads a split's
        notes)."""
        if self.train.version == self.dev.version:
            return []
        if self.allow_null:
            return [f"{self.dev.source} is SQuAD v{self.dev.version} (every question answered) but the training set "
                    f"is v2.0: dev is scored by the v1.1 rules, and an answer left empty scores 0"]
        return [f"{self.dev.source} is SQuAD v2.0 but the training set {self.train.source} is v1.1: the model "
                f"always answers, so dev's unanswerable questions score 0"]

    def fingerprints(self) -> dict[str, str]:
        """{train, dev}: each set's `qa_fingerprint`."""
        return {"train": qa_fingerprint(self.train), "dev": qa_fingerprint(self.dev)}


def qa_fingerprint(corpus: QACorpus) -> str:
    """What identifies a question set in a run's resume key and cards: a file's sha256 (its first 16 hex digits), a
    hub split's name and `datasets` fingerprint."""
    identity = corpus.data_identity()
    if corpus.source.is_hub:
        return f"hub:{corpus.source}:{identity.get('data_fingerprint')}"
    return f"sha256:{str(identity['data_sha256'])[:16]}"


def qa_source(value: str, option: str, data: str, config: str | None) -> DataSource:
    """Where --dev or --test (`option`) reads: a file, or a split of the hub dataset --data."""
    if is_file_value(value):
        return DataSource(value)
    if is_file_value(data):
        raise UserError(f"{option} {value} is not a file, and --data {data} is a file (not a hub dataset whose split "
                        f"it could name). Valid: a SQuAD file (.json, .jsonl, .csv, .parquet), or a split name with a "
                        f"hub --data such as squad. Pass {option} as a file path.")
    return DataSource(data, value, config)


def load_qa_training(inputs: Any) -> QATraining:
    """--data, --dev and --test when given (files, or the hub dataset --data and its splits), each read and checked
    whole (`read_squad`: every problem named with its question id), the first --limit questions of each kept. A
    question id in both the training and the dev set is refused: dev would score questions the model learnt."""
    data, config = str(inputs.data), inputs.data_config
    train_source = DataSource(data) if is_file_value(data) else DataSource(data, inputs.train_split, config)
    train = read_squad(train_source)
    dev = read_squad(qa_source(str(inputs.dev), "--dev", data, config))
    test = read_squad(qa_source(str(inputs.test), "--test", data, config)) if inputs.test is not None else None
    limit = inputs.limit

    def kept(corpus: QACorpus) -> tuple[Question, ...]:
        return corpus.questions[:limit] if limit else corpus.questions

    shared = sorted({q.id for q in kept(train)} & {q.id for q in kept(dev)})
    if shared:
        raise UserError(f"{len(shared)} question id(s) are in both the training set {train.source} and the dev set "
                        f"{dev.source} (the first is {shared[0]!r}): dev would score questions the model learnt. "
                        f"Valid: disjoint sets. Pass a dev set of other questions.")
    return QATraining(train, dev, kept(train), kept(dev), test, kept(test) if test is not None else ())
