"""Where and in what precision a model computes: the option values (--precision, --device) and their checks, and
`Compute`, the settings object they resolve to once per command; `process_state`, the processes a run spans."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bertkit.options import RUN, option

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""Compute precisions of every command (finetune and distill train in these)."""
INFERENCE_PRECISIONS = PRECISIONS + ("int8",)
"""Those of the inference commands (embed, predict, evaluate, probe, bench): int8 is inference-only."""
TRUST_HELP = "Allow custom code from the model repository (off by default: it runs arbitrary code)."
PRECISION_HELP = "Compute precision. auto = bf16 where the hardware runs it natively (GPU, AVX512-BF16/AMX CPU), else fp32."
INT8_HELP = " int8 = the linear layers' weights in int8, activations quantized per batch (dynamic int8); CPU only."
INFERENCE_PRECISION_HELP = PRECISION_HELP + INT8_HELP


def precision_option(*, training: bool = False, more_help: str = "", panel: str = RUN) -> Any:
    """--precision (alias --dtype), declared here once with one meaning: `auto` is bf16 where the hardware runs it
    natively, else fp32, resolved once per command (`Compute.resolve`); an inference command also takes int8 (not a
    `training` one). `more_help`: what the command adds (predict: a probe's recorded precision)."""
    return option("auto", (PRECISION_HELP if training else INFERENCE_PRECISION_HELP) + more_help, panel=panel,
                  choices=PRECISIONS if training else INFERENCE_PRECISIONS, aliases=("--dtype",))


def check_device(problems: list[str], value: str, *, check_available: bool = True) -> None:
    """Record a problem unless --device names a device (cpu, cuda, cuda:N, mps, auto) that this machine has."""
    if value in ("auto", "cpu"):
        return
    from bertkit.models.loading import device_problem  # imports torch: only for a device other than auto/cpu

    problem = device_problem(value, check_available=check_available)
    if problem:
        problems.append(problem)


@dataclass(frozen=True)
class Compute:
    """Where a command's model runs and in what precision, resolved once (`resolve`): `device` as torch names it
    (cpu, cuda, cuda:1, mps) and `precision` as bertkit records it (fp32, bf16, fp16, int8; `auto` resolved). Written
    into the artifacts a command makes (`to_json`), read back as information (`from_json`)."""

    device: str = "cpu"
    precision: str = "fp32"

    @classmethod
    def resolve(cls, device: str | None, precision: str) -> Compute:
        """--device (auto: $BERTKIT_DEVICE, else the best device here; int8 with auto: the CPU) and --precision
        (auto: bf16 where the device runs it natively, else fp32) resolved, or a UserError naming the flag."""
        from bertkit.models import loading

        where = loading.inference_device(device, precision)
        dtype = loading.choose_dtype(precision, where)
        return cls(str(where), loading.INT8 if precision == loading.INT8 else loading.dtype_name(dtype))

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device(self.device)

    @property
    def dtype(self) -> Any:
        """The torch dtype the arithmetic runs in (int8 computes in fp32 around int8 matrix products)."""
        from bertkit.models import loading

        return loading.DTYPE_NAMES.get(self.precision, loading.DTYPE_NAMES["fp32"])

    @classmethod
    def of_accelerator(cls, accelerator: Any) -> Compute:
        """Where and in what precision an Accelerate run computes (mixed precision "no" is fp32)."""
        precision = str(accelerator.mixed_precision)
        return cls(str(accelerator.device), "fp32" if precision == "no" else precision)

    def on(self, device: Any) -> Compute:
        """The same precision on another device (a process's own GPU under a launcher)."""
        return Compute(str(device), self.precision)

    def to_json(self) -> dict[str, str]:
        return {"device": self.device, "precision": self.precision}

    @classmethod
    def from_json(cls, record: Any) -> Compute | None:
        if not isinstance(record, dict) or not isinstance(record.get("precision"), str):
            return None
        return cls(str(record.get("device", "cpu")), record["precision"])

    @classmethod
    def recorded_in(cls, meta: Any) -> Compute | None:
        """The compute an artifact's record names: its `compute`, else (saved before bertkit recorded one) the
        precision its `dtype` key names, on the CPU; None when it names no precision bertkit runs (an ONNX backend)."""
        if not isinstance(meta, dict):
            return None
        recorded = cls.from_json(meta.get("compute"))
        if recorded is None and isinstance(meta.get("dtype"), str):
            recorded = cls("cpu", meta["dtype"])
        return recorded if recorded is not None and recorded.precision in INFERENCE_PRECISIONS[1:] else None

    @classmethod
    def over_record(cls, device: str | None, precision: str, recorded: Compute | None,
                    what: str) -> tuple[Compute, list[str]]:
        """The compute to read an artifact with, and notes. --precision auto takes the precision `what` records
        (its features were made in it) where this device runs it natively, else auto's own choice with a note; an
        explicit --precision that differs from the record is applied, with a note."""
        from bertkit.models import loading

        here = cls.resolve(device, precision)
        if recorded is None or recorded.precision == here.precision:
            return here, []
        if precision != "auto":
            return here, [f"--precision {precision}: {what} records {recorded.precision} (run in {here.precision}, "
                          f"as asked)"]
        if loading.runs_natively(recorded.precision, here.torch_device):
            return cls(here.device, recorded.precision), []
        where = "this CPU" if here.device == "cpu" else here.device
        return here, [f"{what} records precision {recorded.precision}, which {where} does not run natively: run in "
                      f"{here.precision} (features may differ slightly; pass --precision to choose)"]



@contextlib.contextmanager
def process_state(device: Any) -> Iterator[Any]:
    """accelerate's `PartialState` for this run: rank, world size and barriers under torchrun/accelerate launch
    (one process otherwise). A process group it starts (gloo on the CPU) is destroyed when the run ends."""
    from datetime import timedelta

    import torch.distributed as tdist
    from accelerate import PartialState

    had_group = tdist.is_available() and tdist.is_initialized()
    # a long timeout: a rank may encode its shards for hours while the others wait at the next barrier
    state = PartialState(cpu=device.type == "cpu", timeout=timedelta(hours=24))
    try:
        yield state
    finally:
        if state.num_processes > 1 and not had_group:
            state.destroy_process_group()
            PartialState._reset_state()
