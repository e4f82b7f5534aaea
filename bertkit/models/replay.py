"""Small inference batches replayed as CUDA graphs, one per input shape.

A batch of a few hundred tokens leaves a GPU waiting on Python between its kernels: BERT-base at batch 1 is ~150
kernel launches for well under a millisecond of work. `Replayed` wraps a batch function (padded batch -> tensor):
the first calls with a shape run it eagerly; from the `MIN_CALLS`-th call on, that shape is captured once (inputs
copied into fixed buffers, the function's kernels recorded) and replayed, so a call costs a few copies and one
launch. Large batches - where the GPU is busy anyway - always run eagerly. The function must not read tensors back
to the host (bertkit's own layers, `fastforward.hidden_states`, do not); `capturable()` says whether it currently
does that, and a capture that fails anyway is logged and the shape runs eagerly from then on.

Replays share one memory pool: nothing a replay computes is kept but its output buffer, which the caller copies
out (on the same stream, before the next replay can overwrite it).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)

MAX_TOKENS = 8192
"""Batches of more padded tokens than this run eagerly: their kernels keep the GPU busy by themselves."""
MIN_CALLS = 2
"""A shape is captured on its MIN_CALLS-th call (its first calls also warm up library handles)."""
MAX_GRAPHS = 32

Key = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass
class _Graph:
    inputs: dict[str, torch.Tensor]
    output: torch.Tensor
    graph: Any


@dataclass
class Replayed:
    """`fn(batch)` replayed as CUDA graphs per input shape on small batches (see module doc). Call it inside the
    inference mode and autocast state it should run under; inputs may be pinned host tensors."""

    fn: Callable[[dict[str, torch.Tensor]], torch.Tensor]
    device: torch.device
    capturable: Callable[[], bool] = lambda: True
    max_tokens: int = MAX_TOKENS
    graphs: dict[Key, _Graph | None] = field(default_factory=dict)
    """Captured shapes (None: its capture failed, it runs eagerly)."""
    calls: Counter[Key] = field(default_factory=Counter)
    replays: int = 0

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        key = tuple(sorted((name, tuple(t.shape)) for name, t in batch.items()))
        captured = self.graphs.get(key)
        if captured is not None:
            for name, tensor in batch.items():
                captured.inputs[name].copy_(tensor, non_blocking=True)
            captured.graph.replay()
            self.replays += 1
            return captured.output
        on_device = {name: t.to(self.device, non_blocking=True) for name, t in batch.items()}
        self.calls[key] += 1
        if self._should_capture(key, on_device):
            captured = self._capture(key, on_device)
            if captured is not None:
                captured.graph.replay()
                self.replays += 1
                return captured.output
        return self.fn(on_device)

    def _should_capture(self, key: Key, batch: dict[str, torch.Tensor]) -> bool:
        tokens = batch["input_ids"].numel()
        return (self.device.type == "cuda" and key not in self.graphs and self.calls[key] >= MIN_CALLS
                and tokens <= self.max_tokens and len(self.graphs) < MAX_GRAPHS and self.capturable())

    def _capture(self, key: Key, batch: dict[str, torch.Tensor]) -> _Graph | None:
        """Record `fn` on fixed copies of `batch` (after one warm-up call on a side stream); None if it fails."""
        inputs = {name: t.clone() for name, t in batch.items()}
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self.fn(inputs)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool(), capture_error_mode="thread_local"):
                output = self.fn(inputs)
        except RuntimeError as exc:  # e.g. a host read inside fn: that shape stays eager
            log.warning("CUDA graph capture failed for a batch of shape %s (%s); it runs eagerly",
                        dict(key), str(exc).splitlines()[0][:160])
            self.graphs[key] = None
            return None
        self.graphs[key] = _Graph(inputs, output, graph)
        return self.graphs[key]

    def _pool(self) -> Any:
        if not hasattr(self, "_pool_handle"):
            self._pool_handle = torch.cuda.graph_pool_handle()
        return self._pool_handle
