"""bertkit sweep on tagged data: every trial a tagger fine-tuned through `finetune.finetune` (TagTask) on tagged data
read once, ranked by what the tags score (entity F1; word accuracy for plain tags), the tagging options sweepable,
and the refusals - a sentence-only option, a --metric-for-best tags do not score, a searched option that would
re-read the tagged data or make a trial a classifier - exit 2 with one message before anything is made."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from tagged_samples import synthetic_sentences, write_iob
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.io import trail

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def tagged_files(tmp_path):
    return (write_iob(tmp_path / "train.iob2", synthetic_sentences(40, 0)),
            write_iob(tmp_path / "dev.iob2", synthetic_sentences(12, 1)))


def tag_sweep_argv(model: Path, train: Path, dev: Path, out: Path, *extra: str) -> list[str]:
    return ["sweep", "--model", str(model), "--data", str(train), "--dev", str(dev), "--out", str(out), "--epochs",
            "1", "--batch-size", "8", "--precision", "fp32", "--save-every", "100", "--seed", "3", "--quiet", *extra]


def refused(argv: list[str]) -> str:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    return " ".join(result.output.split())


def test_a_tagger_sweep_ranks_its_trials_by_entity_f1_and_keeps_the_best_tagger(tiny_bert_dir, tagged_files,
                                                                                tmp_path, monkeypatch):
    from bertkit.data import tagged_splits

    reads = []
    real = tagged_splits.load_tagged_training

    def counted(*args, **kwargs):
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(tagged_splits, "load_tagged_training", counted)
    train, dev = tagged_files
    out = tmp_path / "sweep"
    result = runner.invoke(app, [*tag_sweep_argv(tiny_bert_dir, train, dev, out, "--grid", "lr=5e-3,1e-5"),
                                 "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert reads == [str(train)]  # the tagged data read once, for both trials
    assert summary["metric"] == "f1" and summary["direction"] == "max" and summary["trials"] == 2
    rows = {row["lr"]: row for row in summary["rows"]}
    assert {row["metric"] for row in rows.values()} == {"f1"}
    for row in rows.values():  # each trial's best is its tagger's best dev entity F1
        metrics = json.loads((out / "trials" / row["trial"] / "metrics.json").read_text())
        assert metrics["task"] == "tags" and metrics["best_metric_name"] == "f1"
        assert row["best"] == pytest.approx(metrics["best_metric"])
    best = max(rows.values(), key=lambda row: row["best"])
    assert rows[5e-3]["best"] > rows[1e-5]["best"] and summary["best"]["trial"] == best["trial"]
    assert summary["ranking"][0]["params"] == {"lr": 5e-3}
    record = json.loads((out / "best" / "bertkit_model.json").read_text())
    assert record["task"] == "tags" and record["tag_scheme"] == {"name": "IOB2", "source": "IOB2"}
    with open(out / "trials.csv", newline="", encoding="utf-8") as handle:
        assert [r["metric"] for r in csv.DictReader(handle)] == ["f1", "f1"]
    shown = runner.invoke(app, tag_sweep_argv(tiny_bert_dir, train, dev, out, "--grid", "lr=5e-3,1e-5"))
    assert shown.exit_code == 0 and "best dev f1" in shown.output  # finished: the summary again, nothing trained


def test_the_tagging_options_are_sweepable_and_fixed_ones_reach_the_trials(tiny_bert_dir, tmp_path):
    kinds = {"the": "DET", "a": "DET", "dog": "NOUN", "cat": "NOUN", "saw": "VERB", "ran": "VERB"}
    words = list(kinds)
    rows = [([words[(i + k) % 6] for k in range(4)], [kinds[words[(i + k) % 6]] for k in range(4)]) for i in range(24)]
    train, dev = write_iob(tmp_path / "train.conll", rows[:18]), write_iob(tmp_path / "dev.conll", rows[18:])
    out = tmp_path / "sweep"
    result = runner.invoke(app, [*tag_sweep_argv(tiny_bert_dir, train, dev, out, "--lr", "5e-3", "--tag-scheme",
                                                 "none", "--grid", "label-all-pieces=false,true"), "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["metric"] == "accuracy" and [r["label-all-pieces"] for r in summary["rows"]] == [False, True]
    for row in summary["rows"]:
        config = json.loads((out / "trials" / row["trial"] / "config.json").read_text())["config"]
        assert config["tag_scheme"] == "none" and config["label_all_pieces"] is row["label-all-pieces"]


@pytest.mark.parametrize(("extra", "message"), [
    (("--calibrate", "temperature"), "--calibrate does not apply to fine-tuning on tagged data"),
    (("--metric-for-best", "mcc"), "--metric-for-best mcc is not a score of tagged data with entity tags"),
    (("--grid", "limit=10,20"), "--limit decides which tagged sentences and tags the trials read"),
    (("--grid", "tag-scheme=IOB2,none"), "--tag-scheme changes the entities the dev tags are read into"),
    (("--grid", "text-pair-column=a,b"), "--text-pair-column does not apply to fine-tuning on tagged data"),
    (("--grid", "max-length=32,1000"), "--grid max-length=1000: a trial with --max-length 1000 would stop before"),
    (("--max-length", "32", "--grid", "stride=4,30"), "--grid stride=30: a trial with --stride 30 would stop before "
                                                       "training: --stride 30 must be between 0 and 29"),
])
def test_what_a_tagger_sweep_cannot_do_is_refused_before_anything_is_made(tiny_bert_dir, tagged_files, tmp_path,
                                                                          extra, message):
    train, dev = tagged_files
    out = tmp_path / "sweep"
    text = refused(tag_sweep_argv(tiny_bert_dir, train, dev, out, "--grid", "lr=5e-3,1e-4", *extra))
    assert message in text, text
    assert not out.exists()


def test_a_sentence_sweep_refuses_tagging_options_and_a_tagged_data_value(tiny_bert_dir, tagged_files, write_tsv,
                                                                        toy_rows, tmp_path):
    rows = write_tsv("rows.tsv", toy_rows, ("sentence", "label"))
    train, _ = tagged_files
    out = tmp_path / "sweep"
    text = refused(tag_sweep_argv(tiny_bert_dir, rows, rows, out, "--label-all-pieces"))
    assert "--label-all-pieces applies to tagged data" in text
    dev = tmp_path / "dev.jsonl"  # JSON rows: a tagged --data could pair with them, so the kinds differ
    dev.write_text("".join(json.dumps({"sentence": text, "label": label}) + "\n" for text, label in toy_rows),
                   encoding="utf-8")
    text = refused(tag_sweep_argv(tiny_bert_dir, rows, dev, out, "--grid", f"data={rows},{train}"))
    assert "a trial would train a tagger (tagged data), but the sweep's options train a classifier" in text, text
    assert not out.exists()


def test_a_sweep_of_rows_recorded_before_the_tagging_options_still_continues(tiny_bert_dir, write_tsv, toy_rows,
                                                                            tmp_path):
    rows = write_tsv("rows.tsv", toy_rows, ("sentence", "label"))
    out = tmp_path / "sweep"
    argv = [*tag_sweep_argv(tiny_bert_dir, rows, rows, out, "--grid", "lr=5e-3"), "--json"]
    first = runner.invoke(app, argv, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    record = json.loads((out / "config.json").read_text())
    older = {k: v for k, v in record["compared"].items() if k not in ("tag_scheme", "label_all_pieces", "stride")}
    layout_1 = {k: v for k, v in record.items() if k not in ("format", "family", "record_sha256")}
    assert trail.migrated_run_config({**layout_1, "compared": older})["compared"] == record["compared"]
    assert record["family"] == "sentences"
    changed = runner.invoke(app, [*argv, "--epochs", "2"])
    assert changed.exit_code == 2 and "--epochs: 1 -> 2" in changed.output  # the comparison still holds
    again = runner.invoke(app, argv, catch_exceptions=False)
    assert again.exit_code == 0 and json.loads(again.stdout)["rows"] == json.loads(first.stdout)["rows"]


def test_an_optuna_search_of_taggers_is_told_their_entity_f1(tiny_bert_dir, tagged_files, tmp_path):
    pytest.importorskip("optuna")
    train, dev = tagged_files
    out = tmp_path / "sweep"
    result = runner.invoke(app, [*tag_sweep_argv(tiny_bert_dir, train, dev, out, "--search", "optuna", "--trials",
                                                 "2", "--space", "lr=1e-4:5e-3:log", "--no-prune"), "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["metric"] == "f1" and summary["trials"] == 2 and summary["direction"] == "max"
    assert all(row["metric"] == "f1" and 0.0 <= row["best"] <= 1.0 for row in summary["rows"])
    assert summary["best"]["best"] == max(row["best"] for row in summary["rows"])
