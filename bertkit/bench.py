"""`bertkit bench`: speed, size, memory and (optionally) quality of encoders, measured side by side.

The DistilBERT paper says: 40% fewer parameters, 60% faster, 97% of BERT's GLUE score. This module measures
those numbers on the user's machine and data: parameter count, safetensors size (fp32/fp16), load time,
batch-1 latency over real sentences (tokenization timed apart from the model), throughput per batch size
(length-sorted dynamic padding vs static padding to --max-length), peak memory, a training step, and a
"claims" section next to the paper's figures.

Measurement discipline: each measurement has warm-up iterations, then at least `min_iters` iterations AND
`min_seconds` of timed work; models are interleaved (A B A B ...) so machine drift hits both; each timed
region holds exactly the counted work (inputs are tokenized/padded/moved before the clock starts, and GPU
work is synchronised before the clock stops). The clock is injected so tests can prove that.
"""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import data, modeling, runs
from bertkit.errors import UserError

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# The paper (Sanh et al. 2019, "DistilBERT, a distilled version of BERT"): "40% smaller, 60% faster, retains 97%
# of its language understanding". Table 3: 66M vs 110M parameters; inference time of one full pass over the
# STS-B dev set on CPU, batch size 1: 410 s (DistilBERT) vs 668 s (BERT-base). 668 / 410 = 1.63x.
PAPER = {
    "parameter_reduction_pct": 40.0,
    "speedup_x": round(668 / 410, 2),
    "inference_seconds": {"distilbert": 410.0, "bert": 668.0},
    "quality_retained_pct": 97.0,
    "source": "Sanh et al. 2019, arXiv:1910.01108, Table 3 (CPU, batch size 1, full pass over STS-B dev)",
}
SPEEDUP_NOTE = (
    "Paper's '60% faster' = BERT time / DistilBERT time = 668 s / 410 s = 1.63x (DistilBERT needs 61% of BERT's "
    "time). Speed-ups here are the same ratio: baseline time / candidate time (or candidate rows/s / baseline rows/s)."
)
RANDOM_INIT_NOTE = (
    "Random-init models: exact architecture shapes with fresh random weights. Speed, size and memory are those of "
    "the real checkpoints; quality is meaningless and is skipped unless --quality is given."
)
PRESETS: dict[str, tuple[tuple[str, str], ...]] = {
    # label -> transformers config class; both use the bert-base-uncased vocabulary (30522 tokens).
    "distilbert-vs-bert": (("distilbert-base-uncased", "DistilBertConfig"), ("bert-base-uncased", "BertConfig")),
}
PRESET_TOKENIZER = modeling.OFFLINE_NAME  # the packaged MiniLM folder ships the bert-base-uncased vocab
QUALITY_KINDS = ("probe", "finetune")


# ---------------------------------------------------------------- models under test


@dataclass
class Contender:
    """One model under test, with its tokenizer and how it was obtained."""

    label: str
    source: str
    random_init: bool
    model: Any
    tokenizer: Any
    build_seconds: float
    """Time to build (random init) or load (pretrained) the model the first time."""

    @property
    def input_names(self) -> frozenset[str]:
        """Arguments the model's forward accepts (DistilBERT takes no token_type_ids)."""
        return frozenset(inspect.signature(self.model.forward).parameters)


def preset_configs(name: str) -> list[tuple[str, Any]]:
    """(label, config) pairs of a preset: default transformers configs, i.e. the exact published shapes."""
    import transformers

    if name not in PRESETS:
        raise UserError(f"Unknown --preset {name!r}; known presets: {', '.join(PRESETS)}. Or pass --models.")
    return [(label, getattr(transformers, cls)()) for label, cls in PRESETS[name]]


def load_contenders(
    models: Sequence[str], preset: str | None, random_init: bool, trust_remote_code: bool = False,
    clock: Clock = time.perf_counter,
) -> list[Contender]:
    """Build the preset's models (random init, offline) or load each of `models` (hub id or folder)."""
    found: list[Contender] = []
    if preset:
        tokenizer = modeling.load_tokenizer(PRESET_TOKENIZER)
        for label, config in preset_configs(preset):
            start = clock()
            model = modeling.build_encoder(config)
            found.append(Contender(f"{label} (random init)", f"{type(config).__name__}()", True, model, tokenizer,
                                   clock() - start))
        return found
    for name in models:
        try:
            tokenizer = modeling.load_tokenizer(name, trust_remote_code)
            start = clock()
            model = modeling.load_encoder(name, trust_remote_code, random_init=random_init)
        except UserError as exc:
            raise UserError(f"{exc} Offline, `--preset distilbert-vs-bert` compares the exact BERT/DistilBERT "
                            "shapes with random weights (speed, size, memory).") from None
        label = f"{name} (random init)" if random_init else name
        found.append(Contender(label, name, random_init, model, tokenizer, clock() - start))
    return found


# ---------------------------------------------------------------- timing core


def _no_sync() -> None:
    return None


@dataclass(frozen=True)
class Budget:
    """How long to measure: warm-up iterations, then at least `min_iters` AND `min_seconds` of timed work."""

    warmup: int = 1
    min_iters: int = 3
    min_seconds: float = 2.0
    rounds: int = 2
    """Each measurement is split into this many chunks, interleaved across models (A B A B ...)."""
    clock: Clock = time.perf_counter
    sync: Callable[[], None] = _no_sync
    """Waits for queued device work (torch.cuda.synchronize on GPU) so the clock sees finished work."""


Step = Callable[[], tuple[float, ...]]
"""One iteration: returns (timed seconds, *counters); it reads the clock itself around exactly the counted work."""


def repeat(step: Step, warmup: int, min_iters: int, min_seconds: float) -> list[tuple[float, ...]]:
    """Run `warmup` untimed iterations, then iterate until both `min_iters` and `min_seconds` are reached.

    `min_seconds` counts timed seconds (what the samples hold), not wall time around them.
    """
    for _ in range(warmup):
        step()
    samples: list[tuple[float, ...]] = []
    spent = 0.0
    while len(samples) < min_iters or spent < min_seconds:
        sample = step()
        samples.append(sample)
        spent += sample[0]
    return samples


def interleaved(
    labels: Sequence[str], steps: dict[str, Step], budget: Budget, device: Any = None
) -> tuple[dict[str, list[tuple[float, ...]]], dict[str, dict[str, float]]]:
    """Samples per model: all warm up first, then `rounds` chunks in A B A B order; peak memory per model."""
    for label in labels:
        repeat(steps[label], budget.warmup, 0, 0.0)
    per_iters = max(1, math.ceil(budget.min_iters / budget.rounds))
    per_seconds = budget.min_seconds / budget.rounds
    samples: dict[str, list[tuple[float, ...]]] = {label: [] for label in labels}
    memory: dict[str, dict[str, float]] = {}
    for _ in range(budget.rounds):
        for label in labels:
            with peak_memory(device) as meter:
                samples[label].extend(repeat(steps[label], 0, per_iters, per_seconds))
            memory[label] = _max_memory(memory.get(label), meter)
    return samples, memory


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """mean/p50/p90/p99/min/max in milliseconds, and n."""
    values = np.asarray(seconds, dtype=np.float64) * 1000.0
    if values.size == 0:
        return {"n": 0}
    pct = np.percentile(values, [50, 90, 99])
    return {"n": int(values.size), "mean": float(values.mean()), "p50": float(pct[0]), "p90": float(pct[1]),
            "p99": float(pct[2]), "min": float(values.min()), "max": float(values.max())}


# ---------------------------------------------------------------- memory


def _proc_status_mb(field_name: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024 / 1e6  # kB in /proc are KiB; MB = 1e6 bytes
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) for this process; False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class MemoryMeter:
    kind: str = "none"
    base_mb: float = 0.0
    peak_mb: float = 0.0
    reserved_mb: float | None = None

    def as_dict(self) -> dict[str, float]:
        out = {"peak_mb": self.peak_mb, "delta_mb": max(0.0, self.peak_mb - self.base_mb)}
        if self.reserved_mb is not None:
            out["reserved_mb"] = self.reserved_mb
        return out


@contextmanager
def peak_memory(device: Any = None) -> Iterator[MemoryMeter]:
    """Peak memory of the block in MB (1e6 bytes): CUDA allocated/reserved on GPU, process RSS (VmHWM, reset first)
    on CPU.

    `delta_mb` is the peak above what was in use when the block started (activations, gradients, optimizer).
    """
    import torch

    meter = MemoryMeter()
    cuda = device is not None and getattr(device, "type", str(device)) == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        meter.kind, meter.base_mb = "cuda_allocated", torch.cuda.memory_allocated() / 1e6
    elif _reset_peak_rss():
        meter.kind, meter.base_mb = "rss", _proc_status_mb("VmRSS") or 0.0
    else:
        meter.kind, meter.base_mb = "rss_process_peak", _proc_status_mb("VmRSS") or 0.0
    yield meter
    if cuda:
        torch.cuda.synchronize()
        meter.peak_mb = torch.cuda.max_memory_allocated() / 1e6
        meter.reserved_mb = torch.cuda.max_memory_reserved() / 1e6
    else:
        meter.peak_mb = _proc_status_mb("VmHWM") or 0.0


def _max_memory(previous: dict[str, float] | None, meter: MemoryMeter) -> dict[str, float]:
    current = meter.as_dict()
    if previous is None:
        return current
    return {k: max(previous.get(k, 0.0), v) for k, v in current.items()}


# ---------------------------------------------------------------- steps (each times exactly its counted work)


def model_inputs(batch: dict[str, Any], accepted: frozenset[str], device: Any = None) -> dict[str, Any]:
    """The batch tensors the model accepts, on `device`."""
    return {k: (v.to(device) if device is not None else v) for k, v in batch.items() if k in accepted}


def latency_step(c: Contender, texts: Sequence[str], max_length: int, device: Any, budget: Budget) -> Step:
    """Batch 1 over real sentences in turn: returns (model seconds, tokenization seconds)."""
    position = itertools.count()
    accepted, clock, sync = c.input_names, budget.clock, budget.sync

    def step() -> tuple[float, ...]:
        text = texts[next(position) % len(texts)]
        t0 = clock()
        encoded = c.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        t1 = clock()
        inputs = model_inputs(dict(encoded), accepted, device)
        sync()
        t2 = clock()
        c.model(**inputs)
        sync()
        t3 = clock()
        return t3 - t2, t1 - t0

    return step


@dataclass
class PreparedBatch:
    """A padded batch, ready before the clock starts, with what it counts."""

    inputs: dict[str, Any]
    rows: int
    tokens: int
    """Real (non-padding) tokens."""
    padded_tokens: int
    labels: Any = None


def forward_step(c: Contender, batches: Sequence[PreparedBatch], device: Any, budget: Budget) -> Step:
    """Forward passes over prepared batches in turn: returns (seconds, rows, tokens, padded tokens)."""
    position = itertools.count()
    moved = [model_inputs(b.inputs, c.input_names, device) for b in batches]
    clock, sync = budget.clock, budget.sync

    def step() -> tuple[float, ...]:
        i = next(position) % len(batches)
        sync()
        t0 = clock()
        c.model(**moved[i])
        sync()
        t1 = clock()
        return t1 - t0, batches[i].rows, batches[i].tokens, batches[i].padded_tokens

    return step


def train_step(c: Contender, batches: Sequence[PreparedBatch], device: Any, dtype: Any, budget: Budget) -> Step:
    """Forward + backward + AdamW step of the encoder and a linear head: returns (seconds, rows, tokens)."""
    import torch

    hidden = _hidden_size(c.model)
    head = torch.nn.Linear(hidden, 2).to(device)
    optimizer = torch.optim.AdamW(list(c.model.parameters()) + list(head.parameters()), lr=1e-5)
    moved = [(model_inputs(b.inputs, c.input_names, device), b.labels.to(device)) for b in batches]
    position = itertools.count()
    clock, sync = budget.clock, budget.sync

    def step() -> tuple[float, ...]:
        i = next(position) % len(batches)
        inputs, labels = moved[i]
        sync()
        t0 = clock()
        with modeling.autocast(device, dtype):
            hidden_states = c.model(**inputs).last_hidden_state
            logits = head(hidden_states[:, 0])
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        t1 = clock()
        return t1 - t0, batches[i].rows, batches[i].tokens

    return step


def _hidden_size(model: Any) -> int:
    config = model.config
    return int(getattr(config, "hidden_size", None) or config.dim)


def prepare_batches(
    encoded: data.Encoded, batch_size: int, pad_id: int, pad_to: int | None, seed: int, with_labels: bool = False
) -> list[PreparedBatch]:
    """Length-sorted batches of every row (dynamic padding, or static to `pad_to`), in a seeded shuffled order.

    Sorting keeps padding low; shuffling the batch order makes any prefix of the list a fair sample of lengths.
    """
    import torch

    groups = data.sorted_batches(encoded.lengths, batch_size)
    order = np.random.default_rng(seed).permutation(len(groups))
    prepared = []
    for g in order:
        idx = groups[g]
        inputs = data.pad_batch(encoded, idx, pad_id, pad_to)
        width = int(inputs["input_ids"].shape[1])
        labels = torch.arange(len(idx)) % 2 if with_labels else None  # labels do not change step time
        prepared.append(PreparedBatch(inputs, len(idx), int(encoded.lengths[idx].sum()), width * len(idx), labels))
    return prepared


# ---------------------------------------------------------------- phases


@dataclass
class BenchSettings:
    """What `run_bench` needs besides the models and texts (cli.py builds it from BenchConfig)."""

    batch_sizes: tuple[int, ...] = (1, 8, 32)
    max_length: int = 128
    train_batch_size: int = 32
    protocol: str = "standard"
    seed: int = 42
    budget: Budget = field(default_factory=Budget)


def measure_sizes(contenders: Sequence[Contender], workdir: Path, budget: Budget) -> dict[str, dict[str, Any]]:
    """Parameter count, safetensors size (fp32, fp16) and load time from a local safetensors folder.

    Load time is timed from the saved fp32 folder (page cache warm after the save), once per round, interleaved.
    """
    results: dict[str, dict[str, Any]] = {}
    folders = {}
    for i, c in enumerate(contenders):
        folder = workdir / f"model-{i}"
        fp32_bytes = save_safetensors(c, folder, "fp32")
        fp16_bytes = save_safetensors(c, workdir / f"model-{i}-fp16", "fp16")
        folders[c.label] = folder
        results[c.label] = {
            "parameters": modeling.parameter_count(c.model),
            "size_mb_fp32": fp32_bytes / 1e6,
            "size_mb_fp16": fp16_bytes / 1e6,
            "build_seconds": c.build_seconds,
            "folder": str(folder),
        }
    loads: dict[str, list[float]] = {c.label: [] for c in contenders}
    for _ in range(max(1, budget.rounds)):
        for c in contenders:
            start = budget.clock()
            loaded = modeling.load_encoder(str(folders[c.label]))
            loads[c.label].append(budget.clock() - start)
            del loaded
    for label, seconds in loads.items():
        results[label]["load_seconds"] = float(np.median(seconds))
        results[label]["load_seconds_all"] = seconds
    return results


def save_safetensors(c: Contender, folder: Path, precision: str) -> int:
    """Save the model (and tokenizer) as safetensors in `precision`; returns the bytes of the weight files."""
    import torch
    from transformers.utils import logging as hf_logging

    folder.mkdir(parents=True, exist_ok=True)
    if precision == "fp32":
        hf_logging.disable_progress_bar()  # loading re-enables transformers' bars; a temp save needs none
        c.model.save_pretrained(folder, safe_serialization=True)
        c.tokenizer.save_pretrained(folder)
    else:
        from safetensors.torch import save_file

        state = {k: v.detach().to(torch.float16).contiguous().cpu() for k, v in c.model.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def measure_latency(
    contenders: Sequence[Contender], texts: Sequence[str], s: BenchSettings, device: Any, dtype: Any
) -> dict[str, dict[str, Any]]:
    """Batch-1 latency over real sentences: model time and tokenization time, summarized separately."""
    import torch

    budget = s.budget
    steps = {c.label: latency_step(c, texts, s.max_length, device, budget) for c in contenders}
    with torch.inference_mode(), modeling.autocast(device, dtype):
        samples, memory = interleaved([c.label for c in contenders], steps, budget, device)
    out = {}
    for label, rows in samples.items():
        model_s = [r[0] for r in rows]
        tok_s = [r[1] for r in rows]
        out[label] = {"model_ms": summarize(model_s), "tokenize_ms": summarize(tok_s),
                      "end_to_end_ms": summarize([a + b for a, b in rows]), "memory": memory[label]}
    return out


def measure_throughput(
    contenders: Sequence[Contender], encoded: data.Encoded, pad_id: int, s: BenchSettings, device: Any, dtype: Any
) -> dict[str, list[dict[str, Any]]]:
    """Rows/s and tokens/s per batch size, dynamic (length-sorted) vs static padding to --max-length."""
    import torch

    out: dict[str, list[dict[str, Any]]] = {c.label: [] for c in contenders}
    for batch_size in s.batch_sizes:
        for padding, pad_to in (("dynamic", None), ("static", s.max_length)):
            batches = prepare_batches(encoded, batch_size, pad_id, pad_to, s.seed)
            log.info("throughput: batch size %d, %s padding", batch_size, padding)
            steps = {c.label: forward_step(c, batches, device, s.budget) for c in contenders}
            with torch.inference_mode(), modeling.autocast(device, dtype):
                samples, memory = interleaved([c.label for c in contenders], steps, s.budget, device)
            for label, rows in samples.items():
                out[label].append(_throughput_record(batch_size, padding, rows, memory[label]))
    return out


def _throughput_record(batch_size: int, padding: str, rows: list[tuple[float, ...]], memory: dict) -> dict[str, Any]:
    seconds = sum(r[0] for r in rows)
    n_rows, tokens, padded = (int(sum(r[k] for r in rows)) for k in (1, 2, 3))
    return {"batch_size": batch_size, "padding": padding, "iterations": len(rows), "seconds": seconds,
            "rows": n_rows, "rows_per_s": n_rows / seconds if seconds else 0.0,
            "tokens_per_s": tokens / seconds if seconds else 0.0,
            "padded_tokens_per_s": padded / seconds if seconds else 0.0,
            "padding_share": 1.0 - tokens / padded if padded else 0.0,
            "batch_ms": summarize([r[0] for r in rows]), "memory": memory}


def measure_train_step(
    contenders: Sequence[Contender], encoded: data.Encoded, pad_id: int, s: BenchSettings, device: Any, dtype: Any
) -> dict[str, dict[str, Any]]:
    """Seconds per training step (forward+backward+AdamW) at --train-batch-size, dynamic padding."""
    batches = prepare_batches(encoded, s.train_batch_size, pad_id, None, s.seed, with_labels=True)
    for c in contenders:
        c.model.train()
    try:
        steps = {c.label: train_step(c, batches, device, dtype, s.budget) for c in contenders}
        samples, memory = interleaved([c.label for c in contenders], steps, s.budget, device)
    finally:
        for c in contenders:
            c.model.eval()
            c.model.zero_grad(set_to_none=True)
        steps = {}
    out = {}
    for c in contenders:
        rows = samples[c.label]
        seconds = sum(r[0] for r in rows)
        weight_mb = sum(p.numel() * p.element_size() for p in c.model.parameters() if p.requires_grad) / 1e6
        out[c.label] = {"batch_size": s.train_batch_size, "step_ms": summarize([r[0] for r in rows]),
                        "rows_per_s": sum(r[1] for r in rows) / seconds if seconds else 0.0,
                        "memory": memory[c.label],
                        # AdamW's two moments are allocated in the warm-up step, so they are not in the peak
                        # above (gradients are: they are freed after every step and allocated again)
                        "gradients_mb": weight_mb, "adamw_state_mb": 2 * weight_mb}
    return out


def measure_paper_protocol(
    contenders: Sequence[Contender], texts: Sequence[str], s: BenchSettings, device: Any, dtype: Any
) -> dict[str, dict[str, Any]]:
    """One full pass over `texts` at batch size 1 per model (interleaved in `rounds` chunks): total seconds."""
    import torch

    budget = s.budget
    chunks = np.array_split(np.arange(len(texts)), max(1, budget.rounds))
    totals = {c.label: {"model_seconds": 0.0, "tokenize_seconds": 0.0, "rows": 0} for c in contenders}
    with torch.inference_mode(), modeling.autocast(device, dtype):
        for c in contenders:  # warm-up on the first sentences (not counted)
            step = latency_step(c, texts, s.max_length, device, budget)
            for _ in range(budget.warmup):
                step()
        for r, chunk in enumerate(chunks):
            part = [texts[i] for i in chunk]
            for c in contenders:
                log.info("paper protocol: %s, part %d/%d (%d sentences)", c.label, r + 1, len(chunks), len(part))
                step = latency_step(c, part, s.max_length, device, budget)
                for _ in part:
                    model_s, tok_s = step()
                    totals[c.label]["model_seconds"] += model_s
                    totals[c.label]["tokenize_seconds"] += tok_s
                    totals[c.label]["rows"] += 1
    for record in totals.values():
        record["total_seconds"] = record["model_seconds"] + record["tokenize_seconds"]
    return totals


# ---------------------------------------------------------------- quality (through the CLI, same settings)


def quality_command(kind: str, model: str, data_args: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`python -m bertkit probe|finetune --model M <data args> <extra> --json --quiet`."""
    return [sys.executable, "-m", "bertkit", kind, "--model", model, *data_args, *extra, "--json", "--quiet"]


def command_available(kind: str, runner: Callable[..., Any] = subprocess.run) -> bool:
    """Whether this install has `bertkit <kind>` (quality columns degrade gracefully when not)."""
    done = runner([sys.executable, "-m", "bertkit", kind, "--help"], capture_output=True, text=True, check=False)
    return done.returncode == 0


def find_score(result: Any) -> tuple[str, float] | None:
    """The headline dev score in a command's JSON: (path, value), preferring dev accuracy."""
    found: list[tuple[str, float]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and path.split(".")[-1] == "accuracy":
            found.append((path, float(node)))

    walk(result, "")
    if not found:
        return None

    def rank(item: tuple[str, float]) -> tuple[bool, bool, bool, bool]:
        path = item[0].lower()
        return ("test" in path, "train" in path, "best" not in path, "dev" not in path)

    return sorted(found, key=rank)[0]


def measure_quality(
    kind: str, models: dict[str, str], data_args: Sequence[str], extra: Sequence[str],
    runner: Callable[..., Any] = subprocess.run, out_dir: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Run `bertkit <kind> --json` for each model with identical data args; the score each reports.

    With `out_dir`, model i's run directory is `out_dir/<kind>-<i>` (fine-tuning needs one; a re-run resumes).
    """
    if not command_available(kind, runner):
        message = f"`bertkit {kind}` is not available in this install; quality column '{kind}' skipped."
        return {label: {"status": "unavailable", "message": message} for label in models}
    out = {}
    for i, (label, source) in enumerate(models.items()):
        run_args = ["--out", str(out_dir / f"{kind}-{i}")] if out_dir is not None else []
        command = quality_command(kind, source, data_args, [*run_args, *extra])
        log.info("quality (%s): %s", kind, shlex.join(command[1:]))
        done = runner(command, capture_output=True, text=True, check=False, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        record: dict[str, Any] = {"command": shlex.join(["bertkit", *command[3:]])}
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-3:]
            out[label] = {**record, "status": "failed", "message": " ".join(tail)[:500]}
            continue
        try:
            parsed = json.loads(done.stdout)
        except json.JSONDecodeError:
            out[label] = {**record, "status": "failed", "message": "output was not JSON"}
            continue
        score = find_score(parsed)
        if score is None:
            out[label] = {**record, "status": "failed", "message": "no accuracy in the JSON output"}
        else:
            out[label] = {**record, "status": "ok", "metric": score[0], "score": score[1]}
    return out


# ---------------------------------------------------------------- claims


def compute_claims(models: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Candidate (fewest parameters) vs baseline (most): reduction %, speed-ups x, quality retained %.

    Each measured value sits next to the paper's figure. Missing measurements give None, never a guess.
    """
    if len(models) < 2:
        return {"note": "claims need two models (a candidate and a baseline)"}
    ordered = sorted(models, key=lambda m: m["parameters"])
    candidate, baseline = ordered[0], ordered[-1]
    claims: dict[str, Any] = {"candidate": candidate["label"], "baseline": baseline["label"],
                              "interpretation": SPEEDUP_NOTE}
    claims["parameter_reduction_pct"] = _claim(
        100.0 * (1.0 - candidate["parameters"] / baseline["parameters"]), PAPER["parameter_reduction_pct"])
    claims["speedup_batch1_x"] = _claim(_ratio(_get(baseline, "latency", "model_ms", "mean"),
                                               _get(candidate, "latency", "model_ms", "mean")), PAPER["speedup_x"])
    claims["speedup_batch1_end_to_end_x"] = _claim(
        _ratio(_get(baseline, "latency", "end_to_end_ms", "mean"), _get(candidate, "latency", "end_to_end_ms", "mean")),
        PAPER["speedup_x"])
    claims["speedup_best_batch_x"] = _best_batch_claim(candidate, baseline)
    paper_c, paper_b = _get(candidate, "paper_protocol", "total_seconds"), _get(baseline, "paper_protocol", "total_seconds")
    claims["speedup_paper_protocol_x"] = _claim(_ratio(paper_b, paper_c), PAPER["speedup_x"])
    if paper_c is not None:
        claims["speedup_paper_protocol_x"].update(candidate_seconds=paper_c, baseline_seconds=paper_b,
                                                  paper_seconds=PAPER["inference_seconds"])
    claims["quality_retained_pct"] = _quality_claims(candidate, baseline)
    return claims


def _claim(measured: float | None, paper: float) -> dict[str, Any]:
    return {"measured": measured, "paper": paper}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _get(record: dict[str, Any], *keys: str) -> Any:
    node: Any = record
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def best_throughput(model: dict[str, Any]) -> dict[str, Any] | None:
    """The throughput record with the most rows/s (any batch size and padding)."""
    records = model.get("throughput") or []
    return max(records, key=lambda r: r["rows_per_s"]) if records else None


def _best_batch_claim(candidate: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    best_c, best_b = best_throughput(candidate), best_throughput(baseline)
    if best_c is None or best_b is None:
        return _claim(None, PAPER["speedup_x"])
    claim = _claim(_ratio(best_c["rows_per_s"], best_b["rows_per_s"]), PAPER["speedup_x"])
    claim.update(candidate_at=f"batch {best_c['batch_size']}, {best_c['padding']}",
                 baseline_at=f"batch {best_b['batch_size']}, {best_b['padding']}")
    same = {(r["batch_size"], r["padding"]): r["rows_per_s"] for r in baseline.get("throughput", [])}
    claim["per_batch_size"] = {
        f"{r['batch_size']}/{r['padding']}": _ratio(r["rows_per_s"], same.get((r["batch_size"], r["padding"])))
        for r in candidate.get("throughput", [])
    }
    return claim


def _quality_claims(candidate: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    claims: dict[str, Any] = {}
    for kind in QUALITY_KINDS:
        c, b = _get(candidate, "quality", kind, "score"), _get(baseline, "quality", kind, "score")
        claims[kind] = _claim(None if c is None or not b else 100.0 * c / b, PAPER["quality_retained_pct"])
    return claims


# ---------------------------------------------------------------- the whole run


def token_stats(encoded: data.Encoded) -> dict[str, Any]:
    lengths = encoded.lengths
    return {"rows": int(len(lengths)), "mean_tokens": float(lengths.mean()), "p50_tokens": float(np.median(lengths)),
            "max_tokens": int(lengths.max()), "truncated": encoded.n_truncated}


def run_bench(
    contenders: Sequence[Contender], texts: Sequence[str], settings: BenchSettings, device: Any, dtype: Any,
    workdir: Path | None = None, keep_folders: bool = False,
) -> dict[str, Any]:
    """Every measurement for every model; returns the report (no files written except temp model folders).

    With `keep_folders`, each model record keeps `folder` (its saved safetensors copy inside `workdir`).
    """
    if not texts:
        raise UserError("No sentences to benchmark on: --data has no rows. Pass --data with a text file.")
    for c in contenders:  # before any measurement: an over-long --max-length would crash mid-run
        modeling.check_max_length(settings.max_length, c.tokenizer, c.model.config, c.source)
    for c in contenders:
        c.model.to(device)
    tokenizer = contenders[0].tokenizer
    encoded = data.encode_dataset(tokenizer, data.TextDataset(list(texts)), settings.max_length)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    report: dict[str, Any] = {"protocol": settings.protocol, "data": token_stats(encoded), "notes": [],
                              "loadavg_start": list(os.getloadavg())}
    records = {c.label: {"label": c.label, "source": c.source, "random_init": c.random_init,
                         "model_type": getattr(c.model.config, "model_type", "?")} for c in contenders}
    with _workdir(workdir) as folder:
        log.info("size on disk and load time")
        for label, sizes in measure_sizes(contenders, folder, settings.budget).items():
            records[label].update(sizes)
        if settings.protocol == "paper":
            log.info("paper protocol: batch size 1, one full pass over %d sentences per model", len(texts))
            for label, result in measure_paper_protocol(contenders, texts, settings, device, dtype).items():
                records[label]["paper_protocol"] = result
        else:
            _measure_standard(contenders, texts, encoded, pad_id, settings, device, dtype, records)
        report["models"] = list(records.values())
    for record in report["models"]:
        if not keep_folders:
            record.pop("folder", None)
    report["claims"] = compute_claims(report["models"])
    return report


def _measure_standard(contenders, texts, encoded, pad_id, settings, device, dtype, records) -> None:
    log.info("batch-1 latency over %d sentences", len(texts))
    for label, result in measure_latency(contenders, texts, settings, device, dtype).items():
        records[label]["latency"] = result
    for label, result in measure_throughput(contenders, encoded, pad_id, settings, device, dtype).items():
        records[label]["throughput"] = result
    if settings.train_batch_size > 0:
        log.info("training step at batch size %d", settings.train_batch_size)
        for label, result in measure_train_step(contenders, encoded, pad_id, settings, device, dtype).items():
            records[label]["train_step"] = result


@contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="bertkit-bench-") as tmp:
        yield Path(tmp)


def environment(device: Any, dtype: Any) -> dict[str, Any]:
    """Machine, versions, device, dtype, threads and load: the context every timing needs."""
    import torch

    return {"machine": runs.machine_info(), "versions": runs.package_versions(), "device": str(device),
            "dtype": modeling.dtype_name(dtype), "torch_threads": torch.get_num_threads(),
            "cpu_native_bf16": modeling.cpu_supports_bf16(), "loadavg": list(os.getloadavg())}


# ---------------------------------------------------------------- report tables


def summary_rows(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The headline table (one row per model) shared by the terminal and bench.md."""
    columns = ["model", "params (M)", "fp32 MB", "fp16 MB", "load s"]
    paper = report.get("protocol") == "paper"
    if paper:
        columns += ["pass model s", "pass tokenize s", "pass total s"]
    else:
        columns += ["b1 model ms", "b1 p90 ms", "b1 tokenize ms", "best rows/s", "train step s", "peak +MB"]
    columns += [f"{k} score" for k in QUALITY_KINDS if any(_get(m, "quality", k) for m in report["models"])]
    rows = []
    for m in report["models"]:
        row: list[Any] = [m["label"], m["parameters"] / 1e6, m["size_mb_fp32"], m["size_mb_fp16"], m["load_seconds"]]
        if paper:
            p = m.get("paper_protocol", {})
            row += [p.get("model_seconds"), p.get("tokenize_seconds"), p.get("total_seconds")]
        else:
            best = best_throughput(m)
            row += [_get(m, "latency", "model_ms", "mean"), _get(m, "latency", "model_ms", "p90"),
                    _get(m, "latency", "tokenize_ms", "mean"),
                    None if best is None else f"{best['rows_per_s']:.1f} (b{best['batch_size']} {best['padding']})",
                    _seconds(_get(m, "train_step", "step_ms", "mean")), peak_memory_mb(m)]
        for kind in columns[len(row):]:
            q = _get(m, "quality", kind.split()[0]) or {}
            row.append(q.get("score") if q.get("status") == "ok" else q.get("status"))
        rows.append(row)
    return columns, rows


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def peak_memory_mb(model: dict[str, Any]) -> float | None:
    """The largest peak-above-start (activations, gradients, optimizer state) over all measurements."""
    peaks = [_get(model, "latency", "memory", "delta_mb"), _get(model, "train_step", "memory", "delta_mb")]
    peaks += [_get(r, "memory", "delta_mb") for r in model.get("throughput", [])]
    values = [p for p in peaks if p is not None]
    return max(values) if values else None


def throughput_rows(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    columns = ["model", "batch", "padding", "rows/s", "tokens/s", "padding share", "batch p50 ms", "iters"]
    rows = [[m["label"], r["batch_size"], r["padding"], r["rows_per_s"], r["tokens_per_s"],
             f"{r['padding_share']:.0%}", r["batch_ms"].get("p50"), r["iterations"]]
            for m in report["models"] for r in m.get("throughput", [])]
    return columns, rows


def memory_rows(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Memory per model: weights, peak growth during inference and training, AdamW state, process peak."""
    kind = next((_get(m, "latency", "memory") or {} for m in report["models"]), {})
    unit = "GPU allocated" if "reserved_mb" in kind else "RSS"
    columns = ["model", "weights MB", f"inference peak +MB ({unit})", f"training peak +MB ({unit})", "AdamW state MB",
               "process peak MB"]
    rows = []
    for m in report["models"]:
        inference = [_get(r, "memory", "delta_mb") for r in m.get("throughput", [])]
        inference.append(_get(m, "latency", "memory", "delta_mb"))
        peaks = [_get(m, "latency", "memory", "peak_mb"), _get(m, "train_step", "memory", "peak_mb")]
        peaks += [_get(r, "memory", "peak_mb") for r in m.get("throughput", [])]
        rows.append([m["label"], m["parameters"] * 4 / 1e6, max([v for v in inference if v is not None], default=None),
                     _get(m, "train_step", "memory", "delta_mb"), _get(m, "train_step", "adamw_state_mb"),
                     max([v for v in peaks if v is not None], default=None)])
    return columns, rows


def claim_lines(claims: dict[str, Any]) -> list[str]:
    """Human sentences for the claims section."""
    if "candidate" not in claims:
        return [claims.get("note", "no claims")]
    lines = [f"candidate: {claims['candidate']}  vs  baseline: {claims['baseline']}"]

    def fmt(value: float | None, unit: str) -> str:
        return "not measured" if value is None else f"{value:.1f}{unit}" if unit == "%" else f"{value:.2f}{unit}"

    p = claims["parameter_reduction_pct"]
    lines.append(f"parameter reduction: {fmt(p['measured'], '%')}  (paper: {p['paper']:.0f}% smaller)")
    for key, what in (("speedup_batch1_x", "speed-up at batch 1, model only"),
                      ("speedup_batch1_end_to_end_x", "speed-up at batch 1, with tokenization"),
                      ("speedup_best_batch_x", "speed-up at each model's best batch size (rows/s)"),
                      ("speedup_paper_protocol_x", "speed-up, paper protocol (full pass, batch 1)")):
        claim = claims.get(key, {})
        if claim.get("measured") is None:
            continue
        where = f" [{claim['candidate_at']} vs {claim['baseline_at']}]" if "candidate_at" in claim else ""
        lines.append(f"{what}: {fmt(claim['measured'], 'x')}{where}  (paper: {claim['paper']:.2f}x = '60% faster')")
    quality = {k: c for k, c in claims.get("quality_retained_pct", {}).items() if c["measured"] is not None}
    for kind, claim in quality.items():
        lines.append(f"quality retained ({kind}): {fmt(claim['measured'], '%')}  "
                     f"(paper: {claim['paper']:.0f}% of BERT's GLUE score)")
    if not quality:
        lines.append(f"quality retained: not measured (paper: {PAPER['quality_retained_pct']:.0f}%); pass --quality "
                     "probe or finetune with labelled --data/--dev and pretrained --models")
    lines.append(claims["interpretation"])
    return lines


def report_markdown(report: dict[str, Any], png_name: str | None = "bench.png") -> str:
    """bench.md: environment, the headline table, throughput details, claims."""
    env = report.get("environment", {})
    machine = env.get("machine", {})
    lines = ["# bertkit bench", ""]
    lines.append(f"- protocol: {report['protocol']}; device: {env.get('device')}; dtype: {env.get('dtype')}; "
                 f"threads: {env.get('torch_threads')}; CPU: {machine.get('cpu')} ({machine.get('cores')} cores); "
                 f"load average: {', '.join(f'{x:.2f}' for x in env.get('loadavg', []))}")
    versions = env.get("versions", {})
    lines.append(f"- torch {versions.get('torch')}, transformers {versions.get('transformers')}")
    if report.get("command"):
        lines.append(f"- command: `{report['command']}`")
    d = report["data"]
    lines.append(f"- data: {report.get('data_source', {}).get('source', '?')} — {d['rows']} rows, mean {d['mean_tokens']:.1f} tokens, "
                 f"max {d['max_tokens']}")
    for note in report.get("notes", []):
        lines.append(f"- {note}")
    lines += ["", _md_table(*summary_rows(report)), ""]
    if any(m.get("throughput") for m in report["models"]):
        lines += ["## Throughput", "", _md_table(*throughput_rows(report)), ""]
        lines += ["## Memory", "", _md_table(*memory_rows(report)), "",
                  "`+MB` = growth of the process's peak memory above its level when the measurement started (both "
                  "models stay loaded, so the process peak includes the other model). AdamW's moments are allocated "
                  "in the warm-up step, so they are listed separately.", ""]
    lines += ["## Claims vs the paper", ""] + [f"- {line}" for line in claim_lines(report["claims"])]
    if png_name:
        lines += ["", f"![benchmark bars]({png_name})"]
    return "\n".join(lines) + "\n"


def _md_table(columns: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] + ["---:"] * (len(columns) - 1)) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


# ---------------------------------------------------------------- entry point used by cli.py


def benchmark_texts(cfg: Any) -> tuple[list[str], dict[str, Any]]:
    """The sentences to time: --dev if given (a file or a split of the hub --data), else --data, else the demo dev."""
    if cfg.dev and (data.is_local_source(cfg.dev) or cfg.data is None or data.is_local_source(cfg.data)):
        dataset = data.load_dataset_split(cfg, cfg.dev, need_labels=False)
    elif cfg.dev:
        dataset = data.load_dataset_split(cfg, cfg.data, split=cfg.dev, need_labels=False)
    elif cfg.data:
        dataset = data.load_dataset_split(cfg, cfg.data, need_labels=False)
    else:
        demo = Path(__file__).resolve().parent / "resources" / "demo" / "dev.tsv"
        dataset = data.load_dataset_split(cfg, str(demo), need_labels=False)
    # Sentence pairs: the first text of each row is timed (the benchmark measures the encoder, not the task).
    return list(dataset.texts), {"source": dataset.source, "fingerprint": dataset.fingerprint}


def quality_data_args(cfg: Any) -> list[str]:
    """The data flags every quality command gets, identical for every model."""
    args: list[str] = []
    for name in ("data", "dev", "test", "data_config", "text_column", "text_pair_column", "label_column", "limit"):
        value = getattr(cfg, name)
        if value is not None:
            args += ["--" + name.replace("_", "-"), str(value)]
    args += ["--encoding", cfg.encoding, "--header", cfg.header, "--seed", str(cfg.seed),
             "--max-length", str(cfg.max_length)]
    return args


def benchmark(cfg: Any, clock: Clock = time.perf_counter,
              quality_dir: Path | Callable[[], Path] | None = None) -> dict[str, Any]:
    """The whole `bertkit bench` run for a BenchConfig: models, texts, measurements, quality, claims.

    `quality_dir` holds the run directories of the quality commands (probe/finetune), one per model; a callable
    is called only when quality is measured, after the models loaded and were timed (it may claim --out).
    """
    import torch

    notes: list[str] = []
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = modeling.choose_device("cpu" if cfg.protocol == "paper" else cfg.device)
    if cfg.protocol == "paper" and cfg.device not in ("auto", "cpu"):
        notes.append(f"--protocol paper runs on the CPU (as the paper did); --device {cfg.device} ignored.")
    dtype = modeling.choose_dtype(cfg.precision, device)
    if device.type == "cpu" and dtype == torch.bfloat16 and not modeling.cpu_supports_bf16():
        notes.append("bf16 on this CPU is emulated (no AVX512-BF16/AMX): expect it to be several times slower "
                     "than fp32. Use --precision fp32 (what auto picks here) for representative numbers.")
    texts, source = benchmark_texts(cfg)
    order = np.random.default_rng(cfg.seed).permutation(len(texts))
    torch.manual_seed(cfg.seed)
    contenders = load_contenders(cfg.model_list, cfg.preset, cfg.random_init, cfg.trust_remote_code, clock)
    if any(c.random_init for c in contenders):
        notes.append(RANDOM_INIT_NOTE)
    if cfg.preset:
        notes.append(f"--preset {cfg.preset}: transformers' default configs (the published base shapes), "
                     f"tokenizer = bert-base-uncased vocabulary from the packaged `{PRESET_TOKENIZER}` folder.")
    settings = BenchSettings(
        batch_sizes=cfg.batch_size_list, max_length=cfg.max_length, train_batch_size=cfg.train_batch_size,
        protocol=cfg.protocol, seed=cfg.seed,
        budget=Budget(cfg.warmup, cfg.min_iters, cfg.min_seconds, cfg.rounds, clock, _sync_for(device)),
    )
    timed_texts = texts if cfg.protocol == "paper" else [texts[i] for i in order]
    with tempfile.TemporaryDirectory(prefix="bertkit-bench-") as tmp:
        report = run_bench(contenders, timed_texts, settings, device, dtype, Path(tmp), keep_folders=True)
        if cfg.quality_kinds and callable(quality_dir):
            quality_dir = quality_dir()
        for kind in cfg.quality_kinds:
            folders = {m["label"]: (m["folder"] if m["random_init"] else m["source"]) for m in report["models"]}
            for label, result in measure_quality(kind, folders, quality_data_args(cfg),
                                                 shlex.split(cfg.quality_args or ""),
                                                 out_dir=quality_dir if isinstance(quality_dir, Path) else None).items():
                record = next(m for m in report["models"] if m["label"] == label)
                record.setdefault("quality", {})[kind] = result
        if cfg.quality_kinds and any(c.random_init for c in contenders):
            notes.append("Quality of random-init models was measured because --quality was given; it is meaningless.")
    for record in report["models"]:
        record.pop("folder", None)
    report["claims"] = compute_claims(report["models"])
    report["notes"] = notes + report["notes"]
    report["data_source"] = source
    report["environment"] = environment(device, dtype)
    return report


def _sync_for(device: Any) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "mps":
        return torch.mps.synchronize
    return _no_sync


def run_command(cfg: Any) -> dict[str, Any]:
    """`bertkit bench`: measure, then write bench.json, bench.md and bench.png into --out (default runs/bench)."""
    from bertkit import plots

    plan = runs.inspect_run_dir(cfg.out or "runs/bench", "bench", overwrite=cfg.overwrite,
                                compare=runs.config_compare(vars(cfg)))  # read-only; claimed once models are measured
    report = benchmark(cfg, quality_dir=lambda: plan.claim().path / "quality")
    run = plan.claim()
    runs.write_run_config(run.path, "bench", vars(cfg), data_fingerprint=report["data_source"]["fingerprint"])
    report["outputs"] = {name: str(run.out / name) for name in ("bench.json", "bench.md", "bench.png")}
    plots.bench_bars(report, run.path / "bench.png")
    runs.write_json_atomic(run.path / "bench.json", report)
    runs.write_text_atomic(run.path / "bench.md", report_markdown(report))
    run.commit()
    return report
