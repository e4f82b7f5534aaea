"""`bertkit bench`: speed, size, memory and (optionally) quality of encoders, measured side by side.

The models under test ("contenders": a preset's exact shapes with random weights, or --models) are measured on
the user's machine and data: parameter count, safetensors size (fp32/fp16), load time, batch-1 latency over real
sentences (tokenization timed apart from the model), throughput per batch size (length-sorted dynamic padding vs
static padding to --max-length), peak memory, a training step, or the paper's protocol (one full pass at batch
size 1 on the CPU). The models come from `contenders.py`, the timed steps from `steps.py`, the measurements from
`measure.py`; how each measurement is timed is `timing.py`'s job; the claims and tables are `report.py`'s; the
quality runs `quality.py`'s. `run_command` is the CLI's one call.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.bench import quality as bench_quality
from bertkit.bench.contenders import contender_notes, load_contenders
from bertkit.bench.measure import BenchSettings, environment, run_bench
from bertkit.bench.report import compute_claims, report_markdown
from bertkit.bench.timing import Budget, Clock, sync_for
from bertkit.data.splits import load_dataset_split, named_source
from bertkit.io import atomic, ownership, rundir, trail
from bertkit.models import loading as modeling

# ---------------------------------------------------------------- entry point used by cli/app.py


def benchmark_texts(cfg: Any) -> tuple[list[str], dict[str, Any]]:
    """The sentences to time: --dev if given (a file or a split of the hub --data), else --data, else the demo dev."""
    if cfg.dev:
        source, split = named_source(cfg.data, cfg.dev)
        dataset = load_dataset_split(cfg, source, split=split, need_labels=False)
    elif cfg.data:
        dataset = load_dataset_split(cfg, cfg.data, need_labels=False)
    else:
        demo = Path(__file__).resolve().parent.parent / "resources" / "demo" / "dev.tsv"
        dataset = load_dataset_split(cfg, str(demo), need_labels=False)
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
        protocol=cfg.protocol, seed=cfg.seed, int8=cfg.precision == modeling.INT8,
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
    report["environment"] = environment(device, dtype, int8=settings.int8)
    return report


def device_and_dtype(cfg: Any) -> tuple[Any, Any, list[str]]:
    """The device and dtype the benchmark runs in, and notes on choices the user should know about."""
    import torch

    notes: list[str] = []
    device = modeling.inference_device("cpu" if cfg.protocol == "paper" else cfg.device, cfg.precision)
    if cfg.protocol == "paper" and cfg.device not in ("auto", "cpu"):
        notes.append(f"--protocol paper runs on the CPU (as the paper did); --device {cfg.device} ignored.")
    dtype = modeling.choose_dtype(cfg.precision, device)
    if device.type == "cpu" and dtype == torch.bfloat16 and not modeling.cpu_supports_bf16():
        notes.append("bf16 on this CPU is emulated (no AVX512-BF16/AMX): expect it to be several times slower "
                     "than fp32. Use --precision fp32 (what auto picks here) for representative numbers.")
    return device, dtype, notes


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