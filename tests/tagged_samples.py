"""A tiny tagged corpus (IOB2 entities) the word tests share: four training sentences, two dev sentences, and
`write_conll`, which writes sentences as a CoNLL-style column file (one `word<sep>tag` line each, a blank line
between sentences)."""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    [("Anna", "B-PER"), ("met", "O"), ("Bob", "B-PER"), ("in", "O"), ("Paris", "B-LOC")],
    [("Bob", "B-PER"), ("Smith", "I-PER"), ("left", "O"), ("Rome", "B-LOC")],
    [("Paris", "B-LOC"), ("is", "O"), ("big", "O")],
    [("Anna", "B-PER"), ("likes", "O"), ("Rome", "B-LOC"), ("a", "O"), ("lot", "O")],
]
DEV = [[("Anna", "B-PER"), ("saw", "O"), ("Paris", "B-LOC")], [("Bob", "B-PER"), ("left", "O")]]


def write_conll(path: Path, sentences, sep: str = "\t") -> Path:
    path.write_text("\n\n".join("\n".join(f"{w}{sep}{t}" for w, t in s) for s in sentences) + "\n", encoding="utf-8")
    return path
