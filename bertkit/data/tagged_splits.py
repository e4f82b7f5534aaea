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
    check_training_tags,
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
        """What the run's summary says of how the tags are read and scored (as the fine-tuning loop reads a split's
        notes): the scheme, then each corpus's notes (stray I- tags, unseen tags dropped or mapped)."""
        scheme = self.scheme
        corpora = [self.train, self.dev, *([self.test] if self.test is not None else [])]
        read = [note for corpus in corpora for note in corpus.notes]
        if scheme.source != scheme.name:
            return [f"{scheme.source} tags read as {scheme.name}", *read]
        return read if scheme.has_entities else ["plain tags (no entity scheme): scored by word accuracy", *read]

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
                         test: str | None = None, unseen_tags: str = "refuse") -> TaggedTraining:
    """--data, --dev and --test when given (files, or the hub dataset --data and its splits) read, checked (training
    data with one tag refused, also within --limit; a dev or test tag unseen in training refused, dropped or mapped
    as --unseen-tags says: `data.tagged.read_tagged_splits`) and kept (the first `limit` sentences of each)."""
    sources = tagged_sources(data, [dev] if test is None else [dev, test], config, train_split)
    train_corpus, dev_corpus, *test_corpus = read_tagged_splits(sources[0], sources[1:], columns, unseen_tags)

    def kept(corpus: TaggedCorpus) -> tuple[TaggedSentence, ...]:
        return tuple(corpus.head(limit) if limit else corpus.sentences())

    tested = test_corpus[0] if test_corpus else None
    train_sentences = kept(train_corpus)
    if limit:  # the whole file has two tags or more (`read_tagged_splits`); the sentences trained on may not
        check_training_tags(train_corpus, {tag for s in train_sentences for tag in s.tags}, limit)
    return TaggedTraining(train_corpus, dev_corpus, train_sentences, kept(dev_corpus), tested,
                          kept(tested) if tested is not None else ())


TAGGED_TRAINING_OPTIONS = ("data", "dev", "test", "text_column", "label_column", "tag_scheme", "data_config",
                           "train_split", "limit", "encoding", "unseen_tags")
"""The options `load_tagged_training_for` reads: what decides a run's tagged sentences and tags."""


def tagged_columns(options: DataOptions, tag_scheme: str = "auto") -> TaggedColumns:
    """How a command's data group reads tagged files: --text-column, --label-column, --encoding, and `tag_scheme`
    (--tag-scheme, where the command has it). Every command that reads tagged data builds its columns here."""
    return TaggedColumns(options.text_column, options.label_column, tag_scheme, options.encoding)


def load_tagged_training_for(options: DataOptions, tag_scheme: str, unseen_tags: str = "refuse") -> TaggedTraining:
    """The tagged data of a run's data group (a fine-tuning run's, or a sweep's: read once for all its trials) read
    in `tag_scheme` (--tag-scheme) with `unseen_tags` (--unseen-tags): --data, --dev and a labelled --test, their
    columns and encoding, the hub dataset's config and --train-split, --limit."""
    return load_tagged_training(str(options.data), str(options.dev), tagged_columns(options, tag_scheme),
                                options.data_config, options.train_split, options.limit, test=options.test,
                                unseen_tags=unseen_tags)
