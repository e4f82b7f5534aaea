"""Sentences to tag, as words: `--text` split on whitespace (the text kept, so spans point into it as given),
`--words` a JSON list of words, or a file streamed one sentence at a time (`file_sentences`; `data_sentences` for a
command's data group):

- a tagged corpus (a column file, JSON rows or a parquet file of word and tag lists): its word column (its tags are
  not read);
- JSON rows with a list of words (`tokens`, `words`, or the key --text-column names): that list;
- a table of sentences (a .csv file, a .tsv/.txt file with TAB-separated fields, JSON rows of text, or any file when
  --text-column is given): its text column (--text-column, else `sentence`, `text`... or the first; --header says
  whether the first row names the columns), each cell split on whitespace, read as `bertkit.data.splits` reads the
  sentences of every other command (empty cells refused by line);
- plain text: a sentence per line split on whitespace (blank lines between sentences skipped), in --encoding."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.options import DataOptions
from bertkit.data.tagged import DataSource, TaggedColumns, is_tagged_file, open_tagged, raw_sentences
from bertkit.data.tagged_rows import is_json_path, json_rows, text_lines
from bertkit.data.tagged_sentence import WORD_KEYS
from bertkit.data.tagged_tables import is_table_path
from bertkit.errors import UserError

SNIFF_TABLE_LINES = 20
"""Lines looked at for a TAB: a .tsv/.txt file with one is a table of sentences, not plain text."""


@dataclass(frozen=True)
class WordSentence:
    """A sentence's words, and the text they were split from (None: the words joined by single spaces)."""

    words: tuple[str, ...]
    text: str | None = None


def text_sentence(text: str) -> WordSentence:
    """--text: its whitespace-separated words, the text kept as given."""
    return WordSentence(tuple(text.split()), text)


def words_problems(given: str | None) -> list[str]:
    """Why --words is not a JSON list of words (empty: it is, or it is not given)."""
    if given is None:
        return []
    try:
        words = json.loads(given)
    except ValueError as exc:
        return [f"--words {given!r} is not JSON ({exc}). Valid: a JSON list of words, e.g. --words "
                f"'[\"New\", \"York\"]'. Quote the list for your shell."]
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
        return [f"--words {given!r} is not a non-empty JSON list of non-blank words. Valid: e.g. --words "
                f"'[\"New\", \"York\"]'. Pass the sentence's words as a list of strings."]
    return []


def words_sentence(given: str) -> WordSentence:
    """--words (checked by `words_problems`): the list's words."""
    return WordSentence(tuple(json.loads(given)))


def data_sentences(inputs: DataOptions) -> Iterator[WordSentence]:
    """The sentences of a command's --data (its first --limit), read with its data group's --text-column,
    --label-column, --encoding, --header and --cache-dir (see `file_sentences`)."""
    columns = TaggedColumns(inputs.text_column, inputs.label_column, encoding=inputs.encoding)
    return file_sentences(inputs.data or "", columns, inputs.limit, inputs)


def file_sentences(path: str | Path, columns: TaggedColumns | None = None, limit: int | None = None,
                   inputs: DataOptions | None = None) -> Iterator[WordSentence]:
    """The sentences of `path`, streamed (the first `limit`; the module docstring says how each kind of file is
    read): `columns` the word column (--text-column) and the encoding, `inputs` the data group a table is read with
    (None: one made of `columns`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"--data {path} does not exist. Valid: a tagged corpus (CoNLL-style columns) or a text file "
                        f"with one sentence per line. Check the path.")
    if is_table_path(path) and not is_tagged_file(path):
        raise UserError(f"--data {path} is a parquet file without a list of words and a list of tags per row. Valid: "
                        f"a tagged corpus (column file, JSON lines or parquet with token and tag lists) or a text file "
                        f"with one sentence per line. Pass one of those.")
    columns = columns or TaggedColumns()
    inputs = inputs or DataOptions(data=str(path), text_column=columns.word_column, encoding=columns.encoding)
    for n, sentence in enumerate(_sentences(path, columns, inputs)):
        if limit is not None and n >= limit:
            return
        yield sentence


def _sentences(path: Path, columns: TaggedColumns, inputs: DataOptions) -> Iterator[WordSentence]:
    if is_tagged_file(path):
        return _tagged(path, columns)
    if is_json_path(path):
        key = _word_list_key(path, columns)
        return _json_words(path, key, columns.encoding) if key else _table(path, inputs)
    if _is_table(path, columns):
        return _table(path, inputs)
    return _lines(path, columns.encoding)


def _tagged(path: Path, columns: TaggedColumns) -> Iterator[WordSentence]:
    source = DataSource(str(path))
    resolved, _ = open_tagged(source, columns)
    for raw in raw_sentences(source, resolved):
        if raw.words:
            yield WordSentence(tuple(raw.words))


def _word_list_key(path: Path, columns: TaggedColumns) -> str | None:
    """The key of JSON rows' word lists (--text-column, else tokens or words) when the first row has one."""
    first = next((row for _, row in json_rows(path, columns.encoding) if isinstance(row, dict)), {})
    keys = (columns.word_column,) if columns.word_column else WORD_KEYS
    return next((key for key in keys if isinstance(first.get(key), list)), None)


def _json_words(path: Path, key: str, encoding: str) -> Iterator[WordSentence]:
    for number, row in json_rows(path, encoding):
        words = row.get(key) if isinstance(row, dict) else None
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
            raise UserError(f"{path} row {number}: {key!r} is not a non-empty list of words. Valid: every row holds "
                            f"a list of words under {key!r}. Fix the row, or choose the list with --text-column.")
        yield WordSentence(tuple(words))


def _is_table(path: Path, columns: TaggedColumns) -> bool:
    """A table of sentences rather than plain text: a .csv, --text-column given, or TABs in the first lines."""
    if path.suffix.lower() == ".csv" or columns.word_column is not None:
        return True
    return any("\t" in line for _, line in itertools.islice(text_lines(path, columns.encoding), SNIFF_TABLE_LINES))


def _table(path: Path, inputs: DataOptions) -> Iterator[WordSentence]:
    """The text column's cells of a table, as every command reads a table's sentences (`splits.read_split`)."""
    from bertkit.data.splits import read_split, split_source

    dataset = read_split(inputs, split_source(str(path)), need_labels=False, task="single_label")
    return (text_sentence(str(text)) for text in dataset.texts)


def _lines(path: Path, encoding: str) -> Iterator[WordSentence]:
    for _, line in text_lines(path, encoding):
        words = tuple(line.split())
        if words:
            yield WordSentence(words)
