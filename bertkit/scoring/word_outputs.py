"""Word predictions into a file, chunk by chunk (`predict --probe WORD_PROBE --out FILE`): `.jsonl` holds one
object per sentence (`TaggedWords.to_json`: words, tags, spans), `.csv` one row per word (sentence, word index,
word, tag, probability, and the span it opens or continues). Written to a temp file renamed over --out at the end,
so a failure leaves the previous file as it was."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bertkit.errors import UserError
from bertkit.scoring.spans import TaggedWords

WORD_OUT_SUFFIXES = (".jsonl", ".csv")
CSV_HEADER = ("sentence", "word_index", "word", "tag", "probability", "span")


def word_out_problems(out: str | None) -> list[str]:
    """--out for word predictions: .jsonl or .csv."""
    if out is None or Path(out).suffix.lower() in WORD_OUT_SUFFIXES:
        return []
    return [f"--out {out}: word predictions are written as .jsonl (one object per sentence) or .csv (one row per "
            f"word). Pass --out {Path(out).with_suffix('.jsonl').name} or --out {Path(out).with_suffix('.csv').name}."]


def csv_rows(start: int, sentences: Sequence[TaggedWords]) -> Iterator[list[object]]:
    """One row per word; `span` names the entity (type and index within the sentence) a word belongs to."""
    for k, sentence in enumerate(sentences):
        member = {w: f"{s.type}#{n}" for n, s in enumerate(sentence.spans)
                  for w in range(s.first_word, s.last_word + 1)}
        for i, (word, tag, p) in enumerate(zip(sentence.words, sentence.tags, sentence.probabilities, strict=True)):
            yield [start + k, i, word, tag, round(p, 6), member.get(i, "")]


@contextmanager
def open_word_predictions(path: Path, vouch: Callable[[tuple[int, str]], None] | None = None
                          ) -> Iterator[Callable[[Sequence[TaggedWords]], None]]:
    """`append(sentences)`: write a chunk's predictions (sentences numbered on from the previous chunks)."""
    from bertkit.io import atomic

    if word_out_problems(str(path)):
        raise UserError(word_out_problems(str(path))[0])
    as_csv, written = path.suffix.lower() == ".csv", 0
    with atomic.atomic_path(path, vouch) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle) if as_csv else None
        if writer is not None:
            writer.writerow(CSV_HEADER)

        def append(sentences: Sequence[TaggedWords]) -> None:
            nonlocal written
            if writer is not None:
                writer.writerows(csv_rows(written, sentences))
            else:
                handle.writelines(json.dumps(s.to_json(), ensure_ascii=False) + "\n" for s in sentences)
            written += len(sentences)

        yield append
