"""The tagger's own layers (`TokenClassifier` in training on a CPU) compute what the model's own forward computes:
the same logits, the same loss over labelled pieces and the same gradients in fp32; elsewhere (eval mode, a model
outside `TOKEN_CLASSIFIERS`, fast=False) the model's own forward runs."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    BertConfig,
    BertForTokenClassification,
    DistilBertConfig,
    DistilBertForTokenClassification,
    RobertaConfig,
    RobertaForTokenClassification,
)

from bertkit.encoding.word_labels import IGNORE
from bertkit.models.tagger import TokenClassifier, tagger_unsupported_reason

TAGS = 5


def tiny_bert(dropout: float = 0.0) -> BertForTokenClassification:
    torch.manual_seed(0)
    return BertForTokenClassification(BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
        num_labels=TAGS, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout))


def tiny_distilbert(dropout: float = 0.0) -> DistilBertForTokenClassification:
    torch.manual_seed(0)
    return DistilBertForTokenClassification(DistilBertConfig(
        vocab_size=100, dim=32, n_layers=3, n_heads=4, hidden_dim=64, num_labels=TAGS, dropout=dropout,
        attention_dropout=dropout))


def padded_batch() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Four windows of different lengths (padding on the right) and their labels: some pieces labelled, the rest
    IGNORE (later pieces, [CLS]/[SEP], padding)."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 100, (4, 11), generator=generator)
    mask = torch.ones_like(input_ids)
    labels = torch.randint(0, TAGS, (4, 11), generator=generator)
    labels[:, ::3] = IGNORE
    for row, length in enumerate((11, 7, 3, 9)):
        mask[row, length:] = 0
        input_ids[row, length:] = 0
        labels[row, length - 1:] = IGNORE
    labels[:, 0] = IGNORE
    return {"input_ids": input_ids, "attention_mask": mask}, labels


def loss_and_grads(forward, model, batch, labels) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = forward(**batch)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("make", [tiny_bert, tiny_distilbert])
def test_own_layers_give_the_models_logits_loss_and_gradients_in_fp32(make):
    model = make().train()  # training mode (dropout 0): the path a CPU training step takes
    net = TokenClassifier(model)
    assert net.fast and net.unsupported is None and next(model.parameters()).dtype == torch.float32
    batch, labels = padded_batch()
    calls = []
    real_fast = net.fast_logits
    net.fast_logits = lambda *a, **k: calls.append(1) or real_fast(*a, **k)
    fast_logits, fast_loss, fast_grads = loss_and_grads(net, model, batch, labels)
    own_logits, own_loss, own_grads = loss_and_grads(lambda **b: model(**b).logits, model, batch, labels)
    assert calls, "the training forward did not take the tagger's own layers"
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(fast_logits[real], own_logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast_loss, own_loss, atol=1e-6, rtol=1e-6)
    assert fast_grads.keys() == own_grads.keys() and len(own_grads) > 10
    for name, grad in own_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_dropout_is_drawn_in_training_and_off_in_eval():
    model = tiny_bert(dropout=0.3).train()
    net = TokenClassifier(model)
    batch, _ = padded_batch()
    first, second = net(**batch), net(**batch)
    assert not torch.allclose(first, second)  # new masks each call
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(net(**batch), model(**batch).logits, atol=0, rtol=0)  # eval: the model's own


def test_other_models_and_fast_off_run_the_models_own_forward():
    torch.manual_seed(0)
    roberta = RobertaForTokenClassification(RobertaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        num_labels=TAGS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    assert "RobertaForTokenClassification" in tagger_unsupported_reason(roberta)
    batch, _ = padded_batch()
    for net, model in ((TokenClassifier(roberta.train()), roberta), (TokenClassifier(tiny_bert().train(), fast=False),
                                                                    None)):
        model = model or net.model
        assert not net.fast
        net.fast_logits = lambda *a, **k: pytest.fail("the own layers ran")
        torch.testing.assert_close(net(**batch), model(**batch).logits, atol=0, rtol=0)
