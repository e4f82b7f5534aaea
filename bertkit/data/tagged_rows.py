"""The raw readers behind `bertkit.data.tagged`: sentences of a column file or of JSON(L) rows as read, with the
line they start on (for error messages), and the word and tag columns resolved from what was given or detected
from the file's first sentences."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.data.tagged_sentence import (
    PEEK_SENTENCES,
    PLACEHOLDERS,
    TAG_KEYS,
    WORD_KEYS,
    RawSentence,
    check_tag_values,
    checked_sentence,
)
from bertkit.data.tagscheme import is_entity_tag
from bertkit.errors import UserError

JSON_SUFFIXES = (".jsonl", ".json")
CONLLU_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
"""Names of a 10-column CoNLL-U file's columns, so --text-column form --label-column upos reads one."""
CONLLU_SKIPPED_ID = re.compile(r"^\d+[-.]\d+$")
"""CoNLL-U multiword ranges (1-2) and empty nodes (1.1): not words of the sentence."""


def is_json_path(path: Path) -> bool:
    return path.suffix.lower() in JSON_SUFFIXES


def is_comment(line: str) -> bool:
    """`#` then a space (`# text = ...`), or a lone `#...` field: a comment. A line of several fields starting
    with `#` is a word row (UD files have the word `#`, tagged SYM, and hashtags such as `#1`)."""
    return line.startswith("#") and (line.startswith("# ") or len(split_fields(line)) < 2)


def split_fields(line: str) -> list[str]:
    return line.split("\t") if "\t" in line else line.split()


def field_sentences(path: Path) -> Iterator[tuple[int, list[list[str]], list[str] | None]]:
    """(first line, the fields of each row, column names from a `# global.columns =` header) per sentence."""
    names: list[str] | None = None
    rows: list[list[str]] = []
    start = 0
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if is_comment(line):
                if line.lower().startswith("# global.columns ="):
                    names = [name.lower() for name in line.split("=", 1)[1].split()]
                continue
            fields = split_fields(line) if line.strip() else []
            if fields and fields[0] == "-DOCSTART-":
                continue
            if not fields:
                if rows:
                    yield start, rows, names
                rows = []
                continue
            if len(fields) == 10 and CONLLU_SKIPPED_ID.match(fields[0]):
                continue
            if not rows:
                start = number
            rows.append(fields)
    if rows:
        yield start, rows, names


def column_sentences(path: Path, word: int, tag: int) -> Iterator[RawSentence]:
    """Sentences of a column file, word and tag from the 0-based columns `word` and `tag`."""
    need = max(word, tag) + 1
    for start, rows, _ in field_sentences(path):
        for offset, fields in enumerate(rows):
            if len(fields) < need:
                raise UserError(
                    f"{path} line {start + offset}: {len(fields)} column(s) ({' | '.join(fields)}), but the word and "
                    f"tag columns are {word} and {tag}. Valid: every word line has at least {need} columns. Fix the "
                    f"line, or choose other columns with --text-column/--label-column.")
        yield RawSentence([f[word] for f in rows], [f[tag] for f in rows], start)


def json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, object) of a .jsonl file (streamed) or a .json file holding a list of objects."""
    if path.suffix.lower() == ".json":
        with open(path, encoding="utf-8") as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as error:
                raise UserError(f"{path} is not valid JSON ({error}). Valid: a list of objects with token and tag "
                                f"lists. Fix the file, or write it as JSON lines (.jsonl).") from error
        yield from enumerate(data if isinstance(data, list) else [data], 1)
        return
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as error:
                    raise UserError(f"{path} line {number} is not a JSON object ({error}). Valid: one object per "
                                    f"line with token and tag lists. Fix that line.") from error


def json_sentences(path: Path, word_key: str, tag_key: str) -> Iterator[RawSentence]:
    """Sentences of JSON rows; ragged rows, empty sentences and tag fields that are not lists stop the read."""
    for number, row in json_rows(path):
        words, tags = (row.get(word_key), row.get(tag_key)) if isinstance(row, dict) else (None, None)
        yield checked_sentence(f"{path} row {number}", number, words, tags, word_key, tag_key)


def resolve_file_columns(path: Path, word: str | None, tag: str | None) -> dict[str, str]:
    """{word_column, tag_column} as read: JSON keys, or column indices (as text) of a column file; given ones
    are checked, missing ones detected, and the tag column must look like tags (`check_tag_values`)."""
    if is_json_path(path):
        first = next((row for _, row in json_rows(path) if isinstance(row, dict)), {})
        keys = {"word_column": word or _first_key(path, first, WORD_KEYS, "--text-column"),
                "tag_column": tag or _first_key(path, first, TAG_KEYS, "--label-column")}
        _check_json_tags(path, keys["word_column"], keys["tag_column"])
        return keys
    sample = list(itertools.islice(field_sentences(path), PEEK_SENTENCES))
    rows = [fields for _, sentence, _ in sample for fields in sentence]
    if not rows:
        return {"word_column": word or "0", "tag_column": tag or "1"}
    width = Counter(len(fields) for fields in rows).most_common(1)[0][0]  # a short line is reported when read
    rows = [fields for fields in rows if len(fields) >= width]
    names = sample[0][2] or (list(CONLLU_COLUMNS) if width == 10 else None)
    word_index = _index(path, word, width, names, "--text-column") if word else _detect_word(rows)
    tag_index = _index(path, tag, width, names, "--label-column") if tag else _detect_tag(rows, width, word_index)
    check_tag_values(path, [fields[tag_index] for fields in rows], tag_index, word_index)
    return {"word_column": str(word_index), "tag_column": str(tag_index)}


def _check_json_tags(path: Path, word_key: str, tag_key: str) -> None:
    """The tag lists of the first rows hold tags (`check_tag_values`; integer ids are numbers by design)."""
    values = [tag for _, row in itertools.islice(json_rows(path), PEEK_SENTENCES)
              if isinstance(row, dict) and isinstance(row.get(tag_key), list) for tag in row[tag_key]]
    if values:
        check_tag_values(path, [str(v) for v in values], tag_key, word_key,
                         ids=all(isinstance(v, int) and not isinstance(v, bool) for v in values))


def _first_key(path: Path, row: dict, keys: tuple[str, ...], flag: str) -> str:
    found = next((key for key in keys if key in row), None)
    if found is None:
        raise UserError(f"{path}: none of the keys {', '.join(keys)} is in its first row (keys: "
                        f"{', '.join(map(str, row)) or 'none'}). Pass {flag} with the key of the list column.")
    return found


def _index(path: Path, given: str, width: int, names: list[str] | None, flag: str) -> int:
    """A given column: an index (negative from the end) or a name from the header / CoNLL-U."""
    if re.fullmatch(r"-?\d+", given):
        index = int(given)
        if -width <= index < width:
            return index % width
    elif names and given.lower() in names and names.index(given.lower()) < width:
        return names.index(given.lower())
    valid = f"0 to {width - 1} (or -1 to -{width})" + (f", or a name: {', '.join(names)}" if names else "")
    raise UserError(f"{flag} {given} is not a column of {path}: its lines have {width} columns, so valid are {valid}. "
                    f"Pass {flag} with one of them.")


def _is_running_index(rows: list[list[str]], column: int) -> bool:
    return all(fields[column].isdigit() for fields in rows)


def _detect_word(rows: list[list[str]]) -> int:
    """The word column: the first, or the second when the first is a running index (CoNLL-U, UNER files)."""
    return 1 if len(rows[0]) > 1 and _is_running_index(rows, 0) else 0


def _detect_tag(rows: list[list[str]], width: int, word: int) -> int:
    """The tag column: the last one of entity tags (CoNLL-2003's NER after its chunk column), else the last that
    is neither the words, a running index nor placeholders only (`-`, `_`)."""
    candidates = [c for c in range(width) if c != word and not _is_running_index(rows, c)
                  and not all(fields[c] in PLACEHOLDERS for fields in rows)]
    entity = [c for c in candidates if all(is_entity_tag(fields[c]) for fields in rows)]
    if entity:
        return entity[-1]
    return candidates[-1] if candidates else (width - 1)
