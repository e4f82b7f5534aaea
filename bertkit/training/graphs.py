"""The optimizer step without the host: forward + backward per padded length bucket and the update, each replayed as
a CUDA graph, with the loss, gradient norm and a non-finite flag kept on the GPU until the loop reads them.

At BERT's batch size of 32 a step is a few thousand small kernels; launched one by one from Python, the GPU waits
on the host for most of the step. Here the shapes repeat (widths padded to multiples of `WIDTH_MULTIPLE`), so each
(rows, width, padded-or-not) shape is captured once - its forward, its backward into gradients that live outside
the graphs - and replayed; the update (gradient norm and clipping, fused AdamW with its learning rate in a tensor
the scheduler fills, zeroing the gradients) is one more graph for every shape. A shape seen too rarely to pay for
its capture runs eagerly through the same code, so every step computes the same thing.

Nothing inside a step reads a value back: the loss of each micro-batch is added to a device total, the update
skips itself on a non-finite gradient norm (AdamW's `found_inf`) and records the first such step, and
`StepRunner.read` returns the total and raises the NaN/inf stop where the loop needs a number (log steps,
evaluations, checkpoints). Dropout draws from the CUDA generator in every replay; captures restore the generator
afterwards, so a run resumed from a checkpoint (which saves the generator) replays the same masks.

On a CPU nothing is captured and the same runner runs every step eagerly: that is how its arithmetic is tested.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bertkit.encoding.batches import pad_batch
from bertkit.encoding.encode import Encoded

log = logging.getLogger(__name__)

WIDTH_MULTIPLE = 32
"""Padded widths are multiples of this, so that few shapes repeat."""
MIN_USES = 2
"""A shape is captured when the run will use it at least this often; rarer ones run eagerly."""
MAX_GRAPHS = 64
"""At most this many forward/backward graphs (the most used shapes); they share one memory pool."""
WARMUP = 2
"""Eager forward/backward passes per shape before its capture (library handles, workspaces)."""


@dataclass(frozen=True)
class Shape:
    """What a captured forward/backward is specialised to."""

    rows: int
    width: int
    masked: bool
    """False when no row of the micro-batch is padded: attention then runs unmasked (SDPA's flash kernel)."""


@dataclass
class MicroBatch:
    """One micro-batch ready on the host (pinned when the device is a GPU): its shape, inputs and loss scale."""

    shape: Shape
    inputs: dict[str, torch.Tensor]
    rows: torch.Tensor
    scale: float


@dataclass
class _Static:
    """A shape's device buffers: the inputs a replay reads and the loss scale, plus its graph once captured."""

    inputs: dict[str, torch.Tensor]
    rows: torch.Tensor
    scale: torch.Tensor
    scale_value: float = 1.0
    graph: Any = None


def padded_width(length: int, max_length: int) -> int:
    """The bucket width of a micro-batch whose longest row has `length` tokens."""
    return min(-(-max(length, 1) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE, max(max_length, length))


def shape_of(lengths: np.ndarray, max_length: int) -> Shape:
    width = padded_width(int(lengths.max()), max_length)
    return Shape(len(lengths), width, bool((lengths < width).any()))


@dataclass
class StepRunner:
    """Optimizer steps on micro-batches of `encoded` rows, replayed as CUDA graphs where captured (see module doc).

    `net` is the unwrapped classifier (its plain forward is called, under this runner's own autocast), `optimizer`
    the torch AdamW (fused), `objective` the loss (`loss(logits, rows)` with `rows` a device tensor)."""

    net: Any
    optimizer: Any
    objective: Any
    encoded: Encoded
    pad_id: int
    inputs: frozenset[str]
    dtype: torch.dtype
    max_grad_norm: float
    device: torch.device
    max_length: int
    capture: bool = True
    statics: dict[Shape, _Static] = field(default_factory=dict)
    update_graph: Any = None
    captured_shapes: int = 0
    eager_steps: int = 0
    capture_seconds: float = 0.0
    """Time the captures took (warm-up passes included): part of the run's training time."""

    def __post_init__(self) -> None:
        zeros = {"device": self.device, "dtype": torch.float32}
        self.pending = torch.zeros((), **zeros)
        """Sum over micro-batches of loss x rows since the last `read`."""
        self.pending_rows = 0
        self.grad_norm = torch.zeros((), **zeros)
        self.steps = torch.zeros((), device=self.device, dtype=torch.int64)
        self.first_bad = torch.zeros((), device=self.device, dtype=torch.int64)
        self.found_inf = torch.zeros((), **zeros)
        self.params = [p for p in self.net.parameters() if p.requires_grad]
        self.grads: list[torch.Tensor] = []
        self.capture = self.capture and self.device.type == "cuda"
        for group in self.optimizer.param_groups:  # the scheduler fills these tensors; captured kernels read them
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=self.device)
            group["capturable"] = self.capture
        self.optimizer.found_inf = self.found_inf  # fused AdamW skips its update where this is 1

    # ---------------------------------------------------------------- host side

    def prepare(self, pieces: Sequence[np.ndarray], batch_rows: int) -> list[MicroBatch]:
        """The micro-batches of one optimizer step, padded to their bucket width (pinned for the copy to a GPU)."""
        prepared = []
        for rows in pieces:
            shape = shape_of(self.encoded.lengths[rows], self.max_length)
            batch = pad_batch(self.encoded, rows, self.pad_id, pad_to=shape.width, inputs=self.inputs)
            if not shape.masked:
                batch.pop("attention_mask", None)
            index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
            if self.device.type == "cuda":
                batch, index = {k: v.pin_memory() for k, v in batch.items()}, index.pin_memory()
            prepared.append(MicroBatch(shape, batch, index, len(rows) / batch_rows))
        return prepared

    def step(self, micro_batches: Sequence[MicroBatch], global_step: int) -> None:
        """Queue one optimizer step (no host synchronisation): each micro-batch's forward/backward, the update."""
        if self.steps_behind(global_step):
            self.steps.fill_(global_step)
        for micro in micro_batches:
            static = self.statics.get(micro.shape)
            if static is None or static.graph is None:
                self.eager_steps += 1
                static = self._static_for(micro)
                self._forward_backward(static)
                continue
            self._load(static, micro)
            static.graph.replay()
        self.pending_rows += sum(m.shape.rows for m in micro_batches)
        if self.update_graph is not None:
            self.update_graph.replay()
        else:
            self._update()
        self._host_step = global_step + 1

    def steps_behind(self, global_step: int) -> bool:
        return getattr(self, "_host_step", None) != global_step

    def read(self) -> tuple[float, int, int]:
        """(loss x rows, rows) since the last read, and the first optimizer step (1-based) whose gradient norm was
        NaN/inf, 0 if none: one host synchronisation."""
        loss, bad = torch.stack([self.pending.double(), self.first_bad.double()]).tolist()
        rows, self.pending_rows = self.pending_rows, 0
        self.pending.zero_()
        return loss, rows, int(bad)

    def last_grad_norm(self) -> float:
        return float(self.grad_norm)

    # ---------------------------------------------------------------- device side

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        # no cast cache: cached copies made inside a capture would belong to its memory pool
        return torch.autocast(device_type=self.device.type, dtype=self.dtype, cache_enabled=False)

    def _forward_backward(self, static: _Static) -> None:
        with self._autocast():
            logits = type(self.net).forward(self.net, **static.inputs)  # not accelerate's autocast-wrapped forward
        loss = self.objective.loss(logits, static.rows)
        (loss * static.scale).backward()
        self.pending.add_(loss.detach().float() * static.rows.numel())

    def _update(self) -> None:
        """Clip (the norm is always computed: it tells a non-finite step), AdamW unless non-finite, zero grads."""
        params = self.params_with_grads()
        norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm if self.max_grad_norm > 0 else math.inf,
                                              foreach=True)
        bad = ~torch.isfinite(norm)
        self.grad_norm.copy_(norm)
        self.found_inf.copy_(bad.float())
        self.steps.add_(1)
        self.first_bad.copy_(torch.where((self.first_bad == 0) & bad, self.steps, self.first_bad))
        self.optimizer.step()
        torch._foreach_zero_(self.grads_now(params))

    def params_with_grads(self) -> list[torch.Tensor]:
        """The trainable parameters that received a gradient (as AdamW skips the others, so does the update)."""
        return [p for p in self.params if p.grad is not None]

    def grads_now(self, params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        return [p.grad for p in params]

    def _load(self, static: _Static, micro: MicroBatch) -> None:
        for name, tensor in micro.inputs.items():
            static.inputs[name].copy_(tensor, non_blocking=True)
        static.rows.copy_(micro.rows, non_blocking=True)
        if micro.scale != static.scale_value:
            static.scale.fill_(micro.scale)
            static.scale_value = micro.scale

    def _static_for(self, micro: MicroBatch) -> _Static:
        """Device buffers holding `micro` (an uncaptured shape: fresh tensors each time)."""
        inputs = {k: v.to(self.device, non_blocking=True) for k, v in micro.inputs.items()}
        scale = torch.tensor(micro.scale, dtype=torch.float32, device=self.device)
        return _Static(inputs, micro.rows.to(self.device, non_blocking=True), scale, micro.scale)

    # ---------------------------------------------------------------- capture

    def capture_shapes(self, shapes: Counter[Shape]) -> None:
        """Capture the forward/backward of the most used `shapes` (used >= MIN_USES times, at most MAX_GRAPHS) and
        the update; the generator states, the gradients and the loss total are as they were before."""
        chosen = [s for s, n in shapes.most_common(MAX_GRAPHS) if n >= MIN_USES]
        if not self.capture or not chosen:
            return
        started = time.perf_counter()
        cuda_rng, cpu_rng = torch.cuda.get_rng_state(self.device), torch.get_rng_state()
        try:
            self._capture(chosen)
        finally:  # captured or not, the run draws from the generators as it would have
            torch.cuda.set_rng_state(cuda_rng, self.device)
            torch.set_rng_state(cpu_rng)
        self.captured_shapes = len(chosen)
        torch.cuda.synchronize(self.device)
        self.capture_seconds = time.perf_counter() - started
        log.info("CUDA graphs: %d forward/backward shapes captured (%d uses of %d planned micro-batches) and the "
                 "update, in %.1f s", len(chosen), sum(shapes[s] for s in chosen), sum(shapes.values()),
                 self.capture_seconds)

    def _capture(self, chosen: list[Shape]) -> None:
        for shape in chosen:
            self.statics[shape] = self._blank(shape)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for shape in chosen:  # the first pass also creates every gradient, outside any graph's pool
                for _ in range(WARMUP):
                    self._forward_backward(self.statics[shape])
        torch.cuda.current_stream(self.device).wait_stream(side)
        params = self.params_with_grads()
        torch._foreach_zero_(self.grads_now(params))
        pool = torch.cuda.graph_pool_handle()
        for shape in chosen:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                self._forward_backward(self.statics[shape])
            self.statics[shape].graph = graph
        init_adamw_state(self.optimizer)  # made lazily inside a capture, the moments would be zeroed at every replay
        self.update_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.update_graph, pool=pool, capture_error_mode="thread_local"):
            self._update()
        self.pending.zero_()  # the captures ran nothing; the warm-up passes' losses and gradients are dropped
        torch._foreach_zero_(self.grads_now(params))

    def release(self) -> None:
        """Back to eager steps (a capture failed): no graphs, the optimizer as an eager step expects it, no
        gradients, nothing pending."""
        self.statics.clear()
        self.update_graph = None
        for group in self.optimizer.param_groups:
            group["lr"] = float(group["lr"])
            group["capturable"] = False
        self.optimizer.__dict__.pop("found_inf", None)
        for p in self.params:
            p.grad = None
        self.pending.zero_()

    def _blank(self, shape: Shape) -> _Static:
        """Buffers for `shape`, filled with valid values for the warm-up passes (token 0, row 0, no padding)."""
        ids = torch.zeros(shape.rows, shape.width, dtype=torch.long, device=self.device)
        inputs = {"input_ids": ids}
        if shape.masked:
            inputs["attention_mask"] = torch.ones_like(ids)
        if "token_type_ids" in self.inputs:
            inputs["token_type_ids"] = torch.zeros_like(ids)
        rows = torch.zeros(shape.rows, dtype=torch.long, device=self.device)
        return _Static(inputs, rows, torch.ones((), dtype=torch.float32, device=self.device))


def init_adamw_state(optimizer: Any) -> None:
    """AdamW's per-parameter state (step, moments) for every parameter with a gradient, as its first step makes it
    (fused/capturable: the step count a float32 tensor on the parameter's device); existing state is kept."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None or optimizer.state[p]:
                continue
            optimizer.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                  "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                  "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            if group.get("amsgrad"):
                optimizer.state[p]["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def planned_shapes(runner: StepRunner, plan: Iterable[Sequence[np.ndarray]]) -> Counter[Shape]:
    """How often each micro-batch shape occurs in `plan` (the micro-batches of the optimizer steps still to run)."""
    counts: Counter[Shape] = Counter()
    for pieces in plan:
        for rows in pieces:
            counts[shape_of(runner.encoded.lengths[rows], runner.max_length)] += 1
    return counts
