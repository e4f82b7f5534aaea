"""Model FLOPs utilisation counted the standard way, one accounting for every results file and page.

- N is the encoder's non-embedding parameters (its layers: projections, feed-forward, LayerNorms, biases): 85.05M
  for BERT-base, 42.5M for DistilBERT-base. Embeddings, the pooler and the head are not counted.
- Training costs 6·N FLOPs per real token (forward 2·N, backward 4·N) plus attention: 12·layers·hidden·s per token of
  a row of s real tokens (scores and weighted values, forward and backward). Inference costs 2·N plus
  4·layers·hidden·s per token. Padding is never counted, and neither is work a fast path skips (bertkit's
  [CLS]-only last layer): the count is what the model needs, whatever runs.
- The peak is the device's dense bf16 tensor-core figure from its data sheet (`spec_peak_tflops`), not a rate
  measured in the run (results files record that beside it, for reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SPEC_BF16_DENSE_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIE", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4), ("H20", 148.0),
    ("GH200", 989.4), ("B200", 2250.0), ("A100", 312.0), ("A10G", 70.0), ("A10", 125.0), ("L40S", 362.0),
    ("L4", 121.0), ("V100", 125.0), ("T4", 65.0),
)
"""(name fragment, dense bf16 TFLOP/s; V100 and T4 have no bf16 tensor cores: their fp16 figure), matched in this
order: a name that contains another comes first ("H100 PCIe" before "H100", "H200" before "H20", "A100" before
"A10")."""


def spec_peak_tflops(device_name: str) -> tuple[float | None, str]:
    """(dense bf16 TFLOP/s from the data sheet, the entry matched) for a GPU name as torch reports it
    ("NVIDIA H100 80GB HBM3"); (None, reason) for a device not in the table."""
    name = device_name.upper()
    for fragment, tflops in SPEC_BF16_DENSE_TFLOPS:
        if fragment in name:
            return tflops, fragment
    return None, f"{device_name!r} is not in bertkit.measure.flops.SPEC_BF16_DENSE_TFLOPS"


@dataclass(frozen=True)
class Shape:
    """What the count needs of a model config (BERT and DistilBERT name the fields differently)."""

    layers: int
    hidden: int
    ffn: int

    @classmethod
    def of(cls, config: Any) -> Shape:
        return cls(int(getattr(config, "num_hidden_layers", None) or config.n_layers),
                   int(getattr(config, "hidden_size", None) or config.dim),
                   int(getattr(config, "intermediate_size", None) or config.hidden_dim))

    @property
    def non_embedding_params(self) -> int:
        """Per layer: query, key, value and output projections with biases, the two feed-forward matrices with
        biases, two LayerNorms (weight and bias)."""
        h, f = self.hidden, self.ffn
        return self.layers * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h)


def training_flops(config: Any, lengths: np.ndarray) -> float:
    """Standard training FLOPs over rows of `lengths` real tokens: 6·N·tokens + 12·layers·hidden·s² per row."""
    shape, s = Shape.of(config), np.asarray(lengths, dtype=np.float64)
    return float(6 * shape.non_embedding_params * s.sum() + 12 * shape.layers * shape.hidden * (s * s).sum())


def inference_flops(config: Any, lengths: np.ndarray) -> float:
    """Standard inference FLOPs over rows of `lengths` real tokens: 2·N·tokens + 4·layers·hidden·s² per row."""
    shape, s = Shape.of(config), np.asarray(lengths, dtype=np.float64)
    return float(2 * shape.non_embedding_params * s.sum() + 4 * shape.layers * shape.hidden * (s * s).sum())


def mfu(flops: float, seconds: float, peak_tflops: float | None) -> float | None:
    """flops / seconds / peak, or None without a peak (a device not in the table, a CPU)."""
    if not peak_tflops or seconds <= 0:
        return None
    return flops / seconds / (peak_tflops * 1e12)
