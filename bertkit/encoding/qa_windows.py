"""Questions on long passages as model rows, as transformers' run_qa.py prepares them (`prepare_train_features` and
`prepare_validation_features` in one pass): with a fast tokenizer, `[CLS] question [SEP] context [SEP]`, only the
context cut (`truncation="only_second"`), a passage longer than the window read as overlapping windows sharing
`doc_stride` tokens, each token's character span in the context kept (context tokens only; -1 elsewhere), each
window's question, and the training labels: the first gold answer's first and last token where the window holds the
whole answer, else the [CLS] index (as for an unanswerable question).

Two choices differ from run_qa.py and are said here:
- A question is cut to its first `max_question_length` tokens (64: the original BERT run_squad.py's
  max_query_length), or fewer where a small window needs it (`QAReading.question_budget`), so every window reads
  new context: the fast tokenizer panics, not raises, when a question leaves no more context than `doc_stride`.
  `QAReading.problems` refuses settings that leave no room at all.
- An answer that starts in the window's last context token is labelled there: run_qa.py's loop walks past it onto
  [SEP] (whose offsets are (0, 0)) and labels start after end.

Windows are batched the way bertkit batches rows (`bertkit.encoding.batches`): grouped by length for training,
sorted by length for inference, padded per batch."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.squad import Question
from bertkit.encoding.batches import global_batches, pad_batch, sorted_batches
from bertkit.encoding.encode import TYPE_DTYPE, Encoded
from bertkit.encoding.reading import DOC_STRIDE, QUESTION_MAX_LENGTH, Reading
from bertkit.encoding.rows import TokenRows, flatten, offsets_of
from bertkit.errors import UserError, raise_if_problems

SPECIAL_TOKENS = 3
"""[CLS] question [SEP] context [SEP]."""
CHUNK_QUESTIONS = 1000
"""Questions tokenized at a time: the tokenizer's Python lists never hold more than one chunk."""
NOT_CONTEXT = -1
"""The character offset of a token that is not part of the context ([CLS], question, [SEP])."""


@dataclass(frozen=True)
class QAReading:
    """How questions and passages become windows: `max_length` tokens each, neighbouring windows of one passage
    sharing `doc_stride` tokens (run_qa.py's defaults, 384 and 128), questions cut to `question_budget` tokens."""

    max_length: int = QUESTION_MAX_LENGTH
    doc_stride: int = DOC_STRIDE
    max_question_length: int = 64

    KEYS = ("max_length", "doc_stride", "max_question_length")

    @property
    def question_budget(self) -> int:
        """The tokens a question keeps: `max_question_length`, or half of what a window holds besides the special
        and shared tokens when that is less, so every window reads at least as many new context tokens."""
        return min(self.max_question_length, (self.max_length - SPECIAL_TOKENS - self.doc_stride) // 2)

    def problems(self) -> list[str]:
        """Settings that leave a window no room for a question token and a new context token."""
        if min(self.max_length, self.max_question_length) < 1 or self.doc_stride < 0:
            return [f"--max-length {self.max_length}, --doc-stride {self.doc_stride} and --max-question-length "
                    f"{self.max_question_length} must be positive (the stride may be 0). Pass positive values."]
        if self.question_budget < 1:
            room = self.max_length - SPECIAL_TOKENS - self.doc_stride
            return [f"--doc-stride {self.doc_stride} leaves no room in a window: --max-length {self.max_length} less "
                    f"{SPECIAL_TOKENS} special tokens and {self.doc_stride} tokens shared with the window before "
                    f"leaves {room}, and a window needs a question token and a new context token. Pass a --doc-stride "
                    f"of at most {self.max_length - SPECIAL_TOKENS - 2} (e.g. {self.max_length // 4}), or a larger "
                    f"--max-length."]
        return []

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KEYS}

    @classmethod
    def of(cls, reading: Reading, max_question_length: int | None = None) -> QAReading:
        """How a run or a model with `reading` (its window, and its `stride` as the doc stride: None,
        `DOC_STRIDE`) reads questions; `max_question_length` None: the default."""
        return cls(reading.max_length, DOC_STRIDE if reading.stride is None else reading.stride,
                   max_question_length or cls.max_question_length)

    def as_reading(self) -> Reading:
        """The `Reading` a model records (bertkit_model.json's `reading`, and `model_max_length` in its tokenizer
        config): windows (chunk) of `max_length` tokens sharing `doc_stride`."""
        return Reading(self.max_length, "chunk", "head", self.doc_stride)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> QAReading:
        return cls(**{key: int(record[key]) for key in cls.KEYS if key in record})


@dataclass
class QAWindows:
    """Questions as model rows: window k is `encoded.input_ids[k]` of question `window_question[k]` (a question's
    windows are consecutive, in passage order); token t of it spans context characters
    `char_starts[k][t]:char_ends[k][t]` (`NOT_CONTEXT` for [CLS], question and [SEP] tokens); its training labels
    are `start_positions[k]`, `end_positions[k]` (token indices; `cls_index[k]` where the window does not hold the
    first gold answer whole, or the question has none)."""

    encoded: Encoded
    window_question: np.ndarray
    char_starts: TokenRows
    char_ends: TokenRows
    start_positions: np.ndarray
    end_positions: np.ndarray
    cls_index: np.ndarray
    n_questions: int
    n_questions_cut: int
    """Questions longer than the reading's `question_budget` tokens, read by their first ones."""

    @property
    def n_windows(self) -> int:
        return len(self.window_question)

    @property
    def lengths(self) -> np.ndarray:
        return self.encoded.lengths

    def question_bounds(self) -> np.ndarray:
        """Question q's windows are `bounds[q]:bounds[q + 1]` (n_questions + 1 entries)."""
        return np.searchsorted(self.window_question, np.arange(self.n_questions + 1), side="left")

    def offsets(self, k: int) -> list[tuple[int, int] | None]:
        """Window k's offset mapping as run_qa.py's validation features keep it: (start, end) for a context token,
        None for any other."""
        return [None if s == NOT_CONTEXT else (int(s), int(e)) for s, e in zip(self.char_starts[k], self.char_ends[k],
                                                                                strict=True)]


def cut_questions(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> tuple[list[str], int]:
    """(each question without its leading whitespace, as run_qa.py strips it, and cut after its `max_tokens`-th
    token; how many were cut). A cut ends where that token ends, so the cut text reads as those tokens."""
    texts = [t.lstrip() for t in texts]
    pieces = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    cut = 0
    for i, offsets in enumerate(pieces["offset_mapping"]):
        keep = max_tokens
        while len(offsets) > max_tokens and keep > 0:
            texts[i] = texts[i][:offsets[keep - 1][1]]
            offsets = tokenizer(texts[i], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            keep -= 1  # a tokenizer that reads the cut text as more tokens (BPE merges) is cut one token earlier
        cut += keep < max_tokens
    return texts, cut


def answer_labels(seq: np.ndarray, starts: np.ndarray, ends: np.ndarray, answer: tuple[int, int] | None,
                  cls: int) -> tuple[int, int]:
    """(first, last) token of the answer's characters `answer` in one window, run_qa.py's labels: `cls` twice when
    there is no answer or the window's context does not hold it whole; else the last context token starting at or
    before the answer's start and the first ending at or after its end."""
    context = np.flatnonzero(seq == 1)
    if answer is None or not len(context):
        return cls, cls
    first, last = int(context[0]), int(context[-1])
    start_char, end_char = answer
    if not (starts[first] <= start_char and ends[last] >= end_char):
        return cls, cls
    start = first + int(np.searchsorted(starts[first:last + 1], start_char, side="right")) - 1
    end = first + int(np.searchsorted(ends[first:last + 1], end_char, side="left"))
    return start, end


class _Collector:
    """Windows of chunks of questions -> flat arrays, one chunk's Python lists at a time."""

    def __init__(self) -> None:
        self.ids: list[np.ndarray] = []
        self.types: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.rows: dict[str, list[int]] = {"question": [], "start": [], "end": [], "cls": []}

    def add_chunk(self, enc: Any, questions: Sequence[Question], base: int, cls_id: int) -> None:
        ids = enc["input_ids"]
        self.ids.append(flatten(ids, np.int32)[0])
        self.lengths.append(np.fromiter(map(len, ids), dtype=np.int32, count=len(ids)))
        if "token_type_ids" in enc:
            self.types.append(flatten(enc["token_type_ids"], TYPE_DTYPE)[0])
        for k, offsets in enumerate(enc["offset_mapping"]):
            seq = np.array([-1 if s is None else s for s in enc.sequence_ids(k)], dtype=np.int8)
            spans = np.asarray(offsets, dtype=np.int32).reshape(-1, 2)
            starts = np.where(seq == 1, spans[:, 0], NOT_CONTEXT).astype(np.int32)
            ends = np.where(seq == 1, spans[:, 1], NOT_CONTEXT).astype(np.int32)
            question = questions[enc["overflow_to_sample_mapping"][k]]
            gold = question.answers[0] if question.answers and not question.is_impossible else None
            cls = ids[k].index(cls_id) if cls_id in ids[k] else 0
            start, end = answer_labels(seq, spans[:, 0], spans[:, 1], None if gold is None else (gold.start, gold.end),
                                       cls)
            self.starts.append(starts)
            self.ends.append(ends)
            for key, value in (("question", base + enc["overflow_to_sample_mapping"][k]), ("start", start),
                               ("end", end), ("cls", cls)):
                self.rows[key].append(value)

    def windows(self, max_length: int, n_questions: int, n_cut: int) -> QAWindows:
        def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

        lengths = joined(self.lengths, np.int32)
        offsets = offsets_of(lengths)
        types = TokenRows(joined(self.types, TYPE_DTYPE), offsets) if self.types else None
        encoded = Encoded(TokenRows(joined(self.ids, np.int32), offsets), types, lengths, lengths, max_length)
        rows = {key: np.asarray(values, dtype=np.int64) for key, values in self.rows.items()}
        return QAWindows(encoded, rows["question"], TokenRows(joined(self.starts, np.int32), offsets),
                         TokenRows(joined(self.ends, np.int32), offsets), rows["start"], rows["end"], rows["cls"],
                         n_questions, n_cut)


def qa_windows(tokenizer: Any, questions: Sequence[Question], reading: QAReading | None = None) -> QAWindows:
    """The questions' windows, offsets and labels as `reading` says (see the module docstring), `CHUNK_QUESTIONS`
    questions tokenized at a time."""
    reading = reading or QAReading()
    raise_if_problems(reading.problems(), "Invalid question-answering reading")
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"Reading questions on passages needs a fast tokenizer (its offsets map tokens to the "
                        f"passage's characters); {type(tokenizer).__name__} is not one. Valid: a model folder with "
                        f"tokenizer.json. Save the tokenizer with transformers' fast tokenizer, or choose another "
                        f"model.")
    collector, n_cut = _Collector(), 0
    for base in range(0, len(questions), CHUNK_QUESTIONS):
        chunk = questions[base:base + CHUNK_QUESTIONS]
        texts, cut = cut_questions(tokenizer, [q.question for q in chunk], reading.question_budget)
        n_cut += cut
        enc = tokenizer(texts, [q.context for q in chunk], truncation="only_second", max_length=reading.max_length,
                        stride=reading.doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                        padding=False)
        collector.add_chunk(enc, chunk, base, tokenizer.cls_token_id)
    return collector.windows(reading.max_length, len(questions), n_cut)


def training_batches(windows: QAWindows, batch_size: int, seed: int, epoch: int, min_rows: int = 1) -> list[np.ndarray]:
    """An epoch's batches of window indices, as every bertkit training epoch forms them (`batches.global_batches`:
    grouped by length, shuffled, deterministic for (seed, epoch))."""
    return global_batches(windows.lengths, batch_size, seed, epoch, min_rows)


def inference_batches(windows: QAWindows, batch_size: int) -> list[np.ndarray]:
    """Batches of window indices sorted by length, longest first (`batches.sorted_batches`)."""
    return sorted_batches(windows.lengths, batch_size)


def batch_tensors(windows: QAWindows, indices: Sequence[int], pad_id: int, *, labels: bool = False,
                  inputs: Collection[str] | None = None, device: Any = None) -> dict[str, Any]:
    """The windows at `indices` as model inputs padded to the longest of them (`batches.pad_batch`), with their
    `start_positions` and `end_positions` when `labels` (what a question-answering head's loss takes)."""
    import torch

    batch = pad_batch(windows.encoded, indices, pad_id, inputs=inputs, device=device)
    if labels:
        rows = np.asarray(indices, dtype=np.int64)
        for key, values in (("start_positions", windows.start_positions), ("end_positions", windows.end_positions)):
            tensor = torch.from_numpy(values[rows])
            batch[key] = tensor if device is None else tensor.to(device)
    return batch


def window_rows(batches: Sequence[np.ndarray], outputs: Sequence[np.ndarray], lengths: np.ndarray) -> list[np.ndarray]:
    """Per-batch outputs (batch rows x padded width, e.g. start logits) back as one array per window, in window
    order and cut to the window's length: what `scoring.answers` reads."""
    rows: list[np.ndarray | None] = [None] * len(lengths)
    for batch, output in zip(batches, outputs, strict=True):
        for row, k in enumerate(np.asarray(batch)):
            rows[int(k)] = np.asarray(output[row][: int(lengths[k])])
    missing = [k for k, row in enumerate(rows) if row is None]
    if missing:
        raise ValueError(f"{len(missing)} window(s) have no output (the first is window {missing[0]})")
    return rows  # type: ignore[return-value]
