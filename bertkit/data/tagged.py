"""Tagged corpora (one tag per word): CoNLL-style column files and JSON(L) rows with list columns, read as
`TaggedSentence`s one at a time so a corpus of any size costs the memory of one chunk.

`read_tagged` checks a file in one streaming pass (ragged rows, a tag column that is not tags, empty sentences,
the tag scheme) and returns a `TaggedCorpus`: counts, tags and scheme, plus `sentences()`/`chunks()` that read the
file again with the tags as scored (IOB1 rewritten as IOB2). Column files: one word per line, a blank line between
sentences, `-DOCSTART-` lines and `#` comment lines skipped (a line starting with `#` and a TAB is the word `#`),
fields split on TABs when a line has one, else on whitespace. The raw line and row readers are `tagged_rows`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit.data.tagged_rows import (
    RawSentence,
    column_sentences,
    is_json_path,
    json_sentences,
    resolve_file_columns,
)
from bertkit.data.tagscheme import SCHEMES, SchemeEvidence, TagScheme, is_entity_tag, normalised_tags
from bertkit.errors import UserError

CHUNK_SENTENCES = 1000
TAGGED_SUFFIXES = (".iob2", ".iob", ".bio", ".conll", ".conllu")
"""Extensions that name a CoNLL-style column file (one word per line): always read as a tagged corpus."""
SNIFF_LINES = 400
"""Lines read to tell a column file with another extension (.tsv, .txt) from a table of sentences."""
"""Sentences per chunk when a corpus is read in chunks (`TaggedCorpus.chunks`)."""


@dataclass(frozen=True)
class TaggedColumns:
    """Which fields of a tagged file are the words and the tags, and their scheme: as given (None: detected), and
    as resolved by `read_tagged` (a column index as text for column files, a key for JSON rows)."""

    word_column: str | None = None
    """--text-column: a column index (0-based; negative counts from the end) or name; JSON: a key (tokens, words)."""
    tag_column: str | None = None
    """--label-column: as --text-column; JSON: a key (tags, ner_tags, pos_tags)."""
    tag_scheme: str = "auto"
    """--tag-scheme: auto, IOB1, IOB2, IOBES or none (plain labels such as POS)."""

    def __post_init__(self) -> None:
        if self.tag_scheme not in SCHEMES:
            raise UserError(f"--tag-scheme {self.tag_scheme!r} is not a tag scheme: valid are {', '.join(SCHEMES)}. "
                            f"Pass one of them (auto detects it from the tags).")

    def to_json(self) -> dict[str, Any]:
        return {"word_column": self.word_column, "tag_column": self.tag_column, "tag_scheme": self.tag_scheme}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> TaggedColumns:
        def text(value: Any) -> str | None:
            return None if value is None else str(value)

        return cls(text(record.get("word_column")), text(record.get("tag_column")),
                   str(record.get("tag_scheme", "auto")))


@dataclass(frozen=True)
class TaggedSentence:
    """One sentence: its words and one tag per word."""

    words: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class TaggedCorpus:
    """A checked tagged file: where it is, how it is read (resolved columns, scheme), and what it holds. Its
    sentences are read again from the file on each call (`sentences`, `chunks`): nothing per sentence is kept."""

    path: Path
    columns: TaggedColumns
    scheme: TagScheme
    n_sentences: int
    n_words: int
    tag_counts: Mapping[str, int] = field(default_factory=dict)
    """Words per tag, tags as scored."""

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted(self.tag_counts))

    def sentences(self) -> Iterator[TaggedSentence]:
        """Every sentence in file order, tags as scored (see `TagScheme`)."""
        for raw in raw_sentences(self.path, self.columns):
            yield TaggedSentence(tuple(raw.words), tuple(normalised_tags(raw.tags, self.scheme)))

    def chunks(self, size: int = CHUNK_SENTENCES) -> Iterator[list[TaggedSentence]]:
        """The sentences in lists of at most `size`."""
        chunk: list[TaggedSentence] = []
        for sentence in self.sentences():
            chunk.append(sentence)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def head(self, n: int) -> list[TaggedSentence]:
        """The first `n` sentences (all of them when there are fewer)."""
        out = []
        for sentence in self.sentences():
            if len(out) == n:
                break
            out.append(sentence)
        return out


def is_tagged_file(path: str | Path) -> bool:
    """Whether `path` is a tagged corpus: a tagged extension, or (a .tsv/.txt...) the shape of a column file in its
    first lines: a blank line between blocks of rows, every row two or more fields, and no field holding spaces
    (a table of sentences has spaces in its text cells). JSON files are tagged only when asked (--task tags)."""
    path = Path(path)
    if path.suffix.lower() in TAGGED_SUFFIXES:
        return True
    if not path.is_file() or is_json_path(path) or path.suffix.lower() in (".csv", ".parquet", ".arrow"):
        return False
    rows, blank_between = 0, False
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle):
            if number == SNIFF_LINES:
                break
            line = line.rstrip("\r\n")
            if not line.strip():
                blank_between = blank_between or rows > 0
                continue
            if line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) < 2 or any(" " in f.strip() for f in fields):
                return False
            rows += 1
    return blank_between and rows > 0


def raw_sentences(path: Path, columns: TaggedColumns) -> Iterator[RawSentence]:
    """The file's sentences as read (tags not normalised), with `columns` already resolved."""
    if is_json_path(path):
        return json_sentences(path, str(columns.word_column), str(columns.tag_column))
    return column_sentences(path, int(str(columns.word_column)), int(str(columns.tag_column)))


def read_tagged(path: str | Path, columns: TaggedColumns | None = None) -> TaggedCorpus:
    """Check a tagged file in one streaming pass and describe it (see the module docstring); every problem is a
    `UserError` naming the file, the line and the flag that fixes it."""
    path = Path(path)
    columns = columns or TaggedColumns()
    if not path.is_file():
        raise UserError(f"Tagged file {path} does not exist. Valid inputs are CoNLL-style column files and "
                        f".jsonl/.json files with token and tag lists. Check the path.")
    resolved = replace(columns, **resolve_file_columns(path, columns.word_column, columns.tag_column))
    evidence, tag_counts, n_sentences, n_words = SchemeEvidence(), Counter(), 0, 0
    for raw in raw_sentences(path, resolved):
        evidence.add(raw.tags)
        tag_counts.update(raw.tags)
        n_sentences += 1
        n_words += len(raw.words)
        if columns.tag_scheme not in ("auto", "none"):
            _check_entity_tags(path, raw, columns.tag_scheme)
    if n_sentences == 0:
        raise UserError(f"{path} holds no tagged sentence. Valid: one word and its tag per line, a blank line between "
                        f"sentences (or JSON rows with token and tag lists). Check the file and --text-column/--label-column.")
    source = evidence.scheme() if columns.tag_scheme == "auto" else columns.tag_scheme
    scheme = TagScheme.read_as(source)
    scored = _scored_counts(path, resolved, scheme, tag_counts)
    return TaggedCorpus(path, replace(resolved, tag_scheme=source), scheme, n_sentences, n_words, dict(scored))


def _scored_counts(path: Path, columns: TaggedColumns, scheme: TagScheme, raw_counts: Counter) -> Counter:
    """Words per tag as scored: a second pass only when rewriting changes tags (IOB1, BILOU or I_ spellings)."""
    respelled = any(normalised_tags([tag], scheme) != [tag] for tag in raw_counts)
    if not scheme.has_entities or (scheme.source != "IOB1" and not respelled):
        return raw_counts
    counts: Counter = Counter()
    for raw in raw_sentences(path, columns):
        counts.update(normalised_tags(raw.tags, scheme))
    return counts


def _check_entity_tags(path: Path, raw: RawSentence, scheme: str) -> None:
    for tag in raw.tags:
        if not is_entity_tag(tag):
            raise UserError(f"{path} line {raw.line}: tag {tag!r} is not an entity tag, but --tag-scheme is {scheme}. "
                            f"Valid entity tags are O and prefix-type tags (B-PER, I-LOC, S-ORG). Pass --tag-scheme "
                            f"none for plain labels such as POS tags, or --label-column for the entity column.")


def read_tagged_splits(train: str | Path, others: Sequence[str | Path],
                       columns: TaggedColumns) -> list[TaggedCorpus]:
    """The training file and each other split (dev, test) checked (ragged rows, tag columns, schemes; the columns
    detected in each unless given), and every other split's tags seen in training (`check_dev_tags`)."""
    train_corpus = read_tagged(train, columns)
    corpora = [train_corpus]
    for path in others:
        corpora.append(read_tagged(path, columns))
        check_dev_tags(train_corpus, corpora[-1])
    return corpora


def check_dev_tags(train: TaggedCorpus, dev: TaggedCorpus) -> None:
    """A dev tag the training file never has cannot be predicted, and a scheme that differs reads other entities:
    both stop here, naming the tags and the fix."""
    unseen = sorted(set(dev.tag_counts) - set(train.tag_counts))
    if unseen:
        listed = ", ".join(f"{tag} ({dev.tag_counts[tag]} words)" for tag in unseen[:10])
        raise UserError(
            f"{dev.path} has tags never seen in training ({train.path}): {listed}"
            f"{' and more' if len(unseen) > 10 else ''}. A probe predicts only training tags: "
            f"{', '.join(train.tags[:20])}{' ...' if len(train.tags) > 20 else ''}. Add training sentences with "
            f"these tags, or map them to a training tag (e.g. O) in {dev.path.name}.")
    if train.scheme.name != dev.scheme.name:
        raise UserError(
            f"{train.path} reads as {train.scheme.name} tags but {dev.path} as {dev.scheme.name}: entities would be "
            f"read differently in each. Valid: one scheme for both files (IOB1 and IOB2 both read as IOB2). "
            f"Convert one file, or pass --tag-scheme for both.")
