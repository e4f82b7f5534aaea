"""Length-aware batches of encoded rows: inference batches sorted by length (by rows or by a padded-token
budget), training batches grouped by length in a fresh random order per epoch (an epoch's global batches and each
process's micro-batches of them); dynamic padding to tensors; outputs put back in the rows' order."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from bertkit.encoding.encode import Encoded

T = TypeVar("T")
R = TypeVar("R")

SORT_WINDOW = 65_536
"""Rows a streaming pass (predict's output file, the tokens report) takes at a time: length-sorted batches are
formed within each window of this many rows, so a dataset no larger than this is sorted as a whole (the same
batches as a global sort) and a larger one never holds more than one window's outputs."""


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Inference batches: rows sorted by length, longest first (memory peaks show up at once)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def token_budget_batches(lengths: np.ndarray, max_tokens: int, max_rows: int) -> list[np.ndarray]:
    """Inference batches by padded-token budget: long rows in small batches, short rows in big ones."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, start = [], 0
    while start < len(order):
        longest = int(lengths[order[start]])
        size = max(1, min(max_rows, max_tokens // max(longest, 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def grouped_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, group: int = 50) -> list[np.ndarray]:
    """Training batches: shuffled, then sorted by length within groups of `group` batches, batch order shuffled.

    Rows of similar length share a batch (little padding) while every epoch sees a new random order.
    Deterministic for (seed, epoch).
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    batches: list[np.ndarray] = []
    span = batch_size * group
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)  # type: ignore[arg-type]
    return batches


def global_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, min_rows: int) -> list[np.ndarray]:
    """A training epoch's optimizer-step batches (`grouped_batches`: length-grouped, shuffled, deterministic for
    (seed, epoch)). The same whether the steps run in one process, across processes or accumulated, so a resumed run
    skips exactly the batches it already consumed.

    A last batch with fewer rows than `min_rows` (= processes x grad_accum, one row per micro-batch) is dropped.
    """
    batches = grouped_batches(lengths, batch_size, seed, epoch)
    return [b for b in batches if len(b) >= min_rows]


def micro_batches(batch: np.ndarray, n_processes: int, grad_accum: int, process_index: int) -> list[np.ndarray]:
    """This process's `grad_accum` slices of a global batch (contiguous, so similar lengths share a slice)."""
    pieces = np.array_split(batch, n_processes * grad_accum)
    return pieces[process_index * grad_accum : (process_index + 1) * grad_accum]


def pad_batch(encoded: Encoded, indices: Sequence[int], pad_id: int, pad_to: int | None = None,
              multiple_of: int | None = None, *, inputs: Collection[str] | None = None,
              device: Any = None) -> dict[str, Any]:
    """Tensors for the rows at `indices`, padded to the longest of them (dynamic) or to `pad_to` (static);
    `multiple_of` rounds the dynamic width up (8 suits GPU tensor cores).

    For a model call: `inputs` keeps only the tensors the model takes (`infer.accepted_inputs`), and `device` moves
    them there; on a GPU the dynamic width is then a multiple of 8 unless `multiple_of` says otherwise."""
    import torch

    if device is not None and multiple_of is None and device.type == "cuda":
        multiple_of = 8
    rows = np.asarray(indices, dtype=np.int64)
    offsets = encoded.input_ids.offsets
    width = pad_to or int((offsets[rows + 1] - offsets[rows]).max())
    if multiple_of and not pad_to:
        width = -(-width // multiple_of) * multiple_of
    input_ids, real = encoded.input_ids.padded(rows, width, pad_id)  # one vectorised gather, no per-row loop
    batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(real.astype(np.int64))}
    if encoded.token_type_ids is not None:
        batch["token_type_ids"] = torch.from_numpy(encoded.token_type_ids.padded(rows, width, 0)[0])
    if inputs is not None:
        batch = {k: v for k, v in batch.items() if k in inputs}
    return batch if device is None else {k: v.to(device) for k, v in batch.items()}


def restore_order(batches: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> np.ndarray:
    """Stack per-batch outputs (rows in batch order) back into the original row order."""
    order = np.concatenate(batches)
    stacked = np.concatenate(outputs)
    result = np.empty_like(stacked)
    result[order] = stacked
    return result


def ahead(items: Iterable[T], prepare: Callable[[T], R], depth: int = 4) -> Iterator[tuple[T, R]]:
    """(item, prepare(item)) for each item, `prepare` running on a worker thread up to `depth` items ahead: host work
    (padding, pinning) overlaps the device's. An exception in `prepare` is raised here; closing the generator early
    stops the worker."""
    done, results = threading.Event(), queue.Queue(maxsize=depth)
    end = object()

    def put(value: Any) -> bool:
        """Hand `value` over, waiting while the queue is full; False once the consumer has stopped."""
        while not done.is_set():
            try:
                results.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((item, prepare(item))):
                    return
            put(end)
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)

    worker = threading.Thread(target=work, name="bertkit-batches", daemon=True)
    worker.start()
    try:
        while (got := results.get()) is not end:
            if isinstance(got, BaseException):
                raise got
            yield got
    finally:
        done.set()
