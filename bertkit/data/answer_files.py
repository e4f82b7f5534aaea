"""The files question answering reads besides SQuAD sets: a passage given as a text file (`predict --context-file`),
and another system's answers in the official SQuAD predictions format (`evaluate --predictions`: `{id: answer}`,
with the v2.0 script's null odds `{id: number}` beside it, `--null-odds`). Each is checked whole: a problem names
the file, the question id where there is one, and the fix."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bertkit.errors import UserError


def _existing(path: str, option: str, what: str) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"{option} {path} does not exist (or is not a file). Valid: {what}. Check the path.")
    return file


def read_context_file(path: str) -> str:
    """The passage in a UTF-8 text file (a byte-order mark dropped), as written: answers' character offsets point
    into it."""
    file = _existing(path, "--context-file", "a UTF-8 text file holding the passage")
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"--context-file {path} is not UTF-8 text ({exc.reason} at byte {exc.start}). Valid: a UTF-8 "
                        f"text file. Save the passage as UTF-8.") from None
    if not text.strip():
        raise UserError(f"--context-file {path} is empty. Valid: a text file holding the passage the question is "
                        f"about. Write the passage into it.")
    return text


def _json_object(path: str, option: str, what: str) -> dict[str, Any]:
    file = _existing(path, option, what)
    try:
        document = json.loads(file.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{option} {path} is not valid JSON ({exc}). Valid: {what}. Fix the file.") from None
    if not isinstance(document, dict):
        raise UserError(f"{option} {path} holds a JSON {type(document).__name__}, not an object. Valid: {what}. "
                        f"Write one object keyed by question id.")
    return document


def read_answer_predictions(path: str) -> dict[str, str]:
    """{question id: answer text} of an official SQuAD predictions file ("" is no answer, SQuAD v2.0)."""
    what = 'the official SQuAD predictions format, {"question id": "answer text", ...} ("" for no answer)'
    document = _json_object(path, "--predictions", what)
    wrong = [(qid, value) for qid, value in document.items() if not isinstance(value, str)]
    if wrong:
        qid, value = wrong[0]
        raise UserError(f"--predictions {path}: {len(wrong)} answer(s) are not text; the first is question {qid!r}: "
                        f"{json.dumps(value)[:80]}. Valid: {what}. Write each answer as a string.")
    return document


def read_null_odds(path: str) -> dict[str, float]:
    """{question id: null odds} (the v2.0 script's --na-prob-file: higher means more likely unanswerable)."""
    what = '{"question id": number, ...}: each question\'s odds of having no answer (the SQuAD v2.0 --na-prob-file)'
    document = _json_object(path, "--null-odds", what)
    wrong = [(qid, value) for qid, value in document.items()
             if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)]
    if wrong:
        qid, value = wrong[0]
        raise UserError(f"--null-odds {path}: {len(wrong)} value(s) are not finite numbers; the first is question "
                        f"{qid!r}: {json.dumps(value)[:80]}. Valid: {what}. Write a number for each question.")
    return {qid: float(value) for qid, value in document.items()}
