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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap
from bertkit.encoding.batches import pad_batch, restore_order, sorted_batches, token_budget_batches
from bertkit.encoding.encode import Encoded, encode_for
from bertkit.encoding.longtext import LongText
from bertkit.models import loading as modeling
from bertkit.models import onnx, quantize
from bertkit.models.fastforward import SequenceClassifier
from bertkit.models.inputs import accepted_inputs

BatchFn = Callable[[dict[str, torch.Tensor]], torch.Tensor]
"""One padded batch (on the device, only the inputs the model takes) -> a tensor with one row per input row."""


def auto_token_budget(model: Any, device: torch.device) -> tuple[int, int]:
    """`--batch-size auto`: (padded tokens per batch, max rows per batch) from the model size.

    The budget keeps the largest activation (tokens x FFN width x 4 bytes) near 32 MiB on a CPU (256 MiB on a
    GPU), rounded down to a power of two and kept within [512, 65536] tokens; at most 256 rows (1024 on a GPU).
    MiniLM-L6 (FFN 1536) -> 4096 tokens; BERT-base (FFN 3072) -> 2048 tokens.
    """
    config = model.config
    ffn = int(getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 0) or 4 * config.hidden_size)
    target = (256 if device.type == "cuda" else 32) * 2**20
    tokens = 2 ** int(math.floor(math.log2(max(1, target // (4 * ffn)))))
    return int(min(65536, max(512, tokens))), 1024 if device.type == "cuda" else 256


def plan_batches(lengths: np.ndarray, batch_size: int | None, budget: tuple[int, int]) -> list[np.ndarray]:
    """Length-sorted batches (longest first): `batch_size` rows each, or by padded-token budget when None (auto)."""
    if batch_size is not None:
        return sorted_batches(lengths, batch_size)
    return token_budget_batches(lengths, budget[0], budget[1])


def run_batches(fn: BatchFn, encoded: Encoded, batches: Sequence[np.ndarray], *, model: Any, pad_id: int,
                device: torch.device, dtype: torch.dtype, bar: Any = None) -> list[np.ndarray]:
    """fn(batch) for each batch of row indices, as float32 numpy, in batch order (see `in_input_order`)."""
    accepted = accepted_inputs(model)
    outputs = []
    with torch.inference_mode(), modeling.autocast(device, dtype):
        for rows in batches:
            outputs.append(fn(pad_batch(encoded, rows, pad_id, inputs=accepted, device=device)).float().cpu().numpy())
            if bar is not None:
                bar.update(len(rows))
    return outputs


def in_input_order(batches: Sequence[np.ndarray], outputs: Sequence[np.ndarray], row_shape: tuple[int, ...]) -> np.ndarray:
    """Per-batch outputs stacked back into the rows' original order; (0, *row_shape) when there were no rows."""
    if not outputs:
        return np.zeros((0, *row_shape), np.float32)
    return restore_order(batches, outputs)


def pad_id_of(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "rows") -> Any:
    """A tqdm bar on stderr counting rows (or `unit`: windows of long texts), or None (`--quiet`, --json, or not
    the main process)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


@contextlib.contextmanager
def closing(bar: Any):
    """Close the bar however the block ends."""
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


# ---------------------------------------------------------------- logits of a sequence classifier


def classifier_logits(classifier: Any, tokenizer: Any, dataset: TextDataset, *, max_length: int, batch_size: int,
                      precision: str, progress: bool = False, long_text: LongText | None = None) -> np.ndarray:
    """Logits of a sequence classifier for every row of `dataset`, in its order (predict, evaluate, distill).

    Texts longer than `max_length` are cut (`long_text.truncation`; None: head), or with `long_text.mode` chunk read
    whole in overlapping windows pooled back to one row per text: the max per class, the mean of a regression
    model's numbers (why: `bertkit.encoding.longtext`). `precision` int8 wants a model `load_for_inference`
    quantized once; an fp32 one is quantized here, a copy per call. An ONNX export runs in its own precision."""
    if isinstance(classifier, onnx.OnnxModel):  # an export folder: its session in place of the torch model
        model = net = classifier
        device, dtype = torch.device("cpu"), torch.float32
    else:
        model = classifier.model if isinstance(classifier, SequenceClassifier) else classifier
        device = next(model.parameters()).device
        dtype = modeling.choose_dtype(precision, device)
        if precision == modeling.INT8 and not quantize.is_int8(model):
            model = classifier = quantize.quantized_int8(model)
        model.eval()
        net = classifier if isinstance(classifier, SequenceClassifier) else SequenceClassifier(model)
    windows = encode_for(tokenizer, dataset, max_length, long_text)
    batches = sorted_batches(windows.encoded.lengths, batch_size)
    with closing(progress_bar(len(windows.owner), "predict", progress)) as bar:
        outputs = run_batches(lambda batch: net(**batch), windows.encoded, batches, model=model,
                              pad_id=pad_id_of(tokenizer), device=device, dtype=dtype, bar=bar)
    per_window = in_input_order(batches, outputs, (model.config.num_labels,))
    return windows.pool(per_window, "mean" if getattr(model.config, "problem_type", None) == "regression" else "max")


def load_for_inference(model_dir: str, precision: str = "fp32") -> tuple[Any, Any, LabelMap]:
    """A fine-tuned folder: classifier (eval mode, on the best device), tokenizer, and its label mapping.
    `precision` int8: on the CPU, its linear layers quantized (`quantize.quantized_int8`), for inference only.
    An ONNX export folder: its runner (`bertkit.models.onnx`), which takes only its own precision."""
    if onnx.is_export(model_dir):
        onnx.check_precision(precision, model_dir)
        return onnx.load_for_inference(model_dir)
    model = modeling.load_classifier(model_dir, require_head=True)
    tokenizer = modeling.load_tokenizer(model_dir)
    id2label = getattr(model.config, "id2label", None) or {i: str(i) for i in range(model.config.num_labels)}
    model.to(modeling.inference_device(None, precision)).eval()
    if precision == modeling.INT8:
        model = quantize.quantized_int8(model, inplace=True)  # loaded for inference only
    return model, tokenizer, LabelMap.from_id2label(id2label, getattr(model.config, "problem_type", None))
