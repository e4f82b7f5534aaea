"""bertkit finetune on tagged data: a tagger (token classification) through the sentence runs' loop - it learns an
easy synthetic set, its folders record the task, scheme and reading, a killed run resumes to the same weights, the
windows label each word once, and the refusals come before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tagged_samples import pos_sentences, synthetic_sentences, write_iob
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.encoding.reading import Reading
from bertkit.encoding.word_labels import IGNORE, continuation_ids, label_windows
from bertkit.errors import UserError
from bertkit.io.checkpoint_folders import latest_checkpoint
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV, SimulatedFailure

pytestmark = pytest.mark.usefixtures("one_thread")

@pytest.fixture
def tagged_files(tmp_path):
    return (write_iob(tmp_path / "train.iob2", synthetic_sentences(60, 0)),
            write_iob(tmp_path / "dev.iob2", synthetic_sentences(20, 1)))


def tag_cfg(model: Path, train: Path, dev: Path | None, out: Path, **overrides) -> FinetuneConfig:
    values = dict(model=str(model), data=str(train), dev=dev and str(dev), out=str(out), epochs=4, lr="5e-3", batch_size=8,
                  save_every=None, precision="fp32")
    return FinetuneConfig.of(**{**values, **overrides})


def test_a_tagger_learns_an_easy_set_and_its_folders_record_task_scheme_and_reading(tiny_bert_dir, tagged_files,
                                                                                  tmp_path):
    train, dev = tagged_files
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run"), progress=False)
    history = result.metrics["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"] * 0.5
    assert result.metrics["task"] == "tags" and result.metrics["best_metric_name"] == "f1"
    assert result.metrics["best_metric"] > 0.8 and result.metrics["forward"] == "fast"  # own layers on a CPU
    best = result.metrics["best_dev"]
    assert set(best["per_type"]) == {"LOC", "PER"} and best["n"] == sum(len(s[0]) for s in synthetic_sentences(20, 1))
    assert best["intervals"]["f1"][0] <= best["f1"] <= best["intervals"]["f1"][1]
    for folder in ("best", "final"):
        record = json.loads((tmp_path / "run" / folder / "bertkit_model.json").read_text())
        assert record["task"] == "tags" and record["tag_scheme"] == {"name": "IOB2", "source": "IOB2"}
        assert Reading.from_json(record["reading"]) == Reading.of_words("first", 128)
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"]
    assert set(config["id2label"].values()) == {"B-LOC", "B-PER", "I-LOC", "O"}
    card = (tmp_path / "run" / "best" / "README.md").read_text()
    assert "pipeline_tag: token-classification" in card and "| PER |" in card and "words" in card
    errors = (tmp_path / "run" / "dev_errors.csv").read_text().splitlines()
    assert errors[0] == "sentence,word_index,word,gold,predicted,probability"


def test_a_transformers_pipeline_reads_the_saved_tagger(tiny_bert_dir, tagged_files, tmp_path):
    from transformers import pipeline

    train, dev = tagged_files
    finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=1), progress=False)
    tagger = pipeline("token-classification", model=str(tmp_path / "run" / "best"))
    assert {row["entity"] for row in tagger("alice went to paris")} <= {"B-LOC", "B-PER", "I-LOC", "O"}


def test_a_killed_tagging_run_resumes_to_the_weights_of_an_uninterrupted_one(tiny_bert_dir, tagged_files, tmp_path,
                                                                            monkeypatch):
    train, dev = tagged_files  # dropout on: the restored RNG state matters too
    whole = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "whole", epochs=2), progress=False)
    cfg = tag_cfg(tiny_bert_dir, train, dev, tmp_path / "cut", epochs=2, save_every=3)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "5")  # checkpoint at step 3, killed after step 5
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    assert latest_checkpoint(tmp_path / "cut").name == "step-3"
    monkeypatch.delenv(FAIL_AFTER_STEPS_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3
    assert resumed.metrics["global_step"] == whole.metrics["global_step"] == 16
    assert [h["dev_loss"] for h in resumed.metrics["history"]] == pytest.approx(
        [h["dev_loss"] for h in whole.metrics["history"]], rel=1e-5)
    a, b = load_file(str(tmp_path / "whole/final/model.safetensors")), load_file(str(tmp_path / "cut/final/model.safetensors"))
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert finetune(cfg, progress=False).already_finished


def test_windows_label_each_word_once_at_its_first_piece(tiny_bert_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    words = ["unbelievably", "new", "york", *(["the"] * 12), "alice"]
    tags = ["O", "B-LOC", "I-LOC", *(["O"] * 12), "B-PER"]
    names = ("B-LOC", "B-PER", "I-LOC", "O")
    ids = [[names.index(t) for t in tags]]
    windows = label_windows(tokenizer, [words], ids, Reading.of_words("first", 8))
    assert windows.n_windows > 1 and all(len(row) <= 8 for row in windows.encoded.input_ids)
    labels = windows.labels.tolist()
    assert sum(label != IGNORE for row in labels for label in row) == len(words)  # each word once, in one window
    assert [labels[k][p] for k, p in zip(windows.word_window, windows.word_start, strict=True)] == ids[0]
    assert all(row[0] == IGNORE and row[-1] == IGNORE for row in labels)  # [CLS] and [SEP]
    every = label_windows(tokenizer, [["unbelievably", "paris"]], [[names.index("B-LOC"), 3]],
                          Reading.of_words("first", 16), label_all_pieces=True, continuation=continuation_ids(names))
    pieces = len(tokenizer.tokenize("unbelievably"))
    assert pieces > 1
    assert every.labels.tolist()[0] == [IGNORE, 0, *([2] * (pieces - 1)), 3, IGNORE]  # B-LOC's later pieces: I-LOC


def test_a_tagger_trained_in_short_windows_reads_long_sentences_in_them(tiny_bert_dir, tmp_path):
    train = write_iob(tmp_path / "train.iob2", synthetic_sentences(30, 2, words=(20, 30)))
    dev = write_iob(tmp_path / "dev.iob2", synthetic_sentences(8, 3, words=(20, 30)))
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", max_length=16, epochs=1,
                              label_all_pieces=True), progress=False)
    assert result.metrics["best_dev"]["n"] == sum(len(s[0]) for s in synthetic_sentences(8, 3, words=(20, 30)))
    record = json.loads((tmp_path / "run" / "best" / "bertkit_model.json").read_text())
    assert record["reading"]["max_length"] == 16


@pytest.mark.parametrize(("overrides", "message"), [
    ({"dev": None}, r"needs --dev"),
    ({"text_pair_column": "x"}, r"--text-pair-column does not apply to fine-tuning on tagged data"),
    ({"calibrate": "temperature"}, r"--calibrate does not apply"),
    ({"metric_for_best": "mcc"}, r"--metric-for-best mcc is not a score of tagged data.*f1, precision, recall"),
])
def test_a_refused_tagging_run_leaves_nothing(tiny_bert_dir, tagged_files, tmp_path, overrides, message):
    train, dev = tagged_files
    values = {"dev": dev, **overrides}
    with pytest.raises(UserError, match=message):
        finetune(tag_cfg(tiny_bert_dir, train, values.pop("dev"), tmp_path / "run", **values), progress=False)
    assert not (tmp_path / "run").exists()


def test_dev_tags_unseen_in_training_and_tag_options_on_sentences_are_refused(tiny_bert_dir, tagged_files, tmp_path,
                                                                             write_tsv, toy_rows):
    train, _ = tagged_files
    dev = write_iob(tmp_path / "odd.iob2", [(["zurich"], ["B-CITY"])])
    with pytest.raises(UserError, match=r"tags never seen in training.*B-CITY"):
        finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run"), progress=False)
    assert not (tmp_path / "run").exists()
    rows = write_tsv("rows.tsv", toy_rows, ("sentence", "label"))
    with pytest.raises(UserError, match=r"--label-all-pieces applies to tagged data"):
        tag_cfg(tiny_bert_dir, rows, rows, tmp_path / "run", label_all_pieces=True)


def test_every_training_config_reads_a_tagged_file_as_tagged_data(tagged_files):
    from bertkit.commands.distill import DistillConfig
    from bertkit.commands.sweep import SweepConfig
    from bertkit.training.options import DistillOptions, FinetuneOptions

    train, dev = tagged_files
    for options, extra in ((FinetuneOptions, {}), (SweepConfig, {}), (DistillOptions, {"teacher": "runs/t/best"}),
                           (DistillConfig, {"teacher": "runs/t/best"})):  # a tagging teacher's: `distill.run` checks it
        cfg = options.of(data=str(train), dev=str(dev), out="runs/x", **extra)
        assert cfg.reads_words and cfg.inputs.data == str(train)


def test_plain_tags_pick_best_by_word_accuracy_and_predict_no_spans(tiny_bert_dir, tmp_path):
    from bertkit.commands.evaluate import EvaluateConfig
    from bertkit.commands.evaluate import run as evaluate
    from bertkit.commands.predict import PredictConfig
    from bertkit.commands.predict import run as predict

    rows = pos_sentences(60, 5)
    train, dev = write_iob(tmp_path / "train.conll", rows[:45]), write_iob(tmp_path / "dev.conll", rows[45:])
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", class_weight="balanced"), progress=False)
    assert result.metrics["best_metric_name"] == "accuracy" and result.metrics["best_metric"] > 0.6
    assert "f1" not in result.metrics["best_dev"] and "macro_f1" in result.metrics["best_dev"]
    record = json.loads((tmp_path / "run" / "best" / "bertkit_model.json").read_text())
    assert record["tag_scheme"] == {"name": "none", "source": "none"}
    tagged = predict(PredictConfig.of(model=str(tmp_path / "run" / "best"), text=("the dog saw a cat",))).sentences[0]
    assert len(tagged.tags) == 5 and tagged.spans == ()
    scored = evaluate(EvaluateConfig.of(model=str(tmp_path / "run" / "best"), data=str(dev)))
    assert scored.metrics.score("accuracy") == pytest.approx(result.metrics["best_metric"])


@pytest.mark.slow
def test_minilm_learns_entities_on_uner_ewt(shared_data, tmp_path):
    """The real check (about 5 min on 2 shared cores): the packaged MiniLM on the first 500 training and dev sentences
    of uner_ewt, 3 epochs of batch 16, --lr auto. Measured: dev entity F1 0.449 (0.375-0.533) after epoch 2; with
    every sentence and the defaults 0.634, against 0.550 for the best frozen word probe (docs/finetune.md)."""
    from bertkit.commands.evaluate import EvaluateConfig
    from bertkit.commands.evaluate import run as evaluate

    data = shared_data / "uner_ewt"
    result = finetune(FinetuneConfig.of(data=str(data / "train.iob2"), dev=str(data / "dev.iob2"), limit=500, epochs=3,
                                     batch_size=16, out=str(tmp_path / "run"), save_every=None), progress=False)
    assert result.metrics["best_metric"] > 0.3 and set(result.metrics["best_dev"]["per_type"]) == {"LOC", "ORG", "PER"}
    scored = evaluate(EvaluateConfig.of(model=str(tmp_path / "run" / "best"), data=str(data / "dev.iob2"), limit=500))
    assert scored.metrics.score("f1") == pytest.approx(result.metrics["best_metric"], abs=0.02)  # bf16 may differ


def test_iob1_training_data_is_read_and_recorded_as_iob2(tiny_bert_dir, tmp_path):
    def iob1(sentences):
        return [(words, [("I" + t[1:]) if t.startswith("B-") and (i == 0 or tags[i - 1][2:] != t[2:]) else t
                         for i, t in enumerate(tags)]) for words, tags in sentences]

    train = write_iob(tmp_path / "train.iob", iob1(synthetic_sentences(30, 0)))
    dev = write_iob(tmp_path / "dev.iob", iob1(synthetic_sentences(10, 1)))
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=1), progress=False)
    assert "IOB1 tags read as IOB2" in result.notes
    record = json.loads((tmp_path / "run" / "best" / "bertkit_model.json").read_text())
    assert record["tag_scheme"] == {"name": "IOB2", "source": "IOB1"}
    assert "B-PER" in json.loads((tmp_path / "run" / "best" / "config.json").read_text())["label2id"]


def test_a_missing_tagged_dev_file_is_refused_before_torch_and_leaves_no_out(tagged_files, tmp_path):
    from test_fast_start import run_cli

    train, _ = tagged_files
    code, output, imported = run_cli("finetune", "--data", str(train), "--dev", "missing.iob2", "--out", "OUT",
                                     cwd=tmp_path)
    assert code == 2 and "Tagged file missing.iob2 does not exist" in output and "Traceback" not in output
    assert imported == [] and not (tmp_path / "OUT").exists()


def test_a_tagged_tsv_is_read_as_tags_and_an_unopenable_path_is_not_read(tmp_path):
    from bertkit.training.options import FinetuneOptions

    pos = tmp_path / "pos.tsv"  # a column file named .tsv (as ud_ewt_pos): told by its lines
    pos.write_text("the\tDET\ndog\tNOUN\n\na\tDET\ncat\tNOUN\n", encoding="utf-8")
    assert FinetuneOptions.of(data=str(pos), dev=str(pos), out=str(tmp_path / "x")).reads_words  # a tagger's run
    too_long = str(tmp_path / ("d" * 256) / "train.iob2")  # a name this system cannot stat: no OSError traceback
    assert FinetuneConfig.of(data=too_long, dev=too_long, out=str(tmp_path / "run")).reads_words  # named as tagged
    refused = CliRunner().invoke(app, ["finetune", "--data", too_long, "--dev", too_long, "--out", str(tmp_path / "r")])
    assert refused.exit_code == 2 and "Cannot read tagged file" in refused.output and "Traceback" not in refused.output
    assert not (tmp_path / "r").exists()


def test_a_resume_key_recorded_before_the_tagging_options_reads_as_todays(tmp_path, write_tsv, toy_rows,
                                                                          tagged_files):
    """A run on rows of text does not read the tagging options: its key leaves them out (an older key that holds
    them, migrated, is the same run); a tagger's key holds them."""
    from bertkit.io import trail
    from bertkit.training.resume import resume_key

    rows = write_tsv("rows.tsv", toy_rows, ("sentence", "label"))
    key = resume_key(FinetuneConfig.of(data=str(rows), out=str(tmp_path / "run")), {})
    assert not {"tag_scheme", "label_all_pieces", "stride", "unseen_tags"} & set(key["config"])
    record = trail.migrated_run_config({"command": "finetune", "config": {}, "resume_key": {"config": key["config"]}})
    assert record["resume_key"]["config"]["tag_scheme"] == "auto"  # filled in by the migration
    assert trail.key_differences(record["resume_key"], key) == []  # a run from before them resumes
    train, dev = tagged_files
    tagger = resume_key(tag_cfg("m", train, dev, tmp_path / "r", label_all_pieces=True), {})["config"]
    assert tagger["label_all_pieces"] is True and tagger["unseen_tags"] == "refuse" and "truncation" not in tagger


def test_no_fast_forward_trains_a_tagger_with_the_models_own_forward(tiny_bert_dir, tagged_files, tmp_path):
    train, dev = tagged_files
    result = finetune(tag_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=1, fast_forward=False),
                      progress=False)
    assert result.metrics["forward"] == "transformers" and result.metrics["task"] == "tags"
