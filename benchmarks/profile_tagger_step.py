"""Where a tagging step's time goes on this CPU: bertkit's tagger (`TokenClassifier`, its own layers or the model's
own forward) vs the step Trainer takes (the model's forward with `labels`, its loss inside), forward / backward /
optimizer apart, under bf16 autocast and in fp32, and the padding the batch plans leave.

MiniLM + a new token head on uner_ewt train (bertkit's windows of 128 pieces, labels on each word's first piece),
batches of 32 from bertkit's length-grouped plan. Every variant has its own copy of the same initial weights and its
own fused AdamW, and the variants take turns step by step on the same batches, so load on the machine hits them
alike. Seconds are the thread's CPU time (`time.thread_time`) with torch on one thread (--threads 1, the default):
what a step costs, which other jobs on a shared machine barely move (wall seconds with more threads do, a lot).
Writes benchmarks/results/tagger-profile.json.

    .venv/bin/python benchmarks/profile_tagger_step.py [--steps 20]
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import ner_trainer_side as trainer_side  # noqa: E402
from anchor_common import load_avg, machine_record  # noqa: E402

from bertkit.measure.timing import Stopwatch  # noqa: E402

VARIANTS = ("trainer_step_bf16", "bertkit_own_forward_bf16", "bertkit_fast_bf16", "bertkit_fast_lean_bf16",
            "bertkit_own_forward_fp32", "bertkit_fast_fp32")
"""trainer_step: model(**batch, labels=...).loss as Trainer computes it; bertkit_own_forward: TokenClassifier with
fast=False (the model's own forward) + TagObjective's loss; bertkit_fast: TokenClassifier's own layers + that loss;
bertkit_fast_lean: those layers lean (`layers.block_forward(lean=True)`: one product for Q, K, V and a bf16 residual
stream under bf16 autocast, as on a GPU)."""


def windows_of(train: Path, max_length: int) -> tuple[Any, Any, list[str]]:
    """The training sentences as bertkit's labelled windows, the tokenizer and the tags."""
    from bertkit.encoding.reading import Reading
    from bertkit.encoding.word_labels import label_windows
    from bertkit.models import loading

    words, tags = trainer_side.read_columns(train)
    names = sorted({t for s in tags for t in s})
    index = {t: i for i, t in enumerate(names)}
    tokenizer = loading.load_tokenizer("minilm-offline")
    windows = label_windows(tokenizer, words, [[index[t] for t in s] for s in tags], Reading.of_words("first", max_length))
    return windows, tokenizer, names


def step_fn(name: str, model: Any, windows: Any, clock: Any) -> Any:
    """One training step of variant `name` on its own model copy: returns (forward, backward, optimizer) seconds."""
    import torch

    from bertkit.encoding.word_labels import IGNORE
    from bertkit.models.layers import block_forward
    from bertkit.models.tagger import TokenClassifier
    from bertkit.training.finetune import adamw_optimizer

    net = TokenClassifier(model, fast="fast" in name).train()
    if "lean" in name:
        net.layer = functools.partial(block_forward, lean=True)
    optimizer = adamw_optimizer(model, 5e-5, 0.0)
    bf16 = name.endswith("bf16")

    def step(batch: dict[str, Any], rows: Any) -> tuple[float, float, float]:
        labels = torch.as_tensor(windows.labels.padded(rows, batch["input_ids"].shape[1], IGNORE)[0]).long()
        with Stopwatch(clock=clock) as forward, torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            if name.startswith("trainer"):
                loss = model(**batch, labels=labels).loss
            else:
                logits = net(**batch)
        if not name.startswith("trainer"):
            with Stopwatch(clock=clock) as loss_watch:
                loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                                                         ignore_index=IGNORE)
            forward.seconds += loss_watch.seconds
        with Stopwatch(clock=clock) as backward:
            loss.backward()
        with Stopwatch(clock=clock) as update:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return forward.seconds, backward.seconds, update.seconds
    return step


def padding(lengths: Any, batch_size: int, seed: int) -> dict[str, float]:
    """The share of padded positions in one epoch's batches: bertkit's plan, Trainer's group_by_length sampler,
    random order."""
    import numpy as np
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from bertkit.encoding.batches import grouped_batches

    def share(batches: list[Any]) -> float:
        return round(1 - float(lengths.sum()) / float(sum(lengths[b].max() * len(b) for b in batches)), 4)

    order = np.asarray(get_length_grouped_indices(lengths.tolist(), batch_size,
                                                  generator=torch.Generator().manual_seed(seed)))
    shuffled = np.random.default_rng(seed).permutation(len(lengths))
    return {"bertkit_grouped": share(grouped_batches(lengths, batch_size, seed, 0)),
            "trainer_group_by_length": share([order[i:i + batch_size] for i in range(0, len(order), batch_size)]),
            "random_order": share([shuffled[i:i + batch_size] for i in range(0, len(shuffled), batch_size)])}


def profile(steps: int, variants: tuple[str, ...], clock: Any) -> dict[str, Any]:
    """Per variant, seconds per step of forward (loss included), backward and optimizer, summed over `steps`
    batches run by every variant in turn after 2 warm-up batches each."""
    import numpy as np
    import torch

    from bertkit.encoding.batches import grouped_batches, pad_batch
    from bertkit.models import loading

    windows, tokenizer, tags = windows_of(trainer_side.DATA / "train.iob2", 128)
    torch.manual_seed(0)
    base = loading.load_classifier("minilm-offline", dict(enumerate(tags)), tokens=True)
    steps_of = {name: step_fn(name, copy.deepcopy(base).train(), windows, clock) for name in variants}
    batches = grouped_batches(windows.encoded.lengths, 32, 42, 0)[: steps + 2]
    totals = {name: np.zeros(3) for name in variants}
    for i, rows in enumerate(batches):
        batch = pad_batch(windows.encoded, rows, tokenizer.pad_token_id, inputs={"input_ids", "attention_mask"})
        for name in variants:
            torch.manual_seed(i)  # the same dropout draws for every variant's step i
            seconds = steps_of[name](batch, rows)
            if i >= 2:
                totals[name] += seconds
    per_step = {name: {"forward": round(float(t[0]) / steps, 4), "backward": round(float(t[1]) / steps, 4),
                       "optimizer": round(float(t[2]) / steps, 4), "step": round(float(t.sum()) / steps, 4)}
                for name, t in totals.items()}
    lengths = windows.encoded.lengths
    timed = batches[2:]
    return {"seconds_per_step": per_step, "steps": steps, "mean_rows_x_width": int(np.mean(
                [len(b) * lengths[b].max() for b in timed])), "padding_share": padding(lengths, 32, 42)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from bertkit.io import atomic

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"Comma list of: {', '.join(VARIANTS)}.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 1: CPU seconds of one thread")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tagger-profile.json"))
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    import time

    import torch

    torch.set_num_threads(args.threads)
    before = load_avg()
    result = profile(args.steps, variants, time.thread_time if args.threads == 1 else time.perf_counter)
    per_step = result["seconds_per_step"]
    ratios = {f"{name}_vs_trainer_step_bf16": round(per_step["trainer_step_bf16"]["step"] / t["step"], 3)
              for name, t in per_step.items() if "trainer_step_bf16" in per_step and name != "trainer_step_bf16"}
    record = {"benchmark": "tagger step profile", "model": "minilm-offline + token head", "torch_threads":
              args.threads, "clock": "thread CPU seconds" if args.threads == 1 else "wall seconds", **result,
              "speedup_vs_trainer_step": ratios, "load_avg_before": before, "load_avg_after": load_avg(),
              **machine_record()}
    atomic.write_json_atomic(Path(args.out), record)
    print(f"wrote {args.out}")
    for name, t in per_step.items():
        print(f"{name:28s} {t}")
    print(ratios, result["padding_share"])
    return record


if __name__ == "__main__":
    main()
