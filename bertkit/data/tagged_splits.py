"""The tagged data of a training run (`bertkit finetune` or `sweep` on tagged data): --data, --dev and a labelled
--test read and checked as tagged corpora (`bertkit.data.tagged.read_tagged_splits`: columns, scheme, dev and
test tags seen in training), their
sentences kept in memory (the first --limit of each: a run holds its windows of word pieces anyway), the tags the
model outputs (the training corpus's, sorted) and what identifies each corpus in the run's resume key and cards."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.labels import TAGS_TASK, LabelMap
from bertkit.data.options import DataOptions
from bertkit.data.tagged import (
    TaggedColumns,
    TaggedCorpus,
    TaggedSentence,
    read_tagged_splits,
    tagged_sources,
)
from bertkit.data.tagscheme import TagScheme


@dataclass(frozen=True)
class TaggedTraining:
    """A run's tagged training, dev and (optional) test data: the corpora as checked, their sentences (within
    --limit), the tags (the training corpus's: the model's outputs in this order) and the scheme all are scored with."""

    train: TaggedCorpus
    dev: TaggedCorpus
    train_sentences: tuple[TaggedSentence, ...]
    dev_sentences: tuple[TaggedSentence, ...]
    test: TaggedCorpus | None = None
    """--test: scored at each new best and at the end (its tags seen in training); None without --test."""
    test_sentences: tuple[TaggedSentence, ...] = ()

    @property
    def tags(self) -> tuple[str, ...]:
        return self.train.tags

    @property
    def scheme(self) -> TagScheme:
        return self.train.scheme

    @property
    def label_map(self) -> LabelMap:
        """The model's outputs: one per training tag, in `tags`' order."""
        return LabelMap(self.tags, TAGS_TASK)

    @property
    def notes(self) -> list[str]:
        """What the run's summary says of how the tags are scored (as the fine-tuning loop reads a split's notes)."""
        scheme = self.scheme
        if scheme.source != scheme.name:
            return [f"{scheme.source} tags read as {scheme.name}"]
        return [] if scheme.has_entities else ["plain tags (no entity scheme): scored by word accuracy"]

    def fingerprints(self) -> dict[str, str]:
        """{train, dev}: each corpus's `corpus_fingerprint`."""
        return {"train": corpus_fingerprint(self.train), "dev": corpus_fingerprint(self.dev)}


def corpus_fingerprint(corpus: TaggedCorpus) -> str:
    """What identifies a tagged corpus in a run's resume key and cards: a file's sha256 (its first 16 hex digits),
    a hub split's name and `datasets` fingerprint."""
    identity = corpus.data_identity()
    if corpus.source.is_hub:
        return f"hub:{corpus.source}:{identity.get('data_fingerprint')}"
    return f"sha256:{str(identity['data_sha256'])[:16]}"


def load_tagged_training(data: str, dev: str, columns: TaggedColumns, config: str | None = None,
                         train_split: str = "train", limit: int | None = None,
                         test: str | None = None) -> TaggedTraining:
    """--data, --dev and --test when given (files, or the hub dataset --data and its splits) read, checked (a dev or
    test tag unseen in training refused: `data.tagged.check_dev_tags`) and kept (the first `limit` sentences of
    each)."""
    sources = tagged_sources(data, [dev] if test is None else [dev, test], config, train_split)
    train_corpus, dev_corpus, *test_corpus = read_tagged_splits(sources[0], sources[1:], columns)

    def kept(corpus: TaggedCorpus) -> tuple[TaggedSentence, ...]:
        return tuple(corpus.head(limit) if limit else corpus.sentences())

    tested = test_corpus[0] if test_corpus else None
    return TaggedTraining(train_corpus, dev_corpus, kept(train_corpus), kept(dev_corpus), tested,
                          kept(tested) if tested is not None else ())


TAGGED_TRAINING_OPTIONS = ("data", "dev", "test", "text_column", "label_column", "tag_scheme", "data_config",
                           "train_split", "limit")
"""The options `load_tagged_training_for` reads: what decides a run's tagged sentences and tags."""


def load_tagged_training_for(options: DataOptions, tag_scheme: str) -> TaggedTraining:
    """The tagged data of a run's data group (a fine-tuning run's, or a sweep's: read once for all its trials) read
    in `tag_scheme` (--tag-scheme): --data, --dev and a labelled --test, their columns, the hub dataset's config and
    --train-split, --limit."""
    columns = TaggedColumns(options.text_column, options.label_column, tag_scheme)
    return load_tagged_training(str(options.data), str(options.dev), columns, options.data_config,
                                options.train_split, options.limit, test=options.test)
