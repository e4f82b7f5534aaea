"""One tagged sentence as a reader yields it (`RawSentence`: words, tags and where it starts) and the checks every
tagged reader shares, whatever it reads - column files and JSON rows (`tagged_rows`), parquet files and hub splits
(`tagged_tables`): a row's words and tags (`checked_sentence`) and a tag column's values (`check_tag_values`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Line (column files) or row (JSON) the sentence starts on, 1-based."""


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


def check_tag_values(path: Path | str, values: list[str], tag: int | str, word: int | str, ids: bool = False) -> None:
    """A tag column holds a small set of labels: not the words themselves, not a running index, not placeholders
    (`ids`: the column holds integer tag ids without names, numbers by design)."""
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
