"""tokens.py: the length report's arithmetic."""

from __future__ import annotations

import numpy as np

from bertkit.data.dataset import TextDataset
from bertkit.encoding import report as tokens


def test_padding_waste_arithmetic():
    lengths = np.array([4, 2, 2, 2])
    assert tokens.padding_waste(lengths, [np.array([0, 1]), np.array([2, 3])]) == 1 - 10 / 12
    assert tokens.padding_waste(lengths, [np.array([1, 2, 3])]) == 0.0


def test_suggested_max_length_covers_p99_and_respects_limit():
    lengths = np.arange(1, 101)
    assert tokens.suggest_max_length(lengths, 512) == 104  # p99 = 99.01 -> next multiple of 8
    assert tokens.suggest_max_length(lengths, 64) == 64


def test_length_report_fields(tiny_bert_dir):
    from bertkit.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    ds = TextDataset(texts=["a", "a b c d e f g h i j"], labels=[0, 1])
    report = tokens.length_report(tok, ds, "train", max_length=6, batch_size=2, model_limit=128, seed=0)
    assert (report.min, report.max, report.truncated) == (3, 12, 1)
    assert report.waste_static == 1 - (3 + 6) / 12 and report.label_counts == {"0": 1, "1": 1}


def test_explain_sentence_marks_specials(tiny_bert_dir):
    from bertkit.models.loading import load_tokenizer

    out = tokens.explain_sentence(load_tokenizer(str(tiny_bert_dir)), "hi there", "you")
    assert out["tokens"][0] == "[CLS]" and out["special_positions"]["sep"] == [3, 5]
    assert out["token_type_ids"] == [0, 0, 0, 0, 1, 1]
