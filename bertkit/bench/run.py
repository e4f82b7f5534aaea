"""`bertkit bench`: speed, size, memory and (optionally) quality of encoders, measured side by side.

The models under test ("contenders": a preset's exact shapes with random weights, or --models) are measured on
the user's machine and data: parameter count, safetensors size (fp32/fp16), load time, batch-1 latency over real
sentences (tokenization timed apart from the model), throughput per batch size (length-sorted dynamic padding vs
static padding to --max-length), peak memory, a training step, or the paper's protocol (one full pass at batch
size 1 on the CPU). How each measurement is timed is `timing.py`'s job; the claims and tables are
`bench_report.py`'s; the quality runs `bench_quality.py`'s. `run_command` is the CLI's one call.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.bench import quality as bench_quality
from bertkit.bench.report import compute_claims, report_markdown
from bertkit.bench.timing import Budget, Clock, Step, interleaved, summarize, sync_for
from bertkit.data import dataset as data
from bertkit.errors import UserError
from bertkit.io import atomic, ownership, rundir, trail
from bertkit.models import infer
from bertkit.models import loading as modeling

log = logging.getLogger(__name__)

RANDOM_INIT_NOTE = (
    "Random-init models: exact architecture shapes with fresh random weights. Speed, size and memory are those of "
    "the real checkpoints; quality is meaningless and is skipped unless --quality is given."
)
PRESETS: dict[str, tuple[tuple[str, str], ...]] = {
    # label -> transformers config class; both use the bert-base-uncased vocabulary (30522 tokens).
    "distilbert-vs-bert": (("distilbert-base-uncased", "DistilBertConfig"), ("bert-base-uncased", "BertConfig")),
}
PRESET_TOKENIZER = modeling.OFFLINE_NAME  # the packaged MiniLM folder ships the bert-base-uncased vocab


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
        """The inputs the model's forward takes (DistilBERT: no token_type_ids), asked the way inference asks."""
        return infer.accepted_inputs(self.model)


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



# ---------------------------------------------------------------- steps (each times exactly its counted work)


def model_inputs(batch: dict[str, Any], accepted: frozenset[str], device: Any = None) -> dict[str, Any]:
    """The batch tensors the model accepts, on `device`.

    `infer.batch_inputs` pads token ids and then selects and moves; here the batch is already padded (one batch
    serves every model) or is the tokenizer's output, so only the selection and the move are left.
    """
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
    """Width of the encoder's output (BERT's config calls it hidden_size, DistilBERT's dim)."""
    config = model.config
    return int(getattr(config, "hidden_size", None) or config.dim)


def prepare_batches(
    encoded: data.Encoded, batch_size: int, pad_id: int, pad_to: int | None, seed: int, with_labels: bool = False
) -> list[PreparedBatch]:
    """Length-sorted batches of every row (dynamic padding, or static to `pad_to`), in a seeded shuffled order.

    Sorting keeps padding low; shuffling the batch order makes any prefix of the list a fair sample of lengths.
    The rows of a batch are those inference groups for a fixed batch size (`data.sorted_batches`, what
    `infer.plan_batches` calls); the padding is `data.pad_batch`'s, not `infer.batch_inputs`': that one has no
    static padding, and on a GPU it rounds the width up to a multiple of 8, which would change what "dynamic"
    measured there.
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


# ---------------------------------------------------------------- the whole run


def token_stats(encoded: data.Encoded) -> dict[str, Any]:
    """Rows, mean/median/max tokens and truncated rows of the timed sentences (the report's `data`)."""
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
    pad_id = infer.pad_id_of(tokenizer)
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

    return {"machine": trail.machine_info(), "versions": trail.package_versions(), "device": str(device),
            "dtype": modeling.dtype_name(dtype), "torch_threads": torch.get_num_threads(),
            "cpu_native_bf16": modeling.cpu_supports_bf16(), "loadavg": list(os.getloadavg())}


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
        demo = Path(__file__).resolve().parent.parent / "resources" / "demo" / "dev.tsv"
        dataset = data.load_dataset_split(cfg, str(demo), need_labels=False)
    # Sentence pairs: the first text of each row is timed (the benchmark measures the encoder, not the task).
    return list(dataset.texts), {"source": dataset.source, "fingerprint": dataset.fingerprint}


def benchmark(cfg: Any, clock: Clock = time.perf_counter,
              quality_dir: Path | Callable[[], Path] | None = None) -> dict[str, Any]:
    """The whole `bertkit bench` run for a BenchConfig: models, texts, measurements, quality, claims.

    `quality_dir` holds the run directories of the quality runs (probe/finetune), one per model; a callable is
    called only when quality is measured, after the models loaded and were timed (it may claim --out). Without
    it they go into the benchmark's temporary folder.
    """
    import torch

    quality = bench_quality.plan_quality(cfg)  # every --quality-args value is checked before anything is measured
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device, dtype, notes = device_and_dtype(cfg)
    texts, source = benchmark_texts(cfg)
    order = np.random.default_rng(cfg.seed).permutation(len(texts))
    torch.manual_seed(cfg.seed)
    contenders = load_contenders(cfg.model_list, cfg.preset, cfg.random_init, cfg.trust_remote_code, clock)
    notes += contender_notes(cfg, contenders)
    settings = BenchSettings(
        batch_sizes=cfg.batch_size_list, max_length=cfg.max_length, train_batch_size=cfg.train_batch_size,
        protocol=cfg.protocol, seed=cfg.seed,
        budget=Budget(cfg.warmup, cfg.min_iters, cfg.min_seconds, cfg.rounds, clock, sync_for(device)),
    )
    timed_texts = texts if cfg.protocol == "paper" else [texts[i] for i in order]
    with tempfile.TemporaryDirectory(prefix="bertkit-bench-") as tmp:
        report = run_bench(contenders, timed_texts, settings, device, dtype, Path(tmp), keep_folders=True)
        if quality:
            where = quality_dir() if callable(quality_dir) else quality_dir or Path(tmp) / "quality"
            add_quality(report, quality, where)
    for record in report["models"]:
        record.pop("folder", None)
    report["claims"] = compute_claims(report["models"])
    report["notes"] = notes + report["notes"]
    report["data_source"] = source
    report["environment"] = environment(device, dtype)
    return report


def device_and_dtype(cfg: Any) -> tuple[Any, Any, list[str]]:
    """The device and dtype the benchmark runs in, and notes on choices the user should know about."""
    import torch

    notes: list[str] = []
    device = modeling.choose_device("cpu" if cfg.protocol == "paper" else cfg.device)
    if cfg.protocol == "paper" and cfg.device not in ("auto", "cpu"):
        notes.append(f"--protocol paper runs on the CPU (as the paper did); --device {cfg.device} ignored.")
    dtype = modeling.choose_dtype(cfg.precision, device)
    if device.type == "cpu" and dtype == torch.bfloat16 and not modeling.cpu_supports_bf16():
        notes.append("bf16 on this CPU is emulated (no AVX512-BF16/AMX): expect it to be several times slower "
                     "than fp32. Use --precision fp32 (what auto picks here) for representative numbers.")
    return device, dtype, notes


def contender_notes(cfg: Any, contenders: Sequence[Contender]) -> list[str]:
    """What the report must say about where the models came from (random weights, the preset's shapes)."""
    notes = []
    if any(c.random_init for c in contenders):
        notes.append(RANDOM_INIT_NOTE)
    if cfg.preset:
        notes.append(f"--preset {cfg.preset}: transformers' default configs (the published base shapes), "
                     f"tokenizer = bert-base-uncased vocabulary from the packaged `{PRESET_TOKENIZER}` folder.")
    if cfg.quality_kinds and any(c.random_init for c in contenders):
        notes.append("Quality of random-init models was measured because --quality was given; it is meaningless.")
    return notes


def add_quality(report: dict[str, Any], plans: Sequence[bench_quality.QualityPlan], out_dir: Path) -> None:
    """Each model record's `quality` section: one result per --quality command (random-init models: their saved
    copy, so the quality run starts from the very weights that were timed)."""
    folders = {m["label"]: (m["folder"] if m["random_init"] else m["source"]) for m in report["models"]}
    for plan in plans:
        for label, result in bench_quality.measure_quality(plan, folders, out_dir).items():
            record = next(m for m in report["models"] if m["label"] == label)
            record.setdefault("quality", {})[plan.kind] = result


def run_command(cfg: Any) -> dict[str, Any]:
    """`bertkit bench`: measure, then write bench.json, bench.md and bench.png into --out (default runs/bench)."""
    from bertkit import plots

    plan = rundir.inspect_run_dir(cfg.out or "runs/bench", "bench", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.config_compare(vars(cfg)))  # read-only; claimed once models are measured
    report = benchmark(cfg, quality_dir=lambda: plan.claim().path / "quality")
    run = plan.claim()
    trail.write_run_config(run.path, "bench", vars(cfg), data_fingerprint=report["data_source"]["fingerprint"])
    report["outputs"] = {name: str(run.out / name) for name in ("bench.json", "bench.md", "bench.png")}
    plots.bench_bars(report, run.path / "bench.png")
    atomic.write_json_atomic(run.path / "bench.json", report)
    atomic.write_text_atomic(run.path / "bench.md", report_markdown(report))
    run.commit()
    return report