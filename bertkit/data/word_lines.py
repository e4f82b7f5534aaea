"""Sentences to tag, as words: `--text` split on whitespace (the text kept, so spans point into it as given),
`--words` a JSON list of words, or a file streamed one sentence at a time — a tagged corpus (a column file or a
parquet file of word and tag lists: its word column; its tags are not read) or plain text, one sentence per line
split on whitespace (blank lines skipped)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.tagged import TaggedColumns, TaggedSource, is_tagged_file, open_tagged, raw_sentences
from bertkit.data.tagged_tables import is_table_path
from bertkit.errors import UserError


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


def file_sentences(path: str | Path, columns: TaggedColumns | None = None,
                   limit: int | None = None) -> Iterator[WordSentence]:
    """The sentences of `path`, streamed: a tagged corpus's word column, or plain text lines (the first `limit`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"--data {path} does not exist. Valid: a tagged corpus (CoNLL-style columns) or a text file "
                        f"with one sentence per line. Check the path.")
    if is_table_path(path) and not is_tagged_file(path):
        raise UserError(f"--data {path} is a parquet file without a list of words and a list of tags per row. Valid: "
                        f"a tagged corpus (column file, JSON lines or parquet with token and tag lists) or a text file "
                        f"with one sentence per line. Pass one of those.")
    sentences = _tagged(path, columns or TaggedColumns()) if is_tagged_file(path) else _lines(path)
    for n, sentence in enumerate(sentences):
        if limit is not None and n >= limit:
            return
        yield sentence


def _tagged(path: Path, columns: TaggedColumns) -> Iterator[WordSentence]:
    source = TaggedSource(str(path))
    resolved, _ = open_tagged(source, columns)
    for raw in raw_sentences(source, resolved):
        if raw.words:
            yield WordSentence(tuple(raw.words))


def _lines(path: Path) -> Iterator[WordSentence]:
    with open(path, encoding="utf-8", errors="strict") as handle:
        try:
            for line in handle:
                words = tuple(line.split())
                if words:
                    yield WordSentence(words)
        except UnicodeDecodeError as exc:
            raise UserError(f"--data {path} is not UTF-8 text ({exc.reason} at byte {exc.start}). Valid: UTF-8 text, "
                            f"one sentence per line. Re-save the file as UTF-8.") from None
