"""The word store against its anchors (issue 45): words/s of `bertkit embed` on tagged data (the word store) next
to (b) `bertkit embed` on the same sentences joined by spaces (the sentence store) and (c) a Flair-style
extraction written by hand with plain transformers; and peak memory of the word store against corpus size.

1. Throughput. The same text (the first --sentences sentences of ../shared/data/uner_ewt/train.iob2; default all
   2,001, 25,149 words), the same model (the packaged MiniLM-L6), the same --max-length (128), in fp32 and, where
   this CPU runs it natively (`loading.runs_natively`), in bf16:
   (a) the word store: `bertkit.commands.embed.run` in this process (the library entry `bertkit embed` calls),
       end to end: read and check the tagged file, load the model, embed, write and hash the store;
   (b) the sentence store: the same entry on a JSONL file of the sentences joined by single spaces (its defaults:
       [CLS] of the last layer, --batch-size auto), end to end as (a);
   (c) Flair-style by hand: `is_split_into_words=True`, `output_hidden_states=True`, each word's first piece by
       `word_ids()`, batches of 32 in file order padded to the batch's longest, `torch.inference_mode()` (bf16:
       under the same CPU autocast bertkit uses, weights fp32); the model is loaded before the clock starts and
       the vectors stay in memory (nothing written): the timing favours (c).
   Repeats are interleaved (a b c, b c a, c a b, ...) after one untimed warm-up of each; medians and the ratios
   (a)/(b) and (a)/(c) against the issue's targets (0.9 and 1.5) are reported, with the load average around each
   measurement. (a)'s vectors are checked against (c)'s (cosine on a sample of words) so the comparison is like
   for like.
2. Memory. `python -m bertkit embed --task tags` as a child process (through bench_memory's launcher: the child's
   own ru_maxrss from os.wait4) on the first N and 4N sentences of ../shared/data/ud_ewt_pos/train.tsv
   (default N = 3,136: 4N is the whole file, 204,577 words); both peaks, their ratio and the store's bytes per word.

Inputs derived from the shared data (first-N files, the joined-sentence JSONL) are written to a scratch folder,
never into the repository. Writes benchmarks/results/word-store.json (--quick: word-store-quick.json).

    python benchmarks/bench_word_store.py [--quick] [--sentences N] [--repeats 3] [--memory-n 3136]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from transformers.utils import logging as hf_logging  # noqa: E402

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402
from bertkit.models import loading  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()

DATA = ROOT.parent / "shared" / "data"
UNER = DATA / "uner_ewt" / "train.iob2"
UD_POS = DATA / "ud_ewt_pos" / "train.tsv"
MODEL = "minilm-offline"
MAX_LENGTH = 128
FLAIR_BATCH = 32
TARGETS = {"word_vs_sentence": 0.9, "word_vs_flair": 1.5}
MEMORY_TARGET = 1.3
"""bench_memory's bound for a large run's peak against its small run's (peak memory flat in the input)."""
CONTENDERS = ("word_store", "sentence_store", "flair_by_hand")


# ---------------------------------------------------------------- inputs (scratch files)


def read_sentences(path: Path, limit: int | None) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of the first `limit` sentences of a tagged file, read by bertkit's own reader."""
    from bertkit.data.tagged import TaggedColumns, read_tagged

    corpus = read_tagged(path, TaggedColumns(tag_scheme="none") if path.suffix == ".tsv" else None)
    out = []
    for sentence in corpus.sentences():
        if limit is not None and len(out) >= limit:
            break
        out.append((list(sentence.words), list(sentence.tags)))
    return out


def write_conll(path: Path, sentences: list[tuple[list[str], list[str]]]) -> Path:
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for words, tags in sentences:
            out.write("".join(f"{w}\t{t}\n" for w, t in zip(words, tags, strict=True)) + "\n")
    return path


def write_joined(path: Path, sentences: list[tuple[list[str], list[str]]]) -> Path:
    """One JSON object per sentence, its words joined by single spaces (the sentence path's input)."""
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for words, _ in sentences:
            out.write(json.dumps({"text": " ".join(words)}) + "\n")
    return path


# ---------------------------------------------------------------- the contenders


def word_store(data: Path, out: Path, precision: str) -> dict[str, Any]:
    """(a) `bertkit embed` on tagged data, in process, end to end (model load included)."""
    from bertkit.commands import embed

    shutil.rmtree(out, ignore_errors=True)
    result = embed.run(embed.EmbedConfig.of(data=str(data), task="tags", out=str(out), precision=precision,
                                         max_length=MAX_LENGTH), progress=False)
    words = result.words
    return {"words": words.words_encoded, "encode_seconds": words.seconds, "size_bytes": words.size_bytes,
            "precision_recorded": words.precision}


def sentence_store(data: Path, out: Path, precision: str) -> dict[str, Any]:
    """(b) `bertkit embed` on the joined sentences, in process, end to end, its defaults ([CLS], batch auto)."""
    from bertkit.commands import embed

    shutil.rmtree(out, ignore_errors=True)
    result = embed.run(embed.EmbedConfig.of(data=str(data), text_column="text", out=str(out), precision=precision,
                                         max_length=MAX_LENGTH), progress=False)
    return {"rows": result.rows_encoded, "tokens": result.tokens_encoded, "encode_seconds": result.seconds,
            "size_bytes": result.size_bytes, "precision_recorded": result.dtype}


def flair_by_hand(model: Any, tokenizer: Any, sentences: list[list[str]], dtype: torch.dtype
                  ) -> tuple[np.ndarray, list[int]]:
    """(c) What a user's script does: batches of 32 in file order, padded to the batch's longest, all hidden
    states, each word's first piece by `word_ids()`. Returns the last layer's word vectors (file order) and the
    indices of the sentences whose words were all read (truncation can drop a long sentence's tail)."""
    vectors, complete = [], []
    autocast = loading.autocast(torch.device("cpu"), dtype)
    with torch.inference_mode(), autocast:
        for start in range(0, len(sentences), FLAIR_BATCH):
            batch = sentences[start:start + FLAIR_BATCH]
            encoded = tokenizer(batch, is_split_into_words=True, truncation=True, max_length=MAX_LENGTH,
                                padding=True, return_tensors="pt")
            hidden = model(**encoded, output_hidden_states=True).hidden_states[-1].float()
            for j, words in enumerate(batch):
                first: dict[int, int] = {}
                for position, word in enumerate(encoded.word_ids(j)):
                    if word is not None and word not in first:
                        first[word] = position
                vectors.append(hidden[j, list(first.values())].numpy())
                if len(first) == len(words):
                    complete.append(start + j)
    return np.concatenate(vectors), complete


# ---------------------------------------------------------------- measuring


def timed(fn: Callable[[], Any]) -> tuple[float, Any, dict[str, float]]:
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - start
    return seconds, value, {"load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def agreement(store_path: Path, flair: np.ndarray, complete: list[int], rows_in_flair: np.ndarray,
              sample: int = 2000) -> dict[str, Any]:
    """Cosine between (a)'s stored vectors and (c)'s on a random sample of words of sentences (c) read whole."""
    from bertkit.features.word_store import open_word_store

    store = open_word_store(store_path)
    rows = np.concatenate([np.arange(store.sentence_offsets[s], store.sentence_offsets[s + 1]) for s in complete])
    rng = np.random.default_rng(0)
    picked = rng.choice(rows, size=min(sample, len(rows)), replace=False)
    a = np.asarray(store.vectors[np.sort(picked)], dtype=np.float64)
    c = flair[rows_in_flair[np.sort(picked)]].astype(np.float64)
    cos = (a * c).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(c, axis=1))
    return {"words_compared": int(len(picked)), "cosine_min": round(float(cos.min()), 6),
            "cosine_mean": round(float(cos.mean()), 6), "max_abs_diff": round(float(np.abs(a - c).max()), 6)}


def flair_rows(sentences: list[list[str]], complete: list[int], tokenizer: Any) -> np.ndarray:
    """For every word of the store (file order): its row in (c)'s output, -1 where (c) did not read it."""
    kept = np.zeros(len(sentences), dtype=bool)
    kept[complete] = True
    rows, at = [], 0
    for s, words in enumerate(sentences):
        if kept[s]:
            rows.append(np.arange(at, at + len(words)))
            at += len(words)
        else:  # truncated: (c) read only the words whose first piece fit; count them
            n = len({w for w in tokenizer(words, is_split_into_words=True, truncation=True,
                                          max_length=MAX_LENGTH).word_ids() if w is not None})
            rows.append(np.full(len(words), -1))
            at += n
    return np.concatenate(rows)


def throughput(precision: str, conll: Path, joined: Path, sentences: list[list[str]], repeats: int,
               work: Path) -> dict[str, Any]:
    """Interleaved repeats of (a), (b), (c) in `precision`; medians, ratios and the vectors' agreement."""
    from transformers import AutoModel, AutoTokenizer

    folder = loading.resolve_model_name(MODEL)
    model, tokenizer = AutoModel.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    n_words = sum(len(s) for s in sentences)
    store_a, store_b = work / f"a-{precision}", work / f"b-{precision}"
    steps = {"word_store": lambda: word_store(conll, store_a, precision),
             "sentence_store": lambda: sentence_store(joined, store_b, precision),
             "flair_by_hand": lambda: flair_by_hand(model, tokenizer, sentences, dtype)}
    warm = work / "warm"  # untimed warm-up of each (first calls build caches: Arrow data, kernels)
    write_conll(warm.with_suffix(".iob2"), [(s, ["O"] * len(s)) for s in sentences[:64]])
    write_joined(warm.with_suffix(".jsonl"), [(s, []) for s in sentences[:64]])
    word_store(warm.with_suffix(".iob2"), work / "warm-a", precision)
    sentence_store(warm.with_suffix(".jsonl"), work / "warm-b", precision)
    sentence_store(joined, store_b, precision)  # the sentence path's data cache for the timed file
    flair_by_hand(model, tokenizer, sentences[:64], dtype)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    flair_out: Any = None
    for r in range(repeats):
        order = CONTENDERS[r % 3:] + CONTENDERS[:r % 3]
        for name in order:
            seconds, value, load = timed(steps[name])
            if name == "flair_by_hand":
                flair_out, value = value, {"words_out": int(len(value[0])), "sentences_whole": len(value[1])}
            samples[name].append({"seconds": round(seconds, 3), "words_per_s": round(n_words / seconds, 1),
                                  **load, **value})
            print(f"[{precision}] round {r + 1} {name:<15} {seconds:7.2f} s  {n_words / seconds:8.1f} words/s  "
                  f"load {load['load_before']}", file=sys.stderr, flush=True)
    medians = {name: statistics.median(s["words_per_s"] for s in samples[name]) for name in CONTENDERS}
    encode_a = statistics.median(s["encode_seconds"] for s in samples["word_store"])
    vectors, complete = flair_out
    check = agreement(store_a, vectors, complete, flair_rows(sentences, complete, tokenizer))
    return {"precision": precision, "words": n_words, "sentences": len(sentences), "samples": samples,
            "median_words_per_s": medians,
            "ratios": {"word_vs_sentence": round(medians["word_store"] / medians["sentence_store"], 3),
                       "word_vs_flair": round(medians["word_store"] / medians["flair_by_hand"], 3),
                       "word_encode_only_vs_flair": round(n_words / encode_a / medians["flair_by_hand"], 3)},
            "agreement_word_store_vs_flair": check,
            "store_bytes_per_word": round(samples["word_store"][-1]["size_bytes"] / n_words, 1)}


# ---------------------------------------------------------------- memory


def memory(n: int, work: Path, precision: str) -> dict[str, Any]:
    """Peak RSS of `python -m bertkit embed --task tags` on the first n and 4n sentences of UD-EWT POS train."""
    import bench_memory

    sentences = read_sentences(UD_POS, 4 * n)
    env = {**os.environ, **bench_memory.CHILD_ENV, "PYTHONPATH": str(ROOT), "BERTKIT_CACHE_DIR": str(work / "cache")}
    runs = []
    for size in (n, 4 * n):
        part = sentences[:size]
        data = write_conll(work / f"ud-{size}.tsv", part)
        out = work / f"mem-{size}"
        argv = [sys.executable, "-m", "bertkit", "embed", "--data", str(data), "--task", "tags", "--out", str(out),
                "--precision", precision, "--max-length", str(MAX_LENGTH), "--quiet"]
        load_before = os.getloadavg()[0]
        measured = bench_memory.run_measured(argv, env, work / f"mem-{size}.log")
        if measured["exit_code"] != 0:
            raise SystemExit(f"embed of {size} sentences failed:\n{measured.get('log_tail', '')}")
        words = sum(len(w) for w, _ in part)
        size_bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        runs.append({"sentences": size, "words": words, **measured, "words_per_s": round(words / measured["seconds"], 1),
                     "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                     "store_bytes": size_bytes, "store_bytes_per_word": round(size_bytes / words, 1),
                     "vectors_bytes_per_word": (out / "vectors.npy").stat().st_size // words})
        print(f"[memory] {size} sentences, {words} words: peak {measured['peak_rss_mib']} MiB, "
              f"{measured['seconds']:.0f} s", file=sys.stderr, flush=True)
        shutil.rmtree(out, ignore_errors=True)
    ratio = runs[1]["peak_rss_mib"] / runs[0]["peak_rss_mib"]
    return {"data": str(UD_POS), "precision": precision, "runs": runs, "peak_ratio_4x": round(ratio, 3),
            "target_ratio": MEMORY_TARGET, "flat": ratio <= MEMORY_TARGET,
            "how": "python -m bertkit embed --task tags as a child process; peak = the child's ru_maxrss (os.wait4, "
                   "bench_memory's launcher)"}


# ---------------------------------------------------------------- main


def precisions() -> list[str]:
    return ["fp32"] + (["bf16"] if loading.runs_natively("bf16", torch.device("cpu")) else [])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 sentences, memory on 200/800 sentences")
    parser.add_argument("--sentences", type=int, default=None, help="uner_ewt train sentences (default all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-n", type=int, default=None, help="N of the N / 4N memory runs (default 3136)")
    parser.add_argument("--memory-precision", default="auto", help="precision of the memory runs")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    n_sentences = args.sentences or (300 if args.quick else None)
    memory_n = args.memory_n or (200 if args.quick else 3136)
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"word-store{'-quick' if args.quick else ''}.json")
    started = time.perf_counter()
    results: dict[str, Any] = {
        "benchmark": "word-store", "issue": 45, "args": vars(args), "machine": machine_info(),
        "versions": package_versions(), "cpu_supports_bf16": loading.cpu_supports_bf16(), "model": MODEL,
        "max_length": MAX_LENGTH, "targets": TARGETS, "loadavg_start": os.getloadavg(),
        "notes": ["(a) and (b) are `bertkit.commands.embed.run` in this process (what `bertkit embed` calls), end "
                  "to end: reading the file, loading the model, embedding, writing and hashing the store. (c) is "
                  "timed from a loaded model with its vectors kept in memory: the ratio (a)/(c) favours (c).",
                  "(b) is the sentence store's default ([CLS] of the last layer, which runs the top layer for "
                  "[CLS] only, --batch-size auto); (a) needs every token of every layer it reads.",
                  "The machine is shared (2 cores): read the ratios of interleaved medians, not the absolute "
                  "numbers; load_before/load_after are os.getloadavg()[0] around each measurement."]}
    with tempfile.TemporaryDirectory(prefix="bench-word-store-") as tmp:
        work = Path(tmp)
        os.environ["BERTKIT_CACHE_DIR"] = str(work / "cache")
        tagged = read_sentences(UNER, n_sentences)
        conll = write_conll(work / "uner.iob2", tagged)
        joined = write_joined(work / "uner.jsonl", tagged)
        words = [w for w, _ in tagged]
        results["data"] = {"file": str(UNER), "sentences": len(words), "words": sum(map(len, words))}
        results["throughput"] = [throughput(p, conll, joined, words, args.repeats, work) for p in precisions()]
        if not args.skip_memory:
            results["memory"] = memory(memory_n, work, args.memory_precision)
    results["loadavg_end"] = os.getloadavg()
    results["seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(out, results)
    for block in results["throughput"]:
        m, r = block["median_words_per_s"], block["ratios"]
        print(f"{block['precision']}: words/s word {m['word_store']:.0f}, sentence {m['sentence_store']:.0f}, flair "
              f"{m['flair_by_hand']:.0f}; word/sentence {r['word_vs_sentence']:.2f} (target 0.9), word/flair "
              f"{r['word_vs_flair']:.2f} (target 1.5); cosine min {block['agreement_word_store_vs_flair']['cosine_min']}")
    if "memory" in results:
        mem = results["memory"]
        print(f"memory: {' / '.join(str(x['peak_rss_mib']) + ' MiB' for x in mem['runs'])} "
              f"(ratio {mem['peak_ratio_4x']}), {mem['runs'][-1]['store_bytes_per_word']} bytes/word")
    print(f"wrote {out} ({results['seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
