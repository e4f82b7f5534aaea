"""The raw readers behind `bertkit.data.squad`: the questions of a SQuAD file or hub split as written, each with
where it was read (for messages), before any check of their content. Two layouts:

- SQuAD JSON v1.1/v2.0: `{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
  "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}` (`plausible_answers` is not read);
- the flat Hugging Face layout, one question per row: `id, title, context, question, answers: {"text": [...],
  "answer_start": [...]}` (a list of `{"text", "answer_start"}` objects is read too), optionally `is_impossible`, as
  a .json file (a list of rows, or JSON lines as `Dataset.to_json` writes them), .jsonl, .csv (answers as a JSON
  string column), .parquet (answers a struct of lists) and hub splits (`squad`, `squad_v2`).

Structure that cannot be read at all (a row without a context, answers that are not answers) stops here with the
file, the row or question and the fix; what can be read is checked whole in `bertkit.data.squad`."""

from __future__ import annotations

import ast
import csv
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.sources import json_objects
from bertkit.errors import UserError

FLAT_COLUMNS = ("context", "question", "answers")
"""The columns a flat row must have (besides `id`); `title` and `is_impossible` are optional."""
SQUAD_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
BATCH_ROWS = 1024
"""Rows of a parquet file or hub split converted to Python at a time."""
HUB_VERSIONS = {"squad": "1.1", "squad_v2": "2.0"}
"""The SQuAD version a hub dataset declares by its name (`rajpurkar/squad_v2` too)."""


@dataclass(frozen=True)
class RawQuestion:
    """One question as read: `answers` as (text, answer_start) pairs in file order, `is_impossible` None when the row
    does not say."""

    where: str
    """Where it was read, for messages: "article 3, paragraph 2" or "row 17"."""
    id: str
    title: str
    context: str
    question: str
    answers: tuple[tuple[str, int], ...]
    is_impossible: bool | None


@dataclass(frozen=True)
class RawSet:
    """Every question of one file or split, and what the source says of its version ("1.1", "2.0"; None: nothing)."""

    questions: list[RawQuestion]
    declared: str | None
    layout: str
    """"squad" (nested SQuAD JSON) or "flat" (one question per row)."""


def declared_version(value: Any) -> str | None:
    """The SQuAD version a `version` key names ("v2.0", "1.1", "tydiqa-goldp-v1.1-english"); None otherwise."""
    text = str(value or "")
    return "2.0" if "2.0" in text else "1.1" if "1.1" in text else None


def _text(value: Any, where: str, key: str, source: str) -> str:
    if isinstance(value, str):
        return value
    raise UserError(f"{source} {where}: {key!r} is {type(value).__name__} {str(value)[:60]!r}, not text. Valid: a "
                    f"string for id, title, context and question. Fix that {key}.")


def _question_id(value: Any, where: str, source: str) -> str:
    """An id as text: ids written as numbers are read as their digits (predictions key them as strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None or value == "":
        raise UserError(f"{source} {where}: the question has no id. Valid: a unique string id per question "
                        f"(predictions and scores are keyed by it). Add an 'id' to every question.")
    return _text(value, where, "id", source)


def _answer_pairs(value: Any, where: str, source: str) -> tuple[tuple[str, int], ...]:
    """(text, start) pairs of a SQuAD answer list or a flat `{"text": [...], "answer_start": [...]}` object."""
    fix = (f"Valid: a list of {{'text', 'answer_start'}} objects, or {{'text': [...], 'answer_start': [...]}} with "
           f"lists of the same length (an integer start per text). Fix the answers of {where}.")
    if isinstance(value, Mapping) and set(value) >= {"text", "answer_start"}:
        texts, starts = value["text"], value["answer_start"]
        if not isinstance(texts, list | tuple) or not isinstance(starts, list | tuple) or len(texts) != len(starts):
            raise UserError(f"{source} {where}: answers {str(value)[:120]} do not pair texts with starts. {fix}")
        value = [{"text": t, "answer_start": s} for t, s in zip(texts, starts, strict=True)]
    if not isinstance(value, list | tuple) or not all(isinstance(a, Mapping) for a in value):
        raise UserError(f"{source} {where}: answers {str(value)[:120]!r} are not a list of answers. {fix}")
    pairs = []
    for answer in value:
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or isinstance(start, bool) or not isinstance(start, int):
            raise UserError(f"{source} {where}: answer {dict(answer)!r} needs a text and an integer answer_start. "
                            f"{fix}")
        pairs.append((text, start))
    return tuple(pairs)


def _impossible(value: Any, where: str, source: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if value in (0, 1, "true", "false", "True", "False"):
        return value in (1, "true", "True")
    raise UserError(f"{source} {where}: is_impossible is {value!r}. Valid: true or false. Fix that question.")


def nested_questions(document: Mapping[str, Any], source: str) -> list[RawQuestion]:
    """The questions of a SQuAD JSON document, every paragraph's context shared by its questions (one string)."""
    articles = document.get("data")
    if not isinstance(articles, list):
        raise UserError(f"{source}: 'data' is not a list of articles. Valid SQuAD JSON: {{\"data\": [{{\"title\", "
                        f"\"paragraphs\": [{{\"context\", \"qas\": [...]}}]}}]}}. Fix the file.")
    out = []
    for a, article in enumerate(articles, 1):
        paragraphs = article.get("paragraphs") if isinstance(article, Mapping) else None
        if not isinstance(paragraphs, list):
            raise UserError(f"{source} article {a}: no 'paragraphs' list. Valid: each article is {{\"title\", "
                            f"\"paragraphs\": [...]}}. Fix that article.")
        title = article.get("title") or ""
        for p, paragraph in enumerate(paragraphs, 1):
            where = f"article {a}, paragraph {p}"
            if not isinstance(paragraph, Mapping) or not isinstance(paragraph.get("qas"), list):
                raise UserError(f"{source} {where}: no 'qas' list. Valid: each paragraph is {{\"context\", \"qas\": "
                                f"[{{\"id\", \"question\", \"answers\"}}]}}. Fix that paragraph.")
            context = _text(paragraph.get("context"), where, "context", source)
            for qa in paragraph["qas"]:
                qa = qa if isinstance(qa, Mapping) else {}
                qid = _question_id(qa.get("id"), where, source)
                out.append(RawQuestion(where, qid, _text(title, where, "title", source), context,
                                       _text(qa.get("question"), where, "question", source),
                                       _answer_pairs(qa.get("answers", []), f"{where}, question {qid!r}", source),
                                       _impossible(qa.get("is_impossible"), where, source)))
    return out


def flat_questions(rows: Iterable[tuple[int, Any]], source: str, unit: str = "row") -> list[RawQuestion]:
    """The questions of flat rows, (number, row object) each; equal contexts are kept as one string."""
    contexts: dict[str, str] = {}
    out = []
    for number, row in rows:
        where = f"{unit} {number}"
        if not isinstance(row, Mapping) or any(key not in row for key in FLAT_COLUMNS):
            have = ", ".join(map(str, row)) if isinstance(row, Mapping) else type(row).__name__
            raise UserError(f"{source} {where}: not a question row (it has {have}). Valid: id, title, context, "
                            f"question, answers {{'text': [...], 'answer_start': [...]}}. Fix the row, or pass SQuAD "
                            f"JSON ({{\"data\": [...]}}).")
        answers = row["answers"]
        if isinstance(answers, str):
            answers = parsed_cell(answers, where, source)
        context = _text(row["context"], where, "context", source)
        qid = _question_id(row.get("id"), where, source)
        out.append(RawQuestion(where, qid, _text(row.get("title") or "", where, "title", source),
                               contexts.setdefault(context, context), _text(row["question"], where, "question", source),
                               _answer_pairs(answers, f"{where} (id {qid!r})", source),
                               _impossible(row.get("is_impossible"), where, source)))
    return out


def parsed_cell(cell: str, where: str, source: str) -> Any:
    """A CSV answers cell: JSON, or the Python literal `str(dict)` writes (single quotes)."""
    try:
        return json.loads(cell)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(cell)
    except (ValueError, SyntaxError):
        raise UserError(f"{source} {where}: the answers cell {cell[:120]!r} is not JSON. Valid: "
                        f"{{\"text\": [\"...\"], \"answer_start\": [12]}} as JSON text. Write the answers column with "
                        f"json.dumps.") from None


def json_document(path: Path) -> Any:
    """A .json file's document, or its rows when it holds JSON lines (`Dataset.to_json` writes those)."""
    with open(path, encoding="utf-8-sig") as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg != "Extra data":
            raise UserError(f"{path} is not valid JSON ({error}). Valid: SQuAD JSON ({{\"data\": [...]}}) or question "
                            f"rows. Fix the file.") from None
    return [row for _, row in json_lines(text.splitlines(), path)]


def json_lines(lines: Iterable[str], path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) of JSON lines (`sources.json_objects`)."""
    return json_objects(enumerate(lines, 1), path, "one question row per line")


def csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV file with a header; a context may hold newlines (quoted)."""
    previous = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in ("id", *FLAT_COLUMNS) if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: no column {', '.join(missing)} (its header is {reader.fieldnames}). Valid: "
                                f"a header with id, title, context, question, answers (JSON). Rename the columns.")
            for row in reader:
                yield reader.line_num, row
    finally:
        csv.field_size_limit(previous)


def table_rows(batches: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """(row number, row) of Arrow record batches, one batch converted to Python at a time."""
    number = 0
    for batch in batches:
        for row in batch.to_pylist():
            number += 1
            yield number, row


def parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        yield from table_rows(pq.ParquetFile(path).iter_batches(BATCH_ROWS))
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"{path} is not a readable parquet file ({exc}). Valid: columns id, title, context, "
                        f"question, answers. Re-export it.") from None


def read_file(path: Path) -> RawSet:
    """Every question of a local SQuAD file (the layout from its content, the format from its extension)."""
    suffix, source = path.suffix.lower(), str(path)
    if suffix == ".csv":
        return RawSet(flat_questions(csv_rows(path), source, "line"), None, "flat")
    if suffix == ".parquet":
        return RawSet(flat_questions(parquet_rows(path), source), None, "flat")
    if suffix == ".jsonl":
        with open(path, encoding="utf-8-sig") as handle:
            return RawSet(flat_questions(json_lines(handle, path), source, "line"), None, "flat")
    document = json_document(path)
    if isinstance(document, Mapping) and "data" in document:
        return RawSet(nested_questions(document, source), declared_version(document.get("version")), "squad")
    rows = document if isinstance(document, list) else [document]
    return RawSet(flat_questions(enumerate(rows, 1), source), None, "flat")


def read_hub(name: str, config: str | None, split: str) -> tuple[RawSet, str | None]:
    """(the questions of a hub split, its `datasets` fingerprint); a name `squad`/`squad_v2` declares its version."""
    try:
        import datasets

        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # offline, a wrong name, config or split all land here
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise UserError(f"Could not load hub dataset {name!r} (config {config!r}, split {split!r}): {reason}. The hub "
                        f"may be unreachable (offline?) or the name or split wrong. Valid: a hub SQuAD dataset such as "
                        f"squad or squad_v2 where the hub is reachable, or local files. Pass a SQuAD JSON file "
                        f"instead (e.g. --data train.json --dev dev.json).") from None
    batches = dataset.with_format("arrow").iter(batch_size=BATCH_ROWS)
    questions = flat_questions(table_rows(batches), f"{name}[{split}]")
    return RawSet(questions, HUB_VERSIONS.get(name.rsplit("/", 1)[-1]), "flat"), getattr(dataset, "_fingerprint", None)
