"""bertkit distill: the student built from the teacher, the loss, the teacher-logit cache, exact resume, the
report. Correctness only: the speed and quality claims are measured in benchmarks/bench_distill.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.distill import DistillConfig
from bertkit.errors import UserError
from bertkit.io import faults
from bertkit.models import loading
from bertkit.training import distill

runner = CliRunner()


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("distill-data")
    good = ["great", "wonderful", "lovely", "superb", "delightful"]
    bad = ["awful", "terrible", "boring", "dreadful", "horrible"]
    rows = []
    for i in range(30):
        rows.append(f"a {good[i % 5]} film , truly {good[(i + 2) % 5]}\tpos")
        rows.append(f"an {bad[i % 5]} movie , really {bad[(i + 1) % 5]}\tneg")
    train, dev = root / "train.tsv", root / "dev.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    dev.write_text("sentence\tlabel\n" + "\n".join(rows[:16]) + "\n", encoding="utf-8")
    return train, dev


@pytest.fixture(scope="module")
def teacher(toy, tiny_bert_dir, tmp_path_factory) -> Path:
    """A 2-layer tiny BERT fine-tuned on the toy data: the teacher."""
    train, dev = toy
    out = tmp_path_factory.mktemp("teacher") / "run"
    result = runner.invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev),
                                 "--out", str(out), "--epochs", "3", "--batch-size", "8", "--lr", "5e-3",
                                 "--precision", "fp32", "--quiet"])
    assert result.exit_code == 0, result.output
    return out / "best"


def argv(teacher: Path, toy: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    return ["distill", "--teacher", str(teacher), "--data", str(toy[0]), "--dev", str(toy[1]), "--out", str(out),
            "--student-layers", "1", "--epochs", "2", "--batch-size", "8", "--lr", "5e-3", "--save-every", "3",
            "--precision", "fp32", "--report-seconds", "0", "--quiet", *extra]


def test_copied_layers_are_evenly_spaced():
    assert distill.copied_layers(12, 6) == [0, 2, 4, 7, 9, 11]  # transformers' extract_distilbert.py choice
    assert distill.copied_layers(6, 3) == [0, 3, 5]  # first and last kept; 2.5 rounds up
    assert distill.copied_layers(6, 4) == [0, 2, 3, 5]
    assert distill.copied_layers(2, 1) == [0]
    with pytest.raises(UserError, match="more than the teacher's 6 layers"):
        distill.copied_layers(6, 7)


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_student_copies_the_teachers_layers_embeddings_and_head(kind, tiny_bert_dir, tiny_distilbert_dir):
    folder = tiny_bert_dir if kind == "bert" else tiny_distilbert_dir
    teacher = loading.load_classifier(str(folder), {0: "neg", 1: "pos"})
    student, kept = distill.student_from_teacher(teacher, 1)
    assert kept == [0] and student.config.num_hidden_layers == 1 and type(student) is type(teacher)
    t, s = teacher.state_dict(), student.state_dict()
    assert len(s) < len(t)
    for name, value in s.items():
        source = name.replace(".layer.0.", f".layer.{kept[0]}.")
        assert torch.equal(value, t[source]), name  # every student tensor is the teacher's
    assert loading.parameter_count(student) < loading.parameter_count(teacher)


def test_distillation_loss_is_the_mix_of_soft_and_hard_terms():
    from bertkit.scoring.shapes import Distillation, SingleLabel

    y = np.array([0, 1, 1])
    teacher = np.array([[2.0, -1.0], [0.5, 0.7], [-3.0, 3.0]])
    student = torch.tensor([[0.1, 0.2], [1.0, -1.0], [0.0, 2.0]])
    hard = SingleLabel(y, y, ["a", "b"])
    rows = np.arange(3)
    t = 2.0
    loss = Distillation(hard, teacher, t, 0.3).loss(student, rows)
    p_t = torch.softmax(torch.tensor(teacher) / t, -1)
    kl = (p_t * (torch.log(p_t) - torch.log_softmax(student / t, -1))).sum(-1).mean() * t * t
    ce = torch.nn.functional.cross_entropy(student, torch.tensor(y))
    assert loss.item() == pytest.approx((0.3 * kl + 0.7 * ce).item(), rel=1e-5)
    assert Distillation(hard, teacher, t, 0.0).loss(student, rows).item() == pytest.approx(ce.item(), rel=1e-6)


def test_distill_trains_a_smaller_student_caches_the_teacher_and_reports(teacher, toy, tmp_path, monkeypatch):
    computed = []
    real = distill._compute_teacher_outputs
    monkeypatch.setattr(distill, "_compute_teacher_outputs", lambda *a, **k: computed.append(1) or real(*a, **k))
    out = tmp_path / "student"
    result = runner.invoke(app, [*argv(teacher, toy, out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    history = payload["training"]["history"]
    losses = [h["train_loss"] for h in history]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]  # finite and falling
    assert computed == [1] and (out / "teacher_logits.npy").is_file()  # once, before training
    student = load_file(str(out / "best" / "model.safetensors"))
    assert not any(".layer.1." in k for k in student) and any(".layer.0." in k for k in student)
    report = payload["report"]
    assert set(report["claims"]) == {"parameter_reduction_pct", "speedup_batch1_x", "speedup_best_batch_x",
                                     "quality_retained_pct"}
    assert report["models"]["student"]["parameters"] < report["models"]["teacher"]["parameters"]
    assert all(isinstance(c["pass"], bool) for c in report["claims"].values())
    # --report-seconds 0: each model's timings are the 10-iteration minimum, and the report says so
    assert report["timing"] == {"warmup": 2, "min_iters": 10, "min_seconds": 0.0, "rounds": 2}
    assert all(m["latency_b1_ms"] > 0 and m["best_rows_per_s"] > 0 for m in report["models"].values())
    for ext in ("json", "md", "png"):
        assert (out / f"distill_report.{ext}").is_file()
    # the saved student is a normal transformers folder
    from transformers import AutoModelForSequenceClassification

    loaded = AutoModelForSequenceClassification.from_pretrained(str(out / "best"))
    assert loaded.config.num_hidden_layers == 1 and loaded.config.id2label == {0: "neg", 1: "pos"}


def test_resumed_distillation_equals_an_uninterrupted_one_and_reuses_the_cache(teacher, toy, tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    assert runner.invoke(app, argv(teacher, toy, whole, "--no-report")).exit_code == 0
    cut = tmp_path / "cut"
    monkeypatch.setenv(faults.FAIL_AFTER_STEPS_ENV, "4")
    with pytest.raises(faults.SimulatedFailure):
        runner.invoke(app, argv(teacher, toy, cut, "--no-report"), catch_exceptions=False)
    monkeypatch.delenv(faults.FAIL_AFTER_STEPS_ENV)
    computed = []
    real = distill._compute_teacher_outputs
    monkeypatch.setattr(distill, "_compute_teacher_outputs", lambda *a, **k: computed.append(1) or real(*a, **k))
    resumed = runner.invoke(app, [*argv(teacher, toy, cut, "--no-report"), "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["training"]["resumed_from"]["step"] == 3
    assert computed == []  # the teacher's logits came from the cache
    a, b = load_file(str(whole / "final" / "model.safetensors")), load_file(str(cut / "final" / "model.safetensors"))
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_cosine_term_and_a_student_encoder(teacher, toy, tmp_path, tiny_bert_dir):
    out = tmp_path / "cos"
    result = runner.invoke(app, [*argv(teacher, toy, out, "--cos-weight", "1.0", "--no-report"), "--json"])
    assert result.exit_code == 0, result.output
    assert all(np.isfinite(h["train_loss"]) for h in json.loads(result.stdout)["training"]["history"])
    other = tmp_path / "other"
    result = runner.invoke(app, [*argv(teacher, toy, other, "--student", str(tiny_bert_dir), "--no-report"), "--json"])
    assert result.exit_code == 0, result.output


def test_bad_distill_input(teacher, toy, tmp_path, tiny_bert_dir, write_tsv):
    cases = [
        (argv(teacher, toy, tmp_path / "a", "--student-layers", "5"), r"more than the teacher's 2 layers"),
        (argv(tiny_bert_dir, toy, tmp_path / "b"), r"No fine-tuned classification head"),
        (argv(teacher, toy, tmp_path / "c", "--alpha", "1.5"), r"--alpha must be in \[0, 1\]"),
        (["distill", "--data", str(toy[0]), "--out", str(tmp_path / "d")], r"--teacher is required"),
    ]
    other = write_tsv("other.tsv", [(f"row {i}", ("meh", "pos", "neg")[i % 3]) for i in range(30)], ("sentence", "label"))
    cases.append(([*argv(teacher, (other, toy[1]), tmp_path / "e")], r"labels the teacher .* was not trained on: meh"))
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        import re

        assert re.search(message, result.output, re.S), (message, result.output)
    with pytest.raises(UserError, match="--teacher is required"):
        DistillConfig.of(data="x", out="y")


# ---------------------------------------------------------------- a damaged teacher-logit cache; messages (issue 20)


@pytest.fixture(scope="module")
def whole_and_cut(teacher, toy, tmp_path_factory):
    """An uninterrupted distillation, and the same run killed after 4 steps (its teacher-logit cache written)."""
    root = tmp_path_factory.mktemp("distill-cache")
    whole, cut = root / "whole", root / "cut"
    assert runner.invoke(app, argv(teacher, toy, whole, "--no-report")).exit_code == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(faults.FAIL_AFTER_STEPS_ENV, "4")
        with pytest.raises(faults.SimulatedFailure):
            runner.invoke(app, argv(teacher, toy, cut, "--no-report"), catch_exceptions=False)
    assert json.loads((cut / distill.CACHE_KEY).read_text())["sha256"]
    return whole, cut


def _resume_copy(teacher, toy, whole_and_cut, tmp_path, monkeypatch, damage):
    """Resume a copy of the cut run after `damage(run)`: (CLI result, how often the teacher ran, final weights equal)."""
    import shutil

    whole, cut = whole_and_cut
    run = tmp_path / "run"
    shutil.copytree(cut, run)
    damage(run)
    computed = []
    real = distill._compute_teacher_outputs
    monkeypatch.setattr(distill, "_compute_teacher_outputs", lambda *a, **k: computed.append(1) or real(*a, **k))
    result = runner.invoke(app, argv(teacher, toy, run, "--no-report"))
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    a, b = load_file(str(whole / "final" / "model.safetensors")), load_file(str(run / "final" / "model.safetensors"))
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7, err_msg=name)
    return " ".join(result.output.split()), computed


def _replace_bytes(run):
    (run / distill.CACHE).write_bytes(b"these are not the teacher's logits" * 10)


def _flip_a_byte(run):  # the same size, another checksum
    raw = bytearray((run / distill.CACHE).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (run / distill.CACHE).write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", [_replace_bytes, _flip_a_byte], ids=["other-bytes", "one-byte-flipped"])
def test_a_damaged_teacher_logit_cache_is_named_then_recomputed_once_deleted(teacher, toy, whole_and_cut, tmp_path,
                                                                             monkeypatch, damage):
    """A cache whose bytes are not those bertkit recorded writing is refused, named (bertkit replaces only its own
    bytes); deleted, as the message says, it is recomputed once and the run ends as an undamaged one."""
    def refused_then_deleted(run):
        damage(run)
        before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        result = runner.invoke(app, argv(teacher, toy, run, "--no-report"))
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and f"changed since bertkit wrote them ({distill.CACHE})" in text, text
        assert "delete the changed ones" in text and {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
        (run / distill.CACHE).unlink()

    output, computed = _resume_copy(teacher, toy, whole_and_cut, tmp_path, monkeypatch, refused_then_deleted)
    assert computed == [1]  # recomputed once; the results equal an undamaged run's (checked above)


def test_a_cache_from_a_run_without_a_record_is_never_guessed_at(teacher, toy, whole_and_cut, tmp_path):
    """A cache from before checksums comes from a run an older bertkit made: without a record, the run is refused
    with how to move it aside."""
    import shutil

    from bertkit.io import record

    run = tmp_path / "run"
    shutil.copytree(whole_and_cut[1], run)
    manifest = json.loads((run / distill.CACHE_KEY).read_text())
    manifest.pop("sha256")
    (run / distill.CACHE_KEY).write_text(json.dumps(manifest))
    (run / record.RECORD).unlink()
    result = runner.invoke(app, argv(teacher, toy, run, "--no-report"))
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "holds a `bertkit distill` run without the record" in text, text
    assert "Move that run aside" in text


def test_a_student_as_deep_as_its_teacher_is_refused(teacher, toy, tmp_path):
    with pytest.raises(UserError, match=r"--student-layers 6 is as many as the teacher's 6 layers.*1 to 5"):
        distill.copied_layers(6, 6)
    result = runner.invoke(app, argv(teacher, toy, tmp_path / "deep", "--student-layers", "2"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "--student-layers 2 is as many as the teacher's 2 layers" in flat
    assert "not a distillation" in flat and "Pass --student-layers 1." in flat and not (tmp_path / "deep").exists()
    with pytest.raises(UserError, match="single layer.*--student MODEL"):
        distill.copied_layers(1, 1)


def test_a_teacher_without_a_head_names_distills_own_options(toy, tmp_path, tiny_bert_dir):
    result = runner.invoke(app, argv(tiny_bert_dir, toy, tmp_path / "s"))
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "No fine-tuned classification head" in flat
    assert "best/ folder as --teacher" in flat and "--probe" not in flat


def test_student_layers_with_a_student_encoder_is_warned_about(teacher, toy, tmp_path, tiny_bert_dir, monkeypatch):
    def stop(*args, **kwargs):
        raise UserError("stop here")

    monkeypatch.setattr("bertkit.training.finetune.finetune", stop)  # the warning comes before any training
    result = runner.invoke(app, argv(teacher, toy, tmp_path / "s", "--student", str(tiny_bert_dir)))
    assert result.exit_code == 2 and "stop here" in result.output
    assert "--student-layers 1 copies layers of the teacher; with --student" in " ".join(result.output.split())
