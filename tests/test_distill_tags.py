"""bertkit distill with a tagger as --teacher: a tagging student trained on the teacher's per-piece outputs (cached
once, reused on a resume), which `bertkit predict` reads as a tagger; the report compares both by dev entity F1;
the token-level loss; the refusals (a teacher of the other kind, tags it does not know, options it does not read)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from tagged_samples import synthetic_sentences, write_iob
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.encoding.reading import Reading
from bertkit.encoding.rows import TokenRows
from bertkit.encoding.word_labels import IGNORE, label_windows
from bertkit.io import faults
from bertkit.scoring import tag_distill
from bertkit.training import distill, distill_tags

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()
TAGS = ("B-LOC", "B-PER", "I-LOC", "O")


@pytest.fixture(scope="module")
def tagged(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("distill-tags")
    return (write_iob(root / "train.iob2", synthetic_sentences(48, 0)),
            write_iob(root / "dev.iob2", synthetic_sentences(16, 1)))


@pytest.fixture(scope="module")
def tag_teacher(tagged, tiny_bert_dir, tmp_path_factory) -> Path:
    """A 2-layer tiny BERT tagger fine-tuned on the synthetic entities: the teacher."""
    out = tmp_path_factory.mktemp("tag-teacher") / "run"
    result = runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(tagged[0]), "--dev",
                                 str(tagged[1]), "--out", str(out), "--epochs", "4", "--batch-size", "8", "--lr", "5e-3",
                                 "--precision", "fp32", "--quiet"])
    assert result.exit_code == 0, result.output
    return out / "best"


def argv(teacher: Path, data: tuple[Path, Path | None], out: Path, *extra: str) -> list[str]:
    dev = ["--dev", str(data[1])] if data[1] is not None else []
    return ["distill", "--teacher", str(teacher), "--data", str(data[0]), *dev, "--out", str(out),
            "--student-layers", "1", "--epochs", "1", "--batch-size", "8", "--lr", "5e-3", "--save-every", "3",
            "--precision", "fp32", "--report-seconds", "0", "--quiet", *extra]


def counting(monkeypatch) -> list[int]:
    """How often the teacher's piece logits are computed from here on."""
    computed: list[int] = []
    real = distill_tags._compute_piece_logits
    monkeypatch.setattr(distill_tags, "_compute_piece_logits", lambda *a, **k: computed.append(1) or real(*a, **k))
    return computed


def test_the_token_loss_is_the_mix_of_kl_and_cross_entropy_over_labelled_pieces(tiny_bert_dir):
    from transformers import AutoTokenizer

    from bertkit.data.tagscheme import TagScheme
    from bertkit.scoring.tags import TagObjective

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    sentences = [["alice", "went", "to", "new", "york"], ["bob", "saw", "a", "dog"]]
    ids = [[1, 3, 3, 0, 2], [1, 3, 3, 3]]
    windows = label_windows(tokenizer, sentences, ids, Reading.of_words("first", 16))
    positions = tag_distill.labelled_positions(windows)
    assert len(positions) == 9  # one labelled piece per word
    rng = np.random.default_rng(0)
    pieces = rng.normal(size=(9, 4)).astype(np.float32)
    targets = tag_distill.teacher_targets(windows, windows, pieces)
    assert targets.lengths.tolist() == [5, 4]
    hard = TagObjective(windows.labels, windows, [w for s in sentences for w in s], TAGS, TagScheme("IOB2", "IOB2"))
    rows = np.array([1, 0])  # batch order differs from window order: targets follow the rows
    width = int(windows.encoded.lengths.max())
    logits = torch.tensor(rng.normal(size=(2, width, 4)), dtype=torch.float32)
    t, alpha = 2.0, 0.3
    loss = tag_distill.TagDistillation(hard, targets, t, alpha).loss(logits, rows)
    labels = torch.as_tensor(windows.labels.padded(rows, width, IGNORE)[0])
    student = logits[labels != IGNORE]
    teacher = torch.tensor(np.concatenate([pieces[5:], pieces[:5]]))
    p_t = torch.softmax(teacher / t, -1)
    kl = (p_t * (torch.log(p_t) - torch.log_softmax(student / t, -1))).sum(-1).mean() * t * t
    ce = torch.nn.functional.cross_entropy(student, labels[labels != IGNORE])
    assert loss.item() == pytest.approx((alpha * kl + (1 - alpha) * ce).item(), rel=1e-5)


def test_another_tokenizers_windows_get_the_teachers_targets_word_by_word(tiny_bert_dir):
    """A student whose windows differ (here: shorter ones, so a sentence is cut elsewhere) learns each word from the
    teacher's logits at that word's first piece."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    sentences = [["alice", "went", *(["to"] * 10), "new", "york"], ["bob", "saw", "a", "dog"]]
    ids = [[1, 3, *([3] * 10), 0, 2], [1, 3, 3, 3]]
    teacher = label_windows(tokenizer, sentences, ids, Reading.of_words("first", 32))
    student = label_windows(tokenizer, sentences, ids, Reading.of_words("first", 8))
    assert not tag_distill.same_windows(teacher, student) and student.n_windows > teacher.n_windows
    words = sum(map(len, sentences))
    pieces = np.arange(words, dtype=np.float32)[:, None] * np.ones((1, 4), np.float32)  # word i's logits: i
    targets = tag_distill.teacher_targets(teacher, student, pieces)
    got = np.concatenate([targets[w][:, 0] for w in range(len(targets))])
    student_labels = np.asarray(student.labels.values)
    assert len(got) == words == int((student_labels != IGNORE).sum())
    # each student labelled piece (in window order) carries the logits of the word labelled there
    position_word = {int(p): w for w, p in enumerate(student.labels.offsets[student.word_window] + student.word_start)}
    assert got.tolist() == [float(position_word[int(p)]) for p in tag_distill.labelled_positions(student)]


def test_a_tagger_distils_into_a_tagging_student_that_predict_reads(tag_teacher, tagged, tmp_path, monkeypatch):
    computed = counting(monkeypatch)
    out = tmp_path / "student"
    result = runner.invoke(app, [*argv(tag_teacher, tagged, out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert computed == [1] and (out / distill.CACHE).is_file()  # the teacher ran once, before training
    key = json.loads((out / distill.CACHE_KEY).read_text())
    with np.load(out / distill.CACHE) as cached:
        assert cached["logits"].shape == (key["rows"], len(TAGS))
    assert all(np.isfinite(h["train_loss"]) for h in payload["training"]["history"])
    student = load_file(str(out / "best" / "model.safetensors"))
    assert not any(".layer.1." in k for k in student) and any(".layer.0." in k for k in student)
    record = json.loads((out / "best" / "bertkit_model.json").read_text())
    teacher_record = json.loads((tag_teacher / "bertkit_model.json").read_text())
    assert record["task"] == "tags" and record["tag_scheme"] == teacher_record["tag_scheme"]
    assert Reading.from_json(record["reading"]) == Reading.from_json(teacher_record["reading"])
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"] and config["num_hidden_layers"] == 1
    assert config["id2label"] == json.loads((tag_teacher / "config.json").read_text())["id2label"]
    report = payload["report"]
    assert report["task"] == "tags" and report["metric"] == "f1"
    for name in ("teacher", "student"):
        assert 0.0 <= report["models"][name]["dev"]["f1"] <= 1.0 and report["models"][name]["latency_b1_ms"] > 0
    # the report's student F1 is the one training picked best/ by (the same words, scored the same way)
    assert report["models"]["student"]["dev"]["f1"] == pytest.approx(payload["training"]["best_dev"]["f1"], abs=1e-6)
    assert report["models"]["student"]["parameters"] < report["models"]["teacher"]["parameters"]
    assert report["claims"]["quality_retained_pct"]["metric"] == "f1"
    assert "f1 retained" in (out / "distill_report.md").read_text()
    assert "teacher" in (out / "best" / "README.md").read_text()
    predicted = runner.invoke(app, ["predict", "--model", str(out / "best"), "--text", "alice went to paris", "--json"])
    assert predicted.exit_code == 0, predicted.output
    row = json.loads(predicted.stdout.splitlines()[0])
    assert row["words"] == ["alice", "went", "to", "paris"] and set(row["tags"]) <= set(TAGS)
    assert isinstance(row["spans"], list)


def test_a_resumed_tag_distillation_reuses_the_cache_and_equals_an_uninterrupted_one(tag_teacher, tagged, tmp_path,
                                                                                   monkeypatch):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    args = ("--epochs", "2", "--no-report")
    assert runner.invoke(app, argv(tag_teacher, tagged, whole, *args)).exit_code == 0
    monkeypatch.setenv(faults.FAIL_AFTER_STEPS_ENV, "4")
    with pytest.raises(faults.SimulatedFailure):
        runner.invoke(app, argv(tag_teacher, tagged, cut, *args), catch_exceptions=False)
    monkeypatch.delenv(faults.FAIL_AFTER_STEPS_ENV)
    computed = counting(monkeypatch)
    resumed = runner.invoke(app, [*argv(tag_teacher, tagged, cut, *args), "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["training"]["resumed_from"]["step"] == 3
    assert computed == []  # the teacher's piece logits came from the cache
    a, b = load_file(str(whole / "final" / "model.safetensors")), load_file(str(cut / "final" / "model.safetensors"))
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
    again = runner.invoke(app, [*argv(tag_teacher, tagged, cut, *args), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["training"]["already_finished"] and computed == []


def test_a_student_encoder_with_its_own_windows_learns_from_the_teacher(tag_teacher, tagged, tmp_path,
                                                                         tiny_distilbert_dir, monkeypatch):
    computed = counting(monkeypatch)
    out = tmp_path / "own"
    result = runner.invoke(app, [*argv(tag_teacher, tagged, out, "--student", str(tiny_distilbert_dir), "--no-report",
                                       "--student-layers", "3"), "--json"])
    assert result.exit_code == 0, result.output
    assert computed == [1] and all(np.isfinite(h["train_loss"]) for h in json.loads(result.stdout)["training"]["history"])
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["architectures"] == ["DistilBertForTokenClassification"]


def test_teachers_and_data_of_another_kind_and_unknown_tags_are_refused(tag_teacher, tagged, tmp_path, write_tsv,
                                                                       tiny_bert_dir):
    rows = write_tsv("rows.tsv", [(f"a fine film {i}", ("pos", "neg")[i % 2]) for i in range(20)], ("sentence", "label"))
    sentence_teacher = tmp_path / "sentence-teacher"
    assert runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(rows), "--dev", str(rows),
                               "--out", str(sentence_teacher), "--epochs", "1", "--quiet"]).exit_code == 0
    other = write_iob(tmp_path / "other.iob2", [*synthetic_sentences(20, 0), (["alice", "in", "acme"], ["B-PER", "O",
                                                                                                      "B-ORG"])])
    cases = [
        (argv(tag_teacher, (rows, rows), tmp_path / "a"), r"--teacher .* is a tagger .* --data .* is read as rows of text"),
        (argv(sentence_teacher / "best", tagged, tmp_path / "b"),
         r"is a sentence classifier .* --data .* is read as tagged data"),
        (argv(tag_teacher, (other, tagged[1]), tmp_path / "c"), r"--data .* has tags the teacher .* does "
                                                                r"not know: B-ORG"),
        (argv(tag_teacher, (tagged[0], None), tmp_path / "d"), r"Distilling a tagger needs --dev"),
        (argv(tag_teacher, tagged, tmp_path / "e", "--cos-weight", "1"), r"--cos-weight does not apply to distilling a "
                                                                         r"tagger"),
        (argv(sentence_teacher / "best", (rows, rows), tmp_path / "f", "--label-all-pieces"),
         r"--label-all-pieces applies to a tagging teacher"),
        (argv(tag_teacher, tagged, tmp_path / "g", "--student-layers", "2"), r"--student-layers 2 is as many as"),
        (argv(tag_teacher, (tmp_path / "missing.tsv", tagged[1]), tmp_path / "h"), r"missing\.tsv"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        flat = " ".join(result.output.split())
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert re.search(message, flat), (message, flat)
        assert not Path(args[args.index("--out") + 1]).exists()  # refused before --out is made


def test_targets_of_a_batch_follow_its_rows():
    targets = TokenRows(np.arange(10, dtype=np.float32)[:, None], np.array([0, 3, 3, 7, 10]))
    got = tag_distill.batch_targets(targets, np.array([3, 1, 0]))
    assert got[:, 0].tolist() == [7, 8, 9, 0, 1, 2]
