"""What the anchor benchmarks (bertkit vs a `transformers.Trainer` script, in one process: bench_finetune.py,
bench_ner.py, ner_trainer_side.py) share: whether bf16 is native here (so "Trainer at its best" uses it), a clean
Accelerate state between runs of different precisions, and the load average and machine a result records."""

from __future__ import annotations

import os
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
