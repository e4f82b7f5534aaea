"""The question-answering data the spans tests share: an easy synthetic SQuAD set whose answer follows from the words
alone (the one colour word of a passage of other words; SQuAD v2.0: a passage without one is unanswerable),
`write_squad` (SQuAD JSON), `long_passage` (its colour past a short window's first), and `trained_answerer`, the tiny
question-answering model the predict, evaluate and pipeline tests read (trained once per session)."""

from __future__ import annotations

import json
import random
from pathlib import Path

COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "black", "white"]
FILLER = ("the a dog cat ran saw house tree river went with from today old new small big city park car road "
          "hill boat door lamp").split()
QUESTIONS = ["what colour is it?", "which colour is named?", "what is the colour?"]
MAX_LENGTH, DOC_STRIDE = 64, 16
"""The tiny answerer's windows: short, so a passage of 150 words spans several."""


def passage(rng: random.Random, words: int, at: int | None, colour: str | None) -> tuple[str, int | None]:
    """(a passage of `words` filler words with `colour` inserted at word `at`, the colour's character start)."""
    text = [rng.choice(FILLER) for _ in range(words)]
    if colour is None or at is None:
        return " ".join(text) + ".", None
    text.insert(at, colour)
    start = len(" ".join(text[:at])) + (1 if at else 0)
    return " ".join(text) + ".", start


def squad_questions(n: int, seed: int, *, impossible: float = 0.0, long_share: float = 0.0,
                    prefix: str = "q") -> list[dict]:
    """`n` SQuAD qas dicts (each with its context) of the easy set: a share `impossible` without a colour (v2.0),
    a share `long_share` of 150-word passages with the colour near the end."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        colour = None if rng.random() < impossible else rng.choice(COLOURS)
        words = 150 if rng.random() < long_share else rng.randint(6, 18)
        at = rng.randint(words - 12, words) if words == 150 else rng.randint(0, words)
        context, start = passage(rng, words, at, colour)
        answers = [] if colour is None else [{"text": colour, "answer_start": start}]
        qa = {"id": f"{prefix}{seed}-{i}", "question": rng.choice(QUESTIONS), "answers": answers}
        if impossible:
            qa["is_impossible"] = colour is None
        out.append({"context": context, "qa": qa})
    return out


def write_squad(path: Path, questions: list[dict], version: str = "1.1") -> Path:
    """SQuAD JSON: one article per question (as TyDi QA GoldP is laid out)."""
    data = [{"title": f"t{i}", "paragraphs": [{"context": q["context"], "qas": [q["qa"]]}]}
            for i, q in enumerate(questions)]
    path.write_text(json.dumps({"version": version, "data": data}), encoding="utf-8")
    return path


def long_passage(seed: int = 7) -> tuple[str, str, int]:
    """(a 150-word passage, its colour, where the colour starts): the colour is its 140th word, past the first
    window of `MAX_LENGTH` tokens."""
    rng = random.Random(seed)
    colour = rng.choice(COLOURS)
    context, start = passage(rng, 150, 140, colour)
    return context, colour, int(start or 0)


def trained_answerer(model_dir: Path, root: Path, version: str = "1.1") -> tuple[Path, Path]:
    """(best/ of a tiny question-answering model fine-tuned at --max-length 64 --doc-stride 16 on 120 easy synthetic
    questions (some on long passages; v2.0: a quarter unanswerable), its dev file)."""
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    impossible = 0.25 if version == "2.0" else 0.0
    train = write_squad(root / "train.json", squad_questions(120, 0, impossible=impossible, long_share=0.15), version)
    dev = write_squad(root / "dev.json", squad_questions(24, 1, impossible=impossible, long_share=0.2), version)
    finetune(FinetuneConfig.of(model=str(model_dir), data=str(train), dev=str(dev), out=str(root / "run"), epochs=4,
                            lr="5e-3", batch_size=8, save_every=None, precision="fp32", max_length=MAX_LENGTH,
                            doc_stride=DOC_STRIDE), progress=False)
    return root / "run" / "best", dev
