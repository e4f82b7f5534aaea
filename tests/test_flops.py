"""The standard MFU count (`bertkit.measure.flops`): BERT-base's N, the issue's worked figures, the spec table."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import BertConfig, BertModel, DistilBertConfig

from bertkit.measure import flops


def test_non_embedding_parameters_are_the_encoder_layers_parameters():
    assert flops.Shape.of(BertConfig()).non_embedding_params == 85_054_464  # BERT-base: 85.05M
    assert flops.Shape.of(DistilBertConfig()).non_embedding_params == 42_527_232
    small = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    counted = sum(p.numel() for p in BertModel(small, add_pooling_layer=False).encoder.parameters())
    assert flops.Shape.of(small).non_embedding_params == counted


def test_training_and_inference_counts_reproduce_the_published_figures():
    """512-token BERT-base training at 1,031.79 rows/s on an H200 is 30.3% MFU by the standard count (issue 47)."""
    lengths = np.full(1000, 512)
    per_row = flops.training_flops(BertConfig(), lengths) / len(lengths)
    assert per_row == pytest.approx(512 * (6 * 85_054_464 + 12 * 12 * 768 * 512))
    assert flops.mfu(per_row * 1031.79, 1.0, 989.4) == pytest.approx(0.303, abs=5e-4)
    assert flops.inference_flops(BertConfig(), lengths) == pytest.approx(per_row * 1000 / 3)


def test_spec_peaks_match_the_most_specific_name():
    assert flops.spec_peak_tflops("NVIDIA H100 80GB HBM3") == (989.4, "H100")
    assert flops.spec_peak_tflops("NVIDIA H100 PCIe")[0] == 756.0
    assert flops.spec_peak_tflops("NVIDIA H200")[0] == 989.4
    assert flops.spec_peak_tflops("NVIDIA A100-SXM4-80GB")[0] == 312.0
    peak, why = flops.spec_peak_tflops("cpu")
    assert peak is None and "not in" in why
    assert flops.mfu(1e12, 1.0, None) is None
