"""Tagged corpora (one tag per word): CoNLL-style column files, JSON(L) rows and parquet files with list columns, and
splits of hub datasets with a list-of-ClassLabel tag feature (`TaggedSource`), read as `TaggedSentence`s one at a
time so a corpus of any size costs the memory of one chunk.

`read_tagged` checks a file in one streaming pass (ragged rows, a tag column that is not tags, empty sentences,
the tag scheme) and returns a `TaggedCorpus`: counts, tags and scheme, plus `sentences()`/`chunks()` that read the
file again with the tags as scored (IOB1 rewritten as IOB2). Column files: one word per line, a blank line between
sentences, `-DOCSTART-` lines and `#` comment lines skipped (a line starting with `#` and a TAB is the word `#`),
fields split on TABs when a line has one, else on whitespace. The raw line and row readers are `tagged_rows`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from bertkit.data import sources
from bertkit.data.tagged_rows import (
    column_sentences,
    is_json_path,
    json_sentences,
    resolve_file_columns,
)
from bertkit.data.tagged_sentence import RawSentence
from bertkit.data.tagged_tables import (
    dataset_columns,
    dataset_sentences,
    detected_columns,
    is_table_path,
    parquet_sentences,
    resolve_dataset_columns,
    resolve_parquet_columns,
    tagged_shape,
)
from bertkit.data.tagscheme import SCHEMES, SchemeEvidence, TagScheme, is_entity_tag, normalised_tags
from bertkit.errors import UserError
from bertkit.io import digests

CHUNK_SENTENCES = 1000
"""Sentences per chunk when a corpus is read in chunks (`TaggedCorpus.chunks`)."""
TAGGED_SUFFIXES = (".iob2", ".iob", ".bio", ".conll", ".conllu")
"""Extensions that name a CoNLL-style column file (one word per line): always read as a tagged corpus."""
SNIFF_LINES = 400
"""Lines read to tell a column file with another extension (.tsv, .txt) from a table of sentences."""


@dataclass(frozen=True)
class TaggedSource:
    """Where a tagged corpus is read from: a local file (`split` None), or a split of a hub dataset."""

    name: str
    """The file, or the hub dataset."""
    split: str | None = None
    config: str | None = None
    """The hub dataset's configuration (--data-config)."""

    @property
    def is_hub(self) -> bool:
        return self.split is not None

    def __str__(self) -> str:
        return f"{self.name}[{self.split}]" if self.is_hub else self.name


def as_source(value: str | Path | TaggedSource) -> TaggedSource:
    """A source as given: a path is a local file."""
    return value if isinstance(value, TaggedSource) else TaggedSource(str(value))


def is_file_value(value: str) -> bool:
    """Whether a --data/--dev value names a local file (`sources.is_local_source`, or a tagged extension), not a hub
    dataset or split."""
    return sources.is_local_source(value) or Path(value).suffix.lower() in TAGGED_SUFFIXES


T = TypeVar("T")


def in_chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """`items` in lists of at most `size`, in order, as they come (one list in memory at a time)."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def tagged_sources(data: str, others: Sequence[str], config: str | None = None,
                   train_split: str = "train") -> list[TaggedSource]:
    """--data and each --dev/--test value as sources: local files, or, when --data is a hub dataset, its
    --train-split and the splits the others name (a file among them stays a file). A split name beside a local
    --data is refused, as `data.splits.named_split_source` refuses it for sentences."""
    if is_file_value(data):
        names = [value for value in others if not is_file_value(value) and "/" not in value]
        if names:
            raise UserError(f"--dev/--test {names[0]!r} looks like a split name of a hub dataset, but --data {data} is "
                            f"a local file. Pass --dev/--test with local tagged files (e.g. --dev dev.iob2).")
        return [TaggedSource(data)] + [TaggedSource(value) for value in others]
    return [TaggedSource(data, train_split, config)] + [
        TaggedSource(value) if is_file_value(value) else TaggedSource(data, value, config) for value in others]


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
    """A checked tagged corpus: where it is, how it is read (resolved columns, scheme), and what it holds. Its
    sentences are read again from the source on each call (`sentences`, `chunks`): nothing per sentence is kept."""

    source: TaggedSource
    columns: TaggedColumns
    scheme: TagScheme
    n_sentences: int
    n_words: int
    tag_counts: Mapping[str, int] = field(default_factory=dict)
    """Words per tag, tags as scored."""
    dataset: Any = field(default=None, compare=False, repr=False)
    """A hub source's split, opened once (a memory-mapped `datasets.Dataset`); None for files."""

    def data_identity(self) -> dict[str, Any]:
        """What identifies the data read (recorded where a store must match it): a file's size and sha256, a hub
        split's name, configuration and `datasets` fingerprint (which follows its data files)."""
        if self.source.is_hub:
            return {"data_hub": str(self.source), "data_config": self.source.config,
                    "data_fingerprint": getattr(self.dataset, "_fingerprint", None)}
        size, sha256 = digests.file_digest(self.source.name)
        return {"data_size": size, "data_sha256": sha256}

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted(self.tag_counts))

    def sentences(self) -> Iterator[TaggedSentence]:
        """Every sentence in file order, tags as scored (see `TagScheme`)."""
        for raw in raw_sentences(self.source, self.columns, self.dataset):
            yield TaggedSentence(tuple(raw.words), tuple(normalised_tags(raw.tags, self.scheme)))

    def chunks(self, size: int = CHUNK_SENTENCES) -> Iterator[list[TaggedSentence]]:
        """The sentences in lists of at most `size`."""
        return in_chunks(self.sentences(), size)

    def head(self, n: int) -> list[TaggedSentence]:
        """The first `n` sentences (all of them when there are fewer)."""
        out = []
        for sentence in self.sentences():
            if len(out) == n:
                break
            out.append(sentence)
        return out


def is_tagged_file(path: str | Path) -> bool:
    """Whether `path` is a tagged corpus: a tagged extension, a parquet file of the tagged shape (a list of words and
    a list of tags per row: `tagged_tables.detected_columns`), or (a .tsv/.txt, CoNLL-2003's eng.train...) the
    shape of a column file in its first lines: a blank line between blocks of rows, every row two or more fields,
    TAB-separated fields holding no space (a table of sentences has spaces in its text cells) or, without TABs, the
    same number of space-separated fields on every row (sentences have words of every count). JSON files are tagged
    only when asked (--task tags)."""
    path = Path(path)
    if path.suffix.lower() in TAGGED_SUFFIXES:
        return True
    if is_table_path(path):
        return path.is_file() and tagged_shape(path)
    if not path.is_file() or is_json_path(path) or path.suffix.lower() in (".csv", ".arrow"):
        return False
    rows, blank_between, spaced = 0, False, set()
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
            fields = line.split("\t") if "\t" in line else line.split()
            spaced |= set() if "\t" in line else {len(fields)}
            if len(fields) < 2 or any(" " in f.strip() for f in fields) or len(spaced) > 1:
                return False
            rows += 1
    return blank_between and rows > 0


def is_tagged_hub(name: str, config: str | None, split: str) -> bool:
    """Whether the hub dataset `name` is a tagged corpus: its `split` has the tagged shape (a list of words and a
    list of tags, ClassLabel ids or strings, per row). False when it cannot be loaded: the sentence path then says
    why (offline, a wrong name)."""
    try:
        dataset = sources.read_hub_split(name, config, split)
    except UserError:
        return False
    return detected_columns(dataset_columns(dataset)) is not None


def may_be_tagged(value: str) -> bool:
    """Whether --task tags can read `value`: a tagged file, JSON rows, or a hub dataset or split name (checked when
    it is read)."""
    return is_tagged_file(value) or is_json_path(Path(value)) or not is_file_value(value)


def raw_sentences(source: TaggedSource, columns: TaggedColumns, dataset: Any = None) -> Iterator[RawSentence]:
    """The source's sentences as read (tags not normalised), with `columns` already resolved (`dataset`: a hub
    source's opened split)."""
    word, tag = str(columns.word_column), str(columns.tag_column)
    if source.is_hub:
        return dataset_sentences(dataset, word, tag, str(source))
    path = Path(source.name)
    if is_table_path(path):
        return parquet_sentences(path, word, tag)
    if is_json_path(path):
        return json_sentences(path, word, tag)
    return column_sentences(path, int(word), int(tag))


def open_tagged(source: TaggedSource, columns: TaggedColumns) -> tuple[TaggedColumns, Any]:
    """(`columns` resolved for `source`, the hub split opened once or None): given columns checked, missing ones
    detected, the tag column checked to hold tags."""
    if source.is_hub:
        dataset = sources.read_hub_split(source.name, source.config, str(source.split))
        word, tag = resolve_dataset_columns(dataset, str(source), columns.word_column, columns.tag_column)
        return replace(columns, word_column=word, tag_column=tag), dataset
    path = Path(source.name)
    try:
        found = path.is_file()
    except OSError as exc:  # a name this system cannot stat (too long): refused as a name, not a traceback
        raise UserError(f"Cannot read tagged file {path}: {exc.strerror} (OS error {exc.errno}). Pass a path this "
                        f"system can open to --data/--dev.") from None
    if not found:
        raise UserError(f"Tagged file {path} does not exist. Valid inputs are CoNLL-style column files, .jsonl/.json "
                        f"and .parquet files with token and tag lists, and hub datasets. Check the path.")
    if is_table_path(path):
        word, tag = resolve_parquet_columns(path, columns.word_column, columns.tag_column)
        return replace(columns, word_column=word, tag_column=tag), None
    return replace(columns, **resolve_file_columns(path, columns.word_column, columns.tag_column)), None


def read_tagged(source: str | Path | TaggedSource, columns: TaggedColumns | None = None) -> TaggedCorpus:
    """Check a tagged corpus in one streaming pass and describe it (see the module docstring); every problem is a
    `UserError` naming the file or split, the line or row and the flag that fixes it."""
    source = as_source(source)
    columns = columns or TaggedColumns()
    resolved, dataset = open_tagged(source, columns)
    evidence, tag_counts, n_sentences, n_words = SchemeEvidence(), Counter(), 0, 0
    for raw in raw_sentences(source, resolved, dataset):
        evidence.add(raw.tags)
        tag_counts.update(raw.tags)
        n_sentences += 1
        n_words += len(raw.words)
        if columns.tag_scheme not in ("auto", "none"):
            _check_entity_tags(source, raw, columns.tag_scheme)
    if n_sentences == 0:
        raise UserError(f"{source} holds no tagged sentence. Valid: one word and its tag per line, a blank line "
                        f"between sentences (or rows with token and tag lists). Check the data and "
                        f"--text-column/--label-column.")
    scheme_read = evidence.scheme() if columns.tag_scheme == "auto" else columns.tag_scheme
    scheme = TagScheme.read_as(scheme_read)
    scored = _scored_counts(source, resolved, dataset, scheme, tag_counts)
    return TaggedCorpus(source, replace(resolved, tag_scheme=scheme_read), scheme, n_sentences, n_words, dict(scored),
                        dataset)


def _scored_counts(source: TaggedSource, columns: TaggedColumns, dataset: Any, scheme: TagScheme,
                   raw_counts: Counter) -> Counter:
    """Words per tag as scored: a second pass only when rewriting changes tags (IOB1, BILOU or I_ spellings)."""
    respelled = any(normalised_tags([tag], scheme) != [tag] for tag in raw_counts)
    if not scheme.has_entities or (scheme.source != "IOB1" and not respelled):
        return raw_counts
    counts: Counter = Counter()
    for raw in raw_sentences(source, columns, dataset):
        counts.update(normalised_tags(raw.tags, scheme))
    return counts


def _check_entity_tags(source: TaggedSource, raw: RawSentence, scheme: str) -> None:
    unit = "row" if source.is_hub or is_table_path(Path(source.name)) or is_json_path(Path(source.name)) else "line"
    for tag in raw.tags:
        if not is_entity_tag(tag):
            raise UserError(f"{source} {unit} {raw.line}: tag {tag!r} is not an entity tag, but --tag-scheme is "
                            f"{scheme}. Valid entity tags are O and prefix-type tags (B-PER, I-LOC, S-ORG). Pass "
                            f"--tag-scheme none for plain labels such as POS tags, or --label-column for the entity "
                            f"column.")


def read_tagged_splits(train: str | Path | TaggedSource, others: Sequence[str | Path | TaggedSource],
                       columns: TaggedColumns) -> list[TaggedCorpus]:
    """The training corpus and each other split (dev, test) checked (ragged rows, tag columns, schemes; the columns
    detected in each unless given), and every other split's tags seen in training (`check_dev_tags`)."""
    train_corpus = read_tagged(train, columns)
    corpora = [train_corpus]
    for other in others:
        corpora.append(read_tagged(other, columns))
        check_dev_tags(train_corpus, corpora[-1])
    return corpora


def check_dev_tags(train: TaggedCorpus, dev: TaggedCorpus) -> None:
    """A dev tag the training data never has cannot be predicted, and a scheme that differs reads other entities:
    both stop here, naming the tags and the fix."""
    unseen = sorted(set(dev.tag_counts) - set(train.tag_counts))
    if unseen:
        listed = ", ".join(f"{tag} ({dev.tag_counts[tag]} words)" for tag in unseen[:10])
        raise UserError(
            f"{dev.source} has tags never seen in training ({train.source}): {listed}"
            f"{' and more' if len(unseen) > 10 else ''}. A probe predicts only training tags: "
            f"{', '.join(train.tags[:20])}{' ...' if len(train.tags) > 20 else ''}. Add training sentences with "
            f"these tags, or map them to a training tag (e.g. O) in {dev.source}.")
    if train.scheme.name != dev.scheme.name:
        raise UserError(
            f"{train.source} reads as {train.scheme.name} tags but {dev.source} as {dev.scheme.name}: entities would "
            f"be read differently in each. Valid: one scheme for both (IOB1 and IOB2 both read as IOB2). "
            f"Convert one of them, or pass --tag-scheme for both.")
