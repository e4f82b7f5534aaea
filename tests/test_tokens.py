"""tokens.py: the length report's arithmetic."""

from __future__ import annotations

import numpy as np

from bertkit.data.dataset import TextDataset
from bertkit.encoding import report as tokens
from bertkit.encoding.reading import Reading


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
    assert out.tokens[0] == "[CLS]" and out.special_positions["sep"] == [3, 5] and out.n_tokens == len(out.input_ids)
    assert out.token_type_ids == [0, 0, 0, 0, 1, 1]


def whole_array_report(full: np.ndarray, cut: np.ndarray, max_length: int, batch_size: int, seed: int) -> dict:
    """The report's numbers computed the way they were before streaming: on the whole per-row arrays."""
    from bertkit.encoding.batches import sorted_batches

    order = np.random.default_rng(seed).permutation(len(cut))
    return {"min": int(full.min()), "max": int(full.max()), "mean": float(full.mean()),
            "p50": float(np.percentile(full, 50)), "p95": float(np.percentile(full, 95)),
            "p99": float(np.percentile(full, 99)), "truncated": int((full > max_length).sum()),
            "suggested_max_length": tokens.suggest_max_length(full, 512),
            "waste_static": 1.0 - float(cut.sum()) / (len(cut) * max_length),
            "waste_dynamic_random": tokens.padding_waste(cut, [order[i : i + batch_size]
                                                               for i in range(0, len(cut), batch_size)]),
            "waste_dynamic_sorted": tokens.padding_waste(cut, sorted_batches(cut, batch_size))}


def test_percentiles_from_counts_are_numpys_bit_for_bit():
    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 7, 100, 101, 999, 4096, 65_537]:
        for values in (rng.integers(0, 600, n), rng.poisson(20, n) + 2, np.full(n, 9), rng.geometric(0.01, n)):
            counts = np.bincount(values)
            for q in (0, 1, 25, 50, 95, 99, 99.9, 100):
                assert tokens.percentile_of_counts(counts, q) == float(np.percentile(values, q)), (n, q)


def test_streamed_numbers_equal_the_whole_array_ones_within_one_window():
    rng = np.random.default_rng(1)
    for n, max_length, batch_size in ((1, 16, 4), (50, 16, 8), (3000, 64, 32), (20_000, 128, 64)):
        full = rng.geometric(0.03, n).astype(np.int32) + 2
        cut = np.minimum(full, max_length).astype(np.int64)
        tally = tokens._Tally(np.zeros(0, dtype=np.int64))
        tally.add(full, cut, batch_size, np.random.default_rng(5))
        report = tokens._report_of(tally, TextDataset(["x"] * n), "train", max_length, 512)
        want = whole_array_report(full, cut, max_length, batch_size, 5)
        assert {k: getattr(report, k) for k in want} == want
        assert report.rows == n and report.length_counts.sum() == n


def test_length_report_streams_windows_with_exact_statistics(tiny_bert_dir, monkeypatch):
    from bertkit.encoding.encode import encode_for
    from bertkit.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    rng = np.random.default_rng(2)
    words = ["good", "bad", "film", "a", "the", "plot", "!"]
    texts = [" ".join(rng.choice(words, rng.integers(0, 40))) for _ in range(203)]
    ds = TextDataset(texts=texts, labels=[["neg", "pos"][i % 3 == 0] for i in range(203)])
    encoded = encode_for(tok, ds, Reading(24)).encoded
    want = whole_array_report(encoded.full_lengths, encoded.lengths, 24, 8, 3)
    whole = tokens.length_report(tok, ds, "train", max_length=24, batch_size=8, model_limit=512, seed=3)
    assert {k: getattr(whole, k) for k in want} == want and whole.label_counts == {"neg": 135, "pos": 68}
    monkeypatch.setattr(tokens, "SORT_WINDOW", 50)  # 5 windows: statistics still exact, wastes per window
    streamed = tokens.length_report(tok, ds, "train", max_length=24, batch_size=8, model_limit=512, seed=3)
    exact = ("min", "max", "mean", "p50", "p95", "p99", "truncated", "suggested_max_length", "waste_static")
    assert all(getattr(streamed, k) == want[k] for k in exact) and streamed.label_counts == whole.label_counts
    assert np.array_equal(streamed.length_counts, whole.length_counts)
    per_window = [tokens.padding_sums(encoded.lengths[s : s + 50], tokens.sorted_batches(encoded.lengths[s : s + 50], 8))
                  for s in range(0, 203, 50)]
    assert streamed.waste_dynamic_sorted == 1 - sum(r for r, _ in per_window) / sum(p for _, p in per_window)
