"""What the GPU benchmark's parts share (`benchmarks/gpu.py` runs them): sections with a deadline, the device and its
peaks, the standard MFU count, the prepared data and models, and interleaved repeats."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402
from bertkit.measure import flops  # noqa: E402
from bertkit.measure.timing import Stopwatch, repeat, sync_for, timed_step  # noqa: E402

GPU = torch.cuda.is_available()
SYNC = sync_for(torch.device("cuda" if GPU else "cpu"))
"""Waits for the GPU's queued work before the clock is read (nothing to wait for on a CPU)."""
PRECISIONS = ("bf16", "fp16") if GPU else ("fp32",)
"""Inference precisions measured (the first is bertkit's headline): on a CPU smoke run, fp32 only."""
HPARAMS = {"epochs": 1, "batch_size": 32, "lr": 5e-5, "warmup_ratio": 0.1, "weight_decay": 0.01, "max_length": 128,
           "seed": 42}
"""Both sides of every fine-tuning comparison (bertkit's default weight decay, given to the Trainer too)."""
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
"""--quick: models of this size (a smoke run of the script on a CPU), not the base shapes."""
RANDOM_INIT = "BERT-base shape, random init (BertConfig()), bert-base-uncased vocabulary"


class Run:
    """Sections in order, each timed and caught (an error is recorded, the next section runs); the result files are
    rewritten after every section, so a run stopped at its limit still returns what it measured."""

    def __init__(self, out: Path, seconds: float, files: tuple[str, ...]):
        self.out, self.seconds, self.watch = out, seconds, Stopwatch().start()
        self.files: dict[str, dict[str, Any]] = {name: {} for name in files}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.seconds - self.watch.elapsed

    def section(self, file: str, name: str, fn: Callable[[], Any], need: float = 0.0) -> Any:
        record = self.files[file]
        if self.left() < need:
            record.setdefault("skipped", []).append(f"{name}: {self.left():.0f} s left, needs ~{need:.0f} s")
            print(f"[gpu] skip {name}", flush=True)
            return None
        print(f"[gpu] {name} ({self.left():.0f} s left)", flush=True)
        with Stopwatch() as watch:
            try:
                value = fn()
                record[name] = value
            except Exception as exc:  # recorded; the run goes on
                value = None
                record.setdefault("errors", {})[name] = "".join(traceback.format_exception(exc))[-3000:]
                print(f"[gpu] {name} FAILED: {exc!r}", flush=True)
        record.setdefault("section_seconds", {})[name] = round(watch.seconds, 1)
        self.write()
        return value

    def write(self) -> None:
        for name, record in self.files.items():
            write_json_atomic(self.out / f"{name}.json", record)


# ---------------------------------------------------------------- the device and the count


def device_info() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": machine_info(), "versions": package_versions()}
    if GPU:
        p = torch.cuda.get_device_properties(0)
        peak, matched = flops.spec_peak_tflops(p.name)
        info.update(device=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", cuda=torch.version.cuda,
                    spec_bf16_dense_tflops=peak, spec_entry=matched)
    else:
        info.update(device="cpu", spec_bf16_dense_tflops=None, spec_entry="no GPU")
    try:
        import sentence_transformers

        info["versions"]["sentence-transformers"] = sentence_transformers.__version__
    except ImportError:
        pass
    return info


def matmul_peak(quick: bool) -> dict[str, Any]:
    """bf16 matrix-product rate on random data (8192^3, the median of 10 after 3 warm-ups): for reference beside the
    spec peak, which the MFU figures divide by."""
    n = 1024 if quick or not GPU else 8192
    a, b = (torch.randn(n, n, device="cuda" if GPU else "cpu", dtype=torch.bfloat16) for _ in range(2))
    samples = repeat(timed_step(lambda: torch.mm(a, b), SYNC), 3, 10, 0.0)
    seconds = float(np.median([sample[0] for sample in samples]))
    return {"n": n, "tflops": round(2 * n**3 / seconds / 1e12, 1)}


class Count:
    """The standard count for one model config against one peak (see `bertkit.measure.flops`)."""

    def __init__(self, config: Any, peak_tflops: float | None):
        self.config, self.peak = config, peak_tflops

    def training(self, lengths: np.ndarray, seconds: float) -> dict[str, Any]:
        work = flops.training_flops(self.config, lengths)
        return self._figures(work, lengths, seconds)

    def inference(self, lengths: np.ndarray, seconds: float) -> dict[str, Any]:
        return self._figures(flops.inference_flops(self.config, lengths), lengths, seconds)

    def _figures(self, work: float, lengths: np.ndarray, seconds: float) -> dict[str, Any]:
        value = flops.mfu(work, seconds, self.peak)
        return {"mfu_standard": None if value is None else round(value, 4),
                "tokens_per_second": round(float(np.sum(lengths)) / seconds, 1),
                "samples_per_second": round(len(lengths) / seconds, 2), "model_tflop": round(work / 1e12, 3)}


# ---------------------------------------------------------------- data and models


def read_tsv(path: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        text, label = line.rsplit("\t", 1)
        texts.append(text)
        labels.append(int(label))
    return texts, labels


def write_tsv(path: Path, texts: list[str], labels: list[int]) -> Path:
    path.write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, labels, strict=True)), encoding="utf-8")
    return path


def prepare(data: Path, work: Path, size: dict[str, Any]) -> dict[str, Any]:
    """SST-2 train x `copies`, SST-2 dev, long documents (sentences of one label joined, cut at 512 tokens), and the
    random-init BERT-base classifier and encoder folders (seeded) with the bert-base-uncased vocabulary."""
    import transformers

    from bertkit.models import loading

    lines = (data / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[: size["rows"]]
    rows = [line.rsplit("\t", 1) for line in lines]
    texts, labels = [t for t, _ in rows], [int(y) for _, y in rows]
    write_tsv(work / "sst2.tsv", texts, labels)
    write_tsv(work / "sst2x.tsv", texts * size["copies"], labels * size["copies"])
    shutil.copy(data / "sst2" / "dev.tsv", work / "dev.tsv")
    rng = np.random.default_rng(0)
    for name, n in (("docs_train", size["docs_train"]), ("docs_dev", size["docs_dev"]),
                    ("docs_embed", size["embed_docs"])):
        docs, ys = [], []
        for i in range(n):
            pool = [text for text, y in zip(texts, labels, strict=True) if y == i % 2]
            docs.append(" ".join(pool[j] for j in rng.choice(len(pool), size["doc_sentences"], replace=False)))
            ys.append(i % 2)
        write_tsv(work / f"{name}.tsv", docs, ys)
    tokenizer = loading.load_tokenizer("minilm-offline")
    torch.manual_seed(HPARAMS["seed"])
    config = transformers.BertConfig(**(TINY if size["tiny"] else {}))
    folders = {}
    for name, model in (("bert_classifier", transformers.BertForSequenceClassification(
                            transformers.BertConfig(num_labels=2, **config.to_diff_dict()))),
                        ("bert_encoder", transformers.BertModel(config))):
        folders[name] = work / name
        model.save_pretrained(folders[name], safe_serialization=True)
        tokenizer.save_pretrained(folders[name])
    return {"work": work, **folders, "config": config, "tokenizer": tokenizer}


def token_lengths(texts: list[str], tokenizer: Any, max_length: int) -> np.ndarray:
    return np.array([len(x) for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]])


# ---------------------------------------------------------------- repeats


def interleaved(contenders: dict[str, Callable[[], dict[str, Any]]], rounds: int,
                warm: tuple[str, ...] = ()) -> dict[str, list[dict[str, Any]]]:
    """Each contender run once per round, round by round (A B C A B C), so drift on the machine falls on all of
    them; those in `warm` run once more before the first round (a compile, reported as `warm_up`)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    for name in warm:
        first = contenders[name]()
        first["warm_up"] = True
        runs[name].append(first)
    for _ in range(rounds):
        for name, fn in contenders.items():
            runs[name].append(fn())
    return runs


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    """The median of `key` over the runs that are not warm-ups."""
    return float(statistics.median(r[key] for r in runs if not r.get("warm_up")))
