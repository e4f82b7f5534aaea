"""How a run's optimizer steps are launched: replayed as CUDA graphs (`bertkit.training.graphs.StepRunner`) where
that applies - one CUDA GPU, one process, bf16 or fp32, bertkit's own forward - or eagerly. The loop asks here for an
epoch's steps (`steps_of`: the epoch's plan from `encoding.batches`, each step's micro-batches prepared for the way it
runs - padded tensors for an eager step, the graphs' pinned buffers on a worker thread ahead of the GPU) and restores
the optimizer as an eager step expects it (`plain_optimizer_settings`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.encoding.batches import ahead, global_batches, micro_batches, pad_batch
from bertkit.models import loading
from bertkit.models.inputs import accepted_inputs
from bertkit.training.graphs import StepRunner, planned_shapes

log = logging.getLogger(__name__)


def plain_optimizer_settings(session: Any) -> None:
    """A restored optimizer as an eager step expects it: a graphed run saves its learning rates as tensors (the
    captured update reads them) and `capturable` groups; `start_graphs` turns them back on where it applies."""
    for group in session.optimizer.param_groups:
        group["lr"] = float(group["lr"])
        group["capturable"] = False
    scheduler = getattr(session.scheduler, "scheduler", session.scheduler)
    scheduler._last_lr = [float(lr) for lr in scheduler.get_last_lr()]


def graphs_unavailable(session: Any) -> str | None:
    """Why this run's steps are launched eagerly rather than replayed as CUDA graphs (None: they are replayed)."""
    cfg, accelerator = session.cfg, session.accelerator
    unwrapped = accelerator.unwrap_model(session.net)
    reasons = [
        (cfg.compute.cuda_graphs == "off", "--cuda-graphs off"),
        (accelerator.device.type != "cuda", f"the run is on {accelerator.device.type}, not a CUDA GPU"),
        (accelerator.num_processes > 1, "several processes (their gradients are all-reduced eagerly)"),
        (accelerator.mixed_precision == "fp16", "fp16 (its loss scaling runs eagerly; bf16 needs none)"),
        (cfg.compute.compile and getattr(unwrapped, "layer", None) is None, "--compile on the model's own forward"),
        (not getattr(unwrapped, "fast", False), "the model runs its own transformers forward (--fast-forward off or "
                                                "not applicable), which reads a mask value back every call"),
    ]
    return next((why for applies, why in reasons if applies), None)


def start_graphs(session: Any, state: Any) -> Any:
    """The CUDA-graph step runner for the rest of this run, its shapes captured (after `restore`: the weights, the
    optimizer and the generator are the checkpoint's); None where steps run eagerly (why: logged)."""
    reason = graphs_unavailable(session)
    if reason is not None:
        if session.accelerator.device.type == "cuda":
            log.info("steps run eagerly, not as CUDA graphs: %s", reason)
        return None
    cfg, accelerator = session.cfg, session.accelerator
    net = accelerator.unwrap_model(session.net)
    runner = StepRunner(net, getattr(session.optimizer, "optimizer", session.optimizer), session.objective,
                        session.train_enc, session.pad_id, accepted_inputs(net.model),
                        loading.DTYPE_NAMES[{"no": "fp32", "bf16": "bf16"}[accelerator.mixed_precision]],
                        cfg.training.max_grad_norm, accelerator.device, cfg.reading.max_length)
    try:
        runner.capture_shapes(planned_shapes(runner, _remaining_pieces(session, state)))
    except RuntimeError as exc:  # a driver, library or model that cannot be captured: the steps still run
        log.warning("CUDA graph capture failed (%s); steps run eagerly", (str(exc).splitlines() or ["?"])[0][:200])
        runner.release()
        return None
    return runner


def _remaining_pieces(session: Any, state: Any) -> Any:
    """The micro-batches of every optimizer step still to run, epoch by epoch from the state's position."""
    cfg, accelerator = session.cfg, session.accelerator
    for epoch in range(state.epoch, cfg.training.epochs):
        batches = global_batches(session.train_enc.lengths, cfg.training.batch_size * session.min_rows,
                                 cfg.inputs.seed, epoch,
                                 session.min_rows)
        for batch in batches[state.step_in_epoch if epoch == state.epoch else 0 :]:
            yield micro_batches(batch, accelerator.num_processes, cfg.training.grad_accum, accelerator.process_index)


@dataclass(frozen=True)
class Step:
    """One optimizer step of an epoch, ready to run."""

    rows: np.ndarray
    """Its global batch: the rows every process's micro-batches together hold."""
    prepared: Any
    """This process's micro-batches of it: (rows, padded input tensors on the device) each for an eager step, the
    graphs' prepared buffers (`graphs.StepRunner.prepare`) for a replayed one."""
    last: bool
    """The epoch's last step (it is always evaluated and checkpointed)."""


def steps_of(session: Any, epoch: int, start: int) -> Iterator[Step]:
    """The steps of `epoch` from its `start`-th on, in order (the epoch's global batches, `encoding.batches`), each
    prepared as it runs: on a graphed run on a worker thread ahead of the GPU (padded to the bucket width, pinned)."""
    cfg, accelerator, runner = session.cfg, session.accelerator, session.graphs
    accepted = accepted_inputs(accelerator.unwrap_model(session.net).model)
    batches = global_batches(session.train_enc.lengths, cfg.training.batch_size * session.min_rows, cfg.inputs.seed,
                             epoch,
                             session.min_rows)

    def prepare(batch: np.ndarray) -> Any:
        pieces = micro_batches(batch, accelerator.num_processes, cfg.training.grad_accum, accelerator.process_index)
        if runner is not None:
            return runner.prepare(pieces, len(batch))
        return [(rows, pad_batch(session.train_enc, rows, session.pad_id, inputs=accepted, device=accelerator.device))
                for rows in pieces]

    todo = batches[start:]
    ready = ahead(todo, prepare) if runner is not None else ((batch, prepare(batch)) for batch in todo)
    return (Step(batch, prepared, start + i + 1 == len(batches)) for i, (batch, prepared) in enumerate(ready))
