"""`bertkit predict` with a word probe or a tagging model: each sentence's words with their tags and its entity spans as a table, or
`--json` one JSON object per sentence per line (JSONL, printed as the chunks come)."""

from __future__ import annotations

import json
import sys

from rich.markup import escape

from bertkit.cli.output import View, info, out_console, table
from bertkit.commands.predict import PredictConfig, PredictResult
from bertkit.scoring.spans import TaggedWords


def print_sentences_jsonl(sentences: list[TaggedWords]) -> None:
    """`on_sentences` of `predict.run` under --json: one line per sentence."""
    sys.stdout.writelines(json.dumps(s.to_json(), ensure_ascii=False) + "\n" for s in sentences)
    sys.stdout.flush()


def tagged_line(sentence: TaggedWords) -> str:
    """'New/B-LOC York/I-LOC is/O': the words with their tags."""
    return " ".join(f"{w}/{t}" for w, t in zip(sentence.words, sentence.tags, strict=True))


def spans_line(sentence: TaggedWords) -> str:
    """'LOC "New York" [0:8] 0.93; ...' (empty: no spans)."""
    return "; ".join(f'{s.type} "{s.text}" [{s.start}:{s.end}] {s.score:.2f}' for s in sentence.spans)


def show_word_predictions(result: PredictResult, cfg: PredictConfig, view: View) -> None:
    """The kept sentences as a table (--json: they were printed as JSONL already; a status line on stderr)."""
    total = result.n_sentences or 0
    if not view.json:
        shown = result.sentences
        rows = [[k, escape(tagged_line(s)), escape(spans_line(s))] for k, s in enumerate(shown)]
        title = f"{total} sentence(s)" + (f" (first {len(shown)})" if len(shown) < total else "")
        out_console.print(table(title, ["#", "words/tags", "spans"], rows, formats={"#": "d"},
                                prose=("words/tags", "spans")))
    from_pieces = ("each word's first piece" if result.aggregate in (None, "first", "simple") else
                   f"each word's pieces, {result.aggregate}")
    what = f"word probe: features {result.pooling}" if result.pooling else f"tagging model: {from_pieces}"
    info(f"{what}, windows of {result.max_length} tokens, {result.dtype}", view.quiet)
    if cfg.out:
        kind = "one row per word" if cfg.out.lower().endswith(".csv") else "one JSON object per sentence"
        info(f"wrote {cfg.out} ({total} sentences, {kind})", view.quiet)
