"""The raw readers behind `bertkit.data.tagged`: sentences of a column file or of JSON(L) rows as read, with the
line they start on and each word's line (for error messages), in the file's --encoding (`text_lines`: bytes it cannot
read name the line and the flag), and the word and tag columns resolved from what was given or detected from the
file's first sentences.

Lines that start with `#` are comments where the format has them (UD and UNER files: `# sent_id = 1`, `# text = ...`,
a lone `#...`), and word rows where they read as one: a TAB-separated `#<TAB>SYM` or `#1<TAB>NUM`, and CoNLL-2003's
space-separated `# # O O` (the word `#`, whose POS tag is `#`) — a space-separated `#` line with the same number of
fields as its sentence's other (space-separated) rows and no `=` among its first fields is a row; one beside
TAB-separated rows, or in a block of such lines only, is a comment."""

from __future__ import annotations

import codecs
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.sources import json_objects
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
DOCSTART = "-DOCSTART-"
BLOCK_BYTES = 1 << 20


def is_json_path(path: Path) -> bool:
    return path.suffix.lower() in JSON_SUFFIXES


def split_fields(line: str) -> list[str]:
    return line.split("\t") if "\t" in line else line.split()


def comment_kind(line: str) -> str | None:
    """None for a line that is not a comment; "comment" for one that is (`# text = ...`, `# sent_id = 1`, a lone
    `#...` field, `# ` then TAB-free text of a TAB file's header); "maybe" for a space-separated `#` line that may be
    CoNLL-2003's word `#` (`# # O O`): its sentence decides (`_settled`: a row where its sentence's other rows are
    space-separated and as wide)."""
    if not line.startswith("#"):
        return None
    fields = split_fields(line)
    if len(fields) < 2 or "=" in fields[1:4]:
        return "comment"
    if "\t" in line:
        return "comment" if fields[0].startswith("# ") else None
    return "maybe" if fields[0] == "#" else None


def _decode_error(path: Path, encoding: str, line: int, exc: UnicodeDecodeError) -> UserError:
    byte = exc.object[exc.start] if exc.start < len(exc.object) else None
    shown = f"byte 0x{byte:02x}" if byte is not None else "an incomplete character at its end"
    return UserError(f"{path} line {line} is not {encoding} text ({shown} cannot be decoded). Pass --encoding with "
                     f"the file's real encoding (e.g. --encoding latin-1), or re-save it as UTF-8.")


def _decoder(path: Path, encoding: str) -> Any:
    try:
        return codecs.getincrementaldecoder(encoding)("strict")
    except LookupError:
        raise UserError(f"Unknown --encoding {encoding!r} for {path}. Use a Python codec name such as utf-8 or "
                        f"latin-1.") from None


def text_lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """(1-based number, text without its line end) of each line of `path` read in `encoding`, streamed a block at a
    time (a leading byte-order mark dropped); bytes `encoding` cannot read are a UserError naming the file, the line
    and --encoding."""
    decoder, pending, number = _decoder(path, encoding), "", 0
    with open(path, "rb") as handle:
        for block in itertools.chain(iter(lambda: handle.read(BLOCK_BYTES), b""), [b""]):
            held = decoder.getstate()[0]  # bytes of a character cut by the previous block
            try:
                pending += decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                line = number + pending.count("\n") + (held + block)[:exc.start].count(b"\n") + 1
                raise _decode_error(path, encoding, line, exc) from None
            *lines, pending = pending.split("\n")
            for line in lines:
                number += 1
                yield number, (line.lstrip("\ufeff") if number == 1 else line).rstrip("\r")
    if pending:
        yield number + 1, (pending.lstrip("\ufeff") if number == 0 else pending).rstrip("\r")


@dataclass
class FieldBlock:
    """One sentence's rows as read: each row's fields, line and whether it was TAB-separated, and the
    `# global.columns =` names seen so far."""

    rows: list[list[str]]
    lines: list[int]
    tabbed: list[bool]
    names: list[str] | None = None

    @property
    def start(self) -> int:
        return self.lines[0]


Row = tuple[int, list[str], bool, bool]
"""(line number, fields, TAB-separated, maybe a comment) of a word line as read."""


def _settled(rows: list[Row], names: list[str] | None) -> FieldBlock | None:
    """A block's rows with its maybe-comment `#` lines kept where they have its other rows' width (else dropped as
    comments); None when no row is left."""
    if any(row[3] for row in rows):
        sure = [len(fields) for _, fields, tabbed, maybe in rows if not maybe and not tabbed]  # TAB rows: a comment
        width = Counter(sure).most_common(1)[0][0] if sure else None
        rows = [row for row in rows if not row[3] or len(row[1]) == width]
    return FieldBlock([r[1] for r in rows], [r[0] for r in rows], [r[2] for r in rows], names) if rows else None


def field_sentences(path: Path, encoding: str = "utf-8") -> Iterator[FieldBlock]:
    """Each sentence's rows (`FieldBlock`): blank lines end sentences; comments, `-DOCSTART-` lines and CoNLL-U's
    multiword ranges and empty nodes are skipped."""
    names: list[str] | None = None
    rows: list[Row] = []
    for number, line in text_lines(path, encoding):
        kind = comment_kind(line) if line.startswith("#") else None
        if kind == "comment":
            if line.lower().startswith("# global.columns ="):
                names = [name.lower() for name in line.split("=", 1)[1].split()]
            continue
        tabbed = "\t" in line
        fields = (line.split("\t") if tabbed else line.split()) if line.strip() else []
        if fields and fields[0] == DOCSTART or len(fields) == 10 and CONLLU_SKIPPED_ID.match(fields[0]):
            continue
        if fields:
            rows.append((number, fields, tabbed, kind == "maybe"))
            continue
        block = _settled(rows, names) if rows else None
        rows = []
        if block is not None:
            yield block
    block = _settled(rows, names) if rows else None
    if block is not None:
        yield block


def column_sentences(path: Path, word: int, tag: int, encoding: str = "utf-8") -> Iterator[RawSentence]:
    """Sentences of a column file, word and tag from the 0-based columns `word` and `tag`; a line with too few
    fields, or (space-separated) more than most lines (a word with a space in it), stops the read."""
    need, widths = max(word, tag) + 1, Counter()
    for block in field_sentences(path, encoding):
        lengths = [len(fields) for fields in block.rows]
        widths.update(lengths)
        width = widths.most_common(1)[0][0]  # the file's, as read so far
        for number, fields, tabbed in zip(block.lines, block.rows, block.tabbed, strict=True):
            if len(fields) < need:
                raise UserError(
                    f"{path} line {number}: {len(fields)} column(s) ({' | '.join(fields)}), but the word and "
                    f"tag columns are {word} and {tag}. Valid: every word line has at least {need} columns. Fix the "
                    f"line (a missing tag?), or choose other columns with --text-column/--label-column.")
            if len(fields) > width and not tabbed:
                raise UserError(
                    f"{path} line {number}: {len(fields)} space-separated fields ({' | '.join(fields)}) where the "
                    f"file's lines have {width}: its tag would be read from the wrong field. Valid: "
                    f"one word (no spaces) and its tags per line. Fix the line (join the word, or separate the "
                    f"columns with TABs).")
        yield RawSentence([f[word] for f in block.rows], [f[tag] for f in block.rows], block.start,
                          tuple(block.lines))


def looks_like_column_file(path: Path, max_lines: int) -> bool:
    """Whether the first `max_lines` lines of `path` have a column file's shape: blocks of word rows between blank
    lines, most blocks of several rows (plain text with a sentence per line has one per block), and the rows of two
    or more fields without spaces in a TAB-separated field, the space-separated ones of one width. A few rows may
    break that (a missing tag is then named by line when the file is read): one in fifty, or one where the other
    rows have a column of entity tags (`_has_entity_column`: no table of sentences has one)."""
    rows: list[list[str]] = []
    odd, sizes, size, separated, widths = 0, [], 0, False, Counter()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in itertools.islice(handle, max_lines):
            line = line.rstrip("\r\n")
            if not line.strip():
                separated, sizes, size = separated or bool(rows), sizes + [size] if size else sizes, 0
                continue
            fields = split_fields(line)
            if comment_kind(line) == "comment" or fields[0] == DOCSTART:
                continue
            size += 1
            rows.append(fields)
            if "\t" not in line:
                widths[len(fields)] += 1
            odd += len(fields) < 2 or ("\t" in line and any(" " in f.strip() for f in fields))
    sizes += [size] if size else []
    width = widths.most_common(1)[0][0] if widths else None
    odd += sum(widths.values()) - (widths[width] if width else 0)
    allowed = max(len(rows) // 50, int(_has_entity_column([r for r in rows if len(r) == width or not widths])))
    return separated and odd <= allowed and 2 * sum(n > 1 for n in sizes) >= len(sizes)


def _has_entity_column(rows: list[list[str]]) -> bool:
    """Whether some column past the first holds only entity tags, prefix-type ones among them (B-PER...)."""
    width = min((len(r) for r in rows), default=0)
    return any(all(is_entity_tag(r[c]) for r in rows) and any(r[c] != "O" for r in rows) for c in range(1, width))


def json_rows(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, Any]]:
    """(row number, object) of a .jsonl file (streamed) or a .json file holding a list of objects."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads("\n".join(line for _, line in text_lines(path, encoding)))
        except json.JSONDecodeError as error:
            raise UserError(f"{path} is not valid JSON ({error}). Valid: a list of objects with token and tag "
                            f"lists. Fix the file, or write it as JSON lines (.jsonl).") from error
        yield from enumerate(data if isinstance(data, list) else [data], 1)
        return
    yield from json_objects(text_lines(path, encoding), path, "one object per line with token and tag lists")


def json_sentences(path: Path, word_key: str, tag_key: str, encoding: str = "utf-8") -> Iterator[RawSentence]:
    """Sentences of JSON rows; ragged rows, empty sentences and tag fields that are not lists stop the read."""
    for number, row in json_rows(path, encoding):
        words, tags = (row.get(word_key), row.get(tag_key)) if isinstance(row, dict) else (None, None)
        yield checked_sentence(f"{path} row {number}", number, words, tags, word_key, tag_key)


def resolve_file_columns(path: Path, word: str | None, tag: str | None, encoding: str = "utf-8") -> dict[str, str]:
    """{word_column, tag_column} as read: JSON keys, or column indices (as text) of a column file; given ones
    are checked, missing ones detected, and the tag column must look like tags and the word column not
    (`check_tag_values`)."""
    if is_json_path(path):
        first = next((row for _, row in json_rows(path, encoding) if isinstance(row, dict)), {})
        keys = {"word_column": word or _first_key(path, first, WORD_KEYS, "--text-column"),
                "tag_column": tag or _first_key(path, first, TAG_KEYS, "--label-column")}
        _check_json_tags(path, keys["word_column"], keys["tag_column"], encoding)
        return keys
    sample = list(itertools.islice(field_sentences(path, encoding), PEEK_SENTENCES))
    rows = [fields for block in sample for fields in block.rows]
    if not rows:
        return {"word_column": word or "0", "tag_column": tag or "1"}
    width = Counter(len(fields) for fields in rows).most_common(1)[0][0]  # a short line is reported when read
    rows = [fields for fields in rows if len(fields) >= width]
    names = sample[0].names or (list(CONLLU_COLUMNS) if width == 10 else None)
    word_index = _index(path, word, width, names, "--text-column") if word else _detect_word(rows)
    tag_index = _index(path, tag, width, names, "--label-column") if tag else _detect_tag(rows, width, word_index)
    check_tag_values(path, [fields[tag_index] for fields in rows], tag_index, word_index,
                     words=[fields[word_index] for fields in rows])
    return {"word_column": str(word_index), "tag_column": str(tag_index)}


def _check_json_tags(path: Path, word_key: str, tag_key: str, encoding: str) -> None:
    """The tag lists of the first rows hold tags and the word lists not (`check_tag_values`; integer ids are
    numbers by design)."""
    rows = [row for _, row in itertools.islice(json_rows(path, encoding), PEEK_SENTENCES) if isinstance(row, dict)]
    values = [tag for row in rows if isinstance(row.get(tag_key), list) for tag in row[tag_key]]
    words = [str(w) for row in rows if isinstance(row.get(word_key), list) for w in row[word_key]]
    if values:
        check_tag_values(path, [str(v) for v in values], tag_key, word_key,
                         ids=all(isinstance(v, int) and not isinstance(v, bool) for v in values), words=words)


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
