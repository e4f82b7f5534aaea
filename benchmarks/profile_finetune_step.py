"""Where a fine-tuning step's time goes on this machine: the matrix-multiply share and its achieved GFLOP/s.

MiniLM + head, batches of 32 from SST-2 train (bertkit's length-grouped batches), bertkit's fast forward,
cross-entropy, backward, clipping, fused AdamW - profiled with torch.profiler over --steps steps. The achieved
matmul rate (analytic FLOPs of the step / profiled mm+addmm time) is compared with a plain `a @ b` of the same
shapes timed alone. Writes benchmarks/results/finetune-profile.json.

    .venv/bin/python benchmarks/profile_finetune_step.py [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bertkit.encoding.reading import Reading  # noqa: E402
from bertkit.measure.timing import Stopwatch  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "sst2"
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


def step_flops(model, lengths_per_batch) -> float:
    """Linear-layer FLOPs of forward + backward (3x forward) with the [CLS]-only last layer."""
    config = model.config
    d, layers, ffn = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    full = 4 * d * d + 2 * d * ffn  # Q, K, V, O + FFN in and out, multiply-adds per token
    total = 0.0
    for rows, width in lengths_per_batch:
        tokens = rows * width
        forward = tokens * (layers - 1) * full + tokens * 2 * d * d + rows * (2 * d * d + 2 * d * ffn)
        total += 3 * 2 * forward
    return total


def matmul_alone_gflops(d: int, ffn: int, tokens: int, reps: int = 20) -> float:
    import torch

    rates = []
    for k, n in ((d, d), (d, ffn), (ffn, d)):
        a, b = torch.randn(tokens, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        with Stopwatch() as watch:
            for _ in range(reps):
                a @ b
        rates.append(2 * tokens * k * n * reps / watch.seconds / 1e9)
    return sum(rates) / len(rates)


def main() -> dict:
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_splits
    from bertkit.encoding.batches import grouped_batches, pad_batch
    from bertkit.encoding.encode import encode_for
    from bertkit.io import atomic, trail
    from bertkit.models import loading
    from bertkit.models.fastforward import SequenceClassifier
    from bertkit.training.finetune import adamw_optimizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if not DATA.exists():
        print(f"skipped: {DATA} not found")
        return {}
    opts = DataOptions(data=str(DATA / "train.tsv"), text_column="0", label_column="1", dev_fraction=0.1)
    train = load_splits(opts, need_dev=False).train
    tokenizer = loading.load_tokenizer("minilm-offline")
    torch.manual_seed(0)
    model = loading.load_classifier("minilm-offline", {0: "0", 1: "1"})
    net = SequenceClassifier(model).train()
    encoded = encode_for(tokenizer, train, Reading(128)).encoded
    labels = np.asarray([int(y) for y in train.labels])
    batches = grouped_batches(encoded.lengths, 32, 42, 0)[: args.steps + 2]
    optimizer = adamw_optimizer(model, 5e-5, 0.01)

    def step(idx):
        batch = pad_batch(encoded, idx, tokenizer.pad_token_id)
        loss = torch.nn.functional.cross_entropy(net(**batch), torch.as_tensor(labels[idx]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for idx in batches[:2]:  # warm-up
        step(idx)
    timed = batches[2:]
    with Stopwatch() as watch, profile(activities=[ProfilerActivity.CPU]) as prof:
        for idx in timed:
            step(idx)
    wall = watch.seconds
    ops = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    total_op_seconds = sum(ops.values())
    matmul_seconds = sum(ops.get(k, 0.0) for k in MATMUL_OPS)
    linear_seconds = ops.get("aten::mm", 0.0) + ops.get("aten::addmm", 0.0)
    shapes = [(len(i), int(encoded.lengths[i].max())) for i in timed]
    flops = step_flops(model, shapes)
    mean_tokens = int(np.mean([r * w for r, w in shapes]))
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:12]
    record = {
        "benchmark": "finetune-profile", "model": "minilm-offline + head, bertkit fast forward, fp32",
        "steps": len(timed), "mean_padded_tokens_per_step": mean_tokens,
        "wall_seconds_per_step_profiled": round(wall / len(timed), 4),
        "matmul_share_of_op_time": round(matmul_seconds / total_op_seconds, 3),
        "linear_matmul_gflops_in_step": round(flops / linear_seconds / 1e9, 1),
        "same_shapes_alone_gflops": round(matmul_alone_gflops(model.config.hidden_size,
                                                              model.config.intermediate_size, mean_tokens), 1),
        "top_ops_seconds_per_step": {k: round(v / len(timed), 4) for k, v in top},
        "machine": trail.machine_info(), "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    path = ROOT / "benchmarks" / "results" / "finetune-profile.json"
    atomic.write_json_atomic(path, record)
    print(f"wrote {path}: matmul share {record['matmul_share_of_op_time']}, "
          f"{record['linear_matmul_gflops_in_step']} GFLOP/s in the step vs {record['same_shapes_alone_gflops']} alone")
    return record


if __name__ == "__main__":
    main()
