"""bertkit finetune on questions on passages (issue 55): a question-answering model through the one training loop - it
learns an easy synthetic SQuAD set above the overlap baseline, best/ is picked by the official F1 and records the
family, version and reading, plain transformers loads it and answers as bertkit does, a labelled --test is scored
like dev, a killed run resumes, a sweep ranks its trials by F1; and (slow) MiniLM on TyDi QA GoldP English."""

from __future__ import annotations

import json

import numpy as np
import pytest
from benchmark_scripts import benchmark_module
from safetensors.numpy import load_file
from squad_samples import DOC_STRIDE, MAX_LENGTH, squad_questions, write_squad

from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.encoding.reading import Reading
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV, SimulatedFailure

pytestmark = pytest.mark.usefixtures("one_thread")


def span_cfg(model, train, dev, out, **overrides) -> FinetuneConfig:
    values = dict(model=str(model), data=str(train), dev=str(dev), out=str(out), epochs=3, lr="5e-3", batch_size=8,
                  save_every=None, precision="fp32", max_length=MAX_LENGTH, doc_stride=DOC_STRIDE)
    return FinetuneConfig.of(**{**values, **overrides})


def test_a_question_answerer_learns_and_its_folders_record_family_version_and_reading(tiny_answerer):
    best, _ = tiny_answerer
    run = best.parent
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["task"] == "spans" and metrics["best_metric_name"] == "f1" and metrics["forward"] == "transformers"
    history = metrics["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"] * 0.5
    dev = metrics["best_dev"]
    assert dev["n"] == 24 and dev["rules"] == "1.1" and metrics["best_metric"] == dev["f1"] > 90
    assert dev["intervals"]["f1"][0] <= dev["f1"] <= dev["intervals"]["f1"][1]
    assert metrics["baseline"]["predicts"] == "the passage sentence with the most question words"
    assert metrics["baseline"]["value"] < 50 < dev["f1"] and history[-1]["above_baseline"]
    assert {"dev_exact_match", "dev_f1"} <= set(metrics["epoch_table"][0])
    for folder in ("best", "final"):
        record = json.loads((run / folder / "bertkit_model.json").read_text())
        assert record["task"] == "spans" and record["family"] == "spans" and "threshold" not in record
        assert record["spans"]["version"] == "1.1" and record["spans"]["max_question_length"] == 64
        assert Reading.from_json(record["reading"]) == Reading(MAX_LENGTH, "chunk", "head", DOC_STRIDE)
    config = json.loads((best / "config.json").read_text())
    tokenizer_config = json.loads((best / "tokenizer_config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"] and tokenizer_config["model_max_length"] == 64
    card = (best / "README.md").read_text()
    assert "pipeline_tag: question-answering" in card and "24 questions" in card and "doc-stride" in card
    errors = (run / "dev_errors.csv").read_text().splitlines()
    assert errors[0] == "id,question,prediction,gold,kind,f1,confidence"


def test_plain_transformers_loads_the_folder_and_answers_as_bertkit_predict(tiny_answerer):
    """transformers 5 has no question-answering pipeline any more: the folder is read by AutoModelForQuestionAnswering
    and AutoTokenizer and the removed pipeline's span decoding (benchmarks/bench_spans.py), on every dev question
    (a fifth of them on passages longer than one window)."""
    best, dev = tiny_answerer
    agreement = benchmark_module("bench_spans").transformers_agreement(best, dev, 24)
    assert agreement["questions"] == 24 and agreement["differ"] == []


def test_a_later_finetune_reads_passages_as_the_model_records(tiny_answerer, tmp_path):
    best, dev = tiny_answerer
    train = write_squad(tmp_path / "train.json", squad_questions(16, 5, prefix="more"))
    cfg = FinetuneConfig.of(model=str(best), data=str(train), dev=str(dev), out=str(tmp_path / "again"), epochs=1,
                            lr="1e-4", batch_size=8, save_every=None, precision="fp32")
    finetune(cfg, progress=False)  # neither --max-length nor --doc-stride given: the model's 64 and 16
    record = json.loads((tmp_path / "again" / "best" / "bertkit_model.json").read_text())
    assert Reading.from_json(record["reading"]) == Reading(MAX_LENGTH, "chunk", "head", DOC_STRIDE)


def test_a_labelled_test_set_is_scored_like_dev(tiny_bert_dir, tmp_path):
    train = write_squad(tmp_path / "train.json", squad_questions(40, 0))
    dev = write_squad(tmp_path / "dev.json", squad_questions(8, 1))
    test = write_squad(tmp_path / "test.json", squad_questions(6, 2, prefix="t"))
    result = finetune(span_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=1, test=str(test)), progress=False)
    summary = result.metrics
    assert summary["best_test"]["n"] == 6 and summary["final_test"]["rules"] == "1.1"
    assert 0 <= summary["final_test"]["f1"] <= 100
    card = (tmp_path / "run" / "best" / "README.md").read_text()
    assert "## Test metrics (6 questions" in card


def test_a_killed_run_resumes_to_the_same_weights(tiny_bert_dir, tmp_path, monkeypatch):
    train = write_squad(tmp_path / "train.json", squad_questions(32, 0))
    dev = write_squad(tmp_path / "dev.json", squad_questions(6, 1))
    whole = finetune(span_cfg(tiny_bert_dir, train, dev, tmp_path / "whole", epochs=2), progress=False)
    cfg = span_cfg(tiny_bert_dir, train, dev, tmp_path / "cut", epochs=2, save_every=3)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "5")  # checkpoints at step 3 and the first epoch's end (4), killed after 5
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    monkeypatch.delenv(FAIL_AFTER_STEPS_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored is not None and resumed.restored.step == 4
    assert resumed.metrics["global_step"] == whole.metrics["global_step"] == 8
    assert [h["dev_loss"] for h in resumed.metrics["history"]] == pytest.approx(
        [h["dev_loss"] for h in whole.metrics["history"]], rel=1e-5)
    a, b = load_file(str(tmp_path / "whole/final/model.safetensors")), load_file(str(tmp_path / "cut/final/model.safetensors"))
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_sweep_ranks_question_answering_trials_by_f1(tiny_bert_dir, tmp_path):
    from bertkit.commands.sweep import SweepConfig
    from bertkit.commands.sweep import run as sweep

    train = write_squad(tmp_path / "train.json", squad_questions(24, 0))
    dev = write_squad(tmp_path / "dev.json", squad_questions(6, 1))
    cfg = SweepConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(dev), out=str(tmp_path / "sweep"),
                         epochs=1, batch_size=8, save_every=None, precision="fp32", max_length=MAX_LENGTH,
                         doc_stride=DOC_STRIDE, grid=("lr=5e-3,1e-5",))
    result = sweep(cfg, progress=False)
    assert result.summary is not None and {row.metric for row in result.rows} == {"f1"}
    assert len(result.rows) == 2
    record = json.loads((tmp_path / "sweep" / "best" / "bertkit_model.json").read_text())
    assert record["task"] == "spans" and Reading.from_json(record["reading"]).stride == DOC_STRIDE


@pytest.mark.slow
def test_minilm_learns_tydiqa_above_the_overlap_baseline_and_plain_transformers_agrees(minilm_dir, shared_data,
                                                                                       tmp_path):
    """MiniLM fine-tuned briefly (the first 1,000 TyDi QA GoldP English training questions, two epochs, the defaults
    otherwise: 384-token windows sharing 128) scores the 440 dev questions well above the overlap baseline, and plain
    transformers answers a sample of them as bertkit predict does."""
    from bertkit.commands.evaluate import EvaluateConfig
    from bertkit.commands.evaluate import run as evaluate
    from bertkit.data.squad import read_squad
    from bertkit.scoring.squad import overlap_answers, score_squad

    data = shared_data / "tydiqa_goldp_en"
    if not data.is_dir():
        pytest.skip("tydiqa_goldp_en is not in ../shared/data")
    run = tmp_path / "run"
    finetune(FinetuneConfig.of(model=str(minilm_dir), data=str(data / "train.json"), dev=str(data / "dev.json"),
                               out=str(run), epochs=2, limit=1000, save_every=None), progress=False)
    questions = read_squad(data / "dev.json").questions
    baseline = score_squad(questions, overlap_answers(questions)).f1
    scored = evaluate(EvaluateConfig.of(model=str(run / "best"), data=str(data / "dev.json")))
    assert scored.rows == 440 and scored.metrics.score("f1") > baseline + 10  # measured: 37.4 against 16.4
    agreement = benchmark_module("bench_spans").transformers_agreement(run / "best", data / "dev.json", 40)
    assert agreement["same_answer"] >= 36, agreement["differ"]
