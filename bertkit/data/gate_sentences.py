"""The sentences a tagging model's export gate reads (`bertkit export`; compared by `bertkit.scoring.tag_gate`):
--data as a tagged corpus (its gold tags read too, with the columns given) or a text file of one sentence per line
(no gold), or, without --data, the dev set of the `bertkit finetune` run the model was saved in, read as that run
read it (its --data, --dev, columns and tag scheme, from the config it recorded)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tagged import (
    TaggedColumns,
    TaggedCorpus,
    is_file_value,
    is_tagged_file,
    read_tagged,
    tagged_sources,
)
from bertkit.data.tagged_splits import corpus_fingerprint
from bertkit.data.word_lines import file_sentences
from bertkit.errors import UserError
from bertkit.io.digests import file_digest


@dataclass(frozen=True)
class GateSentences:
    """The sentences a tagger's export gate reads: their words, and the corpus they came from when it is tagged
    (its gold tags, in the order of `words`)."""

    source: str
    fingerprint: str
    words: tuple[tuple[str, ...], ...]
    gold: tuple[tuple[str, ...], ...] | None = None
    corpus: TaggedCorpus | None = None

    def __len__(self) -> int:
        return len(self.words)


def read_gate_sentences(data: str, columns: TaggedColumns, limit: int | None = None, data_config: str | None = None,
                        split: str = "train") -> GateSentences:
    """--data for a tagger's gate (the first `limit` sentences): a tagged corpus (a column file, JSON or parquet
    rows with word and tag lists, or the `split` of a hub dataset), or sentences without tags as `file_sentences`
    reads them (plain text, a table's --text-column), in `columns`' encoding."""
    if is_file_value(data) and Path(data).expanduser().is_file() and not is_tagged_file(data):
        words = tuple(s.words for s in file_sentences(data, columns, limit=limit))
        return GateSentences(data, f"sha256:{file_digest(Path(data).expanduser())[1][:16]}", words)
    return tagged_gate_sentences(read_tagged(tagged_sources(data, [], data_config, split)[0], columns), limit)


def tagged_gate_sentences(corpus: TaggedCorpus, limit: int | None = None) -> GateSentences:
    """A tagged corpus's first `limit` sentences, with their gold tags."""
    sentences = corpus.head(limit) if limit else list(corpus.sentences())
    return GateSentences(str(corpus.source), corpus_fingerprint(corpus), tuple(s.words for s in sentences),
                         tuple(s.tags for s in sentences), corpus)


def run_dev_sentences(config: dict[str, Any], limit: int | None = None) -> GateSentences:
    """The dev set of a `bertkit finetune` run on tagged data, from its recorded config (paths as it read them):
    --dev, a file or a split of the hub dataset --data, with the run's columns and tag scheme."""
    def given(key: str, default: Any = None) -> Any:
        value = config.get(key, default)
        return None if value is None else str(value)

    if not given("data") or not given("dev"):
        raise UserError("the run records no --data and --dev")
    columns = TaggedColumns(given("text_column"), given("label_column"), given("tag_scheme", "auto") or "auto",
                            given("encoding", "utf-8") or "utf-8")
    sources = tagged_sources(given("data") or "", [given("dev") or ""], given("data_config"),
                             given("train_split", "train") or "train")
    return tagged_gate_sentences(read_tagged(sources[1], columns), limit)
