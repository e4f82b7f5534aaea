"""Tagged corpora stored as Arrow tables with list columns, one sentence per row: parquet files, read one record
batch (`BATCH_ROWS` rows) at a time, and hub dataset splits (a `datasets.Dataset`, memory-mapped from the hub
cache), read the same way. Each row holds a list of words and a list of tags, checked as JSON rows are
(`tagged_sentence.checked_sentence`). Integer tag ids are read as the names of their ClassLabel: a hub split's features
record them, and a parquet file written by `datasets` keeps those features in its schema metadata. Ids without
names are read as text, as JSON's are."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.data.tagged_sentence import (
    PEEK_SENTENCES,
    TAG_KEYS,
    WORD_KEYS,
    RawSentence,
    check_tag_values,
    checked_sentence,
)
from bertkit.errors import UserError

log = logging.getLogger(__name__)

BATCH_ROWS = 1024
"""Rows read at a time: the memory a table corpus costs is one batch of them."""
TABLE_SUFFIXES = (".parquet",)
HF_METADATA = b"huggingface"
"""The schema metadata key under which `datasets` stores a table's features (ClassLabel names included)."""


@dataclass(frozen=True)
class ListColumns:
    """A table's columns: every name in order, the item kind of each list column (string, integer or other), and
    the tag names of the list columns that hold ClassLabel ids."""

    columns: tuple[str, ...]
    kinds: Mapping[str, str] = field(default_factory=dict)
    names: Mapping[str, list[str]] = field(default_factory=dict)

    def holding(self, *kinds: str) -> list[str]:
        return [name for name in self.columns if self.kinds.get(name) in kinds]


def list_columns(schema: Any, features: Mapping[str, Any] | None) -> ListColumns:
    """The `ListColumns` of an Arrow `schema` (`features`: the `datasets` features in their dict form, or None)."""
    import pyarrow as pa

    kinds = {}
    for item in schema:
        kind = item.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            value = kind.value_type
            text = pa.types.is_string(value) or pa.types.is_large_string(value)
            kinds[item.name] = "string" if text else "integer" if pa.types.is_integer(value) else "other"
    return ListColumns(tuple(schema.names), kinds, class_names(features or {}))


def class_names(features: Mapping[str, Any]) -> dict[str, list[str]]:
    """{column: names} of the list-of-ClassLabel columns in `datasets` features as a dict (`Features.to_dict()`, or
    the JSON a parquet file's metadata holds): `List`/`Sequence` types whose `feature` is a ClassLabel."""
    found = {}
    for name, feature in features.items():
        inner = feature.get("feature") if isinstance(feature, dict) else None
        if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" and inner.get("names"):
            found[str(name)] = [str(n) for n in inner["names"]]
    return found


def detected_columns(table: ListColumns) -> tuple[str, str] | None:
    """(words, tags) of a table that has the tagged shape, else None (`_detect_word`, `_detect_tag`)."""
    word = _detect_word(table)
    tag = _detect_tag(table, word) if word is not None else None
    return None if word is None or tag is None else (word, tag)


def _detect_word(table: ListColumns) -> str | None:
    """The words: a list of strings, tokens or words first."""
    texts = table.holding("string")
    return next((k for k in WORD_KEYS if k in texts), texts[0] if texts else None)


def _detect_tag(table: ListColumns, word: str | None) -> str | None:
    """The tags: another list of strings or integer ids, a known tag name first, then a ClassLabel list."""
    tags = [name for name in table.holding("string", "integer") if name != word]
    known = [k for k in TAG_KEYS if k in tags] + [name for name in tags if name in table.names]
    return next(iter(known), tags[0] if tags else None)


def resolve_table_columns(where: str, table: ListColumns, word: str | None, tag: str | None) -> tuple[str, str]:
    """(words, tags) column names: given ones (a name, or a 0-based index) checked, missing ones detected."""
    word = _column(where, table, word, "--text-column") or _detect_word(table)
    tag = _column(where, table, tag, "--label-column") or _detect_tag(table, word)
    listed = ", ".join(f"{name} ({table.kinds[name]} list)" for name in table.holding("string", "integer", "other"))
    if word is None or tag is None:
        raise UserError(f"{where} has no list column of words and one of tags to detect (its list columns: "
                        f"{listed or 'none'}; all columns: {', '.join(table.columns)}). Valid: one row per sentence, a "
                        f"list of words and a list of tags. Pass --text-column and --label-column with their names.")
    for name, flag, kinds in ((word, "--text-column", ("string",)), (tag, "--label-column", ("string", "integer"))):
        if table.kinds.get(name) not in kinds:
            plural = " or ".join({"string": "strings", "integer": "integer ids"}[kind] for kind in kinds)
            raise UserError(f"{flag} {name} of {where} is not a list of {plural} (one per word). Valid "
                            f"list columns: {listed or 'none'}. Pass {flag} with one of them.")
    return word, tag


def _column(where: str, table: ListColumns, value: str | None, flag: str) -> str | None:
    if value is None or value in table.columns:
        return value
    if value.lstrip("-").isdigit() and -len(table.columns) <= int(value) < len(table.columns):
        return table.columns[int(value)]
    raise UserError(f"{flag} {value} is not a column of {where}: its columns are {', '.join(table.columns)} (or their "
                    f"0-based indices). Pass {flag} with one of them.")


def table_sentences(batches: Iterable[Any], word: str, tag: str, names: list[str] | None,
                    where: str) -> Iterator[RawSentence]:
    """The sentences of Arrow record batches (or tables), one per row, numbered from 1; a batch's cells become
    Python lists only while it is read."""
    number = 0
    for batch in batches:
        for words, tags in zip(batch.column(word).to_pylist(), batch.column(tag).to_pylist(), strict=True):
            number += 1
            yield checked_sentence(f"{where} row {number}", number, words, tags, word, tag, names)


def check_table_tags(where: str, sentences: Iterable[RawSentence], table: ListColumns, word: str, tag: str) -> None:
    """The first sentences' tags look like tags and their words not (`tagged_sentence.check_tag_values`; unnamed
    integer ids are numbers by design)."""
    sample = list(itertools.islice(sentences, PEEK_SENTENCES))
    values = [t for raw in sample for t in raw.tags]
    ids = table.kinds.get(tag) == "integer" and tag not in table.names
    if values:
        check_tag_values(where, values, tag, word, ids=ids, words=[w for raw in sample for w in raw.words])
    if ids:
        log.warning("%s: the tags %r are integer ids without names, so they are read as their numbers (plain labels, "
                    "scored by token accuracy). For entity F1, write the tags as strings, or save the data with "
                    "`datasets` (its ClassLabel names are kept).", where, tag)


# ---------------------------------------------------------------- parquet files


def is_table_path(path: Path) -> bool:
    return path.suffix.lower() in TABLE_SUFFIXES


def parquet_columns(path: Path) -> ListColumns:
    """A parquet file's columns, read from its footer alone."""
    import pyarrow.parquet as pq

    schema = _parquet(path, lambda: pq.read_schema(path))
    try:
        features = json.loads((schema.metadata or {}).get(HF_METADATA, b"{}"))["info"]["features"]
    except (ValueError, KeyError, TypeError):
        features = None  # a parquet file not written by `datasets`: no tag names
    return list_columns(schema, features if isinstance(features, dict) else None)


def tagged_shape(path: Path) -> bool:
    """Whether a parquet file has the tagged shape (`detected_columns`); an unreadable one has not (the sentence
    path then says why)."""
    try:
        return detected_columns(parquet_columns(path)) is not None
    except UserError:
        return False


def resolve_parquet_columns(path: Path, word: str | None, tag: str | None) -> tuple[str, str]:
    """(words, tags) of a parquet file (`resolve_table_columns`), the tags checked in its first rows."""
    table = parquet_columns(path)
    word, tag = resolve_table_columns(str(path), table, word, tag)
    check_table_tags(str(path), parquet_sentences(path, word, tag), table, word, tag)
    return word, tag


def parquet_sentences(path: Path, word: str, tag: str) -> Iterator[RawSentence]:
    """The sentences of a parquet file, `BATCH_ROWS` rows at a time (only the two columns are read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def batches() -> Iterator[Any]:
        try:
            yield from pq.ParquetFile(path).iter_batches(BATCH_ROWS, columns=[word, tag])
        except (OSError, pa.ArrowException) as exc:
            raise unreadable_parquet(path, exc) from None

    yield from table_sentences(batches(), word, tag, parquet_columns(path).names.get(tag), str(path))


def _parquet(path: Path, read: Any) -> Any:
    """`read()`, a pyarrow error on an unreadable file turned into a UserError."""
    import pyarrow as pa

    try:
        return read()
    except (OSError, pa.ArrowException) as exc:
        raise unreadable_parquet(path, exc) from None


def unreadable_parquet(path: Path, exc: Exception) -> UserError:
    return UserError(f"{path} is not a readable parquet file ({exc}). Valid: a parquet file with a list column of "
                     f"words and one of tags. Re-export it.")


# ---------------------------------------------------------------- hub dataset splits


def dataset_columns(dataset: Any) -> ListColumns:
    """A hub split's columns, with its features' ClassLabel names."""
    return list_columns(dataset.data.schema, dataset.features.to_dict())


def resolve_dataset_columns(dataset: Any, where: str, word: str | None, tag: str | None) -> tuple[str, str]:
    """(words, tags) of a hub split (`resolve_table_columns`), the tags checked in its first rows."""
    table = dataset_columns(dataset)
    word, tag = resolve_table_columns(where, table, word, tag)
    check_table_tags(where, dataset_sentences(dataset, word, tag, where), table, word, tag)
    return word, tag


def dataset_sentences(dataset: Any, word: str, tag: str, where: str) -> Iterator[RawSentence]:
    """The sentences of a hub split (`datasets.Dataset`), `BATCH_ROWS` rows at a time as Arrow tables."""
    names = dataset_columns(dataset).names.get(tag)
    batches = dataset.select_columns([word, tag]).with_format("arrow").iter(batch_size=BATCH_ROWS)
    yield from table_sentences(batches, word, tag, names, where)
