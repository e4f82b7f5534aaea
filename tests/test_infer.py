"""The one inference loop: which inputs a model takes, length-sorted dynamically padded batches, inference mode,
outputs back in the input order, and classifier logits equal to the model's own."""

from __future__ import annotations

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    DistilBertModel,
    MegatronBertConfig,
    MegatronBertForSequenceClassification,
)

from bertkit.data.dataset import TextDataset
from bertkit.encoding.encode import Encoded
from bertkit.encoding.reading import Reading
from bertkit.models import infer
from bertkit.models.inputs import accepted_inputs


def encoded(lengths: list[int]) -> Encoded:
    """Rows whose token ids are 1..length, so a row is recognisable by its length."""
    ids = [list(range(1, n + 1)) for n in lengths]
    return Encoded(ids, [[0] * n for n in lengths], np.array(lengths), np.array(lengths), max(lengths))


def test_accepted_inputs_follow_the_forward_signature():
    bert = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32))
    distil = DistilBertModel(DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32))
    assert accepted_inputs(bert) == {"input_ids", "attention_mask", "token_type_ids"}
    assert accepted_inputs(distil) == {"input_ids", "attention_mask"}


def test_run_batches_pads_each_batch_to_its_longest_row_and_restores_the_input_order():
    lengths = [3, 9, 1, 7, 5, 2, 8]
    enc = encoded(lengths)
    batches = infer.plan_batches(enc.lengths, 3, (0, 0))
    assert [len(b) for b in batches] == [3, 3, 1] and list(enc.lengths[batches[0]]) == [9, 8, 7]  # longest first
    seen = []

    def fn(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        seen.append((tuple(batch), batch["input_ids"].shape[1], torch.is_inference_mode_enabled()))
        return batch["attention_mask"].sum(dim=1, keepdim=True)  # the row's own length

    class Bar:
        total = 0

        def update(self, n: int) -> None:
            self.total += n

    bar = Bar()
    outputs = infer.run_batches(fn, enc, batches, model=lambda input_ids, attention_mask: None, pad_id=0,
                                device=torch.device("cpu"), dtype=torch.float32, bar=bar)
    rows = infer.in_input_order(batches, outputs, (1,))
    assert rows[:, 0].tolist() == lengths and rows.dtype == np.float32
    assert [width for _, width, _ in seen] == [9, 5, 1]  # dynamic padding: the longest row of each batch
    assert all(names == ("input_ids", "attention_mask") for names, _, _ in seen)  # only what the model takes
    assert all(mode for _, _, mode in seen) and bar.total == len(lengths)


def test_no_rows_give_an_empty_array_of_the_row_shape():
    assert infer.in_input_order([], [], (3, 4)).shape == (0, 3, 4)


def test_classifier_logits_are_the_models_own_in_input_order(tiny_bert_dir):
    from bertkit.models import loading

    tokenizer = loading.load_tokenizer(str(tiny_bert_dir))
    texts = ["a short one", "a somewhat longer sentence with more words in it", "mid length", "ok"]
    torch.manual_seed(0)
    small = {"num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64, "num_labels": 3}
    models = [
        BertForSequenceClassification(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, **small)),
        DistilBertForSequenceClassification(DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=2,
                                                             n_heads=2, hidden_dim=64, num_labels=3)),
        MegatronBertForSequenceClassification(MegatronBertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                                                 **small)),
    ]
    for model in models:
        got = infer.classifier_logits(model.eval(), tokenizer, TextDataset(texts), reading=Reading(32), batch_size=3,
                                      precision="fp32")
        for row, text in enumerate(texts):
            enc = tokenizer(text, return_tensors="pt")
            enc = {k: v for k, v in enc.items() if k in accepted_inputs(model)}
            with torch.no_grad():
                want = model(**enc).logits[0].numpy()
            np.testing.assert_allclose(got[row], want, atol=1e-5, rtol=0, err_msg=type(model).__name__)
