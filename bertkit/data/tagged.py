"""Tagged corpora (one tag per word): CoNLL-style column files, JSON(L) rows and parquet files with list columns, and
splits of hub datasets with a list-of-ClassLabel tag feature (`DataSource`), read as `TaggedSentence`s one at a
time so a corpus of any size costs the memory of one chunk.

`read_tagged` checks a file in one streaming pass (ragged rows, a tag column that is not tags, empty sentences,
the tag scheme: `tagscheme.SchemeEvidence`, a few malformed tags refused by line rather than read as plain labels, a
declared --tag-scheme the tags contradict refused) and returns a `TaggedCorpus`: counts, tags, scheme and notes
(stray I- tags counted), plus `sentences()`/`chunks()` that read the file again with the tags as scored (IOB1
rewritten as IOB2). Column files: one word per line, a blank line between sentences, `-DOCSTART-` lines and `#`
comment lines skipped (the word `#` kept: `tagged_rows`), fields split on TABs when a line has one, else on
whitespace, read in --encoding. A dev or test tag never seen in training is refused, or its sentences dropped, or
mapped to a training tag (--unseen-tags: `read_tagged_splits`). The raw line and row readers are `tagged_rows`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from bertkit.data import sources
from bertkit.data.sources import DataSource
from bertkit.data.tagged_rows import (
    column_sentences,
    is_json_path,
    json_sentences,
    looks_like_column_file,
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
from bertkit.data.tagscheme import (
    OUTSIDE,
    SCHEMES,
    SchemeEvidence,
    TagScheme,
    normalised_tags,
    scheme_notes,
    scheme_problem,
)
from bertkit.errors import UserError
from bertkit.io import digests
from bertkit.options import DATA, option

CHUNK_SENTENCES = 1000
"""Sentences per chunk when a corpus is read in chunks (`TaggedCorpus.chunks`)."""
TAGGED_SUFFIXES = (".iob2", ".iob", ".bio", ".conll", ".conllu")
"""Extensions that name a CoNLL-style column file (one word per line): always read as a tagged corpus."""
SNIFF_LINES = 400
"""Lines read to tell a column file with another extension (.tsv, .txt) from a table of sentences."""
UNSEEN_TAG_POLICIES = ("refuse", "drop")
"""--unseen-tags: refuse, drop, or else a training tag to map unseen tags to (`unseen_tags_option`)."""


def unseen_tags_option() -> Any:
    """--unseen-tags, declared here once for every command that reads tagged dev or test data beside training data
    (`bertkit probe`, `finetune`, `sweep`, `distill`, `embed`, `bench`): what `read_tagged_splits` does with a dev or
    test tag the training data never has."""
    return option("refuse", "Tagged dev/test data: a tag the training data never has is refused (refuse), its "
                  "sentences left out (drop), or mapped to a training tag given here (e.g. O, or X for POS). What "
                  "was dropped or mapped is counted in the notes.", panel=DATA,
                  families=("words",))


def as_source(value: str | Path | DataSource) -> DataSource:
    """A source as given: a path is a local file."""
    return value if isinstance(value, DataSource) else DataSource(str(value))


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
                   train_split: str = "train") -> list[DataSource]:
    """--data and each --dev/--test value as sources: local files, or, when --data is a hub dataset, its
    --train-split and the splits the others name (a file among them stays a file). A split name beside a local
    --data is refused, as `data.splits.named_split_source` refuses it for sentences."""
    if is_file_value(data):
        names = [value for value in others if not is_file_value(value) and "/" not in value]
        if names:
            raise UserError(f"--dev/--test {names[0]!r} looks like a split name of a hub dataset, but --data {data} is "
                            f"a local file. Pass --dev/--test with local tagged files (e.g. --dev dev.iob2).")
        return [DataSource(data)] + [DataSource(value) for value in others]
    return [DataSource(data, train_split, config)] + [
        DataSource(value) if is_file_value(value) else DataSource(data, value, config) for value in others]


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
    encoding: str = "utf-8"
    """--encoding: the text encoding of column files and JSON rows."""

    def __post_init__(self) -> None:
        if self.tag_scheme not in SCHEMES:
            raise UserError(f"--tag-scheme {self.tag_scheme!r} is not a tag scheme: valid are {', '.join(SCHEMES)}. "
                            f"Pass one of them (auto detects it from the tags).")

    def to_json(self) -> dict[str, Any]:
        """The columns and scheme; the encoding only when it is not UTF-8 (so records made before it are equal)."""
        return {"word_column": self.word_column, "tag_column": self.tag_column, "tag_scheme": self.tag_scheme,
                **({"encoding": self.encoding} if self.encoding != "utf-8" else {})}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> TaggedColumns:
        def text(value: Any) -> str | None:
            return None if value is None else str(value)

        return cls(text(record.get("word_column")), text(record.get("tag_column")),
                   str(record.get("tag_scheme", "auto")), str(record.get("encoding", "utf-8")))


@dataclass(frozen=True)
class TaggedSentence:
    """One sentence: its words and one tag per word."""

    words: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class TaggedCorpus:
    """A checked tagged corpus: where it is, how it is read (resolved columns, scheme), and what it holds. Its
    sentences are read again from the source on each call (`sentences`, `chunks`): nothing per sentence is kept."""

    source: DataSource
    columns: TaggedColumns
    scheme: TagScheme
    n_sentences: int
    n_words: int
    tag_counts: Mapping[str, int] = field(default_factory=dict)
    """Words per tag, tags as scored."""
    dataset: Any = field(default=None, compare=False, repr=False)
    """A hub source's split, opened once (a memory-mapped `datasets.Dataset`); None for files."""
    notes: tuple[str, ...] = ()
    """What a person should know of how it was read (stray I- tags counted, unseen tags dropped or mapped)."""
    tag_map: Mapping[str, str] = field(default_factory=dict)
    """Tags read as another (--unseen-tags TAG), after scheme normalisation."""
    dropped_tags: frozenset[str] = frozenset()
    """Sentences holding one of these tags are left out (--unseen-tags drop)."""

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
        """Every sentence in file order, tags as scored (see `TagScheme`; mapped and dropped as --unseen-tags
        says)."""
        for raw in raw_sentences(self.source, self.columns, self.dataset):
            tags = normalised_tags(raw.tags, self.scheme)
            if self.dropped_tags and not self.dropped_tags.isdisjoint(tags):
                continue
            if self.tag_map:
                tags = [self.tag_map.get(tag, tag) for tag in tags]
            yield TaggedSentence(tuple(raw.words), tuple(tags))

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


def has_tagged_suffix(path: str | Path) -> bool:
    """Whether `path` has an extension that names a column file (`TAGGED_SUFFIXES`): tagged whatever it holds, never
    a table of sentences."""
    return Path(path).suffix.lower() in TAGGED_SUFFIXES


def is_tagged_file(path: str | Path) -> bool:
    """Whether `path` is a tagged corpus: a tagged extension, a parquet file of the tagged shape (a list of words and
    a list of tags per row: `tagged_tables.detected_columns`), or (a .tsv/.txt, CoNLL-2003's eng.train...) the
    shape of a column file in its first lines (`tagged_rows.looks_like_column_file`: blocks of several word rows
    between blank lines, a few odd lines allowed, so one missing tag is reported by line when read rather than the
    file taken for a table; plain text with a sentence per line is not one). JSON files are tagged only when asked
    (--task tags)."""
    path = Path(path)
    if has_tagged_suffix(path):
        return True
    if is_table_path(path):
        return path.is_file() and tagged_shape(path)
    if not path.is_file() or is_json_path(path) or path.suffix.lower() in (".csv", ".arrow"):
        return False
    return looks_like_column_file(path, SNIFF_LINES)


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


def raw_sentences(source: DataSource, columns: TaggedColumns, dataset: Any = None) -> Iterator[RawSentence]:
    """The source's sentences as read (tags not normalised), with `columns` already resolved (`dataset`: a hub
    source's opened split)."""
    word, tag = str(columns.word_column), str(columns.tag_column)
    if source.is_hub:
        return dataset_sentences(dataset, word, tag, str(source))
    path = Path(source.name)
    if is_table_path(path):
        return parquet_sentences(path, word, tag)
    if is_json_path(path):
        return json_sentences(path, word, tag, columns.encoding)
    return column_sentences(path, int(word), int(tag), columns.encoding)


def open_tagged(source: DataSource, columns: TaggedColumns) -> tuple[TaggedColumns, Any]:
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
    resolved = resolve_file_columns(path, columns.word_column, columns.tag_column, columns.encoding)
    return replace(columns, **resolved), None


def read_tagged(source: str | Path | DataSource, columns: TaggedColumns | None = None) -> TaggedCorpus:
    """Check a tagged corpus in one streaming pass and describe it (see the module docstring); every problem is a
    `UserError` naming the file or split, the line or row and the flag that fixes it."""
    source = as_source(source)
    columns = columns or TaggedColumns()
    resolved, dataset = open_tagged(source, columns)
    evidence, tag_counts, n_sentences, n_words = SchemeEvidence(), Counter(), 0, 0
    for raw in raw_sentences(source, resolved, dataset):
        evidence.add(raw.tags, raw.where)
        tag_counts.update(raw.tags)
        n_sentences += 1
        n_words += len(raw.words)
    if n_sentences == 0:
        raise UserError(f"{source} holds no tagged sentence. Valid: one word and its tag per line, a blank line "
                        f"between sentences (or rows with token and tag lists). Check the data and "
                        f"--text-column/--label-column.")
    problem = scheme_problem(evidence, columns.tag_scheme, str(source))
    if problem:
        raise UserError(problem)
    scheme_read = evidence.scheme() if columns.tag_scheme == "auto" else columns.tag_scheme
    scheme = TagScheme.read_as(scheme_read)
    scored = _scored_counts(source, resolved, dataset, scheme, tag_counts)
    return TaggedCorpus(source, replace(resolved, tag_scheme=scheme_read), scheme, n_sentences, n_words, dict(scored),
                        dataset, tuple(scheme_notes(evidence, scheme_read, str(source))))


def _scored_counts(source: DataSource, columns: TaggedColumns, dataset: Any, scheme: TagScheme,
                   raw_counts: Counter) -> Counter:
    """Words per tag as scored: a second pass only when rewriting changes tags (IOB1, BILOU or I_ spellings)."""
    respelled = any(normalised_tags([tag], scheme) != [tag] for tag in raw_counts)
    if not scheme.has_entities or (scheme.source != "IOB1" and not respelled):
        return raw_counts
    counts: Counter = Counter()
    for raw in raw_sentences(source, columns, dataset):
        counts.update(normalised_tags(raw.tags, scheme))
    return counts


def read_tagged_splits(train: str | Path | DataSource, others: Sequence[str | Path | DataSource],
                       columns: TaggedColumns, unseen_tags: str = "refuse") -> list[TaggedCorpus]:
    """The training corpus and each other split (dev, test) checked (ragged rows, tag columns, schemes; the columns
    detected in each unless given; training data with one tag refused: `check_training_tags`), every other split's
    tags seen in training or handled as --unseen-tags says (`with_unseen_tags`), then `check_dev_tags`."""
    train_corpus = read_tagged(train, columns)
    check_training_tags(train_corpus, train_corpus.tags)
    corpora = [train_corpus]
    for other in others:
        corpora.append(with_unseen_tags(train_corpus, read_tagged(other, columns), unseen_tags))
        check_dev_tags(train_corpus, corpora[-1])
    return corpora


def check_training_tags(train: TaggedCorpus, tags: Sequence[str], limit: int | None = None) -> None:
    """Training data with one tag (`tags`: the corpus's, or those of its first `limit` sentences, --limit) teaches a
    tagger or a word probe nothing to tell apart: refused before any model is loaded, naming the file and the tag."""
    if len(set(tags)) >= 2:
        return
    tag = next(iter(tags), "none")
    first = "sentence" if limit == 1 else f"{limit or 0:,} sentences"
    which = f"the words of its first {first} (--limit {limit}) are" if limit else f"all {train.n_words:,} of its words are"
    raise UserError(
        f"The training data {train.source} has one tag only: {which} tagged {tag!r}. A tagger or a word probe learns "
        f"to tell tags apart, so it needs training data with two tags or more. Check that --label-column names the "
        f"tag column (the tags were read from column {train.columns.tag_column}), or pass training data with more "
        f"tags{' (a larger --limit)' if limit else ''}.")


def check_dev_tags(train: TaggedCorpus, dev: TaggedCorpus) -> None:
    """A dev tag the training data never has cannot be predicted, a scheme that differs reads other entities, and a
    dev set of entity tags without any entity leaves entity F1 undefined: each stops here, naming the tags and the
    fix."""
    unseen = sorted(set(dev.tag_counts) - set(train.tag_counts))
    if unseen:
        listed = ", ".join(f"{tag} ({dev.tag_counts[tag]} words)" for tag in unseen[:10])
        fix = "map them to O (--unseen-tags O)" if train.scheme.has_entities else \
            "map them to a training tag (e.g. --unseen-tags X)"
        raise UserError(
            f"{dev.source} has tags never seen in training ({train.source}): {listed}"
            f"{' and more' if len(unseen) > 10 else ''}. A model predicts only training tags: "
            f"{', '.join(train.tags[:20])}{' ...' if len(train.tags) > 20 else ''}. Add training sentences with "
            f"these tags, leave their sentences out (--unseen-tags drop), or {fix}.")
    if train.scheme.name != dev.scheme.name:
        raise UserError(
            f"{train.source} reads as {train.scheme.name} tags but {dev.source} as {dev.scheme.name}: entities would "
            f"be read differently in each. Valid: one scheme for both (IOB1 and IOB2 both read as IOB2). "
            f"Convert one of them, or pass --tag-scheme for both.")
    if dev.scheme.has_entities and set(dev.tag_counts) <= {OUTSIDE}:
        raise UserError(
            f"{dev.source} holds no entity (every tag is O): entity F1 is undefined on it, so it cannot score or "
            f"choose a model. Pass dev/test data with entities, or --tag-scheme none to score the tags by word "
            f"accuracy.")


def unseen_tags_problems(policy: str) -> list[str]:
    """--unseen-tags before anything is read: refuse, drop, or one tag (checked against the training tags when the
    data is read: `with_unseen_tags`)."""
    if policy in UNSEEN_TAG_POLICIES or (policy.strip() and not policy.split()[1:]):
        return []
    return [f"--unseen-tags {policy!r} is not refuse, drop or one tag. Pass --unseen-tags refuse (the default), drop, "
            f"or the training tag to read unseen tags as (e.g. O)."]


def with_unseen_tags(train: TaggedCorpus, other: TaggedCorpus, policy: str) -> TaggedCorpus:
    """`other` (a dev or test corpus) with the tags `train` never has handled as --unseen-tags `policy` says: refuse
    (left to `check_dev_tags`), drop (their sentences left out) or a training tag they are read as (O for entity
    tags); what was dropped or mapped is counted in its notes."""
    unseen = sorted(set(other.tag_counts) - set(train.tag_counts))
    if not unseen or policy == "refuse":
        return other
    listed = ", ".join(f"{tag} ({other.tag_counts[tag]})" for tag in unseen[:10]) + (" ..." if len(unseen) > 10 else "")
    if policy == "drop":
        kept = replace(other, dropped_tags=frozenset(unseen))
        counts, n_sentences = Counter(), 0
        for sentence in kept.sentences():
            counts.update(sentence.tags)
            n_sentences += 1
        if not n_sentences:
            raise UserError(f"--unseen-tags drop leaves nothing of {other.source}: every sentence has a tag never seen "
                            f"in training ({listed}). Map them to a training tag instead (--unseen-tags O).")
        words = sum(counts.values())
        note = (f"{other.source}: {other.n_sentences - n_sentences} sentence(s) ({other.n_words - words} words) left "
                f"out for tags never seen in training: {listed} (--unseen-tags drop)")
        return replace(kept, n_sentences=n_sentences, n_words=words, tag_counts=dict(counts), notes=(*other.notes, note))
    if policy not in train.tag_counts or (train.scheme.has_entities and policy != OUTSIDE):
        valid = "O (entity tags)" if train.scheme.has_entities else f"a training tag: {', '.join(train.tags[:20])}"
        raise UserError(f"--unseen-tags {policy}: unseen tags of {other.source} ({listed}) can only be read as {valid}. "
                        f"Pass --unseen-tags with it, or drop (their sentences left out), or refuse.")
    counts = Counter()
    for tag, n in other.tag_counts.items():
        counts[policy if tag in unseen else tag] += n
    note = f"{other.source}: {sum(other.tag_counts[t] for t in unseen)} word(s) tagged {listed}, never seen in " \
           f"training, read as {policy} (--unseen-tags {policy})"
    return replace(other, tag_map=dict.fromkeys(unseen, policy), tag_counts=dict(counts), notes=(*other.notes, note))
