"""`bertkit bench` on questions on passages (SQuAD): every model timed as a question-answering model on each question's
windows (question first, only the passage cut, overlapping windows sharing the doc stride, as fine-tuning reads them),
questions/s beside windows/s, the DistilBERT-vs-BERT ratios from those numbers, its quality a question-answering model
fine-tuned on the same sets (dev F1), and bad input refused before anything loads."""

from __future__ import annotations

import json

import pytest
from squad_samples import DOC_STRIDE, MAX_LENGTH, squad_questions, write_squad
from test_fast_start import run_cli
from transformers import AutoModelForQuestionAnswering, AutoTokenizer
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.bench import BenchConfig, read_as_recorded_models
from bertkit.data.squad import read_squad
from bertkit.data.squad_splits import qa_fingerprint
from bertkit.encoding.qa_windows import QAReading, qa_windows
from bertkit.encoding.reading import DOC_STRIDE as DEFAULT_DOC_STRIDE
from bertkit.encoding.reading import QUESTION_MAX_LENGTH
from bertkit.models import loading

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()
FAST = ["--min-iters", "1", "--min-seconds", "0", "--warmup", "0", "--rounds", "2", "--batch-sizes", "2",
        "--threads", "1"]
WINDOWS = ["--max-length", str(MAX_LENGTH), "--doc-stride", str(DOC_STRIDE)]


@pytest.fixture
def squad(tmp_path):
    """(training questions, dev questions: 4, half of them on 150-word passages that span several windows)."""
    return (write_squad(tmp_path / "train.json", squad_questions(8, 0)),
            write_squad(tmp_path / "dev.json", squad_questions(4, 1, long_share=0.5)))


def _bench(args, out):
    result = runner.invoke(app, ["bench", *args, "--out", str(out), "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_each_model_is_timed_as_a_question_answering_model_on_the_dev_windows(tiny_bert_dir, tiny_distilbert_dir,
                                                                               squad, tmp_path):
    train, dev = squad
    out = tmp_path / "out"
    report = _bench(["--models", f"{tiny_distilbert_dir},{tiny_bert_dir}", "--data", str(train), "--dev", str(dev),
                     "--train-batch-size", "2", *WINDOWS, *FAST], out)
    questions = read_squad(dev).questions
    windows = qa_windows(AutoTokenizer.from_pretrained(str(tiny_bert_dir)), questions, QAReading(MAX_LENGTH, DOC_STRIDE))
    data = report["data"]
    assert (data["task"], data["questions"], data["windows"], data["rows"]) == ("spans", 4, windows.n_windows,
                                                                                 windows.n_windows)
    assert windows.n_windows > 4 and (data["max_length"], data["doc_stride"]) == (MAX_LENGTH, DOC_STRIDE)
    assert data["max_tokens"] == MAX_LENGTH and data["mean_tokens"] == pytest.approx(windows.lengths.mean())
    for m in report["models"]:
        # the question-answering model's parameters: the encoder and its start/end head
        assert m["parameters"] == loading.parameter_count(AutoModelForQuestionAnswering.from_pretrained(m["source"]))
        assert isinstance(m["latency"]["model_ms"]["p50"], float) and m["latency"]["tokenize_ms"]["n"] >= 1
        for r in m["throughput"]:  # rows are windows; a question is read per windows/questions of them
            assert r["rows"] == 2 * r["iterations"] and r["windows_per_s"] == r["rows_per_s"]
            assert r["questions_per_s"] == pytest.approx(r["rows_per_s"] * 4 / windows.n_windows)
            assert r["questions_per_s"] < r["windows_per_s"]
        assert m["train_step"]["step_ms"]["n"] >= 1 and m["train_step"]["batch_size"] == 2
    assert any("timed as a question-answering model" in note for note in report["notes"])
    distil, bert = report["models"]
    assert report["claims"]["speedup_batch1_x"]["measured"] == pytest.approx(
        bert["latency"]["model_ms"]["p50"] / distil["latency"]["model_ms"]["p50"])
    assert report["claims"]["speedup_best_batch_x"]["measured"] == pytest.approx(
        max(r["questions_per_s"] for r in distil["throughput"]) / max(r["questions_per_s"] for r in bert["throughput"]))


def test_the_record_says_what_was_timed(tiny_bert_dir, squad, tmp_path):
    train, dev = squad
    out = tmp_path / "out"
    _bench(["--models", str(tiny_bert_dir), "--data", str(train), "--limit", "3", "--train-batch-size", "0", *WINDOWS,
            *FAST], out)
    record = json.loads((out / "bench.json").read_text())
    # no --dev: --data's first --limit questions are timed, and the record names the set and its digest
    assert record["data_source"] == {"source": str(train), "fingerprint": qa_fingerprint(read_squad(train))}
    assert (record["data"]["task"], record["data"]["questions"]) == ("spans", 3)
    config = json.loads((out / "config.json").read_text())
    assert config["family"] == "spans" and config["config"]["doc_stride"] == DOC_STRIDE
    markdown = (out / "bench.md").read_text()
    assert f"3 questions on passages read as a question-answering model reads them, in {record['data']['rows']} " \
           f"windows of at most {MAX_LENGTH} tokens sharing {DOC_STRIDE}" in markdown
    assert "| windows/s |" in markdown and "| questions/s |" in markdown
    assert "| best windows/s |" in markdown and "best rows/s" not in markdown  # the summary counts windows too


def test_windows_are_read_as_fine_tuning_reads_them_without_a_recorded_model(squad):
    """No question-answering model among --models records a reading: run_qa's 384 tokens sharing 128, as `bertkit
    finetune` on questions reads them; --doc-stride given wins."""
    train, _ = squad
    from bertkit.families.spans import SPANS

    cfg = read_as_recorded_models(BenchConfig.of(preset="distilbert-vs-bert", data=str(train)))
    assert SPANS.bench_data(cfg).questions == QAReading(QUESTION_MAX_LENGTH, DEFAULT_DOC_STRIDE)
    cfg = read_as_recorded_models(BenchConfig.of(preset="distilbert-vs-bert", data=str(train), doc_stride=100))
    timed = SPANS.bench_data(cfg)
    assert timed.questions == QAReading(QUESTION_MAX_LENGTH, 100) and len(timed.texts) == 8


def test_a_saved_question_answering_model_is_timed_with_its_own_head_and_windows(tiny_answerer, tmp_path):
    model, dev = tiny_answerer
    report = _bench(["--models", str(model), "--data", str(dev), "--limit", "4", "--train-batch-size", "0", *FAST],
                    tmp_path / "out")
    # its record's window and doc stride, as fine-tuning from it (or predict) reads questions
    assert (report["data"]["max_length"], report["data"]["doc_stride"]) == (MAX_LENGTH, DOC_STRIDE)
    (m,) = report["models"]
    assert m["parameters"] == loading.parameter_count(AutoModelForQuestionAnswering.from_pretrained(str(model)))


def test_quality_is_each_models_dev_f1(tiny_bert_dir, tiny_distilbert_dir, squad, tmp_path):
    train, dev = squad
    out = tmp_path / "out"
    report = _bench(["--models", f"{tiny_distilbert_dir},{tiny_bert_dir}", "--data", str(train), "--dev", str(dev),
                     "--train-batch-size", "0", "--quality", "finetune", "--quality-args",
                     "--epochs 1 --batch-size 4 --precision fp32", *WINDOWS, *FAST], out)
    for i, m in enumerate(report["models"]):
        quality = m["quality"]["finetune"]
        assert quality["status"] == "ok", quality
        assert quality["metric"] == "best_dev.f1" and "--task spans --doc-stride 16" in quality["command"]
        metrics = json.loads((out / "quality" / f"finetune-{i}" / "metrics.json").read_text())
        assert quality["score"] == pytest.approx(metrics["best_metric"])
    claim = report["claims"]["quality_retained_pct"]["finetune"]
    assert (claim["candidate_score"], claim["baseline_score"]) == tuple(m["quality"]["finetune"]["score"]
                                                                        for m in report["models"])


@pytest.mark.parametrize("extra, message", [
    (["--quality", "probe", "--dev", "{dev}"], "--quality probe does not time questions on passages"),
    (["--quality", "finetune"], "--quality finetune on questions needs --dev"),
    (["--test", "{dev}"], "--test does not apply to questions on passages"),
    (["--text-column", "context"], "--text-column does not apply to questions on passages"),
    (["--max-length", "64", "--doc-stride", "70"], "--doc-stride 70 leaves no room in a window"),
    (["--task", "spans", "--dev", "{rows}"], "does not look like a SQuAD set"),
])
def test_bad_input_on_questions_is_refused_before_anything_runs(extra, message, squad, tmp_path):
    train, dev = squad
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\na fine film,pos\n", encoding="utf-8")
    args = ["bench", "--preset", "distilbert-vs-bert", "--data", str(train), "--out", str(tmp_path / "out")]
    result = runner.invoke(app, args + [{"{dev}": str(dev), "{rows}": str(rows)}.get(a, a) for a in extra])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_questions_need_data_and_doc_stride_needs_questions(tmp_path):
    result = runner.invoke(app, ["bench", "--preset", "distilbert-vs-bert", "--task", "spans"])
    assert result.exit_code == 2 and "--task spans needs --data" in result.output
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\na fine film,pos\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--preset", "distilbert-vs-bert", "--data", str(rows), "--doc-stride", "16"])
    assert result.exit_code == 2 and "--doc-stride applies to questions on passages" in result.output


def test_a_broken_squad_set_is_refused_before_torch(squad, tmp_path):
    train, dev = squad
    broken = json.loads(dev.read_text())
    broken["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "broken.json").write_text(json.dumps(broken), encoding="utf-8")
    code, output, imported = run_cli("bench", "--preset", "distilbert-vs-bert", "--data", str(train), "--dev",
                                     "broken.json", "--out", "OUT", cwd=tmp_path)
    assert code == 2 and "answer_start" in output and "Traceback" not in output, output
    assert imported == [] and not (tmp_path / "OUT").exists()
