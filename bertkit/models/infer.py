"""One inference path for every command: rows -> token ids -> length-sorted batches with dynamic padding ->
a model call under `torch.inference_mode()` in the chosen precision -> numpy outputs back in the input order.

embed and probe (pooled features), predict and evaluate (class probabilities), finetune's dev evaluation and
distill's teacher logits all go through `run_batches`; what differs is only the per-batch function. Which inputs
a model takes (DistilBERT has no token_type_ids) is asked in one place, `bertkit.models.inputs.accepted_inputs`.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap
from bertkit.encoding.batches import ahead, pad_batch, restore_order, sorted_batches, token_budget_batches
from bertkit.encoding.encode import Encoded, RowsCut, encode_for
from bertkit.encoding.reading import Reading
from bertkit.models import loading, onnx, quantize
from bertkit.models.compute import Compute
from bertkit.models.fastforward import SequenceClassifier
from bertkit.models.inputs import accepted_inputs
from bertkit.models.replay import Replayed

BatchFn = Callable[[dict[str, torch.Tensor]], torch.Tensor]
"""One padded batch (on the device, only the inputs the model takes) -> a tensor with one row per input row."""


def auto_token_budget(model: Any, device: torch.device) -> tuple[int, int]:
    """`--batch-size auto`: (padded tokens per batch, max rows per batch) from the model size and, on a GPU, its
    free memory.

    On a CPU the budget keeps the largest activation (tokens x FFN width x 4 bytes) near 32 MiB, rounded down to a
    power of two and kept within [512, 65536] tokens, at most 256 rows: MiniLM-L6 (FFN 1536) -> 4096 tokens,
    BERT-base (FFN 3072) -> 2048. On a GPU a batch may take an eighth of the free memory at about 16 activations
    of the hidden width and 2 of the FFN width per token (in 4 bytes), within [4096, 65536] tokens and 4096 rows:
    large enough that kernels, not launches, set the pace, small enough that batches stream.
    """
    config = model.config
    ffn = int(getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 0) or 4 * config.hidden_size)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        per_token = 4 * (16 * int(config.hidden_size) + 2 * ffn)
        tokens = 2 ** int(math.floor(math.log2(max(1, free // 8 // per_token))))
        return int(min(65536, max(4096, tokens))), 4096
    tokens = 2 ** int(math.floor(math.log2(max(1, 32 * 2**20 // (4 * ffn)))))
    return int(min(65536, max(512, tokens))), 256


def plan_batches(lengths: np.ndarray, batch_size: int | None, budget: tuple[int, int]) -> list[np.ndarray]:
    """Length-sorted batches (longest first): `batch_size` rows each, or by padded-token budget when None (auto)."""
    if batch_size is not None:
        return sorted_batches(lengths, batch_size)
    return token_budget_batches(lengths, budget[0], budget[1])


Outputs = Callable[[], list[np.ndarray]]
"""The outputs of batches already queued (`start_batches`): calling it waits for the last of them."""


def run_batches(fn: BatchFn, encoded: Encoded, batches: Sequence[np.ndarray], *, model: Any, pad_id: int,
                device: torch.device, dtype: torch.dtype, bar: Any = None, unmasked: bool = False,
                capturable: Callable[[], bool] | None = None) -> list[np.ndarray]:
    """fn(batch) for each batch of row indices, as float32 numpy, in batch order (see `in_input_order`).

    On a GPU (`_run_on_gpu`) batches are padded and pinned on a worker thread ahead of the device, copied without
    waiting, and their outputs copied back while the next batches run. `unmasked`: fn takes a batch without
    "attention_mask" as one with no padding (given such batches, attention runs unmasked). `capturable()` says
    whether fn can be replayed as a CUDA graph (`bertkit.models.replay`; None: never)."""
    return start_batches(fn, encoded, batches, model=model, pad_id=pad_id, device=device, dtype=dtype, bar=bar,
                         unmasked=unmasked, capturable=capturable)()


def start_batches(fn: BatchFn, encoded: Encoded, batches: Sequence[np.ndarray], *, model: Any, pad_id: int,
                  device: torch.device, dtype: torch.dtype, bar: Any = None, unmasked: bool = False,
                  capturable: Callable[[], bool] | None = None) -> Outputs:
    """`run_batches` whose last outputs are collected later: on a GPU it returns once every batch is queued, so the
    caller can queue the next piece of work (embed's next shard) before waiting for these. On a CPU the work is
    done when it returns."""
    accepted = accepted_inputs(model)
    if device.type == "cuda":
        compute = _compute_context(model, device, dtype)
        return _run_on_gpu(fn, encoded, batches, accepted, pad_id, device, compute, bar, unmasked, capturable)
    outputs = []
    with torch.inference_mode(), loading.autocast(device, dtype):
        for rows in batches:
            outputs.append(fn(pad_batch(encoded, rows, pad_id, inputs=accepted, device=device)).float().cpu().numpy())
            if bar is not None:
                bar.update(len(rows))
    return lambda: outputs


IN_FLIGHT = 3
"""Batches whose outputs are still on their way back to the host while the next ones run."""
GPU_WIDTH_MULTIPLE = 16
"""Padded widths on a GPU are multiples of this: tensor-core friendly, and shapes repeat (graph replays)."""


def gpu_padded_width(longest: int) -> int:
    return -(-max(longest, 1) // GPU_WIDTH_MULTIPLE) * GPU_WIDTH_MULTIPLE


def padded_tokens(encoded: Encoded, batches: Sequence[np.ndarray], device: torch.device) -> int:
    """Tokens `run_batches` runs the model on, padding included (each batch padded to its longest row, rounded up
    to GPU_WIDTH_MULTIPLE on a GPU)."""
    total = 0
    for rows in batches:
        longest = int(encoded.lengths[np.asarray(rows)].max()) if len(rows) else 0
        total += len(rows) * (gpu_padded_width(longest) if device.type == "cuda" else longest)
    return total


def _compute_context(model: Any, device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Autocast unless the weights already are in `dtype` (`cast_for_inference`): then the kernels run in it."""
    weights = next(iter(model.parameters()), None)
    if weights is not None and weights.dtype == dtype:
        return contextlib.nullcontext()
    return loading.autocast(device, dtype)


def _run_on_gpu(fn: BatchFn, encoded: Encoded, batches: Sequence[np.ndarray], accepted: frozenset[str], pad_id: int,
                device: torch.device, compute: contextlib.AbstractContextManager, bar: Any, unmasked: bool,
                capturable: Callable[[], bool] | None) -> Outputs:
    """`start_batches` on a GPU: no host synchronisation but waiting for an output IN_FLIGHT batches later; the
    last IN_FLIGHT outputs are waited for when the returned function is called."""
    def prepare(rows: np.ndarray) -> dict[str, torch.Tensor]:
        lengths = encoded.lengths[np.asarray(rows)]
        width = gpu_padded_width(int(lengths.max()))
        batch = pad_batch(encoded, rows, pad_id, pad_to=width, inputs=accepted)
        if unmasked and (lengths == width).all():
            batch.pop("attention_mask", None)
        return {name: tensor.pin_memory() for name, tensor in batch.items()}

    call = Replayed(fn, device, capturable) if capturable is not None and isinstance(compute, contextlib.nullcontext) \
        else (lambda batch: fn({k: v.to(device, non_blocking=True) for k, v in batch.items()}))
    outputs: list[np.ndarray] = []
    waiting: deque[tuple[torch.Tensor, Any, int]] = deque()

    def collect() -> None:
        copy, done, n = waiting.popleft()
        done.synchronize()
        outputs.append(copy.numpy().copy())  # the pinned buffer goes back to the allocator
        if bar is not None:
            bar.update(n)

    with torch.inference_mode(), compute:
        for rows, batch in ahead(batches, prepare):
            result = call(batch).float()
            copy = torch.empty(result.shape, dtype=torch.float32, pin_memory=True)
            copy.copy_(result, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            waiting.append((copy, done, len(rows)))
            if len(waiting) > IN_FLIGHT:
                collect()

    def rest() -> list[np.ndarray]:
        while waiting:
            collect()
        return outputs

    return rest


def in_input_order(batches: Sequence[np.ndarray], outputs: Sequence[np.ndarray], row_shape: tuple[int, ...]) -> np.ndarray:
    """Per-batch outputs stacked back into the rows' original order; (0, *row_shape) when there were no rows."""
    if not outputs:
        return np.zeros((0, *row_shape), np.float32)
    return restore_order(batches, outputs)


def pad_id_of(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


PLAIN_EVERY = 10.0
"""Seconds between two lines of a progress report written where no terminal reads it (a log file, a CI pipe)."""


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "rows", *, initial: int = 0, stream: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> Any:
    """The progress bar of every command (embed, probe, predict, evaluate, export, finetune, distill, sweep), on
    stderr (`stream`) counting rows or `unit` (windows of long texts, steps) from `initial`: on a terminal a tqdm bar;
    elsewhere a plain line every `PLAIN_EVERY` seconds of `clock` and one at the end (`PlainProgress`), since a bar's
    carriage-return redraws fill a log with thousands of updates. None when not `enabled` (--quiet, --json, or not
    the main process)."""
    if not enabled:
        return None
    stream = sys.stderr if stream is None else stream
    if not _is_terminal(stream):
        return PlainProgress(total, desc, unit, stream, clock, initial)
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream, dynamic_ncols=True, smoothing=0.1)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class PlainProgress:
    """A progress report for a log: `desc: n/total unit (p%), rate, elapsed, time left, loss=...` as one line at most
    every `every` seconds of `clock` and once when closed (where it ended, a failure's too). Answers what callers ask
    of a tqdm bar: `update`, `set_postfix`, `total` (which may grow), `refresh`, `close`."""

    def __init__(self, total: int | None, desc: str, unit: str, stream: Any,
                 clock: Callable[[], float] = time.monotonic, initial: int = 0, every: float = PLAIN_EVERY):
        self.total, self.desc, self.unit, self.stream, self.clock, self.every = total, desc, unit, stream, clock, every
        self.n = self.initial = self.shown = initial
        self.started = self.last = clock()
        self.postfix, self.closed = "", False

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self.last >= self.every:
            self._write()

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in {**(ordered_dict or {}), **values}.items())

    def refresh(self) -> None:
        """A new total is shown with the next line."""

    def close(self) -> None:
        if not self.closed and self.n != self.shown:
            self._write()
        self.closed = True

    def line(self, now: float) -> str:
        """The report at `now` (seconds of the clock)."""
        elapsed, done = now - self.started, self.n - self.initial
        count = f"{self.n:,}/{self.total:,} {self.unit}" if self.total else f"{self.n:,} {self.unit}"
        parts = [count + (f" ({self.n / self.total:.0%})" if self.total else "")]
        rate = done / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            parts.append(f"{rate:,.2f} {self.unit}/s" if rate < 10 else f"{rate:,.0f} {self.unit}/s")
        parts.append(f"{duration(elapsed)} elapsed")
        if rate > 0 and self.total and self.n < self.total:
            parts.append(f"about {duration((self.total - self.n) / rate)} left")
        return f"{self.desc}: {', '.join(parts + ([self.postfix] if self.postfix else []))}"

    def _write(self) -> None:
        self.last = self.clock()
        self.shown = self.n
        self.stream.write(self.line(self.last) + "\n")
        self.stream.flush()


def duration(seconds: float) -> str:
    """A progress line's time: 42s, 3m05s, 2h07m."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@contextlib.contextmanager
def closing(bar: Any):
    """Close the bar however the block ends."""
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


# ---------------------------------------------------------------- logits of a sequence classifier


FAST_PATH_MIN_ROWS = 1024
"""Fewer rows than this run the model's own forward: the fast path's check at wrap time (six small forward passes,
the first of them paying the one-off warm-up) costs more than the last layer it saves, about 1/L of the compute
per row (measured: `bertkit predict` of three sentences spent 2-8 s wrapping against about 1 s for the model's own
first forward; benchmarks/bench_startup.py --only-predict)."""


def classifier_logits(classifier: Any, tokenizer: Any, dataset: TextDataset, *, reading: Reading, batch_size: int,
                      precision: str, progress: bool = False, counted: RowsCut | None = None) -> np.ndarray:
    """Logits of a sequence classifier for every row of `dataset`, in its order (predict, evaluate, distill).

    Texts longer than `reading.max_length` are cut (`reading.truncation`), or with `reading.long_text` chunk read
    whole in overlapping windows pooled back to one row per text: the max per class, the mean of a regression
    model's numbers (why: `bertkit.encoding.longtext`). `precision` int8 wants a model `load_for_inference`
    quantized once; an fp32 one is quantized here, a copy per call. An ONNX export runs in its own precision."""
    onnx_run = isinstance(classifier, onnx.OnnxModel)
    if onnx_run:  # an export folder: its session in place of the torch model
        model = net = classifier
        device, dtype = torch.device("cpu"), torch.float32
    else:
        model = classifier.model if isinstance(classifier, SequenceClassifier) else classifier
        device = next(model.parameters()).device
        dtype = loading.choose_dtype(precision, device)
        if precision == loading.INT8 and not quantize.is_int8(model):
            model = classifier = quantize.quantized_int8(model)
        model.eval()
        net = classifier if isinstance(classifier, SequenceClassifier) else SequenceClassifier(
            model, fast=len(dataset) >= FAST_PATH_MIN_ROWS)
    windows = encode_for(tokenizer, dataset, reading)
    if counted is not None and not reading.chunked:  # chunked texts are read whole, never cut
        counted.add(len(windows.encoded.lengths), windows.encoded.n_truncated)
    batches = sorted_batches(windows.encoded.lengths, batch_size)
    with closing(progress_bar(len(windows.owner), "predict", progress)) as bar:
        outputs = run_batches(lambda batch: net(**batch), windows.encoded, batches, model=model,
                              pad_id=pad_id_of(tokenizer), device=device, dtype=dtype, bar=bar, unmasked=not onnx_run,
                              capturable=None if onnx_run else (lambda: net.fast))
    per_window = in_input_order(batches, outputs, (model.config.num_labels,))
    return windows.pool(per_window, "mean" if getattr(model.config, "problem_type", None) == "regression" else "max")


def export_compute_of(model_dir: str, precision: str) -> Compute | None:
    """The `Compute` of an ONNX export folder, which runs in its own baked-in precision on the CPU (so there only
    auto/fp32 may be asked for); None for a model folder, whose --precision the command resolves
    (`Compute.resolve`)."""
    if not onnx.is_export(model_dir):
        return None
    onnx.check_precision(precision, model_dir)
    return onnx.export_compute(model_dir)


def load_for_inference(model_dir: str, compute: Compute) -> tuple[Any, Any, LabelMap]:
    """A fine-tuned folder: classifier (eval mode, on `compute`'s device: the command's one resolution of --device
    and --precision, `export_compute_of` or `Compute.resolve`), tokenizer, and its label mapping. `compute` int8: on the CPU, its linear
    layers quantized (`quantize.quantized_int8`), for inference only. An ONNX export folder: its runner
    (`bertkit.models.onnx`), which takes only its own precision."""
    if onnx.is_export(model_dir):
        if compute.precision not in ("fp32", onnx.export_compute(model_dir).precision):
            onnx.check_precision(compute.precision, model_dir)  # its precision is baked in: refused
        return onnx.load_for_inference(model_dir)
    model = loading.load_classifier(model_dir, require_head=True)
    tokenizer = loading.load_tokenizer(model_dir)
    id2label = getattr(model.config, "id2label", None) or {i: str(i) for i in range(model.config.num_labels)}
    if compute.precision == loading.INT8:
        model = quantize.quantized_int8(model.to(compute.torch_device).eval(), inplace=True)  # inference only
    else:
        model = loading.cast_for_inference(model, compute.torch_device, compute.dtype).eval()
    return model, tokenizer, LabelMap.from_id2label(id2label, getattr(model.config, "problem_type", None))


def precision_of(model: Any, compute: Compute) -> str:
    """The precision a loaded classifier runs in, as results record it: `compute`'s (fp32, bf16, fp16, int8), or an
    ONNX export's backend (onnx, onnx-int8)."""
    return model.backend if isinstance(model, onnx.OnnxModel) else compute.precision
