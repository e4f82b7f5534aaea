"""The tagged data the word and tagging tests share: a tiny IOB2 corpus (four training sentences, two dev sentences)
and `write_conll`, which writes sentences as a CoNLL-style column file (one `word<sep>tag` line each, a blank line
between sentences); `synthetic_sentences`, an easy set whose tags follow from the words, `write_iob`; and
`trained_tagger`, the tiny entity tagger the predict, export and evaluate tests read (trained once per session)."""

from __future__ import annotations

import random
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


PEOPLE = ["alice", "bob", "carol", "dave"]
PLACES = [["paris"], ["london"], ["new", "york"], ["los", "angeles"]]
OTHER = ["the", "met", "in", "went", "to", "saw", "a", "dog", "and", "today", "with", "from"]


def synthetic_sentences(n: int, seed: int, words: tuple[int, int] = (3, 8)) -> list[tuple[list[str], list[str]]]:
    """Sentences whose tags follow from the words alone: people B-PER, places B-LOC (I-LOC), the rest O."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sentence: tuple[list[str], list[str]] = ([], [])
        for _ in range(rng.randint(*words)):
            draw = rng.random()
            if draw < 0.2:
                sentence[0].append(rng.choice(PEOPLE))
                sentence[1].append("B-PER")
            elif draw < 0.35:
                place = rng.choice(PLACES)
                sentence[0].extend(place)
                sentence[1].extend(["B-LOC"] + ["I-LOC"] * (len(place) - 1))
            else:
                sentence[0].append(rng.choice(OTHER))
                sentence[1].append("O")
        out.append(sentence)
    return out


POS_OF = {"the": "DET", "a": "DET", "dog": "NOUN", "cat": "NOUN", "saw": "VERB", "ran": "VERB", "big": "ADJ"}


def pos_sentences(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """Sentences of plain tags (POS-like, no entity scheme) that follow from the words alone."""
    rng = random.Random(seed)
    return [(words, [POS_OF[w] for w in words]) for words in
            ([rng.choice(list(POS_OF)) for _ in range(rng.randint(3, 7))] for _ in range(n))]


def write_iob(path: Path, sentences: list[tuple[list[str], list[str]]]) -> Path:
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in zip(*s, strict=True)) + "\n" for s in sentences),
                    encoding="utf-8")
    return path


def trained_tagger(model_dir: Path, root: Path) -> tuple[Path, Path]:
    """(best/ of a tiny tagger fine-tuned at --max-length 16 on 80 easy synthetic sentences, its dev file)."""
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    train = write_iob(root / "train.iob2", synthetic_sentences(80, 0))
    dev = write_iob(root / "dev.iob2", synthetic_sentences(30, 1))
    finetune(FinetuneConfig.of(model=str(model_dir), data=str(train), dev=str(dev), out=str(root / "run"), epochs=5,
                            lr="5e-3", batch_size=8, save_every=None, precision="fp32", max_length=16),
             progress=False)
    return root / "run" / "best", dev
