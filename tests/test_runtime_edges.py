"""Issue 57, the first hour at run time: SIGTERM ends a command as Ctrl-C does (exit 143, one line, its locks
released); a stopped training run says what a re-run resumes from, and checkpoints on the clock as well as by steps;
progress written to a log is a plain line every few seconds from the one bar factory; the resume and summary lines
format their numbers; training data with one tag is refused before torch; the word probe's closing line names its
saved probe; the probe table says why a row can score above the * row. No sleeps: fault points, injected clocks."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tagged_samples import DEV, SENTENCES, write_conll
from test_fast_start import run_cli
from typer.testing import CliRunner

import bertkit
from bertkit.cli import show, show_training
from bertkit.cli.app import app
from bertkit.cli.interrupts import RERUN, Terminated, interrupted_line
from bertkit.cli.output import format_threshold
from bertkit.commands.finetune import FinetuneConfig
from bertkit.data.tagged import TaggedColumns, read_tagged_splits
from bertkit.data.tagged_splits import load_tagged_training
from bertkit.errors import UserError
from bertkit.io import faults
from bertkit.io.checkpoint_folders import latest_checkpoint
from bertkit.models import infer
from bertkit.probe.records import ProbeReport
from bertkit.training import checkpoints
from bertkit.training.outcome import Restored

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


def finetune_args(model: Path, train: Path, dev: Path, out: Path, *extra: str) -> list[str]:
    return ["finetune", "--model", str(model), "--data", str(train), "--dev", str(dev), "--out", str(out),
            "--epochs", "1", "--batch-size", "8", "--precision", "fp32", "--seed", "3", "--quiet", *extra]


# ---------------------------------------------------------------- SIGTERM and Ctrl-C


def test_sigterm_ends_a_run_like_ctrl_c_with_exit_143_and_what_a_rerun_resumes_from(tiny_bert_dir, toy_files,
                                                                                      tmp_path):
    """SIGTERM sent by the run to itself right after step 3 (a kill point, BERTKIT_KILL_SIGNAL=TERM), with a
    checkpoint at step 2: exit 143, one line, no traceback; the lock is free and the same command resumes at 2."""
    train, dev = toy_files
    out = tmp_path / "run"
    args = finetune_args(tiny_bert_dir, train, dev, out, "--save-every", "2")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           faults.ENV: "finetune.step@3", faults.KILL_SIGNAL_ENV: "TERM"}
    proc = subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("terminated")]
    assert len(said) == 1 and re.fullmatch(r"terminated \(SIGTERM\); a re-run of the same command resumes from the "
                                           r"checkpoint at step 2 \(epoch 1, batch 2/5\)\.", said[0]), proc.stderr
    assert latest_checkpoint(out).name == "step-2" and not (out / "metrics.json").exists()
    again = runner.invoke(app, [*args, "--json"], catch_exceptions=False)  # the lock was released: it resumes
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["restored"]["step"] == 2


def test_ctrl_c_before_the_first_checkpoint_says_a_rerun_starts_over(tiny_bert_dir, toy_files, tmp_path,
                                                                      monkeypatch):
    def ctrl_c_at_step_1(name: str, count: int) -> None:
        if count == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(faults, "fail_point", ctrl_c_at_step_1)
    train, dev = toy_files
    result = runner.invoke(app, finetune_args(tiny_bert_dir, train, dev, tmp_path / "run"), catch_exceptions=False)
    assert result.exit_code == 130
    assert ("interrupted (Ctrl-C); no checkpoint yet: a re-run of the same command starts the run over."
            in result.output), result.output


def test_the_interrupted_line_says_what_stopped_the_command_and_what_a_rerun_does():
    assert interrupted_line(KeyboardInterrupt()) == f"interrupted (Ctrl-C); {RERUN}."
    stopped = Terminated()
    stopped.add_note("a re-run of the same command resumes from the checkpoint at step 4 (epoch 1, batch 4/9)")
    assert interrupted_line(stopped) == ("terminated (SIGTERM); a re-run of the same command resumes from the "
                                         "checkpoint at step 4 (epoch 1, batch 4/9).")


# ---------------------------------------------------------------- checkpoints on the clock


def test_the_clock_makes_a_checkpoint_due_and_each_checkpoint_starts_it_again():
    now = [0.0]
    timed = checkpoints.Checkpointing(5.0, lambda: now[0])
    now[0] = 299.0
    assert not timed.due(None)
    now[0] = 300.0
    assert timed.due(None)
    timed.saved({"global_step": 7, "epoch": 0, "step_in_epoch": 7})
    assert not timed.due(None)
    assert timed.resume_note(20) == ("a re-run of the same command resumes from the checkpoint at step 7 "
                                     "(epoch 1, batch 7/20)")
    timed.saved({"global_step": 20, "epoch": 1, "step_in_epoch": 0})
    assert timed.resume_note(20).endswith("at step 20 (the end of epoch 1)")
    now[0] = 1e9
    assert not checkpoints.Checkpointing(0.0, lambda: now[0]).due(None)  # 0: by steps and epoch ends only
    assert checkpoints.Checkpointing().resume_note(20) == ("no checkpoint yet: a re-run of the same command starts "
                                                           "the run over")


def train_with_clock(cfg: FinetuneConfig, clock) -> None:
    """`bertkit finetune`'s run (commands.finetune.run) with the clock --save-every-minutes reads."""
    from bertkit.models.compute import Compute
    from bertkit.models.preflight import checked_as_saved
    from bertkit.training.finetune import finetune, training_device

    family = cfg.family
    cfg = checked_as_saved(cfg, "finetune", data_fields=family.table_fields)
    training = family.training(cfg)
    finetune(cfg, compute=Compute.resolve(training_device(), cfg.compute.precision), reading=training.reading(cfg),
             task=training.task(), progress=False, clock=clock)


def interrupted_note(cfg: FinetuneConfig, clock, at_step: int, monkeypatch) -> str:
    """Ctrl-C right after step `at_step`: the note the run adds to the KeyboardInterrupt."""
    def ctrl_c(name: str, count: int) -> None:
        if count == at_step:
            raise KeyboardInterrupt

    monkeypatch.setattr(faults, "fail_point", ctrl_c)
    with pytest.raises(KeyboardInterrupt) as stopped:
        train_with_clock(cfg, clock)
    return stopped.value.__notes__[-1]


def test_a_run_checkpoints_by_the_clock_between_step_checkpoints_and_says_from_where_it_resumes(
        tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    train, dev = toy_files
    out = tmp_path / "run"
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(dev), out=str(out), epochs=1,
                            batch_size=8, precision="fp32", save_every=None, save_every_minutes=1.0)
    frozen = interrupted_note(cfg, lambda: 0.0, 3, monkeypatch)  # no minute passes: no checkpoint by the clock
    assert frozen == "no checkpoint yet: a re-run of the same command starts the run over"
    assert latest_checkpoint(out) is None
    ticks = itertools.count(0.0, 61.0)  # a minute and a second passes between two readings: each step is due
    note = interrupted_note(cfg, lambda: next(ticks), 3, monkeypatch)
    assert note == "a re-run of the same command resumes from the checkpoint at step 3 (epoch 1, batch 3/5)"
    assert latest_checkpoint(out).name == "step-3"
    resumed = interrupted_note(cfg, lambda: 0.0, 4, monkeypatch)  # restored at 3, stopped at 4 before a new one
    assert resumed == note


# ---------------------------------------------------------------- progress in a log


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_written_to_a_log_is_a_plain_line_every_few_seconds():
    now, log = [0.0], io.StringIO()
    bar = infer.progress_bar(100, "embed train", True, "rows", stream=log, clock=lambda: now[0])
    assert isinstance(bar, infer.PlainProgress)
    for _ in range(100):  # half a second a row: 50 s in all
        now[0] += 0.5
        bar.update(1)
        bar.set_postfix(loss="0.6931")
    bar.close()
    lines = log.getvalue().split("\n")[:-1]
    assert "\r" not in log.getvalue() and len(lines) == 100 // (infer.PLAIN_EVERY / 0.5)
    assert lines[0] == "embed train: 20/100 rows (20%), 2.00 rows/s, 10s elapsed, about 40s left, loss=0.6931"
    assert lines[-1] == "embed train: 100/100 rows (100%), 2.00 rows/s, 50s elapsed, loss=0.6931"


def test_a_plain_progress_report_ends_with_where_it_stopped_and_follows_a_growing_total():
    now, log = [0.0], io.StringIO()
    bar = infer.progress_bar(10, "finetune", True, "step", initial=4, stream=log, clock=lambda: now[0])
    now[0] = 3.0
    bar.update(3)
    bar.total += 10  # windows of long texts: the total grows (features.extract.count_windows)
    bar.refresh()
    bar.close()
    bar.close()
    assert log.getvalue() == "finetune: 7/20 step (35%), 1.00 step/s, 3s elapsed, about 13s left\n"


def test_a_terminal_gets_a_live_bar_and_quiet_gets_none():
    bar = infer.progress_bar(10, "predict", True, stream=Terminal())
    assert not isinstance(bar, infer.PlainProgress) and hasattr(bar, "set_postfix")
    bar.close()
    assert infer.progress_bar(10, "predict", False) is None


def test_every_progress_bar_comes_from_the_one_factory():
    package = Path(bertkit.__file__).parent
    makers = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "tqdm" in p.read_text())
    assert makers == ["models/infer.py"]


# ---------------------------------------------------------------- numbers in the resume and summary lines


def test_the_resume_line_formats_its_numbers_and_is_shown_once(capsys):
    restored = Restored("runs/x/checkpoints/step-40", 2, 40, 5, 35, 1.9e-05, 0.3611822996753801, True)
    line = checkpoints.resumed_line(restored.to_json(), "accuracy")
    assert line == ("resumed from runs/x/checkpoints/step-40: epoch 2, step 40 (batch 5/35 of the epoch), lr 1.900e-05, "
                    "best accuracy so far 0.3612")
    result = SimpleNamespace(already_finished=False, restored=restored, summary=SimpleNamespace(best_metric_name="accuracy"))
    show_training._print_start(result)
    assert capsys.readouterr().err.strip() == line
    assert checkpoints.resumed_line({**restored.to_json(), "best_metric": None}, "f1").endswith("best f1 so far none yet")
    assert format_threshold(0.3611822996753801) == "0.361"
    assert format_threshold([0.25, 0.5, 0.4]) == "0.25-0.5 (one per tag)"


# ---------------------------------------------------------------- training data with one tag


def test_training_data_with_one_tag_is_refused_naming_the_file_and_the_tag(tmp_path):
    dev = write_conll(tmp_path / "dev.iob2", DEV)
    all_o = write_conll(tmp_path / "train.iob2", [[(w, "O") for w, _ in s] for s in SENTENCES])
    with pytest.raises(UserError, match=r"The training data .*train\.iob2 has one tag only: all 17 of its words are "
                                        r"tagged 'O'\..*two tags or more.*--label-column"):
        read_tagged_splits(all_o, [dev], TaggedColumns())
    nouns = write_conll(tmp_path / "nouns.tsv", [[(w, "NOUN") for w, _ in s] for s in SENTENCES])
    with pytest.raises(UserError, match=r"nouns\.tsv has one tag only: all 17 of its words are tagged 'NOUN'"):
        read_tagged_splits(nouns, [], TaggedColumns())
    late = write_conll(tmp_path / "late.iob2", [[(w, "O") for w, _ in s] for s in SENTENCES[:2]] + SENTENCES[2:])
    with pytest.raises(UserError, match=r"late\.iob2 has one tag only: the words of its first 2 sentences "
                                        r"\(--limit 2\) are tagged 'O'.*a larger --limit"):
        load_tagged_training(str(late), str(dev), TaggedColumns(), limit=2)
    assert len(load_tagged_training(str(late), str(dev), TaggedColumns(), limit=3).train_sentences) == 3


@pytest.mark.parametrize(("command", "heavy"), [("finetune", []), ("probe", ["torch"])])
def test_finetune_refuses_one_tag_before_torch_and_the_word_probe_before_any_model(command, heavy, tmp_path):
    """The word probe imports torch before it reads its data (bertkit/probe), but loads no model (no transformers)."""
    write_conll(tmp_path / "dev.iob2", DEV)
    write_conll(tmp_path / "train.iob2", [[(w, "O") for w, _ in s] for s in SENTENCES])
    code, output, imported = run_cli(command, "--data", "train.iob2", "--dev", "dev.iob2", "--model", "minilm-offline",
                                     "--out", "run", cwd=tmp_path)
    assert code == 2 and "has one tag only" in output and "Traceback" not in output, output
    assert imported == heavy and not (tmp_path / "run").exists()


# ---------------------------------------------------------------- probe closing lines and table


def test_the_word_probe_names_its_saved_probe_and_how_to_use_it(tiny_bert_dir, tmp_path):
    train = write_conll(tmp_path / "train.iob2", SENTENCES * 3)
    dev = write_conll(tmp_path / "dev.iob2", DEV)
    out = tmp_path / "run"
    result = runner.invoke(app, ["probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir),
                                 "--out", str(out), "--layers", "-1", "--no-baselines", "--max-length", "16"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert f"saved probe: {out / 'probe'}" in said and f"bertkit predict --probe {out / 'probe'}" in said, said
    assert (out / "probe" / "probe.json").is_file()


def probe_report(cells: list[tuple[str, str, float, float, bool]]) -> ProbeReport:
    """A sentence probe's result with these (pool, layer, dev accuracy, C, best) cells, searched C (the default)."""
    sweep = [{"pool": pool, "layer": layer, "layer_name": layer, "accuracy": acc, "f1": acc, "mcc": 0.5, "C": C,
              "accuracy_ci95": [acc - 0.02, acc + 0.02], "best": best} for pool, layer, acc, C, best in cells]
    best = next(c for c in sweep if c["best"])
    return ProbeReport.from_json({
        "model": "tiny", "revision": None, "source": "train.tsv", "features": None, "dtype": "fp32",
        "rows": {"train": 100, "dev": 50}, "labels": ["neg", "pos"], "probe": {"C": None, "cv": None},
        "sweep": sweep, "best": {"pool": best["pool"], "layer": best["layer"], "C": best["C"],
                                 "dev": {"accuracy": best["accuracy"]}}})


def test_the_probe_table_says_why_a_row_scores_above_the_saved_one(capsys):
    show._print_probe_report(probe_report([("mean", "layer 3", 0.811, 0.1, True), ("mean", "layer 4", 0.812, 1.0, False),
                                           ("cls", "layer 4", 0.70, 1.0, False)]))
    printed = " ".join(capsys.readouterr().out.split())
    assert "* = the saved probe: best dev accuracy at C = 1, then refit at the C that 5-fold CV" in printed
    assert ("mean layer 4 scores above the * row (0.812 vs 0.811) (inside the * row's 95% CI): the rows were "
            "compared at C = 1, where mean layer 3 was best; its refit at C = 0.1") in printed, printed
    show._print_probe_report(probe_report([("mean", "layer 3", 0.82, 0.1, True), ("mean", "layer 4", 0.812, 1.0, False)]))
    assert "scores above the * row" not in capsys.readouterr().out
