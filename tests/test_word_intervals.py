"""The word table's yardsticks (issue 45): a 95% bootstrap interval over dev *sentences* for every row and baseline,
from the predictions already made, and the random-init encoder baseline on the best row's layers, recorded."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertkit.data.tagged import TaggedColumns, read_tagged
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.reading import Reading
from bertkit.probe.words_run import RANDOM_ENCODER, run_word_probe, with_random_encoder
from bertkit.scoring.entities import main_interval, score_entities, score_tags, sentence_counts

IOB2 = TagScheme("IOB2", "IOB2")
PLAIN = TagScheme()


def noisy_entities(n: int, seed: int = 0) -> tuple[list[list[str]], list[list[str]]]:
    """`n` sentences of gold entity tags and predictions that miss or mistype about a third of the entities."""
    rng = np.random.default_rng(seed)
    gold, pred = [], []
    for _ in range(n):
        g = ["B-PER", "I-PER", "O", "B-LOC", "O", "O"]
        p = list(g)
        if rng.random() < 0.35:
            p[0] = "B-LOC"  # a wrong type: neither the gold PER nor a right LOC
        if rng.random() < 0.3:
            p[3] = "O"  # a missed LOC
        gold.append(g)
        pred.append(p)
    return gold, pred


def test_intervals_contain_the_point_estimate_for_entities_and_plain_tags():
    gold, pred = noisy_entities(60)
    scores = score_tags(gold, pred, IOB2, n_boot=500, seed=1)
    low, high = scores.interval
    assert low < scores.main < high and scores.main == scores.entities.f1
    plain_gold = [["DET", "NOUN", "VERB"]] * 40
    plain_pred = [["DET", "NOUN", "NOUN"] if i % 3 else ["DET", "NOUN", "VERB"] for i in range(40)]
    plain = score_tags(plain_gold, plain_pred, PLAIN, n_boot=500, seed=1)
    assert plain.interval[0] < plain.main == plain.token_accuracy < plain.interval[1]
    assert score_tags(gold, pred, IOB2).interval is None  # asked for only where a table shows it


def test_intervals_shrink_with_more_sentences_and_repeat_with_the_seed():
    few, many = noisy_entities(20), noisy_entities(800)
    width = {n: np.diff(main_interval(*data, IOB2, 1000, seed=0))[0] for n, data in ((20, few), (800, many))}
    assert width[800] < width[20] / 3  # ~ 1 / sqrt(n): 40x the sentences, about a sixth of the width
    assert main_interval(*few, IOB2, 300, seed=5) == main_interval(*few, IOB2, 300, seed=5)


def test_sentences_are_resampled_not_words():
    """One sentence resampled is always that sentence: no spread, where resampling its words would give one."""
    gold, pred = [["B-PER", "O", "B-LOC", "O", "B-ORG"]], [["B-PER", "O", "O", "O", "B-ORG"]]
    low, high = main_interval(gold, pred, IOB2, 1000, seed=0)
    assert low == high == pytest.approx(score_tags(gold, pred, IOB2).main)
    low, high = main_interval([["NOUN", "VERB", "DET"]], [["NOUN", "NOUN", "DET"]], PLAIN, 1000, seed=0)
    assert low == high == pytest.approx(2 / 3)


def test_summed_sentence_counts_give_the_headline_micro_f1(shared_data):
    """The resamples' score, from per-sentence counts, is the headline F1 (conlleval's counting) on the whole set
    (real UNER dev tags, with a fifth of the entities' first tags dropped or retyped: stray I- runs)."""
    corpus = read_tagged(shared_data / "uner_ewt" / "dev.iob2", TaggedColumns())
    gold = [list(s.tags) for s in corpus.head(400)]
    rng = np.random.default_rng(0)
    pred = [[("O" if rng.random() < 0.5 else "B-MISC") if t.startswith("B-") and rng.random() < 0.2 else t
             for t in s] for s in gold]
    tp, n_pred, n_gold = sentence_counts(gold, pred, IOB2).sum(axis=0)
    expected = score_entities(gold, pred, "IOB2")
    assert (n_pred, n_gold) == (expected.n_predicted, expected.n_gold)
    assert 2 * tp / (n_pred + n_gold) == pytest.approx(expected.f1)


SENTENCES = [[("Anna", "B-PER"), ("met", "O"), ("Bob", "B-PER"), ("in", "O"), ("Paris", "B-LOC")],
             [("Bob", "B-PER"), ("Smith", "I-PER"), ("left", "O"), ("Rome", "B-LOC")],
             [("Paris", "B-LOC"), ("is", "O"), ("big", "O")]]


def write_conll(path: Path, sentences) -> str:
    path.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture
def tagged(tmp_path) -> tuple[str, str]:
    return write_conll(tmp_path / "train.iob2", SENTENCES * 4), write_conll(tmp_path / "dev.iob2", SENTENCES)


def test_random_init_encoder_runs_on_the_best_rows_layers_and_is_recorded(tagged, tiny_bert_dir):
    reading = Reading.of_words("first", 32)
    run = run_word_probe(*tagged, TaggedColumns(), reading, str(tiny_bert_dir), layers="1,2", seed=3)
    table = run.table
    assert set(table.baselines) == {"majority tag", "most frequent tag per word", RANDOM_ENCODER}
    assert table.random_encoder_row == table.best().label
    random = table.baselines[RANDOM_ENCODER]
    assert random.interval[0] <= random.main <= random.interval[1] and random.n_sentences == 3
    record = json.loads(json.dumps(run.to_json()))
    assert record["random_encoder_row"] == table.best().label and RANDOM_ENCODER in record["baselines"]
    assert record["baselines"][RANDOM_ENCODER]["interval"] == list(random.interval)
    assert record["peak_layer"] in {"layer 1 (second-to-last)", "layer 2 (last)"}
    again = run_word_probe(*tagged, TaggedColumns(), reading, str(tiny_bert_dir), layers="1,2", seed=3)
    assert again.table.baselines[RANDOM_ENCODER] == random  # seeded before the random weights are drawn


def test_no_baselines_skips_the_random_encoder_and_limit_reads_the_first_sentences(tagged, tiny_bert_dir):
    run = run_word_probe(*tagged, TaggedColumns(), Reading.of_words("first", 32), str(tiny_bert_dir), layers="2",
                         baselines=False, limit=2)
    assert run.table.baselines == {} and run.table.random_encoder_row is None
    assert dict(run.sentences) == {"train": 2, "dev": 2} and "random_encoder_row" not in run.to_json()


def test_a_best_row_that_does_not_beat_random_weights_is_a_warning(tagged, tiny_bert_dir):
    run = run_word_probe(*tagged, TaggedColumns(), Reading.of_words("first", 32), str(tiny_bert_dir), layers="2",
                         baselines=False)
    best = run.table.best()
    stronger = replace(best, scores=replace(best.scores, entities=replace(best.scores.entities, f1=1.01)))
    _, notes = with_random_encoder(run.table, stronger)
    assert len(notes) == 1 and "does not beat the same encoder with random weights" in notes[0]
    assert best.pooling.single_layer and not replace(best.pooling, layers=(-4, -3, -2, -1)).single_layer
