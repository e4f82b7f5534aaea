"""The GPU benchmark's training part: bertkit's fine-tuning against transformers.Trainer at its best (with and without
`torch_compile`), the steady optimizer step of each step variant (lean layers, cuDNN attention, compiled layers), and
MiniLM's dev accuracy over seeds. Every figure is counted the standard way (`gpu_common.Count`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gpu_common import (
    GPU,
    HPARAMS,
    RANDOM_INIT,
    Count,
    Stopwatch,
    interleaved,
    median_of,
    read_tsv,
    token_lengths,
)

# ---------------------------------------------------------------- the two sides of a fine-tuning comparison


def bertkit_finetune(model: Path, train: Path, dev: Path, out: Path, max_length: int, *, graphs: bool = True,
                     compiled: bool = False, seed: int = HPARAMS["seed"], lr: float = HPARAMS["lr"]) -> dict[str, Any]:
    """`bertkit finetune` as the CLI runs it (its own process state reset), 1 epoch at HPARAMS."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()
    shutil.rmtree(out, ignore_errors=True)
    cfg = FinetuneConfig.of(model=str(model), data=str(train), dev=str(dev), text_column="0", label_column="1",
                         epochs=1, batch_size=HPARAMS["batch_size"], lr=lr, warmup_ratio=HPARAMS["warmup_ratio"],
                         weight_decay=HPARAMS["weight_decay"], max_length=max_length, seed=seed,
                         precision="bf16" if GPU else "fp32", save_every=None, out=str(out),
                         cuda_graphs="auto" if graphs else "off", compile=compiled, overwrite=True)
    with Stopwatch() as watch:
        metrics = finetune(cfg, progress=False).metrics
    shutil.rmtree(out, ignore_errors=True)
    launch = metrics["step_launch"]
    return {"train_seconds": metrics["train_seconds"], "train_samples_per_second": metrics["train_samples_per_second"],
            "capture_and_compile_seconds": launch.get("capture_seconds", 0.0),
            "wall_seconds_incl_load_eval_saving": round(watch.seconds, 1),
            "dev_accuracy": round(metrics["best_dev"]["accuracy"], 4), "train_rows": metrics["train_rows_seen"],
            "step_launch": launch}


def trainer_finetune(model: Path, train: Path, dev: Path, out: Path, max_length: int, *, compiled: bool = False,
                     seed: int = HPARAMS["seed"]) -> dict[str, Any]:
    """transformers.Trainer at its best: bf16, dynamic padding (multiple of 8), length-grouped sampling, fused AdamW,
    two pinned loader workers, SDPA attention, the same weight decay as bertkit; `compiled`: `torch_compile=True`
    with torch's defaults (static shapes first, dynamic after a recompile). Tokenization is outside the timed
    train()."""
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    net = AutoModelForSequenceClassification.from_pretrained(str(model))

    def encoded(path: Path) -> list[dict[str, Any]]:
        texts, labels = read_tsv(path)
        enc = tokenizer(texts, truncation=True, max_length=max_length)
        return [{**{k: enc[k][i] for k in enc}, "labels": y} for i, y in enumerate(labels)]

    settings = dict(
        output_dir=str(out), per_device_train_batch_size=HPARAMS["batch_size"], per_device_eval_batch_size=256,
        learning_rate=HPARAMS["lr"], weight_decay=HPARAMS["weight_decay"], num_train_epochs=1,
        warmup_steps=HPARAMS["warmup_ratio"], seed=seed,  # transformers 5: a float < 1 is a ratio save_strategy="no", eval_strategy="no",
        logging_strategy="no", report_to=[], bf16=GPU, use_cpu=not GPU, disable_tqdm=True, optim="adamw_torch_fused",
        dataloader_num_workers=2, dataloader_pin_memory=True, max_grad_norm=1.0, torch_compile=compiled)
    try:
        args = TrainingArguments(**settings, train_sampling_strategy="group_by_length")
    except TypeError:  # transformers before train_sampling_strategy
        args = TrainingArguments(**settings, group_by_length=True)
    trainer = Trainer(model=net, args=args, train_dataset=encoded(train),
                      data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8))
    stats = trainer.train().metrics
    output = trainer.predict(encoded(dev))
    shutil.rmtree(out, ignore_errors=True)
    accuracy = float((np.asarray(output.predictions).argmax(-1) == np.asarray(output.label_ids)).mean())
    return {"train_seconds": round(stats["train_runtime"], 2),
            "train_samples_per_second": round(stats["train_samples_per_second"], 2), "dev_accuracy": round(accuracy, 4),
            "torch_compile": compiled}


def compare(prep: dict[str, Any], count: Count, label: str, train: Path, dev: Path, max_length: int, rounds: int,
            with_compiled_bertkit: bool) -> dict[str, Any]:
    """bertkit (CUDA-graph steps; and with --compile) against the Trainer eager and with torch_compile, interleaved
    `rounds` times on the same rows; the compiled ones warm up once first (compile time reported). The ratio is of
    medians, bertkit's default against the Trainer's faster (steady) setting."""
    work, model = prep["work"], prep["bert_classifier"]
    contenders: dict[str, Callable[[], dict[str, Any]]] = {
        "bertkit": lambda: bertkit_finetune(model, train, dev, work / "ft-bertkit", max_length),
        "trainer": lambda: trainer_finetune(model, train, dev, work / "ft-trainer", max_length),
        "trainer_compiled": lambda: trainer_finetune(model, train, dev, work / "ft-trainer-c", max_length,
                                                     compiled=True)}
    warm = ["trainer_compiled"]
    if with_compiled_bertkit:
        contenders["bertkit_compiled"] = lambda: bertkit_finetune(model, train, dev, work / "ft-bertkit-c", max_length,
                                                                  compiled=True)
        warm.append("bertkit_compiled")
    runs = interleaved(contenders, rounds, tuple(warm))
    lengths = token_lengths(read_tsv(train)[0], prep["tokenizer"], max_length)
    result: dict[str, Any] = {"data": f"{label}: {len(lengths)} rows, {lengths.mean():.1f} tokens on average",
                              "model": RANDOM_INIT, "hparams": {**HPARAMS, "max_length": max_length},
                              "same_lease": True, "rounds": rounds, "runs": runs}
    for name, samples in runs.items():
        seconds = median_of(samples, "train_seconds")
        result[name] = {**count.training(lengths, seconds), "median_train_seconds": seconds,
                        "dev_accuracy": median_of(samples, "dev_accuracy")}
        warmups = [r for r in samples if r.get("warm_up")]
        if warmups:
            result[name]["first_run_train_seconds_incl_compile"] = warmups[0]["train_seconds"]
    trainers = ("trainer", "trainer_compiled")
    best = min(trainers, key=lambda n: result[n]["median_train_seconds"])
    result["trainer_best"] = best
    result["bertkit_vs_trainer_best"] = round(result[best]["median_train_seconds"]
                                              / result["bertkit"]["median_train_seconds"], 2)
    result["bertkit_vs_trainer_best_ratios_by_round"] = [
        round(t["train_seconds"] / b["train_seconds"], 2)
        for b, t in zip(runs["bertkit"], [r for r in runs[best] if not r.get("warm_up")], strict=False)]
    return result


def minilm_seeds(data: Path, work: Path, seeds: tuple[int, ...], rows: int | None) -> dict[str, Any]:
    """The real MiniLM on SST-2 (1 epoch, lr 5e-5): bertkit and the Trainer, dev accuracy over `seeds`."""
    from bertkit.models import loading

    train = data / "sst2" / "train.tsv"
    if rows is not None:
        train = work / "minilm-train.tsv"
        train.write_text("\n".join((data / "sst2" / "train.tsv").read_text().splitlines()[:rows]) + "\n")
    dev = data / "sst2" / "dev.tsv"
    minilm = Path(loading.resolve_model_name("minilm-offline"))
    runs: dict[str, list[float]] = {"bertkit": [], "trainer": []}
    for seed in seeds:
        runs["bertkit"].append(bertkit_finetune(minilm, train, dev, work / "mini-b", 128, seed=seed)["dev_accuracy"])
        runs["trainer"].append(trainer_finetune(minilm, train, dev, work / "mini-t", 128, seed=seed)["dev_accuracy"])
    means = {k: round(float(np.mean(v)), 4) for k, v in runs.items()}
    return {"model": "minilm-offline (6 layers, hidden 384; weights carried as bf16, widened to fp32)",
            "seeds": list(seeds), "dev_accuracy": runs, "mean": means,
            "bertkit_minus_trainer": round(means["bertkit"] - means["trainer"], 4)}


# ---------------------------------------------------------------- the steady optimizer step, variant by variant


def _bert_steps(prep: dict[str, Any], data: Path, max_length: int) -> tuple[Any, Any, Callable[[], tuple[Any, Any]]]:
    """The rows of `data` encoded at `max_length`, a cross-entropy objective on their labels, and a maker of a fresh
    BERT-base classifier (bertkit's fast forward, training mode) with its fused AdamW."""
    from bertkit.data.dataset import TextDataset
    from bertkit.encoding.encode import encode_dataset
    from bertkit.models import loading
    from bertkit.models.fastforward import SequenceClassifier

    device = torch.device("cuda")
    texts, labels = read_tsv(data)
    encoded = encode_dataset(prep["tokenizer"], TextDataset(texts=texts), max_length)
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


STEP_VARIANTS = {"plain": (False, False, False), "lean": (True, False, False), "lean_cudnn": (True, True, False),
                 "compiled": (True, False, True), "compiled_cudnn": (True, True, True)}
"""name -> (lean layers, cuDNN attention first, compiled layers): bertkit's default is "lean"; --compile runs
"compiled"."""


def step_variants(prep: dict[str, Any], count: Count, steps: int, variants: tuple[str, ...]) -> dict[str, Any]:
    """The graphed BERT-base step at batch 32 on 512-token documents and on SST-2 rows, per variant: ms per step
    (CUDA events around `steps` steps after 3 warm-ups, each variant timed twice, interleaved; the faster: a first
    replay after another variant's capture was seen 4-13x slower on an H100), the standard MFU, and the capture time
    (with compiled layers: the compile time too)."""
    from torch.nn.attention import SDPBackend

    from bertkit.encoding.batches import grouped_batches
    from bertkit.models import layers

    default_attention = list(layers.GPU_ATTENTION)
    out: dict[str, Any] = {}

    def use(name: str) -> None:
        lean, cudnn, _ = STEP_VARIANTS[name]
        layers.LEAN_GPU_LAYERS = lean
        layers.GPU_ATTENTION = [SDPBackend.CUDNN_ATTENTION, *default_attention] if cudnn else default_attention

    for label, data, max_length in (("documents_512", prep["work"] / "docs_train.tsv", 512),
                                    ("sst2", prep["work"] / "sst2.tsv", 128)):
        encoded, objective, fresh = _bert_steps(prep, data, max_length)
        batches = grouped_batches(encoded.lengths, 32, 0, 0)[: steps + 3]
        lengths = np.concatenate([encoded.lengths[b] for b in batches[3 : 3 + steps]])
        runners, times, errors = {}, {name: [] for name in variants}, {}
        try:
            for name in variants:
                use(name)
                try:
                    net, optimizer = fresh()
                    if STEP_VARIANTS[name][2]:
                        net.compile_layers()
                    runners[name] = _graphed_runner(net, optimizer, objective, encoded, batches, max_length)
                except Exception as exc:  # one variant failing leaves the others measured
                    errors[name] = repr(exc)[:500]
            for _ in range(2):
                for name, runner in runners.items():
                    use(name)
                    times[name].append(_ms_per_step(runner, batches, steps))
        finally:
            layers.LEAN_GPU_LAYERS, layers.GPU_ATTENTION = True, default_attention
        entry: dict[str, Any] = {"rows_per_step": 32, "steps": steps,
                                 "mean_tokens_per_row": round(float(lengths.mean()), 1), "errors": errors}
        for name, runner in runners.items():
            ms = float(np.min(times[name]))
            entry[name] = {"ms_per_step": round(ms, 3), "ms_per_step_runs": [round(t, 3) for t in times[name]],
                           **count.training(lengths, ms / 1000 * steps),
                           "capture_seconds": round(runner.capture_seconds, 2)}
        out[label] = entry
        del runners
        torch.cuda.empty_cache()
    return out


def profile_step(prep: dict[str, Any], steps: int, compiled: bool) -> dict[str, Any]:
    """Where one graphed 512-token step's GPU time goes (torch.profiler over `steps` steps): the top device ops."""
    from torch.profiler import ProfilerActivity, profile

    from bertkit.encoding.batches import grouped_batches

    encoded, objective, fresh = _bert_steps(prep, prep["work"] / "docs_train.tsv", 512)
    batches = grouped_batches(encoded.lengths, 32, 0, 0)[: steps + 3]
    net, optimizer = fresh()
    if compiled:
        net.compile_layers()
    runner = _graphed_runner(net, optimizer, objective, encoded, batches, 512)
    prepared = [runner.prepare([rows], len(rows)) for rows in batches]
    for micro in prepared[:3]:
        runner.step(micro, 0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for micro in prepared[3 : 3 + steps]:
            runner.step(micro, 0)
        torch.cuda.synchronize()
    events = prof.key_averages()
    kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    top = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:16]
    return {"compiled_layers": compiled, "steps": steps,
            "gpu_busy_ms_per_step": round(sum(e.self_device_time_total for e in kernels) / 1000 / steps, 3),
            "kernel_launches_per_step": round(sum(e.count for e in kernels) / steps, 1),
            "top_device_ops": [{"op": e.key[:90], "ms_per_step": round(e.self_device_time_total / 1000 / steps, 3),
                                "calls_per_step": round(e.count / steps, 1)} for e in top]}
