"""The GPU benchmark, in one go (`bash benchmarks/gpu.sh`, <= 8 minutes on one H100/H200): fine-tuning, embedding and
prediction of bertkit against the alternatives at their best, side by side on the same GPU, and the gpu-marked tests.

Writes, under --out (benchmarks/results/gpu/latest/ by default; the figures docs/gpus.md quotes are in benchmarks/results/gpu/):
  finetune.json  BERT-base shape (random init) on SST-2 x8, batch 32, 1 epoch, bf16: bertkit vs transformers.Trainer
                 at its best (dynamic padding, group_by_length, fused AdamW, 2 loader workers) -> samples/s, dev
                 accuracy, `bertkit_vs_trainer_best`, MFU (`mfu_sst2_b32`); the same on long rows (4,096 documents of
                 512 tokens, `mfu_long`); the graphed step before/after bertkit's lean GPU layers (and with cuDNN
                 attention) on both; MiniLM (real weights) on SST-2 with and without CUDA graphs (dev accuracy); the
                 profiler's account of one step before (eager) and after (graphs); recompiles (none: no torch.compile).
  embed.json     `bertkit embed` vs sentence-transformers at its best (bf16/fp16 at batch 1024, with and without cuDNN
                 attention; batches 64 and 256 were slower in run1/run2) on SST-2 x8 (`bertkit_vs_st_best`); on 8,192
                 documents of 512 tokens against sentence-transformers at batch 128 (`mfu_long`); features vs fp32,
                 prediction rows/s, DistilBERT vs BERT batch-1 latency.
  tests.log      `pytest -m gpu` on this machine.
MFU = model FLOPs a step executes / seconds / the bf16 matmul rate measured in the same run (8192^3, random data).
FLOPs count the matrix products (projections, FFN, attention scores and values; training = 3x forward) on the real
(unpadded) tokens, and only what bertkit runs: its last layer computes queries, attention output and FFN for [CLS]
only, so its figure is the smaller, conservative one (the full-model figure is recorded beside it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
from bertkit.measure.timing import Budget, Stopwatch, repeat, sync_for, timed_step  # noqa: E402

HPARAMS = {"epochs": 1, "batch_size": 32, "lr": 5e-5, "warmup_ratio": 0.1, "max_length": 128, "seed": 42}
SIZES = {"full": {"copies": 8, "rows": None, "docs_train": 4096, "docs_dev": 256, "doc_sentences": 32,
                  "profile_steps": 10, "latency_seconds": 2.0, "minilm_rows": None, "tiny": False, "embed_docs": 8192,
                  "st_docs": 4096, "variant_steps": 20},
         "quick": {"copies": 2, "rows": 128, "docs_train": 64, "docs_dev": 32, "doc_sentences": 6, "profile_steps": 3,
                   "latency_seconds": 0.2, "minilm_rows": 128, "tiny": True, "embed_docs": 128, "st_docs": 64,
                   "variant_steps": 3}}
PRECISIONS = ("bf16", "fp16") if torch.cuda.is_available() else ("fp32",)
"""Inference precisions measured (the first is bertkit's headline): on a CPU smoke run, fp32 only."""
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
"""--quick: models of this size (a smoke run of the script on a CPU), not the base shapes."""
SYNC = sync_for(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
"""Waits for the GPU's queued work before the clock is read (nothing to wait for on a CPU)."""


# ---------------------------------------------------------------- the run: sections with a deadline


class Run:
    """Sections in order, each timed and caught (an error is recorded, the next section runs); the result files are
    rewritten after every section, so a run stopped at its limit still returns what it measured."""

    def __init__(self, out: Path, seconds: float):
        self.out, self.seconds, self.watch = out, seconds, Stopwatch().start()
        self.files: dict[str, dict[str, Any]] = {"finetune": {}, "embed": {}}
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


# ---------------------------------------------------------------- measuring


def device_info() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": machine_info(), "versions": package_versions()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(device=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", cuda=torch.version.cuda)
    else:
        info["device"] = "cpu"
    try:
        import sentence_transformers

        info["versions"]["sentence-transformers"] = sentence_transformers.__version__
    except ImportError:
        pass
    return info


def matmul_peak(quick: bool) -> dict[str, Any]:
    """bf16 matrix-product rate on random data: the median of 10 timed products after 3 warm-ups."""
    n = 1024 if quick or not torch.cuda.is_available() else 8192
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    samples = repeat(timed_step(lambda: torch.mm(a, b), SYNC), 3, 10, 0.0)
    seconds = float(np.median([sample[0] for sample in samples]))
    return {"n": n, "tflops": round(2 * n**3 / seconds / 1e12, 1)}


def forward_flops(config: Any, lengths: np.ndarray, cls_only_last: bool) -> float:
    """Forward FLOPs of the encoder layers over rows of `lengths` real tokens (matrix products only). With
    `cls_only_last`, the last layer computes keys and values for every token but the rest for [CLS] alone."""
    h = int(getattr(config, "hidden_size", None) or config.dim)
    ffn = int(getattr(config, "intermediate_size", None) or config.hidden_dim)
    layers = int(getattr(config, "num_hidden_layers", None) or config.n_layers)
    s = lengths.astype(np.float64)
    full = (8 * h * h + 4 * h * ffn) * s + 4 * h * s * s  # per layer per row
    if not cls_only_last:
        return float(layers * full.sum())
    last = 4 * h * h * s + (4 * h * h + 4 * h * ffn) + 4 * h * s
    return float(((layers - 1) * full + last).sum())


# ---------------------------------------------------------------- data and models


def prepare(data: Path, work: Path, size: dict[str, Any]) -> dict[str, Any]:
    """SST-2 x copies (train), SST-2 dev, long documents (sentences of one label joined), and the random-init
    BERT-base classifier and encoder folders (seeded) with the bert-base-uncased vocabulary."""
    import transformers

    from bertkit.models import loading

    lines = (data / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[: size["rows"]]
    (work / "sst2x.tsv").write_text("\n".join(lines * size["copies"]) + "\n", encoding="utf-8")
    shutil.copy(data / "sst2" / "dev.tsv", work / "dev.tsv")
    rows = [line.rsplit("\t", 1) for line in lines]
    rng = np.random.default_rng(0)
    for name, n in (("docs_train", size["docs_train"]), ("docs_dev", size["docs_dev"])):
        docs = []
        for i in range(n):
            label = str(i % 2)
            pool = [text for text, y in rows if y == label]
            picked = rng.choice(len(pool), size["doc_sentences"], replace=False)
            docs.append(" ".join(pool[j] for j in picked) + "\t" + label)
        (work / f"{name}.tsv").write_text("\n".join(docs) + "\n", encoding="utf-8")
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
    lengths = np.array([len(x) for x in tokenizer([t for t, _ in rows], truncation=True,
                                                  max_length=HPARAMS["max_length"])["input_ids"]])
    return {"work": work, **folders, "sst2_train_lengths_one_copy": lengths, "rows_per_copy": len(rows),
            "config": config}


def read_tsv(path: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        text, label = line.rsplit("\t", 1)
        texts.append(text)
        labels.append(int(label))
    return texts, labels


# ---------------------------------------------------------------- fine-tuning


def bertkit_finetune(model: Path, train: Path, dev: Path, out: Path, max_length: int, graphs: bool = True,
                     batch_size: int = 32, lr: float = HPARAMS["lr"]) -> dict[str, Any]:
    from accelerate.state import AcceleratorState, GradientState, PartialState

    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.training.finetune import finetune

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()
    cfg = FinetuneConfig(model=str(model), data=str(train), dev=str(dev), text_column="0", label_column="1",
                         epochs=1, batch_size=batch_size, lr=lr, warmup_ratio=HPARAMS["warmup_ratio"],
                         max_length=max_length, seed=HPARAMS["seed"], precision="bf16" if torch.cuda.is_available()
                         else "fp32", save_every=None, out=str(out), cuda_graphs="auto" if graphs else "off",
                         overwrite=True)
    with Stopwatch() as watch:
        metrics = finetune(cfg, progress=False).metrics
    return {"train_samples_per_second": metrics["train_samples_per_second"], "train_seconds": metrics["train_seconds"],
            "wall_seconds_incl_load_eval_saving": round(watch.seconds, 1),
            "dev_accuracy": round(metrics["best_dev"]["accuracy"], 4), "train_rows": metrics["train_rows_seen"],
            "step_launch": metrics["step_launch"], "mixed_precision": metrics["mixed_precision"]}


def trainer_finetune(model: Path, train: Path, dev: Path, out: Path, max_length: int,
                     cudnn_attention: bool = True) -> dict[str, Any]:
    """transformers.Trainer at its best: bf16, dynamic padding (multiple of 8), group_by_length, fused AdamW, two
    pinned loader workers, SDPA attention (the default); tokenization outside the timed train(). `cudnn_attention`
    False takes cuDNN out of SDPA's kernels, the lever bertkit pulls (a plan per new shape)."""
    from transformers import (
        AutoTokenizer,
        BertForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    set_seed(HPARAMS["seed"])
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    net = BertForSequenceClassification.from_pretrained(str(model))

    def encoded(path: Path) -> list[dict[str, Any]]:
        texts, labels = read_tsv(path)
        enc = tokenizer(texts, truncation=True, max_length=max_length)
        return [{"input_ids": ids, "token_type_ids": tt, "attention_mask": am, "labels": y}
                for ids, tt, am, y in zip(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], labels,
                                          strict=True)]

    settings = dict(
        output_dir=str(out), per_device_train_batch_size=HPARAMS["batch_size"], per_device_eval_batch_size=256,
        learning_rate=HPARAMS["lr"], num_train_epochs=1, warmup_steps=HPARAMS["warmup_ratio"], seed=HPARAMS["seed"],
        save_strategy="no", eval_strategy="no", logging_strategy="no", report_to=[], bf16=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(), disable_tqdm=True, optim="adamw_torch_fused",
        dataloader_num_workers=2, dataloader_pin_memory=True, max_grad_norm=1.0)
    try:
        args = TrainingArguments(**settings, train_sampling_strategy="group_by_length")
    except TypeError:  # transformers before train_sampling_strategy
        args = TrainingArguments(**settings, group_by_length=True)
    trainer = Trainer(model=net, args=args, train_dataset=encoded(train),
                      data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8))
    with attention_kernels(cudnn_attention):
        stats = trainer.train().metrics
        output = trainer.predict(encoded(dev))
    accuracy = float((np.asarray(output.predictions).argmax(-1) == np.asarray(output.label_ids)).mean())
    return {"train_samples_per_second": round(stats["train_samples_per_second"], 2),
            "train_seconds": round(stats["train_runtime"], 2), "dev_accuracy": round(accuracy, 4),
            "cudnn_attention": cudnn_attention}


def attention_kernels(cudnn: bool) -> Any:
    """SDPA as torch picks it (cudnn True), or without cuDNN's kernels."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    if cudnn or not torch.cuda.is_available():
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def finetune_pair(prep: dict[str, Any], peak: float, train: Path, dev: Path, max_length: int,
                  lengths: np.ndarray, label: str, trainer_cudnn: bool = True) -> dict[str, Any]:
    """bertkit (graphs) and Trainer at its best on the same rows; ratio and MFU of each."""
    work, model = prep["work"], prep["bert_classifier"]
    result: dict[str, Any] = {"data": label, "model": "BERT-base shape, random init (BertConfig())", "hparams":
                              {**HPARAMS, "max_length": max_length}}
    result["bertkit"] = bertkit_finetune(model, train, dev, work / f"ft-{label}", max_length)
    shutil.rmtree(work / f"ft-{label}" / "checkpoints", ignore_errors=True)
    result["trainer_best"] = trainer_finetune(model, train, dev, work / f"tr-{label}", max_length, trainer_cudnn)
    config = prep["config"]
    for name, cls_only in (("bertkit", True), ("trainer_best", False)):
        run = result[name]
        flops = 3 * forward_flops(config, lengths, cls_only)
        run["model_tflop"] = round(flops / 1e12, 2)
        run["mfu"] = round(flops / run["train_seconds"] / (peak * 1e12), 4)
        if cls_only:
            run["mfu_full_model_flops"] = round(3 * forward_flops(config, lengths, False) / run["train_seconds"]
                                                / (peak * 1e12), 4)
    result["bertkit_vs_trainer_best"] = round(result["bertkit"]["train_samples_per_second"]
                                              / result["trainer_best"]["train_samples_per_second"], 2)
    result["dev_accuracy_difference"] = round(result["bertkit"]["dev_accuracy"] - result["trainer_best"]["dev_accuracy"], 4)
    return result


def token_lengths(path: Path, tokenizer: Any, max_length: int) -> np.ndarray:
    texts, _ = read_tsv(path)
    return np.array([len(x) for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]])


def minilm_sst2(prep: dict[str, Any], data: Path, rows: int | None) -> dict[str, Any]:
    """The real MiniLM on SST-2, 1 epoch: CUDA graphs vs eager launches (dev accuracy within noise: 1 pt = 9 rows)."""
    from bertkit.models import loading

    train, work = data / "sst2" / "train.tsv", prep["work"]
    if rows is not None:
        train = work / "minilm-train.tsv"
        train.write_text("\n".join((data / "sst2" / "train.tsv").read_text().splitlines()[:rows]) + "\n")
    minilm = Path(loading.resolve_model_name("minilm-offline"))
    out = {"model": "minilm-offline (6 layers, hidden 384; weights carried as bf16, widened to fp32)"}
    for name, graphs in (("graphs", True), ("eager", False)):
        out[name] = bertkit_finetune(minilm, train, data / "sst2" / "dev.tsv", work / f"minilm-{name}", 128, graphs)
        shutil.rmtree(work / f"minilm-{name}", ignore_errors=True)
    out["graphs_vs_eager_samples_per_second"] = round(out["graphs"]["train_samples_per_second"]
                                                      / out["eager"]["train_samples_per_second"], 2)
    return out


# ---------------------------------------------------------------- one step under the profiler, before and after


def _bert_steps(prep: dict[str, Any], data: Path, max_length: int) -> tuple[Any, Any, Callable[[], tuple[Any, Any]]]:
    """The rows of `data` encoded at `max_length`, a cross-entropy objective on their labels, and a maker of a fresh
    BERT-base classifier (bertkit's fast forward, training mode) with its fused AdamW: what the step timings run."""
    from bertkit.data.dataset import TextDataset
    from bertkit.encoding.encode import encode_dataset
    from bertkit.models import loading
    from bertkit.models.fastforward import SequenceClassifier

    device = torch.device("cuda")
    texts, labels = read_tsv(data)
    tokenizer = loading.load_tokenizer(str(prep["bert_classifier"]))
    encoded = encode_dataset(tokenizer, TextDataset(texts=texts), max_length)
    y = torch.tensor(labels, device=device)

    class Objective:
        def loss(self, logits: torch.Tensor, rows: Any) -> torch.Tensor:
            rows = rows if isinstance(rows, torch.Tensor) else torch.as_tensor(rows, device=device)
            return torch.nn.functional.cross_entropy(logits.float(), y.index_select(0, rows))

    def fresh() -> tuple[Any, Any]:
        torch.manual_seed(0)
        model = loading.load_classifier(str(prep["bert_classifier"]), {0: "0", 1: "1"}).to(device).train()
        net = SequenceClassifier(model)
        return net, torch.optim.AdamW(net.parameters(), lr=1e-5, fused=True)

    return encoded, Objective(), fresh


def _graphed_runner(net: Any, optimizer: Any, objective: Any, encoded: Any, batches: list[np.ndarray],
                    max_length: int) -> Any:
    from bertkit.training.graphs import StepRunner, planned_shapes

    runner = StepRunner(net, optimizer, objective, encoded, 0, frozenset({"input_ids", "attention_mask",
                        "token_type_ids"}), torch.bfloat16, 1.0, torch.device("cuda"), max_length)
    runner.capture_shapes(planned_shapes(runner, [[b] for b in batches]))
    return runner


def profile_steps(prep: dict[str, Any], steps: int) -> dict[str, Any]:
    """`steps` optimizer steps of BERT-base on SST-2 batches of 32 under torch.profiler: the eager step (bertkit's
    loop as it launched before) and the graphed one. Per step: wall ms, GPU busy ms, kernel launches, and the ops
    that take the GPU's time."""
    from torch.profiler import ProfilerActivity, profile

    from bertkit.encoding.batches import grouped_batches, pad_batch

    device = torch.device("cuda")
    encoded, objective, fresh = _bert_steps(prep, prep["work"] / "dev.tsv", 128)
    batches = grouped_batches(encoded.lengths, 32, 0, 0)[: steps + 3]
    net, optimizer = fresh()

    def eager(rows: np.ndarray) -> None:
        inputs = pad_batch(encoded, rows, 0, inputs={"input_ids", "attention_mask", "token_type_ids"}, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = net(**inputs)
        loss = objective.loss(logits, rows)
        loss.backward()
        loss.item()  # the eager loop read every loss back
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    result = {"eager": _profiled(eager, batches, steps, profile, ProfilerActivity)}
    net, optimizer = fresh()
    runner = _graphed_runner(net, optimizer, objective, encoded, batches, 128)

    def graphed(rows: np.ndarray) -> None:
        runner.step(runner.prepare([rows], len(rows)), 0)

    result["graphs"] = _profiled(graphed, batches, steps, profile, ProfilerActivity)
    result["graphs"]["captured_shapes"] = runner.captured_shapes
    result["wall_ms_eager_vs_graphs"] = round(result["eager"]["wall_ms_per_step"] / result["graphs"]["wall_ms_per_step"], 2)
    return result


def lean_layers_before_after(prep: dict[str, Any], peak: float, steps: int) -> dict[str, Any]:
    """The graphed BERT-base step at batch 32 on 512-token documents and on SST-2 rows, with bertkit's lean GPU
    layers (`fastforward.LEAN_GPU_LAYERS`: one product for the projections, a bf16 residual stream) and without
    (autocast's fp32 stream): ms per step (CUDA events around `steps` steps after 3 warm-ups, each variant timed
    twice, interleaved), MFU, and the profiler's top ops of one lean and one plain 512-token step. On the documents
    also the lean step with cuDNN's attention allowed (`fastforward.GPU_ATTENTION` leaves it out by default)."""
    from torch.nn.attention import SDPBackend
    from torch.profiler import ProfilerActivity, profile

    from bertkit.encoding.batches import grouped_batches
    from bertkit.models import fastforward

    default_attention = list(fastforward.GPU_ATTENTION)
    out: dict[str, Any] = {}
    for label, data, max_length in (("documents_512", prep["work"] / "docs_train.tsv", 512),
                                    ("sst2", prep["work"] / "sst2x.tsv", 128)):
        encoded, objective, fresh = _bert_steps(prep, data, max_length)
        batches = grouped_batches(encoded.lengths, 32, 0, 0)[: steps + 3]
        lengths = np.concatenate([encoded.lengths[b] for b in batches[3:]])
        flops = 3 * forward_flops(prep["config"], lengths, True)
        variants = {"lean": (True, default_attention), "plain": (False, default_attention)}
        if label == "documents_512":
            variants["lean_cudnn"] = (True, [SDPBackend.CUDNN_ATTENTION, *default_attention])
        runners = {}
        times: dict[str, list[float]] = {name: [] for name in variants}
        try:
            for name, (lean, attention) in variants.items():
                fastforward.LEAN_GPU_LAYERS, fastforward.GPU_ATTENTION = lean, attention
                net, optimizer = fresh()
                runners[name] = _graphed_runner(net, optimizer, objective, encoded, batches, max_length)
            for _ in range(2):
                for name, runner in runners.items():
                    fastforward.LEAN_GPU_LAYERS, fastforward.GPU_ATTENTION = variants[name]
                    times[name].append(_ms_per_step(runner, batches, steps))
            if label == "documents_512":
                for name in ("lean", "plain"):
                    runner = runners[name]
                    fastforward.LEAN_GPU_LAYERS, fastforward.GPU_ATTENTION = variants[name]
                    profiled = _profiled(lambda rows, r=runner: r.step(r.prepare([rows], len(rows)), 0), batches,
                                         min(5, steps), profile, ProfilerActivity)
                    out[f"profile_{label}_{name}"] = profiled
        finally:
            fastforward.LEAN_GPU_LAYERS, fastforward.GPU_ATTENTION = True, default_attention
        entry: dict[str, Any] = {"rows_per_step": 32, "steps": steps,
                                 "mean_tokens_per_row": round(float(lengths.mean()), 1)}
        for name in variants:
            ms = min(times[name])
            entry[name] = {"ms_per_step": round(ms, 3), "ms_per_step_runs": [round(t, 3) for t in times[name]],
                           "mfu": round(flops / (ms / 1000 * steps) / (peak * 1e12), 4),
                           "mfu_full_model_flops": round(3 * forward_flops(prep["config"], lengths, False)
                                                         / (ms / 1000 * steps) / (peak * 1e12), 4)}
            if name == "lean_cudnn":
                entry[name]["capture_seconds"] = round(runners[name].capture_seconds, 2)
        entry["plain_vs_lean_ms"] = round(entry["plain"]["ms_per_step"] / entry["lean"]["ms_per_step"], 3)
        out[label] = entry
        del runners
        torch.cuda.empty_cache()
    return out


def _ms_per_step(runner: Any, batches: list[np.ndarray], steps: int) -> float:
    prepared = [runner.prepare([rows], len(rows)) for rows in batches]
    for micro in prepared[:3]:
        runner.step(micro, 0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for micro in prepared[3 : 3 + steps]:
        runner.step(micro, 0)
    end.record()
    end.synchronize()
    runner.read()
    return start.elapsed_time(end) / steps


def _profiled(step: Callable[[np.ndarray], None], batches: list[np.ndarray], steps: int, profile: Any,
              activity: Any) -> dict[str, Any]:
    for rows in batches[:3]:
        step(rows)
    SYNC()
    with profile(activities=[activity.CPU, activity.CUDA]) as prof, Stopwatch(SYNC) as watch:
        for rows in batches[3 : 3 + steps]:
            step(rows)
    wall = watch.seconds
    events = prof.key_averages()
    kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    device_us = sum(e.self_device_time_total for e in kernels)
    top = sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:12]
    return {"steps": steps, "wall_ms_per_step": round(wall * 1000 / steps, 3),
            "gpu_busy_ms_per_step": round(device_us / 1000 / steps, 3),
            "gpu_idle_share": round(1 - device_us / 1e6 / wall, 3),
            "kernel_launches_per_step": round(sum(e.count for e in kernels) / steps, 1),
            "top_device_ops": [{"op": e.key[:80], "ms_per_step": round(e.self_device_time_total / 1000 / steps, 3),
                                "calls_per_step": round(e.count / steps, 1)} for e in top],
            "cpu_ops_ms_per_step": round(sum(e.self_cpu_time_total for e in events) / 1000 / steps, 3)}


# ---------------------------------------------------------------- embedding and prediction


def st_model(folder: Path, dtype: torch.dtype, max_length: int) -> Any:
    """sentence-transformers on the same encoder, [CLS] pooling (bertkit embed's default), weights in `dtype`."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoConfig

    word = models.Transformer(str(folder), max_seq_length=max_length)
    width = AutoConfig.from_pretrained(str(folder)).hidden_size
    model = SentenceTransformer(modules=[word, models.Pooling(width, "cls")],
                                device="cuda" if torch.cuda.is_available() else "cpu")
    return model.to(dtype)


def st_best(folder: Path, texts: list[str], max_length: int, batches: tuple[int, ...],
            no_cudnn_batches: tuple[int, ...] = ()) -> dict[str, Any]:
    """sentence-transformers' encode at each precision and batch size (model loaded and warmed up first); at
    `no_cudnn_batches` also with cuDNN taken out of SDPA's kernels."""
    runs = {}
    for name in PRECISIONS:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]
        model = st_model(folder, dtype, max_length)
        model.encode(texts[:2048], batch_size=256, show_progress_bar=False)
        for batch, cudnn in [(b, True) for b in batches] + [(b, False) for b in no_cudnn_batches]:
            with attention_kernels(cudnn), Stopwatch(SYNC) as watch:
                model.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)
            key = f"{name}_batch{batch}" + ("" if cudnn else "_no_cudnn")
            runs[key] = {"seconds": round(watch.seconds, 3), "rows_per_second": round(len(texts) / watch.seconds, 1)}
        del model
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    best = max(runs, key=lambda k: runs[k]["rows_per_second"])
    return {"runs": runs, "best": best, "best_rows_per_second": runs[best]["rows_per_second"]}


def bertkit_embed(folder: Path, data: Path, out: Path, precision: str, max_length: int) -> dict[str, Any]:
    """`bertkit embed` as the CLI runs it (data read, model loaded, store written): its own rows/s (tokenizing,
    encoding, writing the store) and the wall time of the whole call."""
    from bertkit.commands import embed

    shutil.rmtree(out, ignore_errors=True)
    cfg = embed.EmbedConfig(model=str(folder), data=str(data), text_column="0", label_column="1", precision=precision,
                      out=str(out), max_length=max_length)
    with Stopwatch(SYNC) as watch:
        summary = dataclasses.asdict(embed.run(cfg, progress=False))
    wall = watch.seconds
    return {"rows": summary["rows_encoded"], "seconds": summary["seconds"], "rows_per_second": summary["rows_per_s"],
            "wall_seconds_incl_read_and_load": round(wall, 3),
            "rows_per_second_incl_read_and_load": round(summary["rows_encoded"] / wall, 1)}


def bertkit_features(folder: Path, texts: list[str], precision: str, max_length: int) -> tuple[np.ndarray, float]:
    """bertkit's in-memory extraction (`extract_features`, [CLS] of the last layer) with the model loaded, as
    sentence-transformers' encode is timed."""
    from bertkit.data.dataset import TextDataset
    from bertkit.features.extract import extract_features
    from bertkit.models import loading

    device = loading.choose_device(None)
    dtype = loading.choose_dtype(precision, device)
    encoder = loading.cast_for_inference(loading.load_encoder(str(folder)), device, dtype).eval()
    tokenizer = loading.load_tokenizer(str(folder))
    extract_features(encoder, tokenizer, TextDataset(texts=texts[:2048]), batch_size="auto", dtype=dtype,
                     max_length=max_length)
    with Stopwatch(SYNC) as watch:
        features = extract_features(encoder, tokenizer, TextDataset(texts=texts), batch_size="auto", dtype=dtype,
                                    max_length=max_length)
    return features, watch.seconds


def embed_sst2(prep: dict[str, Any], peak: float) -> dict[str, Any]:
    work, folder = prep["work"], prep["bert_encoder"]
    texts, _ = read_tsv(work / "sst2x.tsv")
    result: dict[str, Any] = {"data": f"SST-2 train x{len(texts) // prep['rows_per_copy']} ({len(texts)} rows)",
                              "model": "BERT-base shape, random init (BertConfig())", "pool": "cls, last layer"}
    # batch 64 and 256 were slower than 1024 at both precisions (run1-embed.json, run2-embed.json)
    result["sentence_transformers"] = st_best(folder, texts, 128, (1024,), no_cudnn_batches=(1024,))
    for name in PRECISIONS:
        result[f"bertkit_embed_{name}"] = bertkit_embed(folder, work / "sst2x.tsv", work / f"store-{name}", name, 128)
    features, seconds = bertkit_features(folder, texts, PRECISIONS[0], 128)
    result["bertkit_extract"] = {"precision": PRECISIONS[0], "seconds": round(seconds, 3),
                                 "rows_per_second": round(len(texts) / seconds, 1)}
    st = result["sentence_transformers"]["best_rows_per_second"]
    best = max(PRECISIONS, key=lambda name: result[f"bertkit_embed_{name}"]["rows_per_second"])
    result["bertkit_vs_st_best"] = round(result[f"bertkit_embed_{best}"]["rows_per_second"] / st, 2)
    result["bertkit_incl_read_and_load_vs_st_best"] = round(
        result[f"bertkit_embed_{best}"]["rows_per_second_incl_read_and_load"] / st, 2)
    result["bertkit_extract_vs_st_best"] = round(result["bertkit_extract"]["rows_per_second"] / st, 2)
    lengths = np.tile(prep["sst2_train_lengths_one_copy"], len(texts) // prep["rows_per_copy"])
    result["mfu_extract"] = round(forward_flops(prep["config"], lengths, True) / seconds / (peak * 1e12), 4)
    result["features_vs_fp32"] = features_vs_fp32(folder, texts[:4096], features[:4096])
    return result


def features_vs_fp32(folder: Path, texts: list[str], low: np.ndarray) -> dict[str, Any]:
    """bf16 features against fp32 ones of the same rows (sentence-transformers in fp32 on the GPU: an independent
    implementation of the same function)."""
    reference = st_model(folder, torch.float32, 128).encode(texts, batch_size=256, convert_to_numpy=True,
                                                            show_progress_bar=False)
    cos = (low * reference).sum(1) / (np.linalg.norm(low, axis=1) * np.linalg.norm(reference, axis=1))
    return {"rows": len(texts), "min_cosine": round(float(cos.min()), 5),
            "relative_l2": round(float(np.linalg.norm(low - reference) / np.linalg.norm(reference)), 5)}


def embed_long(prep: dict[str, Any], peak: float, size: dict[str, Any]) -> dict[str, Any]:
    """512-token documents: `bertkit embed` (the command: tokenizing ahead, encoding, writing the store) and the
    in-memory extraction against sentence-transformers at its best (batch 32 was slower than 128 in run1/run2), and
    bertkit's MFU."""
    from bertkit.models import loading

    work, folder = prep["work"], prep["bert_encoder"]
    docs = read_tsv(work / "docs_train.tsv")
    copies = max(1, -(-size["embed_docs"] // len(docs[0])))
    path = work / "docs_embed.tsv"
    path.write_text("".join(f"{t}\t{y}\n" for t, y in zip(docs[0] * copies, docs[1] * copies, strict=True)))
    texts = read_tsv(path)[0]
    lengths = token_lengths_of(texts, loading.load_tokenizer(str(folder)), 512)
    result: dict[str, Any] = {"data": f"{len(texts)} documents, {int(lengths.mean())} tokens on average (max 512)"}
    st_texts = texts[: size["st_docs"]]
    result["sentence_transformers"] = st_best(folder, st_texts, 512, (128,))
    result["sentence_transformers"]["rows"] = len(st_texts)
    st = result["sentence_transformers"]["best_rows_per_second"]
    embedded = bertkit_embed(folder, path, work / "store-docs", PRECISIONS[0], 512)
    result["bertkit_embed"] = embedded
    _, seconds = bertkit_features(folder, texts, PRECISIONS[0], 512)
    result["bertkit_extract"] = {"precision": PRECISIONS[0], "seconds": round(seconds, 3),
                                 "rows_per_second": round(len(texts) / seconds, 1)}
    result["bertkit_vs_st_best"] = round(embedded["rows_per_second"] / st, 2)
    result["bertkit_extract_vs_st_best"] = round(result["bertkit_extract"]["rows_per_second"] / st, 2)
    for name, rate in (("", embedded["rows_per_second"]), ("_extract", result["bertkit_extract"]["rows_per_second"])):
        flops_per_row = forward_flops(prep["config"], lengths, True) / len(texts)
        full_per_row = forward_flops(prep["config"], lengths, False) / len(texts)
        result[f"mfu_long{name}"] = round(flops_per_row * rate / (peak * 1e12), 4)
        result[f"mfu_long{name}_full_model_flops"] = round(full_per_row * rate / (peak * 1e12), 4)
    return result


def token_lengths_of(texts: list[str], tokenizer: Any, max_length: int) -> np.ndarray:
    return np.array([len(x) for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]])


def predict_sst2(prep: dict[str, Any], st_rows_per_second: float | None) -> dict[str, Any]:
    """bertkit's prediction path (`load_for_inference` + `classifier_logits`, bf16) on SST-2 x8 with the
    classifier fine-tuned above, against sentence-transformers' best embedding rate (both one forward per row)."""
    from bertkit.data.dataset import TextDataset
    from bertkit.models import infer

    folder = prep["work"] / "ft-sst2" / "best"
    if not folder.is_dir():
        folder = prep["bert_classifier"]
    texts, _ = read_tsv(prep["work"] / "sst2x.tsv")
    model, tokenizer, _ = infer.load_for_inference(str(folder), infer.inference_compute(str(folder), PRECISIONS[0]))
    infer.classifier_logits(model, tokenizer, TextDataset(texts=texts[:2048]), max_length=128, batch_size=1024,
                            precision=PRECISIONS[0])
    with Stopwatch(SYNC) as watch:
        infer.classifier_logits(model, tokenizer, TextDataset(texts=texts), max_length=128, batch_size=1024,
                                precision=PRECISIONS[0])
    seconds = watch.seconds
    rate = len(texts) / seconds
    return {"rows": len(texts), "seconds": round(seconds, 3), "rows_per_second": round(rate, 1),
            "vs_st_best_embedding": round(rate / st_rows_per_second, 2) if st_rows_per_second else None}


def latency(prep: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Batch-1 latency of DistilBERT vs BERT (base shapes, random init) through `bertkit bench`'s measurement (its
    inference forward: own layers, bf16 weights, CUDA graph per padded width), and through the models' own
    transformers forward (the path before)."""
    from bertkit.measure.contenders import load_contenders
    from bertkit.measure.measure import BenchSettings, measure_latency
    from bertkit.models import loading

    device = loading.choose_device(None)
    dtype = loading.choose_dtype("auto", device)
    contenders = load_contenders([], "distilbert-vs-bert", True)
    for c in contenders:
        c.model.to(device).eval()
    texts = read_tsv(prep["work"] / "dev.tsv")[0][:200]
    budget = Budget(warmup=5, min_iters=50, min_seconds=seconds, rounds=2, sync=sync_for(device))
    result = {}
    for path, settings in (("bertkit", BenchSettings(budget=budget)),):
        measured = measure_latency(contenders, texts, settings, device, dtype)
        result[path] = {label: round(m["model_ms"]["p50"], 3) for label, m in measured.items()}
    own = {}
    with torch.inference_mode(), loading.autocast(device, dtype):
        for c in contenders:
            batch = {k: v.to(device) for k, v in c.tokenizer(texts[0], return_tensors="pt").items()
                     if k in c.input_names}
            for _ in range(5):
                c.model(**batch)
            times = []
            for text in texts[:100]:
                batch = {k: v.to(device) for k, v in c.tokenizer(text, return_tensors="pt").items() if k in c.input_names}
                with Stopwatch(SYNC) as watch:
                    c.model(**batch)
                times.append(watch.seconds)
            own[c.label] = round(1000 * float(np.median(times)), 3)
    result["transformers_forward"] = own
    bert, distil = (next(v for k, v in result["bertkit"].items() if k.startswith(p)) for p in ("bert", "distilbert"))
    result["bert_vs_distilbert_bertkit"] = round(bert / distil, 2)
    own_bert, own_distil = (next(v for k, v in own.items() if k.startswith(p)) for p in ("bert", "distilbert"))
    result["bert_vs_distilbert_transformers_forward"] = round(own_bert / own_distil, 2)
    return result


# ---------------------------------------------------------------- tests and main


def gpu_tests(out: Path, seconds: float) -> dict[str, Any]:
    log = out / "tests.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_gpu.py", "-p", "no:cacheprovider"]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(30, seconds))
        log.write_text(done.stdout + done.stderr)
        return {"exit_code": done.returncode, "summary": (done.stdout.strip().splitlines() or ["?"])[-1]}
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"timed out after {seconds:.0f} s\n{exc.stdout or ''}")
        return {"exit_code": None, "summary": "timed out"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu" / "latest")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="folder with sst2/ and rte/ (gpu.sh passes the carried copy)")
    parser.add_argument("--seconds", type=float, default=450, help="deadline for the sections (tests included)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the script itself")
    parser.add_argument("--only", default="", help="comma list of sections to run (default: all)")
    args = parser.parse_args(argv)
    size = SIZES["quick" if args.quick else "full"]
    only = {s for s in args.only.split(",") if s}
    run = Run(args.out, args.seconds)

    def want(name: str) -> bool:
        return not only or name in only

    with tempfile.TemporaryDirectory(prefix="bertkit-gpu-") as tmp:
        for file in ("finetune", "embed"):
            run.section(file, "environment", device_info)
        peak = (run.section("finetune", "matmul_peak_bf16", lambda: matmul_peak(args.quick)) or {}).get("tflops", 1.0)
        run.files["embed"]["matmul_peak_bf16"] = run.files["finetune"].get("matmul_peak_bf16")
        if want("tests") and torch.cuda.is_available():  # first: the correctness evidence (its own process)
            run.section("finetune", "gpu_tests", lambda: gpu_tests(args.out, min(150.0, run.left() - 200)), need=230)
        run.section("finetune", "prepare", lambda: _described(prepare(args.data, Path(tmp), size)))
        prep = _prep_cache
        if want("finetune_sst2"):
            ft = run.section("finetune", "sst2_x8_batch32", lambda: finetune_pair(
                prep, peak, prep["work"] / "sst2x.tsv", prep["work"] / "dev.tsv", 128,
                np.tile(prep["sst2_train_lengths_one_copy"], size["copies"]), "sst2", trainer_cudnn=False), need=60)
            if ft:
                run.files["finetune"]["bertkit_vs_trainer_best"] = ft["bertkit_vs_trainer_best"]
                run.files["finetune"]["mfu_sst2_b32"] = ft["bertkit"]["mfu"]
        if want("finetune_long"):
            from bertkit.models import loading

            tok = loading.load_tokenizer(str(prep["bert_classifier"]))
            ft = run.section("finetune", "documents_512_batch32", lambda: finetune_pair(
                prep, peak, prep["work"] / "docs_train.tsv", prep["work"] / "docs_dev.tsv", 512,
                token_lengths(prep["work"] / "docs_train.tsv", tok, 512), "docs"), need=40)
            if ft:
                run.files["finetune"]["mfu_long"] = ft["bertkit"]["mfu"]
                run.files["finetune"]["bertkit_vs_trainer_best_long"] = ft["bertkit_vs_trainer_best"]
        if want("lean") and torch.cuda.is_available():
            lean = run.section("finetune", "lean_layers_before_after", lambda: lean_layers_before_after(
                prep, peak, size["variant_steps"]), need=20)
            if lean:
                run.files["finetune"]["mfu_long_steady_step"] = lean["documents_512"]["lean"]["mfu"]
        if want("embed"):
            emb = run.section("embed", "sst2_x8", lambda: embed_sst2(prep, peak), need=40)
            if emb:
                run.files["embed"]["bertkit_vs_st_best"] = emb["bertkit_vs_st_best"]
            long = run.section("embed", "documents_512", lambda: embed_long(prep, peak, size), need=25)
            if long:
                run.files["embed"]["mfu_long"] = long["mfu_long"]
            st = (emb or {}).get("sentence_transformers", {}).get("best_rows_per_second")
            run.section("embed", "predict_sst2_x8", lambda: predict_sst2(prep, st), need=10)
            lat = run.section("embed", "batch1_latency", lambda: latency(prep, size["latency_seconds"]), need=15)
            if lat:
                run.files["embed"]["bert_vs_distilbert_batch1"] = lat["bert_vs_distilbert_bertkit"]
        if want("minilm"):
            mini = run.section("finetune", "minilm_sst2", lambda: minilm_sst2(prep, args.data, size["minilm_rows"]),
                               need=30)
            if mini:
                run.files["finetune"]["dev_accuracy_minilm_sst2"] = {k: mini[k]["dev_accuracy"] for k in ("graphs", "eager")}
        if want("profile") and torch.cuda.is_available():
            run.section("finetune", "profile_step_bert_base_b32", lambda: profile_steps(prep, size["profile_steps"]),
                        need=15)
        run.files["finetune"]["recompiles"] = {"count": 0, "why": "no torch.compile: steps replay CUDA graphs "
                                               "captured once per padded length bucket"}
    run.files["finetune"]["total_seconds"] = round(run.watch.stop(), 1)
    run.write()
    print(json.dumps({k: v for k, v in run.files["finetune"].items() if k in (
        "bertkit_vs_trainer_best", "mfu_sst2_b32", "mfu_long", "dev_accuracy_minilm_sst2", "gpu_tests", "errors")},
        indent=1, default=str)[:4000])
    print(json.dumps({k: v for k, v in run.files["embed"].items() if k in (
        "bertkit_vs_st_best", "mfu_long", "bert_vs_distilbert_batch1", "errors")}, indent=1, default=str)[:3000])
    return 0


_prep_cache: dict[str, Any] = {}


def _described(prep: dict[str, Any]) -> dict[str, Any]:
    """Keep the prepared data for the sections; record a JSON-able description."""
    _prep_cache.update(prep)
    return {k: (str(v) if isinstance(v, Path) else f"{len(v)} lengths" if isinstance(v, np.ndarray) else v)
            for k, v in prep.items() if k != "config"}


if __name__ == "__main__":
    sys.exit(main())
