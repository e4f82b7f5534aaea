"""What the anchor benchmarks (bertkit vs a `transformers.Trainer` script, in one process: bench_finetune.py,
bench_ner.py, ner_trainer_side.py, bench_qa_anchor.py, qa_trainer_side.py) share: the A B B A rounds of both sides, a
Trainer side's result written alone, whether bf16 is native here (so "Trainer at its best" uses it), a clean
Accelerate state between runs of different precisions, and the load average and machine a result records."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def bf16_is_native() -> bool:
    """bf16 runs natively here: a CUDA GPU with bf16, or a CPU with AVX512-BF16/AMX that oneDNN uses (emulated bf16
    is several times slower than fp32). BERTKIT_ASSUME_BF16=0/1 overrides the CPU answer."""
    import torch

    from bertkit.models import loading

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return loading.cpu_supports_bf16()


def reset_accelerate() -> None:
    """Forget Accelerate's process-wide state, so the next run (Trainer or bertkit) picks its own mixed precision."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()


def load_avg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded: the machine's other work while a side ran."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_record() -> dict[str, Any]:
    """The machine (CPU, cores, torch threads, accelerator) and the package versions, as bertkit's runs record them."""
    from bertkit.io import trail

    return {"machine": trail.machine_info(), "versions": trail.package_versions()}


def alternating_rounds(rounds: int, first_seed: int, sides: Sequence[str],
                       run_side: Callable[[str, int, int], dict[str, Any]]) -> list[dict[str, Any]]:
    """Every round: each side once (`run_side(side, seed, round)`), seed `first_seed` + round, in the order `sides`
    gives and reversed every other round (A B B A ...), so a drift in the machine's load hits both sides alike; each
    run recorded with the load averages around it and its wall time, and printed as it ends."""
    from bertkit.measure.timing import Stopwatch

    runs = []
    for round_ in range(rounds):
        seed = first_seed + round_
        for side in sides if round_ % 2 == 0 else list(sides)[::-1]:
            reset_accelerate()  # each side picks its own mixed precision
            before = load_avg()
            with Stopwatch() as watch:
                result = run_side(side, seed, round_)
            runs.append({"side": side, "seed": seed, **result, "load_avg_before": before, "load_avg_after": load_avg(),
                         "wall_seconds": round(watch.seconds, 1)})
            print(json.dumps(runs[-1]), flush=True)
    return runs


def trainer_side_result(benchmark: str, args: Any, result: dict[str, Any]) -> dict[str, Any]:
    """A Trainer side run alone: its `result` with its settings, the load after it and the machine, printed and
    written to --out when given."""
    record = {"benchmark": benchmark, **result, "settings": {k: v for k, v in vars(args).items() if k != "out"},
              "load_avg_after": load_avg(), **machine_record()}
    text = json.dumps(record, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return record
