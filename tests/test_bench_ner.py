"""benchmarks/bench_ner.py, the tagging anchor: both sides read the same slice of a tagged file (its first N sentences,
comments kept), and the comparison reads every round's runs (ratio over all rounds and per round, F1 per seed, the
goal of issue 46)."""

from __future__ import annotations

import pytest
from benchmark_scripts import benchmark_module

TAGGED = """# newdoc id = d1
# sent_id = 1
1\tAnna\tB-PER\t-\t-
2\tsings\tO\t-\t-

# sent_id = 2
1\tin\tO\t-\t-
2\tOslo\tB-LOC\t-\t-

# sent_id = 3
1\tok\tO\t-\t-
"""


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("bench_ner")


def test_a_slice_holds_the_first_sentences_as_both_sides_read_them(bench, tmp_path):
    (tmp_path / "all.iob2").write_text(TAGGED, encoding="utf-8")
    sliced = bench.sentence_slice(tmp_path / "all.iob2", 2, tmp_path / "two.iob2")
    words, tags = bench.trainer_side.read_columns(sliced)
    assert words == [["Anna", "sings"], ["in", "Oslo"]] and tags == [["B-PER", "O"], ["O", "B-LOC"]]
    assert sliced.read_text(encoding="utf-8").startswith("# newdoc id = d1\n# sent_id = 1\n")
    assert bench.sentence_slice(tmp_path / "all.iob2", None, tmp_path / "x.iob2") == tmp_path / "all.iob2"


def run(side, seed, f1, samples, seconds):
    return {"side": side, "seed": seed, "f1": f1, "train_samples": samples, "train_seconds": seconds,
            "train_samples_per_second": round(samples / seconds, 2), "precision": "bf16", "dev_words": 100}


def test_the_comparison_reads_every_round(bench):
    runs = [run("trainer", 42, 0.40, 600, 10.0), run("bertkit", 42, 0.405, 600, 8.0),
            run("bertkit", 43, 0.45, 600, 6.0), run("trainer", 43, 0.452, 600, 6.0)]
    sides = {side: bench.summary(runs, side) for side in ("trainer", "bertkit")}
    assert sides["trainer"]["train_samples_per_second"] == 75.0  # 1200 rows over 16 s, not a mean of rates
    assert sides["bertkit"]["f1_by_seed"] == {"42": 0.405, "43": 0.45} and sides["bertkit"]["f1_mean"] == 0.4275
    compared = bench.compared(sides, runs)
    assert compared["ratio_by_seed"] == {"42": 1.25, "43": 1.0}
    assert compared["bertkit_vs_trainer_samples_per_second"] == round(1200 / 14 / 75, 3)
    assert compared["f1_difference_by_seed"] == {"42": 0.005, "43": -0.002} and compared["same_dev_words"]
    assert compared["goal_met"] is False  # 1.14x: below the 1.2x of issue 46
    assert bench.compared({"trainer": sides["trainer"]}, runs[:1]) == {}
