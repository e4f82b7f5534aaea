"""The optimizer steps of an epoch: global batches (length-grouped, shuffled per seed and epoch) and this process's
micro-batches of each. The same plan whether the steps run in one process, across processes or accumulated, so a
resumed run skips exactly the batches it already consumed."""

from __future__ import annotations

import numpy as np

from bertkit.encoding.batches import grouped_batches


def global_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, min_rows: int) -> list[np.ndarray]:
    """The epoch's optimizer-step batches (length-grouped, shuffled, deterministic for (seed, epoch)).

    A last batch with fewer rows than `min_rows` (= processes x grad_accum, one row per micro-batch) is dropped.
    """
    batches = grouped_batches(lengths, batch_size, seed, epoch)
    return [b for b in batches if len(b) >= min_rows]


def micro_batches(batch: np.ndarray, n_processes: int, grad_accum: int, process_index: int) -> list[np.ndarray]:
    """This process's `grad_accum` slices of a global batch (contiguous, so similar lengths share a slice)."""
    pieces = np.array_split(batch, n_processes * grad_accum)
    return pieces[process_index * grad_accum : (process_index + 1) * grad_accum]
