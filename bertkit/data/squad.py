"""Extractive question answering data (SQuAD v1.1/v2.0): `read_squad` reads a SQuAD JSON file, the flat Hugging
Face layout (.json, .jsonl, .csv, .parquet) or a hub split (`squad`, `squad_v2`), checks it whole and returns a
`QACorpus` of typed `Question`s; `looks_like_squad` tells a SQuAD file from its content, cheaply.

The version: a set is v2.0 when it says so (`version: v2.0`, the hub's `squad_v2`, the caller's `version`), when a
question is `is_impossible`, or (flat rows, which have no version key: Hugging Face's `squad_v2` layout) when a
question has no answer; else it is v1.1, where every question needs an answer. In v2.0 a question is unanswerable
when `is_impossible` says so, or, where it says nothing, when it has no answer.

Every problem is collected and raised once (`UserError`): an `answer_start` that does not slice its context to the
answer text (with the start that would, when the text is in the context), duplicate ids, an empty question or
context, a question without an answer in v1.1, an `is_impossible` that contradicts the answers. Every gold answer is
kept, in file order (dev sets have several per question; scoring takes the best)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.data.sources import DataSource
from bertkit.data.squad_rows import (
    FLAT_COLUMNS,
    SQUAD_SUFFIXES,
    RawQuestion,
    RawSet,
    read_file,
    read_hub,
)
from bertkit.errors import UserError, raise_if_problems
from bertkit.io import digests

VERSIONS = ("1.1", "2.0")
SNIFF_BYTES = 1 << 16
"""Bytes of a JSON file `looks_like_squad` reads: the first article's keys, or the first row's."""
NESTED_KEYS = (re.compile(r'"data"\s*:'), re.compile(r'"paragraphs"\s*:'))
FLAT_KEYS = tuple(re.compile(rf'"{key}"\s*:') for key in FLAT_COLUMNS)


@dataclass(frozen=True)
class Answer:
    """A gold answer: its text and where it starts in the context (characters); it ends at `end` (exclusive)."""

    text: str
    start: int

    @property
    def end(self) -> int:
        """Exclusive, so that `context[start:end]` is the answer's text (checked as the set is read)."""
        return self.start + len(self.text)


@dataclass(frozen=True)
class Question:
    """One question on one passage (`context`) and its gold answers (none when it is unanswerable, v2.0)."""

    id: str
    title: str
    context: str
    question: str
    answers: tuple[Answer, ...]
    is_impossible: bool = False

    def to_json(self) -> dict[str, Any]:
        """The flat Hugging Face row (with `is_impossible`): what `from_json` and `read_squad` read back."""
        return {"id": self.id, "title": self.title, "context": self.context, "question": self.question,
                "answers": {"text": [a.text for a in self.answers], "answer_start": [a.start for a in self.answers]},
                "is_impossible": self.is_impossible}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Question:
        answers = record.get("answers") or {"text": [], "answer_start": []}
        return cls(str(record["id"]), str(record.get("title") or ""), str(record["context"]), str(record["question"]),
                   tuple(Answer(str(t), int(s)) for t, s in zip(answers["text"], answers["answer_start"], strict=True)),
                   bool(record.get("is_impossible", False)))


@dataclass(frozen=True)
class QACorpus:
    """A checked set of questions: where it was read, its SQuAD version ("1.1" or "2.0") and its questions in file
    order (questions on one passage share its context string)."""

    source: DataSource
    version: str
    questions: tuple[Question, ...] = field(repr=False)
    hub_fingerprint: str | None = None
    """A hub split's `datasets` fingerprint (which follows its data files); None for files."""

    @property
    def n_questions(self) -> int:
        return len(self.questions)

    @property
    def n_impossible(self) -> int:
        return sum(q.is_impossible for q in self.questions)

    @property
    def n_answers(self) -> int:
        return sum(len(q.answers) for q in self.questions)

    def data_identity(self) -> dict[str, Any]:
        """What identifies the data read, as `TaggedCorpus.data_identity` records it: a file's size and sha256, a hub
        split's name, configuration and fingerprint."""
        if self.source.is_hub:
            return {"data_hub": str(self.source), "data_config": self.source.config,
                    "data_fingerprint": self.hub_fingerprint}
        size, sha256 = digests.file_digest(self.source.name)
        return {"data_size": size, "data_sha256": sha256}

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}


def as_qa_source(value: str | Path | DataSource) -> DataSource:
    """A source as given: a path is a local file."""
    return value if isinstance(value, DataSource) else DataSource(str(value))


def looks_like_squad(path: str | Path) -> bool:
    """Whether a local file holds questions with passages and answers, from its content: SQuAD JSON (`data` and
    `paragraphs` keys near the top), or flat rows with `context`, `question` and `answers` (the first row of a .jsonl
    or .json file, the header of a .csv, the schema of a .parquet). Reads at most `SNIFF_BYTES`; never raises."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix not in SQUAD_SUFFIXES or not path.is_file():
            return False
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return set(FLAT_COLUMNS) <= set(pq.read_schema(path).names)
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            head = handle.read(SNIFF_BYTES)
    except Exception:  # unreadable or not parquet: not recognised; reading it says why
        return False
    if suffix == ".csv":
        header = next(iter(head.splitlines()), "")
        return set(FLAT_COLUMNS) <= {cell.strip().strip('"') for cell in header.split(",")}
    keys = NESTED_KEYS if all(k.search(head) for k in NESTED_KEYS) else FLAT_KEYS
    return all(k.search(head) for k in keys)


def read_squad(source: str | Path | DataSource, version: str | None = None) -> QACorpus:
    """Read and check a SQuAD set (see the module docstring); `version` ("1.1" or "2.0") overrides what the set
    says. Every problem found is raised together, naming the file, the question id and the fix."""
    source = as_qa_source(source)
    if version is not None and version not in VERSIONS:
        raise UserError(f"SQuAD version {version!r} is not one of {', '.join(VERSIONS)}. Pass 1.1 (every question "
                        f"answered) or 2.0 (unanswerable questions allowed).")
    if source.is_hub:
        raw, fingerprint = read_hub(source.name, source.config, str(source.split))
    else:
        raw, fingerprint = read_file(_checked_path(Path(source.name))), None
    if not raw.questions:
        raise UserError(f"{source} holds no question. Valid: SQuAD JSON with articles, paragraphs and qas, or rows "
                        f"with id, context, question and answers. Check the file.")
    resolved = version or set_version(raw)
    questions = [_question(q, resolved) for q in raw.questions]
    raise_if_problems(set_problems(str(source), raw.questions, resolved), f"{source} is not a valid SQuAD "
                      f"v{resolved} set")
    return QACorpus(source, resolved, tuple(questions), fingerprint)


def _checked_path(path: Path) -> Path:
    try:
        found = path.is_file()
    except OSError as exc:  # a name this system cannot stat (too long)
        raise UserError(f"Cannot read SQuAD file {path}: {exc.strerror}. Pass a path this system can open.") from None
    if not found:
        raise UserError(f"SQuAD file {path} does not exist. Valid: a {', '.join(SQUAD_SUFFIXES)} file, or a hub "
                        f"dataset (squad, squad_v2). Check the path.")
    if path.suffix.lower() not in SQUAD_SUFFIXES:
        raise UserError(f"{path}: a SQuAD set is read from {', '.join(SQUAD_SUFFIXES)} files, not "
                        f"{path.suffix or 'a file without an extension'}. Convert it to SQuAD JSON or JSON lines.")
    return path


def set_version(raw: RawSet) -> str:
    """The version a set says it is, or shows: v2.0 when declared, with an `is_impossible` question, or (flat rows)
    with a question without an answer; else v1.1."""
    if raw.declared == "2.0" or any(q.is_impossible for q in raw.questions):
        return "2.0"
    if raw.declared is None and raw.layout == "flat" and any(not q.answers for q in raw.questions):
        return "2.0"
    return "1.1"


def _question(raw: RawQuestion, version: str) -> Question:
    impossible = version == "2.0" and (raw.is_impossible if raw.is_impossible is not None else not raw.answers)
    return Question(raw.id, raw.title, raw.context, raw.question,
                    tuple(Answer(text, start) for text, start in raw.answers), impossible)


def set_problems(source: str, questions: Sequence[RawQuestion], version: str) -> list[str]:
    """Every kind of problem in the set, one message per kind: how many questions have it, the first of them, and
    the fix."""
    kinds: dict[str, list[tuple[RawQuestion, str]]] = {}
    seen: dict[str, RawQuestion] = {}
    for q in questions:
        if q.id in seen:
            kinds.setdefault("duplicate", []).append((q, f"first at {seen[q.id].where}"))
        seen.setdefault(q.id, q)
        for kind, detail in _question_problems(q, version):
            kinds.setdefault(kind, []).append((q, detail))
    return [_message(source, kind, found) for kind, found in kinds.items()]


def _question_problems(q: RawQuestion, version: str) -> Iterator[tuple[str, str]]:
    if not q.question.strip():
        yield "empty question", ""
    if not q.context.strip():
        yield "empty context", ""
    if q.is_impossible and version == "1.1":
        yield "impossible in v1.1", ""
    elif q.is_impossible and q.answers:
        yield "impossible with answers", f"{len(q.answers)} answer(s)"
    elif not q.answers and (version == "1.1" or q.is_impossible is False):
        yield "no answer", "" if version == "1.1" else "is_impossible is false"
    for text, start in q.answers:
        if not text.strip():
            yield "empty answer", f"answer_start {start}"
        elif start < 0 or q.context[start:start + len(text)] != text:
            yield "misaligned", misaligned_detail(q.context, text, start)


FIXES = {
    "duplicate": ("have an id used before", "one id per question (predictions and scores are keyed by it)",
                  "Give every question its own id"),
    "empty question": ("have an empty question", "a question with text", "Write the question, or drop it"),
    "empty context": ("have an empty context", "a passage with text", "Give the question its passage, or drop it"),
    "empty answer": ("have an empty answer text", "answers with text", "Write the answer's text, or drop that answer"),
    "no answer": ("have no answer", "in SQuAD v1.1 every question has an answer; in v2.0 a question without one is "
                  "is_impossible", "Add the answer, or mark the question is_impossible: true (and read the set as "
                  "v2.0)"),
    "impossible with answers": ("are marked is_impossible but have answers", "an unanswerable question has no "
                                "answers (SQuAD v2.0 keeps its guesses in plausible_answers)",
                                "Set is_impossible false, or move the answers to plausible_answers"),
    "impossible in v1.1": ("are marked is_impossible in a set read as v1.1", "unanswerable questions only in v2.0",
                           "Read the set as v2.0, or answer the questions"),
    "misaligned": ("have an answer_start that does not slice the context to the answer text",
                   "context[answer_start:answer_start + len(text)] == text",
                   "Set answer_start to where the text starts in the context"),
}


def _message(source: str, kind: str, found: list[tuple[RawQuestion, str]]) -> str:
    what, valid, fix = FIXES[kind]
    first, detail = found[0]
    where = f"the first is {first.id!r} ({first.where}{': ' + detail if detail else ''})"
    return f"{source}: {len(found)} question(s) {what}; {where}. Valid: {valid}. {fix}."


def misaligned_detail(context: str, text: str, start: int) -> str:
    """What the context holds at `start` and, when the text is in the context, the start that would slice it: the
    nearest exact occurrence, else one with other whitespace or another case."""
    held = context[max(start, 0):start + len(text)]
    said = f"answer {text[:80]!r} at {start}, where the context has {held[:80]!r}"
    exact = [m.start() for m in re.finditer(re.escape(text), context)]
    if exact:
        best = min(exact, key=lambda p: (abs(p - start), p))
        return f"{said}; the text starts at {best} (off by {best - start:+d}): answer_start {best} is right"
    pattern = r"\s+".join(re.escape(word) for word in text.split())
    for flags, how in ((0, "with other whitespace"), (re.IGNORECASE, "in another case")):
        found = [m for m in re.finditer(pattern, context, flags)]
        if found:
            best = min(found, key=lambda m: (abs(m.start() - start), m.start()))
            return (f"{said}; the text occurs {how} at {best.start()} as {best.group()[:80]!r}: use that as the "
                    f"answer text with answer_start {best.start()}")
    return f"{said}; the text does not occur in the context: fix the text or the context"

