"""The shapes `benchmarks/bench_tag_unseen.py` writes UNER in are read back by bertkit as the same sentences and
entities: CoNLL-2003's four columns in IOB1 and WNUT-17's two TAB columns with renamed types, both detected by content
(issue 46's "tagged data you have never seen")."""

from __future__ import annotations

import pytest
from benchmark_scripts import benchmark_module
from seqeval.metrics.sequence_labeling import get_entities

from bertkit.data.tagged import TaggedColumns, read_tagged

bench = benchmark_module("bench_tag_unseen")


def test_iob1_opens_entities_with_i_and_keeps_b_only_between_neighbours_of_one_type():
    assert bench.iob1(["B-PER", "I-PER", "O", "B-LOC"]) == ["I-PER", "I-PER", "O", "I-LOC"]
    assert bench.iob1(["B-PER", "B-PER", "B-LOC", "B-LOC"]) == ["I-PER", "B-PER", "I-LOC", "B-LOC"]


@pytest.mark.parametrize("shape", sorted(bench.SHAPES))
def test_each_shape_reads_back_as_the_same_sentences_and_entities(shape, tmp_path):
    if not bench.UNER.is_dir():
        pytest.skip("needs ../shared/data/uner_ewt")
    train, _ = bench.write_shape(shape, tmp_path, 50)
    corpus = read_tagged(str(train), TaggedColumns())
    read = list(corpus.sentences())
    gold = list(bench.uner_sentences(bench.UNER / "train.iob2", 50))
    assert corpus.scheme.name == "IOB2" and len(read) == len(gold) == 50
    rename = (lambda t: t) if shape == "conll2003" else bench.wnut_tag
    for sentence, expected in zip(read, gold, strict=True):
        assert list(sentence.words) == [word for word, _ in expected]
        assert get_entities(list(sentence.tags)) == get_entities([rename(tag) for _, tag in expected])
