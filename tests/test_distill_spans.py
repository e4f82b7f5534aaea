"""bertkit distill with a question-answering model as --teacher: a student trained on the teacher's start and end
distributions (computed once, cached, reused by a re-run), which `bertkit predict` reads as a question-answering
model; the report compares both by the official dev F1; the loss; the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from squad_samples import MAX_LENGTH
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.scoring.answer_distill import AnswerDistillation, TeacherSpans
from bertkit.training import distill, distill_spans

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()


def argv(teacher, train, dev, out, *extra: str) -> list[str]:
    dev_args = ["--dev", str(dev)] if dev is not None else []
    return ["distill", "--teacher", str(teacher), "--data", str(train), *dev_args, "--out", str(out),
            "--student-layers", "1", "--epochs", "1", "--batch-size", "8", "--lr", "5e-3", "--precision", "fp32",
            "--report-seconds", "0", "--quiet", *extra]


class HardLoss:
    """A stand-in for `AnswerObjective`: a known hard loss, the attributes a distillation reads."""

    label_names, y_dev, table_metrics, num_outputs = ["start", "end"], np.arange(0), ("exact_match", "f1"), 2

    def loss(self, logits, rows):
        return logits.sum() * 0.0 + 0.75

    def to(self, device):
        return self


def test_teacher_logits_are_kept_per_window_and_padded_to_the_batch():
    padded = np.arange(2 * 4 * 2, dtype=np.float32).reshape(2, 4, 2)
    teacher = TeacherSpans.of_windows(padded, np.array([3, 2]))
    assert teacher.logits.shape == (5, 2) and teacher.offsets.tolist() == [0, 3, 5]
    logits, inside = teacher.batch(np.array([1, 0]), 4)
    assert inside.tolist() == [[True, True, False, False], [True, True, True, False]]
    assert np.array_equal(logits[0, :2], padded[1, :2]) and np.array_equal(logits[1, :3], padded[0, :3])
    assert not logits[0, 2:].any()


def test_the_span_loss_is_the_mix_of_kl_at_temperature_and_the_hard_loss():
    rng = np.random.default_rng(0)
    lengths = np.array([5, 3])
    teacher_padded = rng.normal(size=(2, 5, 2)).astype(np.float32)
    student = torch.tensor(rng.normal(size=(2, 6, 2)), dtype=torch.float32)  # the batch is wider than both windows
    t, alpha = 2.0, 0.6
    loss = AnswerDistillation(HardLoss(), TeacherSpans.of_windows(teacher_padded, lengths), t, alpha).loss(
        student, np.array([0, 1]))
    kl = 0.0
    for w, n in enumerate(lengths):
        for end in (0, 1):
            p = torch.softmax(torch.tensor(teacher_padded[w, :n, end]) / t, dim=0)
            q = torch.log_softmax(student[w, :n, end] / t, dim=0)
            kl += float((p * (p.log() - q)).sum())
    expected = alpha * t * t * kl / (2 * len(lengths)) + (1 - alpha) * 0.75  # the mean over windows and both ends
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_a_question_answering_teacher_distils_into_a_student_that_predict_reads(tiny_answerer, tmp_path, monkeypatch):
    teacher, dev = tiny_answerer
    computed: list[int] = []
    real = distill_spans._compute_span_logits
    monkeypatch.setattr(distill_spans, "_compute_span_logits", lambda *a, **k: computed.append(1) or real(*a, **k))
    out = tmp_path / "student"
    result = runner.invoke(app, [*argv(teacher, dev.parent / "train.json", dev, out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    report = payload["report"]
    assert report["task"] == "spans" and report["metric"] == "f1" and len(report["student_layers"]) == 1
    assert report["teacher_layers"] == 2 and report["dev_rows"] == 24
    for side in ("teacher", "student"):
        assert 0.0 <= report["models"][side]["dev"]["f1"] <= 100.0
    assert report["models"]["teacher"]["dev"]["f1"] > 50.0  # the trained teacher answers the easy set
    record = json.loads((out / "best" / "bertkit_model.json").read_text())
    assert record["family"] == "spans" and record["reading"]["max_length"] == MAX_LENGTH
    cache = json.loads((out / distill.CACHE_KEY).read_text())
    assert cache["windows"] > cache["questions"] == 120  # long passages read in several windows
    assert computed == [1]
    context = "the lighthouse keeper painted the door blue in the spring"
    predicted = runner.invoke(app, ["predict", "--model", str(out / "best"), "--question", "what colour was the door",
                                    "--context", context, "--json"])
    assert predicted.exit_code == 0, predicted.output
    answer = json.loads(predicted.stdout.strip().splitlines()[0])
    assert context[answer["start"]:answer["end"]] == answer["answer"]
    again = runner.invoke(app, [*argv(teacher, dev.parent / "train.json", dev, out), "--json"])
    assert again.exit_code == 0, again.output
    assert computed == [1]  # a finished run is not trained again, nor the teacher run again


def test_distilling_questions_needs_dev_and_squad_data_and_refuses_another_task(tiny_answerer, tmp_path, write_tsv):
    teacher, dev = tiny_answerer
    train = dev.parent / "train.json"
    cases = [
        (argv(teacher, train, None, tmp_path / "a"), "Distilling a question-answering model needs --dev"),
        (argv(teacher, train, dev, tmp_path / "b", "--task", "tags"), "--task tags"),
        (argv(teacher, write_tsv(tmp_path / "rows.tsv", [("a text", "pos")] * 4), dev, tmp_path / "c"),
         "is read as rows of text"),
        (argv(teacher, train, dev, tmp_path / "d", "--test", str(dev)), "--test"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split()), result.output
        assert not any(tmp_path.glob(args[args.index("--out") + 1].split("/")[-1]))

