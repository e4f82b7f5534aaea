"""models/quantize.py: dynamic int8 copies (every linear layer, originals untouched, no warnings), int8 in fp32."""

from __future__ import annotations

import pytest
import torch

from bertkit.models import loading, quantize


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_distilbert_dir"])
def test_quantized_int8_is_a_copy_with_every_linear_layer_in_int8(request, fixture):
    import warnings

    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    model = loading.load_classifier(str(request.getfixturevalue(fixture)), id2label={0: "a", 1: "b"})
    linears = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantized = quantize.quantized_int8(model)
    assert not caught, [str(w.message)[:80] for w in caught]  # torch's deprecation notices are silenced
    modules = dict(quantized.named_modules())
    assert linears and all(isinstance(modules[name], DynamicInt8Linear) for name in linears)
    assert all(modules[name].weight().dtype == torch.qint8 for name in linears)
    assert quantize.is_int8(quantized) and not quantize.is_int8(model)  # the original is untouched (fp32, trainable)
    assert all(isinstance(m, torch.nn.Linear) for n, m in model.named_modules() if n in linears)
    assert quantize.quantized_int8(quantized) is quantized
    assert loading.precision_name(quantized, torch.float32) == "int8"
    assert loading.precision_name(model, torch.float32) == "fp32"


def test_int8_in_float_computes_with_the_int8_weights_without_activation_rounding(tiny_bert_dir):
    encoder = loading.load_encoder(str(tiny_bert_dir))
    quantized = quantize.quantized_int8(encoder)
    layer = quantized.encoder.layer[0].intermediate.dense
    x = torch.randn(3, 5, layer.in_features, generator=torch.Generator().manual_seed(0))
    exact = torch.nn.functional.linear(x, layer.weight().dequantize(), layer.bias())
    rounded = layer(x)
    assert not torch.equal(rounded, exact)
    with quantize.int8_in_float(quantized):
        torch.testing.assert_close(layer(x), exact, rtol=0, atol=0)
    torch.testing.assert_close(layer(x), rounded, rtol=0, atol=0)  # restored
    with quantize.int8_in_float(encoder):  # an fp32 model: nothing to do
        pass


def test_quantized_int8_inplace_converts_the_model_itself(tiny_bert_dir):
    encoder = loading.load_encoder(str(tiny_bert_dir))
    assert quantize.quantized_int8(encoder, inplace=True) is encoder and quantize.is_int8(encoder)
