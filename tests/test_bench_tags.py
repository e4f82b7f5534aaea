"""`bertkit bench` on tagged data: every model timed as a tagger (token classification over the sentences' windows of
word pieces), its quality a tagger fine-tuned on the same sentences (dev entity F1), the DistilBERT-vs-BERT ratios
from those numbers, and the sentence-only options refused before anything runs."""

from __future__ import annotations

import json

import pytest
import torch
from tagged_samples import DEV, SENTENCES, write_conll
from transformers import AutoModelForTokenClassification, AutoTokenizer
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.encoding.reading import Reading
from bertkit.encoding.word_labels import IGNORE
from bertkit.measure import measure as bench_measure
from bertkit.measure import report as bench_report
from bertkit.measure.steps import piece_labels
from bertkit.models import loading

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()
FAST = ["--min-iters", "1", "--min-seconds", "0", "--warmup", "0", "--rounds", "2", "--batch-sizes", "2",
        "--max-length", "16", "--threads", "1"]
TAGS = ("B-LOC", "B-PER", "I-PER", "O")


@pytest.fixture
def tagged(tmp_path):
    return write_conll(tmp_path / "train.iob2", SENTENCES), write_conll(tmp_path / "dev.iob2", DEV)


def _bench(args, out):
    result = runner.invoke(app, ["bench", *args, "--out", str(out), "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_each_model_is_timed_as_a_tagger_on_the_dev_windows(tiny_bert_dir, tiny_distilbert_dir, tagged, tmp_path):
    train, dev = tagged
    models = f"{tiny_distilbert_dir},{tiny_bert_dir}"
    report = _bench(["--models", models, "--data", str(train), "--dev", str(dev), "--train-batch-size", "2", *FAST],
                    tmp_path / "out")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    pieces = [len(tokenizer([w for w, _ in s], is_split_into_words=True, add_special_tokens=False)["input_ids"]) + 2
              for s in DEV]  # one window per dev sentence: its word pieces between [CLS] and [SEP]
    data = report["data"]
    assert (data["task"], data["sentences"], data["words"], data["rows"]) == ("tags", 2, 5, 2)
    assert data["mean_tokens"] == pytest.approx(sum(pieces) / 2) and data["max_tokens"] == max(pieces)
    for m in report["models"]:
        # the tagger's parameters: the encoder (no pooler) and one output per training tag
        tagger = AutoModelForTokenClassification.from_pretrained(m["source"], num_labels=len(TAGS))
        assert m["parameters"] == loading.parameter_count(tagger)
        assert isinstance(m["latency"]["model_ms"]["p50"], float) and m["latency"]["tokenize_ms"]["n"] >= 1
        for r in m["throughput"]:  # both windows in one batch of 2: tokens are their real pieces, never padding
            assert r["rows"] == 2 * r["iterations"]
            assert r["tokens_per_s"] * r["seconds"] == pytest.approx(sum(pieces) * r["iterations"])
        assert m["train_step"]["step_ms"]["n"] >= 1 and m["train_step"]["batch_size"] == 2
    assert any("timed as a tagger (token classification, 4 tags)" in note for note in report["notes"])
    distil, bert = report["models"]
    claims = report["claims"]
    assert claims["speedup_batch1_x"]["measured"] == pytest.approx(
        bert["latency"]["model_ms"]["p50"] / distil["latency"]["model_ms"]["p50"])
    assert claims["parameter_reduction_pct"]["measured"] == pytest.approx(
        100 * (1 - min(distil["parameters"], bert["parameters"]) / max(distil["parameters"], bert["parameters"])))
    assert "tagged sentences (5 words)" in (tmp_path / "out" / "bench.md").read_text()


def test_quality_is_each_taggers_dev_entity_f1(tiny_bert_dir, tiny_distilbert_dir, tagged, tmp_path):
    train, dev = tagged
    out = tmp_path / "out"
    report = _bench(["--models", f"{tiny_distilbert_dir},{tiny_bert_dir}", "--data", str(train), "--dev", str(dev),
                     "--train-batch-size", "0", "--quality", "finetune", "--quality-args",
                     "--epochs 1 --batch-size 4 --precision fp32", *FAST], out)
    for i, m in enumerate(report["models"]):
        quality = m["quality"]["finetune"]
        assert quality["status"] == "ok", quality
        assert quality["metric"] == "best_dev.f1" and "--task tags" in quality["command"]
        metrics = json.loads((out / "quality" / f"finetune-{i}" / "metrics.json").read_text())
        assert metrics["task"] == "tags" and quality["score"] == pytest.approx(metrics["best_metric"])
    claim = report["claims"]["quality_retained_pct"]["finetune"]
    distil, bert = (m["quality"]["finetune"]["score"] for m in report["models"])
    assert (claim["candidate_score"], claim["baseline_score"]) == (distil, bert)
    assert claim["measured"] == (pytest.approx(100 * distil / bert) if bert else None)


def test_the_f1_retained_is_the_ratio_of_the_two_taggers_scores():
    def tagger(label, params, ms, f1):
        return {"label": label, "parameters": params, "latency": {"model_ms": {"p50": ms}},
                "quality": {"finetune": {"status": "ok", "metric": "best_dev.f1", "score": f1}}}

    claims = bench_report.compute_claims([tagger("distil", 66_000_000, 5.0, 0.81),
                                          tagger("bert", 110_000_000, 10.0, 0.90)])
    f1 = claims["quality_retained_pct"]["finetune"]
    assert f1["measured"] == pytest.approx(90.0) and f1["metric"] == "best_dev.f1"
    assert claims["parameter_reduction_pct"]["measured"] == pytest.approx(40.0)
    assert claims["speedup_batch1_x"]["measured"] == pytest.approx(2.0)
    assert any("90.0% = 0.8100 / 0.9000 best_dev.f1" in line for line in bench_report.claim_lines(claims))


def test_windows_of_a_long_sentence_are_the_timed_rows():
    tokenizer = loading.load_tokenizer(loading.OFFLINE_NAME)
    words = ["antidisestablishmentarianism", "met", "bob", "in", "paris", "today", "and", "left", "for", "rome"]
    settings = bench_measure.BenchSettings(max_length=8, words=Reading.of_words(max_length=8))
    encoded, data = bench_measure.timed_encoding(tokenizer, [words, words[:2]], settings)
    assert data["sentences"] == 2 and data["words"] == 12 and data["truncated"] == 0
    assert data["rows"] == len(encoded.lengths) > 2 and max(encoded.lengths) <= 8  # the long one in windows


def test_a_taggers_training_labels_skip_padding():
    inputs = {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 1, 1],
                                                                                               [1, 1, 0, 0]])}
    labels = piece_labels(inputs, n_tags=3)
    assert (labels[1, 2:] == IGNORE).all() and ((labels[0] >= 0) & (labels[0] < 3)).all()


@pytest.mark.parametrize("extra, message", [
    (["--text-pair-column", "1"], "--text-pair-column does not apply to tagged data"),
    (["--test", "{dev}"], "--test does not apply to tagged data"),
    (["--quality", "finetune"], "--quality on tagged data needs --dev"),
])
def test_sentence_options_on_tagged_data_are_refused(extra, message, tagged, tmp_path):
    train, dev = tagged
    args = ["bench", "--preset", "distilbert-vs-bert", "--data", str(train), "--out", str(tmp_path / "out")]
    args += [str(dev) if a == "{dev}" else a for a in extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_tag_options_on_rows_of_text_and_untagged_files_are_refused(demo_dir, tmp_path):
    result = runner.invoke(app, ["bench", "--preset", "distilbert-vs-bert", "--data", str(demo_dir / "dev.tsv"),
                                 "--tag-scheme", "IOB2", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--tag-scheme applies to tagged data" in result.output
    table = tmp_path / "rows.csv"
    table.write_text("text,label\na fine film,pos\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--preset", "distilbert-vs-bert", "--data", str(table), "--task", "tags",
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "does not look like a tagged corpus" in result.output
    assert not (tmp_path / "out").exists()


def test_a_dev_tag_unseen_in_training_is_refused_before_any_model_loads(tagged, tmp_path):
    train, _ = tagged
    dev = write_conll(tmp_path / "odd.iob2", [[("Anna", "B-ORG")]])
    result = runner.invoke(app, ["bench", "--preset", "distilbert-vs-bert", "--data", str(train), "--dev", str(dev),
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "never seen in training" in result.output and "B-ORG" in result.output
    assert not (tmp_path / "out").exists()
