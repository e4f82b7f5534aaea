"""One tagged sentence as a reader yields it (`RawSentence`: words, tags and where it starts) and the checks every
tagged reader shares, whatever it reads - column files and JSON rows (`tagged_rows`), parquet files and hub splits
(`tagged_tables`): a row's words and tags (`checked_sentence`) and a tag column's values (`check_tag_values`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tagscheme import OUTSIDE, is_entity_tag
from bertkit.errors import UserError

WORD_KEYS = ("tokens", "words")
TAG_KEYS = ("tags", "ner_tags", "pos_tags", "upos", "labels")
PLACEHOLDERS = frozenset({"-", "_"})
PEEK_SENTENCES = 200
"""Sentences read to detect columns and check that the tag column holds tags."""


@dataclass(frozen=True)
class RawSentence:
    words: list[str]
    tags: list[str]
    line: int
    """Line (column files) or row (JSON, parquet, hub splits) the sentence starts on, 1-based."""
    word_lines: tuple[int, ...] | None = None
    """Column files: each word's line (comments and skipped lines may sit between them); None for rows."""

    def where(self, index: int) -> str:
        """Where word `index` is, for a message: `line N` (column files) or `row N, word K`."""
        if self.word_lines is not None:
            return f"line {self.word_lines[index]}"
        return f"row {self.line}, word {index + 1}"


def checked_sentence(where: str, number: int, words: Any, tags: Any, word_key: str, tag_key: str,
                     names: list[str] | None = None) -> RawSentence:
    """One row's words and tags (JSON objects, parquet and hub rows alike) as a `RawSentence`, or a UserError naming
    `where` (the file or split and the row): both lists, of one length, not empty, words text and tags strings or
    integer ids (`names`: the tag names the ids index, as a hub dataset's ClassLabel gives them)."""
    if not isinstance(words, list) or not isinstance(tags, list):
        raise UserError(f"{where}: {word_key!r} and {tag_key!r} must both be lists (one entry per word), got "
                        f"{type(words).__name__} and {type(tags).__name__}. Valid: list columns such as tokens "
                        f"and tags. Choose them with --text-column/--label-column.")
    if not words:
        raise UserError(f"{where} is an empty sentence (no words). Valid: at least one word per row. Remove "
                        f"the row from the data.")
    if len(words) != len(tags):
        raise UserError(f"{where} is ragged: {len(words)} words but {len(tags)} tags. Valid: one tag per word. "
                        f"Fix the row (or choose the tag list with --label-column).")
    if any(word is None for word in words):
        raise UserError(f"{where}: {word_key!r} holds a missing word (null) at position {words.index(None) + 1}. "
                        f"Valid: every word is text. Fix the row, or choose the word list with --text-column.")
    bad = [t for t in tags if not isinstance(t, str | int) or isinstance(t, bool)][:1]
    if bad:
        raise UserError(f"{where}: {tag_key!r} holds {bad[0]!r}, which is not a tag. Valid tags are strings (or "
                        f"integer ids). Choose the tag list with --label-column.")
    return RawSentence([str(w) for w in words], named_tags(where, tags, tag_key, names), number)


def named_tags(where: str, tags: list[Any], tag_key: str, names: list[str] | None) -> list[str]:
    """Tags as text: integer ids through `names` when the data names them (else the ids as text, as JSON gives)."""
    if names is None:
        return [str(t) for t in tags]
    out = []
    for tag in tags:
        if isinstance(tag, int) and not 0 <= tag < len(names):
            raise UserError(f"{where}: tag id {tag} in {tag_key!r} names no tag: its {len(names)} names are ids 0 to "
                            f"{len(names) - 1} ({', '.join(names[:10])}{' ...' if len(names) > 10 else ''}). Fix the "
                            f"row, or choose the tag list with --label-column.")
        out.append(names[tag] if isinstance(tag, int) else str(tag))
    return out


def check_tag_values(path: Path | str, values: list[str], tag: int | str, word: int | str, ids: bool = False,
                     words: list[str] | None = None) -> None:
    """A tag column holds a small set of labels: not the words themselves, not a running index, not placeholders
    (`ids`: the column holds integer tag ids without names, numbers by design); and the word column's values
    (`words`, one per value) are not the tags (a tag column given as --text-column)."""
    distinct = set(values)
    reason = None
    if tag == word:
        reason = "it is the word column"
    elif distinct <= PLACEHOLDERS:
        reason = f"it holds only placeholders ({', '.join(sorted(distinct))})"
    elif not ids and all(v.isdigit() for v in values) and len(distinct) > 2:
        reason = "it holds numbers (a running index?)"
    elif len(distinct) > 64 and len(distinct) > 0.2 * len(values):
        reason = f"it has {len(distinct)} different values in {len(values)} words (words, not tags?)"
    if reason:
        raise UserError(f"Column {tag} of {path} is not a tag column: {reason}. Valid: a column of a few labels "
                        f"(O, B-PER, NOUN ...). Pass --label-column with the tag column's "
                        f"{'index' if isinstance(tag, int) else 'name'}.")
    if words and _look_like_tags(words, distinct):
        raise UserError(f"Column {word} of {path}, read as the words, holds tags ({', '.join(sorted(set(words))[:6])}"
                        f"{' ...' if len(set(words)) > 6 else ''}) while column {tag}, read as the tags, holds "
                        f"{len(distinct)} different values: the words would be the labels. Pass --text-column with "
                        f"the words' column and --label-column with the tags' "
                        f"{'index' if isinstance(word, int) else 'name'}.")


def _look_like_tags(words: list[str], tags: set[str]) -> bool:
    """Whether a word column holds tags: entity tags only (some of them prefixed), or far fewer values than the
    tag column (tags are the small set)."""
    distinct = set(words)
    if all(is_entity_tag(w) for w in distinct) and distinct - {OUTSIDE}:
        return True
    return len(tags) >= 6 and 2 * len(distinct) <= len(tags)
