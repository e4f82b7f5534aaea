"""Make the records that `tests/test_legacy_records.py` reads: a model, tagger, probes, stores, exports and two
unfinished runs, made by bertkit as it was at commit 3632259 (before problem families were objects and records carried
a format version). Run once, from the repository root of THAT commit:

    git worktree add /tmp/old 3632259 && cd /tmp/old && PYTHONPATH=. python tests/legacy/make_records.py OUT

The records are committed under tests/legacy/records/; running this with today's code would make today's records,
not the old ones the test is there to keep readable. Everything is tiny (a 2-layer, width-16 BERT with a 200-piece
vocabulary), and every path inside is relative to the records folder, so the test copies it and runs there.
`expected.json` holds what the old code answered, for the test to compare with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

GOOD = ["great", "wonderful", "lovely", "superb", "fine"]
BAD = ["awful", "terrible", "boring", "dreadful", "bad"]
PEOPLE = ["alice", "bob", "carol"]
PLACES = ["paris", "london", "rome"]
OTHER = ["the", "met", "in", "went", "to", "saw", "a", "dog", "and", "film", "movie", "truly", "really", "an", "was"]


def tiny_encoder(folder: Path) -> None:
    """A 2-layer, width-16 BERT with a word-level vocabulary of the words above, saved as safetensors."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    torch.manual_seed(0)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", *sorted(set(GOOD + BAD + PEOPLE + PLACES + OTHER)),
             *letters, *[f"##{c}" for c in letters]]
    folder.mkdir(parents=True)
    tokenizer = BertTokenizer(vocab={piece: i for i, piece in enumerate(vocab)}, do_lower_case=True)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def write_data(root: Path) -> None:
    rows = []
    for i in range(24):
        rows.append((f"a {GOOD[i % 5]} film , truly {GOOD[(i + 2) % 5]}", "pos"))
        rows.append((f"an {BAD[i % 5]} movie , really {BAD[(i + 1) % 5]}", "neg"))
    (root / "data").mkdir()
    (root / "data" / "train.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows[:40]))
    (root / "data" / "dev.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows[40:]))

    def sentences(n: int, offset: int) -> str:
        out = []
        for i in range(n):
            words = [(PEOPLE[(i + offset) % 3], "B-PER"), (OTHER[(i * 3) % len(OTHER)], "O"),
                     (PLACES[(i + offset + 1) % 3], "B-LOC"), (OTHER[(i * 5 + 1) % len(OTHER)], "O")]
            out.append("".join(f"{w}\t{t}\n" for w, t in words))
        return "\n".join(out)

    (root / "data" / "train.iob2").write_text(sentences(24, 0))
    (root / "data" / "dev.iob2").write_text(sentences(8, 1))


def bertkit(root: Path, *argv: str, kill_at: str | None = None) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "BERTKIT_DEVICE": "cpu",
           "BERTKIT_CACHE_DIR": str(root.parent / "cache")}
    if kill_at:
        env["BERTKIT_KILL_AT"] = kill_at
    done = subprocess.run([sys.executable, "-m", "bertkit", *argv, "-q"], cwd=root, env=env, capture_output=True,
                          text=True)
    if kill_at is None and done.returncode != 0:
        raise SystemExit(f"bertkit {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    if kill_at is not None and done.returncode != -9:
        raise SystemExit(f"bertkit {' '.join(argv)} was not killed at {kill_at}: {done.returncode}\n{done.stderr}")


def answers(root: Path, *argv: str) -> object:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "BERTKIT_DEVICE": "cpu",
           "BERTKIT_CACHE_DIR": str(root.parent / "cache")}
    done = subprocess.run([sys.executable, "-m", "bertkit", *argv, "--json", "-q"], cwd=root, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


TRAIN = ("--model", "model", "--epochs", "2", "--batch-size", "8", "--lr", "5e-3", "--precision", "fp32",
         "--max-length", "16", "--seed", "3")
SENTENCES = ("--data", "data/train.tsv", "--dev", "data/dev.tsv")
TAGS = ("--data", "data/train.iob2", "--dev", "data/dev.iob2")


def main(out: Path) -> None:
    root = out / "records"
    shutil.rmtree(out, ignore_errors=True)
    root.mkdir(parents=True)
    tiny_encoder(root / "model")
    write_data(root)
    bertkit(root, "finetune", *TRAIN, *SENTENCES, "--out", "runs/sentences")
    bertkit(root, "finetune", *TRAIN, *TAGS, "--out", "runs/tagger")
    # killed in the second epoch: the first epoch's checkpoint is there to resume from (5 steps an epoch)
    bertkit(root, "finetune", *TRAIN, *SENTENCES, "--out", "runs/sentences-unfinished", kill_at="optimizer.step@7")
    bertkit(root, "finetune", *TRAIN, *TAGS, "--out", "runs/tagger-unfinished", kill_at="optimizer.step@5")
    bertkit(root, "probe", "--model", "model", *SENTENCES, "--precision", "fp32", "--layers", "all", "--pool", "cls", "--max-length", "16",
            "--out", "runs/probe-sentences")
    bertkit(root, "probe", "--model", "model", *TAGS, "--precision", "fp32", "--max-length", "16", "--out", "runs/probe-words")
    bertkit(root, "embed", "--model", "model", *SENTENCES, "--precision", "fp32", "--max-length", "16", "--out", "stores/sentences")
    bertkit(root, "embed", "--model", "model", *TAGS, "--precision", "fp32", "--max-length", "16", "--out", "stores/words")
    bertkit(root, "export", "--model", "runs/sentences/best", "--out", "exports/sentences", "--quantize", "none")
    bertkit(root, "export", "--model", "runs/tagger/best", "--out", "exports/tagger", "--quantize", "none")
    text = ["a truly wonderful film", "an awful movie"]
    words = '["alice", "met", "bob", "in", "paris"]'
    expected = {
        "sentences": answers(root, "predict", "--model", "runs/sentences/best", "--text", text[0], "--text", text[1]),
        "tagger": answers(root, "predict", "--model", "runs/tagger/best", "--words", words),
        "probe_sentences": answers(root, "predict", "--probe", "runs/probe-sentences/probe", "--text", text[0],
                                   "--text", text[1]),
        "probe_words": answers(root, "predict", "--probe", "runs/probe-words/probe", "--words", words),
        "export_sentences": answers(root, "predict", "--model", "exports/sentences", "--text", text[0],
                                    "--text", text[1]),
        "export_tagger": answers(root, "predict", "--model", "exports/tagger", "--words", words),
        "evaluate_tagger": answers(root, "evaluate", "--model", "runs/tagger/best", "--data", "data/dev.iob2"),
        "evaluate_sentences": answers(root, "evaluate", "--model", "runs/sentences/best", "--data", "data/dev.tsv"),
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
