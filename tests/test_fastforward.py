"""The fast classifier forward computes what the `transformers` forward computes (logits and gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.models import fastforward, layers
from bertkit.models.fastforward import SequenceClassifier, dropout, unsupported_reason


def tiny_bert(**overrides) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, num_labels=3, **overrides)
    return BertForSequenceClassification(config)


def tiny_distilbert() -> DistilBertForSequenceClassification:
    torch.manual_seed(0)
    return DistilBertForSequenceClassification(
        DistilBertConfig(vocab_size=100, dim=32, n_layers=3, n_heads=4, hidden_dim=64, num_labels=3))


def padded_batch(pairs: bool) -> dict[str, torch.Tensor]:
    """Four rows of different lengths (padding on the right), optionally with segment B ids."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 100, (4, 11), generator=generator)
    mask = torch.ones_like(input_ids)
    for row, length in enumerate((11, 7, 3, 9)):
        mask[row, length:] = 0
        input_ids[row, length:] = 0
    batch = {"input_ids": input_ids, "attention_mask": mask}
    if pairs:
        batch["token_type_ids"] = ((torch.arange(11) >= 5).long().expand(4, 11) * mask).contiguous()
    return batch


def logits_and_grads(forward, model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = forward(batch)
    (logits * torch.arange(1.0, 4.0)).sum().backward()  # weights the classes differently: every logit matters
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("make, pairs", [(tiny_bert, False), (tiny_bert, True), (tiny_distilbert, False)])
def test_same_logits_and_gradients_as_transformers(make, pairs):
    model = make().eval()  # eval: no dropout, so both forwards are deterministic
    batch = padded_batch(pairs)
    fast = SequenceClassifier(model)
    assert fast.fast
    ref_logits, ref_grads = logits_and_grads(lambda b: model(**b).logits, model, batch)
    got_logits, got_grads = logits_and_grads(lambda b: fast(**b), model, batch)
    torch.testing.assert_close(got_logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert got_grads.keys() == ref_grads.keys()  # every parameter gets its gradient, none is skipped
    for name in ref_grads:
        torch.testing.assert_close(got_grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("make, pairs", [(tiny_bert, True), (tiny_distilbert, False)])
def test_lean_gpu_layers_compute_what_autocast_layers_compute(make, pairs, monkeypatch):
    """The layers a GPU runs (`layers.LEAN_GPU_LAYERS`: one product for the projections, a bf16 residual stream
    under bf16 autocast), pinned here on the CPU: in fp32 the logits and gradients of transformers; under bf16
    autocast a bf16 stream whose logits and gradients are as close to fp32 as autocast's own layers are."""
    model = make().eval()
    batch = padded_batch(pairs)
    fast = SequenceClassifier(model)

    def run(lean: bool, dtype: torch.dtype | None):
        monkeypatch.setattr(layers, "lean_layers", lambda hidden: lean)
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            return logits_and_grads(lambda b: fast.fast_logits(**b, own_layers=True).float(), model, batch)

    ref_logits, ref_grads = logits_and_grads(lambda b: model(**b).logits, model, batch)
    lean_logits, lean_grads = run(True, None)
    torch.testing.assert_close(lean_logits, ref_logits, rtol=1e-5, atol=1e-6)
    assert lean_grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(lean_grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    (low_logits, low_grads), (plain_logits, plain_grads) = run(True, torch.bfloat16), run(False, torch.bfloat16)
    assert relative(low_logits, ref_logits) < max(3 * relative(plain_logits, ref_logits), 2e-2)
    for name in ("classifier.weight", next(n for n in ref_grads if "layer.0." in n and n.endswith("weight"))):
        assert relative(low_grads[name], ref_grads[name]) < max(3 * relative(plain_grads[name], ref_grads[name]), 5e-2)
    monkeypatch.setattr(layers, "lean_layers", lambda hidden: True)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        states = fastforward.hidden_states(model, batch, 2, training=False, keep=[1])
    assert states[1].dtype == states[2].dtype == torch.bfloat16


def test_padding_does_not_change_a_rows_logits():
    model = tiny_bert().eval()
    batch = padded_batch(pairs=False)
    fast = SequenceClassifier(model)
    with torch.inference_mode():
        together = fast(**batch)
        alone = fast(input_ids=batch["input_ids"][2:3, :3], attention_mask=batch["attention_mask"][2:3, :3])
    torch.testing.assert_close(together[2:3], alone, rtol=1e-5, atol=1e-6)


def test_other_architectures_and_opt_out_use_the_models_own_forward():
    torch.manual_seed(0)
    roberta = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)).eval()
    assert "RobertaForSequenceClassification" in unsupported_reason(roberta)
    batch = padded_batch(pairs=False)
    batch["input_ids"] = batch["input_ids"].clamp(min=3)  # RoBERTa's padding id is 1
    wrapped = SequenceClassifier(roberta)
    assert not wrapped.fast
    torch.testing.assert_close(wrapped(**batch), roberta(**batch).logits)
    bert = tiny_bert().eval()
    assert not SequenceClassifier(bert, fast=False).fast
    assert unsupported_reason(tiny_bert(is_decoder=True)) == "BERT configured as a decoder"


def test_training_mode_follows_the_wrapped_model():
    model = tiny_bert(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    batch = padded_batch(pairs=False)
    fast = SequenceClassifier(model.eval())
    with torch.no_grad():
        assert torch.equal(fast(**batch), fast(**batch))  # eval: deterministic
        model.train()
        torch.manual_seed(3)
        first = fast(**batch)
        torch.manual_seed(3)
        again = fast(**batch)
        other = fast(**batch)
    assert torch.equal(first, again)  # dropout follows the global RNG: seeding reproduces it
    assert not torch.equal(first, other)


def test_cpu_dropout_keeps_1_minus_p_and_rescales():
    torch.manual_seed(0)
    x = torch.ones(200_000)
    y = dropout(x, 0.1, training=True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.9))
    assert abs(y.mean().item() - 1.0) < 0.01  # unbiased: same expectation as no dropout
    assert dropout(x, 0.1, training=False) is x


def test_finetune_fast_and_transformers_forward_train_the_same_weights(no_dropout_bert, write_tsv, toy_rows, tmp_path):
    """Without dropout the two forwards are the same function: a whole fine-tuning run ends with the same weights.

    Pinned to fp32: under bf16 the two forwards round differently, and emulated bf16 (CPUs without AVX512-BF16)
    rounds differently again, so a bf16 comparison would test the CPU, not the fast forward."""
    model_dir = no_dropout_bert
    train = write_tsv("train.tsv", toy_rows, ("sentence", "label"))
    dev = write_tsv("dev.tsv", toy_rows[:20], ("sentence", "label"))
    runs = {}
    for fast in (True, False):
        cfg = FinetuneConfig.of(model=str(model_dir), data=str(train), dev=str(dev), out=str(tmp_path / f"run-{fast}"),
                             epochs=2, lr=5e-3, batch_size=8, save_every=None, fast_forward=fast,
                             precision="fp32")
        result = finetune(cfg, progress=False)
        assert result.metrics["forward"] == ("fast" if fast else "transformers")
        runs[fast] = (result.metrics, load_file(str(tmp_path / f"run-{fast}" / "final" / "model.safetensors")))
    (fast_metrics, fast_weights), (hf_metrics, hf_weights) = runs[True], runs[False]
    assert fast_weights.keys() == hf_weights.keys()
    for name in hf_weights:
        np.testing.assert_allclose(fast_weights[name], hf_weights[name], rtol=1e-3, atol=1e-5, err_msg=name)
    assert fast_metrics["history"][-1]["train_loss"] == pytest.approx(hf_metrics["history"][-1]["train_loss"], rel=1e-4)


def test_megatron_bert_is_not_allowlisted_and_gives_its_own_logits():
    """MegatronBERT's layers look like BERT's, but its encoder ends in a LayerNorm: the allowlist keeps it out."""
    from transformers import MegatronBertConfig, MegatronBertForSequenceClassification

    torch.manual_seed(0)
    model = MegatronBertForSequenceClassification(MegatronBertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
        num_labels=3)).eval()
    assert "MegatronBertForSequenceClassification" in unsupported_reason(model)
    wrapped = SequenceClassifier(model)
    assert not wrapped.fast
    for pairs in (False, True):
        batch = padded_batch(pairs)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(**batch), model(**batch).logits, rtol=0, atol=0)


@pytest.mark.parametrize("make", [tiny_bert, tiny_distilbert])
def test_a_fast_path_that_disagrees_at_wrap_time_falls_back_and_says_so(make, monkeypatch, caplog):
    import bertkit.models.fastforward as fastforward

    model = make()  # training mode: the check runs in eval mode and leaves the mode as it was
    real = fastforward.cls_output
    monkeypatch.setattr(fastforward, "cls_output", lambda *args, **kw: real(*args, **kw) * 1.01)
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        wrapped = SequenceClassifier(model)
    assert not wrapped.fast and "differed" in wrapped.unsupported
    assert "[CLS]-only last layer" in caplog.text and "model's own forward" in caplog.text
    assert model.training and wrapped.training
    model.eval()
    batch = padded_batch(pairs=False)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(**batch), model(**batch).logits, rtol=0, atol=0)


def test_the_wrap_time_check_leaves_the_global_rng_alone():
    model = tiny_bert()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert SequenceClassifier(model).fast
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------- int8


@pytest.mark.parametrize("make", [tiny_bert, tiny_distilbert])
def test_int8_model_keeps_the_fast_path_close_to_its_own_and_to_fp32(make, caplog):
    from bertkit.models import fastforward, quantize

    model = make().eval()
    quantized = quantize.quantized_int8(model)
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        wrapped = SequenceClassifier(quantized)
    assert wrapped.fast and not caplog.text
    batch = padded_batch(pairs=False)
    with torch.no_grad():
        fast, own, fp32 = wrapped(**batch), quantized(**batch).logits, model(**batch).logits
    # measured on these tiny models: fast vs own ~1e-6, either vs fp32 ~3e-4 (relative to the largest logit)
    assert fastforward.relative_difference(fast, own) < 1e-3
    assert fastforward.relative_difference(fast, fp32) < 1e-2
    assert not torch.equal(own, fp32)  # the int8 layers really ran


def test_int8_fast_path_with_a_layout_mistake_still_falls_back(monkeypatch, caplog):
    """The check runs the int8 model in fp32 on its int8 weights, so even a small layout mistake is caught."""
    import bertkit.models.fastforward as fastforward
    from bertkit.models import quantize

    quantized = quantize.quantized_int8(tiny_bert().eval())
    real = fastforward.cls_output
    monkeypatch.setattr(fastforward, "cls_output", lambda *args, **kw: real(*args, **kw) * 1.01)
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        wrapped = SequenceClassifier(quantized)
    assert not wrapped.fast and "[CLS]-only last layer" in caplog.text
    batch = padded_batch(pairs=False)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(**batch), quantized(**batch).logits, rtol=0, atol=0)


@pytest.mark.slow  # Inductor compiles for about a minute on 2 cores
def test_compiled_finetune_trains_the_same_weights_and_resumes(no_dropout_bert, write_tsv, toy_rows, tmp_path):
    """--compile is the same arithmetic under Inductor: without dropout, a run ends with the eager run's weights, its
    saved model folders keep the model's own parameter names, and a finished compiled run is recognised as finished.
    Pinned to fp32 (see the test above)."""
    train = write_tsv("train.tsv", toy_rows, ("sentence", "label"))
    dev = write_tsv("dev.tsv", toy_rows[:20], ("sentence", "label"))
    weights = {}
    for compiled in (False, True):
        cfg = FinetuneConfig.of(model=str(no_dropout_bert), data=str(train), dev=str(dev),
                             out=str(tmp_path / f"run-{compiled}"), epochs=1, lr=5e-3, batch_size=8, save_every=None,
                             compile=compiled, precision="fp32")
        result = finetune(cfg, progress=False)
        weights[compiled] = load_file(str(tmp_path / f"run-{compiled}" / "final" / "model.safetensors"))
        if compiled:
            assert finetune(cfg, progress=False).already_finished
    assert weights[True].keys() == weights[False].keys()
    assert not any("_orig_mod" in name for name in weights[True])
    for name in weights[False]:
        np.testing.assert_allclose(weights[True][name], weights[False][name], rtol=1e-3, atol=1e-5, err_msg=name)
    assert result.metrics["best_dev"]["accuracy"] is not None


@pytest.mark.slow  # Inductor compiles the layer (forward and backward) for about half a minute on 2 cores
def test_the_compiled_layer_computes_what_the_layer_computes():
    """`compiled_layer()` (what --compile runs inside the GPU's graphed steps) is `block_forward` under Inductor: the
    same hidden states and gradients in fp32, padded and unpadded, with one compiled function for every layer."""
    model = tiny_bert(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train()
    batch = padded_batch(pairs=True)
    results = {}
    for name, layer in (("eager", layers.block_forward), ("compiled", layers.compiled_layer())):
        model.zero_grad(set_to_none=True)
        for rows in (batch, {k: v[:1, :5] for k, v in batch.items() if k != "attention_mask"}):
            states = fastforward.hidden_states(model, rows, 3, training=True, layer=layer)
            states[3].square().mean().backward()
        results[name] = states[3].detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                             if p.grad is not None}
    torch.testing.assert_close(results["compiled"][0], results["eager"][0], rtol=1e-4, atol=1e-5)
    assert results["compiled"][1].keys() == results["eager"][1].keys()
    for name, grad in results["eager"][1].items():
        torch.testing.assert_close(results["compiled"][1][name], grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("make", [tiny_bert, tiny_distilbert])
def test_half_precision_weights_are_checked_in_fp32_and_left_as_they_were(make, caplog):
    """bf16 weights (as `cast_for_inference` leaves them on a GPU): the wrap-time check widens them to fp32, so it
    compares the layout, not two roundings, and hands the weights back bit for bit."""
    model = make().eval().to(torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        wrapped = SequenceClassifier(model)
    assert wrapped.fast and not caplog.text
    after = model.state_dict()
    assert all(after[k].dtype == v.dtype and torch.equal(after[k], v) for k, v in before.items())
