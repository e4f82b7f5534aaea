"""Dynamic int8 models for `--precision int8` (which precision a run uses, and its name, is `loading`'s): a copy
(or, for a model loaded for one inference alone, the model itself) whose `nn.Linear` layers hold int8 weights and
quantize their inputs per call; how to tell such a model; and how to run it in fp32 on those int8 weights (the fast
path's self-check). CPU only: the fbgemm/x86 kernels of `torch.ao`.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch


def quantized_int8(model: Any, inplace: bool = False) -> Any:
    """A copy of `model` whose `nn.Linear` layers are dynamically quantized: int8 weights (per output channel), activations
    quantized per call from their own range, products in int8 and accumulated in int32 (fbgemm/x86 kernels);
    embeddings, LayerNorm and softmax stay fp32. For inference on the CPU only (`loading.choose_dtype` refuses int8
    elsewhere). A copy, so a model that is later saved or trained stays fp32; `inplace` converts `model` itself
    (no second copy of the weights), only for a model loaded for this inference alone."""
    import copy
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if is_int8(model):
        return model
    engines = torch.backends.quantized.supported_engines
    if torch.backends.quantized.engine not in ("x86", "fbgemm"):
        torch.backends.quantized.engine = next((e for e in ("x86", "fbgemm") if e in engines), engines[-1])
    with warnings.catch_warnings():
        # torch 2.13 still ships eager-mode dynamic quantization and runs it, but warns on every call that
        # torch.ao.quantization is deprecated (in favour of torchao, not installed here); the warnings come at
        # conversion only, say nothing a user can act on, and would repeat for every command run.
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*deprecated")
        target = model if inplace else copy.deepcopy(model)
        # Per output channel: one scale per row of the weight matrix. Per tensor (torch's default) lost 2.4 points
        # of probe accuracy on MiniLM [CLS] features (SST-2 dev, cosine 0.972 to fp32); per channel, measured in
        # benchmarks/results/int8.json, keeps them (onnxruntime's export uses per channel too).
        spec = {torch.nn.Linear: per_channel_dynamic_qconfig}
        return quantize_dynamic(target, spec, dtype=torch.qint8, inplace=True).eval()


@contextlib.contextmanager
def int8_in_float(model: Any):
    """Within the block, every int8 linear layer of `model` computes in fp32 with its int8 weights dequantized:
    the same weights, no activation rounding. How the fast path's self-check (`fastforward.agreement`) compares
    two computations of an int8 model exactly; a no-op for any other model."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    layers = [m for m in model.modules() if isinstance(m, DynamicInt8Linear)]
    for layer in layers:
        layer.forward = functools.partial(torch.nn.functional.linear, weight=layer.weight().dequantize(),
                                          bias=layer.bias())
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def is_int8(model: Any) -> bool:
    """Whether `model` holds dynamically quantized int8 linear layers (made by `quantized_int8`)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    return any(isinstance(module, DynamicInt8Linear) for module in model.modules())
