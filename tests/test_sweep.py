"""bertkit sweep: grids and Optuna searches of tiny fine-tunes (each trial an ordinary finetune run), the best model,
the tables, resuming after a SIGKILL, refusing a changed space, pruning, seeds, and the missing-Optuna message."""

from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.io import faults

runner = CliRunner()
TIMING = ("train_seconds", "samples_per_second")


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[::3], header)


def sweep_argv(model: Path, files: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    train, dev = files
    return ["sweep", "--model", str(model), "--data", str(train), "--dev", str(dev), "--out", str(out),
            "--epochs", "2", "--batch-size", "8", "--lr", "5e-3", "--precision", "fp32", "--save-every", "2",
            "--seed", "7", "--quiet", *extra]


GRID = ("--grid", "lr=5e-3,1e-4", "--grid", "batch-size=8,16")


def run_ok(argv: list[str]) -> dict:
    result = runner.invoke(app, [*argv, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def without_timing(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def test_grid_2x2_completes_and_best_is_the_tables_best(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    summary = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, *GRID))
    rows = read_csv(out / "trials.csv")
    assert len(rows) == 4 and summary["trials"] == 4 and summary["pruned"] == 0
    assert list(rows[0])[:4] == ["trial", "lr", "batch-size", "seed"]
    assert {(r["lr"], r["batch-size"]) for r in rows} == {("0.005", "8"), ("0.005", "16"), ("0.0001", "8"),
                                                           ("0.0001", "16")}
    assert all(r["status"] == "complete" and r["metric"] == "accuracy" and int(r["best_step"]) > 0 for r in rows)
    best = max(float(r["best"]) for r in rows)
    assert summary["best"]["best"] == pytest.approx(best) and summary["ranking"][0]["mean"] == pytest.approx(best)
    assert [g["rank"] for g in summary["ranking"]] == [1, 2, 3, 4]
    assert (out / "sweep.png").stat().st_size > 0 and json.loads((out / "sweep.json").read_text())["trials"] == 4
    # OUT/best is the best trial's best model (never the last trial's): evaluating it gives the table's number
    assert (out / "best" / "model.safetensors").read_bytes() == (
        out / "trials" / summary["best"]["trial"] / "best" / "model.safetensors").read_bytes()
    scored = run_ok(["evaluate", "--model", str(out / "best"), "--data", str(toy_files[1]), "--quiet"])
    assert scored["accuracy"] == pytest.approx(best, abs=1e-9)
    # trials keep only their best model by default
    for trial in (out / "trials").iterdir():
        assert (trial / "best").is_dir() and not (trial / "checkpoints").exists() and not (trial / "final").exists()


def test_keep_checkpoints_keeps_them(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3", "--epochs", "1", "--keep-checkpoints"))
    (trial,) = (out / "trials").iterdir()
    assert (trial / "checkpoints").is_dir() and (trial / "final" / "model.safetensors").is_file()


def test_killed_in_the_second_trial_resumes_without_rerunning_the_first(tiny_bert_dir, toy_files, tmp_path):
    reference = run_ok(sweep_argv(tiny_bert_dir, toy_files, tmp_path / "reference", *GRID))
    out = tmp_path / "sweep"
    argv = sweep_argv(tiny_bert_dir, toy_files, out, *GRID)
    first_steps = reference["rows"][0]["steps"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           faults.ENV: f"finetune.step@{first_steps + 3}"}  # the 3rd step of the second trial (a checkpoint at 2)
    proc = subprocess.run([sys.executable, "-m", "bertkit", *argv], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    trials = sorted((out / "trials").iterdir())
    assert len(trials) == 2 and (trials[0] / "metrics.json").is_file() and not (trials[1] / "metrics.json").exists()
    assert not (out / "trials.csv").exists()
    first = {p: p.stat().st_mtime_ns for p in trials[0].rglob("*") if p.is_file()}
    summary = run_ok(argv)
    assert {p: p.stat().st_mtime_ns for p in trials[0].rglob("*") if p.is_file()} == first, "first trial re-run"
    resumed = json.loads((trials[1] / "metrics.json").read_text())["resumed_from"]
    assert resumed is not None and 0 < resumed["step"] <= 3, resumed  # from its checkpoint, not from scratch
    assert without_timing(read_csv(out / "trials.csv")) == without_timing(read_csv(tmp_path / "reference" /
                                                                                    "trials.csv"))
    assert summary["best"]["trial"] == reference["best"]["trial"]
    again = run_ok(argv)  # finished: nothing trains again, same table
    assert [r["best"] for r in again["rows"]] == [r["best"] for r in summary["rows"]]


def test_a_changed_grid_is_refused_unless_overwrite(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3", "--epochs", "1"))
    changed = sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3,1e-3", "--epochs", "1")
    result = runner.invoke(app, changed)
    assert result.exit_code == 2 and "different settings" in result.output and "--grid" in result.output
    assert len(read_csv(out / "trials.csv")) == 1
    summary = run_ok([*changed, "--overwrite"])
    assert summary["trials"] == 2 and len(list((out / "trials").iterdir())) == 2


def test_a_bad_grid_value_fails_before_anything_runs_naming_the_flag(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    result = runner.invoke(app, sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "warmup-ratio=0.1,1.5"))
    assert result.exit_code == 2 and "--warmup-ratio" in result.output and "--grid" in result.output
    result = runner.invoke(app, sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "epoch=1,2"))
    assert result.exit_code == 2 and "'epoch' is not an option" in result.output
    assert not out.exists()


def test_seeds_rank_configurations_by_their_mean(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    summary = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3,1e-4", "--seeds", "2",
                                "--epochs", "1"))
    rows = read_csv(out / "trials.csv")
    assert [int(r["seed"]) for r in rows] == [7, 8, 7, 8]
    assert len(summary["ranking"]) == 2
    for group in summary["ranking"]:
        values = [float(r["best"]) for r in rows if r["trial"] in group["trials"]]
        assert group["seeds"] == [7, 8] and group["mean"] == pytest.approx(statistics.fmean(values))
        assert group["std"] == pytest.approx(statistics.stdev(values))
    assert summary["ranking"][0]["mean"] >= summary["ranking"][1]["mean"]
    assert summary["best"]["trial"] in summary["ranking"][0]["trials"]


class OddTrialsPruner:
    """Prunes every odd-numbered trial at its first evaluation: deterministic, whatever the metrics."""

    def prune(self, study, trial) -> bool:
        return trial.number % 2 == 1


def test_optuna_search_of_4_trials_marks_pruned_trials_and_replays(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    import optuna

    from bertkit.training import sweep as sweep_core

    class Pruner(OddTrialsPruner, optuna.pruners.BasePruner):
        pass

    monkeypatch.setattr(sweep_core, "make_pruner", lambda cfg: Pruner())
    out = tmp_path / "sweep"
    argv = sweep_argv(tiny_bert_dir, toy_files, out, "--search", "optuna", "--trials", "4", "--space",
                      "lr=1e-4:1e-2:log", "--space", "batch-size=8,16", "--eval-every", "2")
    summary = run_ok(argv)
    rows = read_csv(out / "trials.csv")
    assert [r["status"] for r in rows] == ["complete", "pruned", "complete", "pruned"] and summary["pruned"] == 2
    for row in rows:
        steps = int(row["steps"])
        assert (steps == 2) if row["status"] == "pruned" else steps > 2, row  # pruned at its first evaluation
        assert 1e-4 <= float(row["lr"]) <= 1e-2 and row["batch-size"] in ("8", "16")
    assert summary["ranking"][-1]["pruned"] and not summary["ranking"][0]["pruned"]
    assert summary["best"]["status"] == "complete"
    # the study is replayed from the trial folders: a second run asks for the same parameters and trains nothing
    again = run_ok(argv)
    assert without_timing(read_csv(out / "trials.csv")) == without_timing(rows) and again["pruned"] == 2
    more = run_ok([*argv[:argv.index("--trials") + 1], "5", *argv[argv.index("--trials") + 2:]])
    assert more["trials"] == 5 and [r["trial"] for r in more["rows"][:4]] == [r["trial"] for r in rows]


def test_optuna_missing_says_how_to_install_it(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    out = tmp_path / "sweep"
    result = runner.invoke(app, sweep_argv(tiny_bert_dir, toy_files, out, "--search", "optuna", "--space",
                                           "lr=1e-4:1e-2:log"))
    assert result.exit_code == 2 and "pip install 'bertkit[sweep]'" in result.output
    assert not out.exists()


def test_space_syntax_is_checked():
    from bertkit.config.sweep import SweepConfig
    from bertkit.errors import UserError

    dims = SweepConfig(data="x", out="o", search="optuna", trials=3,
                       space=("lr=1e-5:1e-4:log", "epochs=1:3", "batch-size=16,32")).dimensions
    assert [(d.name, d.log, d.integer, d.values) for d in dims] == [("lr", True, False, ()), ("epochs", False, True, ()),
                                                                     ("batch_size", False, False, (16, 32))]
    for kw, message in [({"space": ("lr=1e-4:1e-5",)}, "LOW must be below HIGH"),
                        ({"space": ("lr=0:1e-4:log",)}, "--lr"),
                        ({"space": ("model=a:b",)}, "a range is LOW:HIGH"),
                        ({"grid": ("lr=1e-4",)}, "--grid is for --search grid"),
                        ({"space": ()}, "needs at least one --space")]:
        with pytest.raises(UserError, match=message):
            SweepConfig(data="x", out="o", search="optuna", **kw)
    with pytest.raises(UserError, match="given twice"):
        SweepConfig(data="x", out="o", grid=("lr=1e-4", "lr=2e-4"))


def test_two_launched_processes_run_the_same_trials_together(tiny_bert_dir, toy_files, tmp_path):
    """torchrun with 2 CPU processes: one sweep (not two racing ones), every trial trained by both processes."""
    out = tmp_path / "sweep"
    argv = sweep_argv(tiny_bert_dir, toy_files, out, "--search", "optuna", "--trials", "2", "--space",
                      "lr=1e-4:1e-2:log", "--epochs", "1", "--batch-size", "4")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "bertkit",
                           *argv], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_csv(out / "trials.csv")
    assert len(rows) == 2 and len(list((out / "trials").iterdir())) == 2
    for row in rows:
        record = json.loads((out / "trials" / row["trial"] / "config.json").read_text())
        assert record["processes"] == 2
    assert (out / "best" / "model.safetensors").is_file()


def test_optuna_search_killed_in_its_second_trial_replays_to_the_uninterrupted_table(tiny_bert_dir, toy_files,
                                                                                    tmp_path):
    pytest.importorskip("optuna")
    space = ("--search", "optuna", "--trials", "3", "--space", "lr=1e-4:1e-2:log", "--space", "batch-size=8,16",
             "--epochs", "1")
    reference = run_ok(sweep_argv(tiny_bert_dir, toy_files, tmp_path / "reference", *space))
    out = tmp_path / "sweep"
    argv = sweep_argv(tiny_bert_dir, toy_files, out, *space)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           faults.ENV: f"finetune.step@{reference['rows'][0]['steps'] + 3}"}
    proc = subprocess.run([sys.executable, "-m", "bertkit", *argv], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    first, second = sorted((out / "trials").iterdir())
    assert (first / "metrics.json").is_file() and not (second / "metrics.json").exists()  # killed in the second
    before = (first / "metrics.json").stat().st_mtime_ns
    run_ok(argv)
    assert (first / "metrics.json").stat().st_mtime_ns == before, "the first trial was re-run"
    assert without_timing(read_csv(out / "trials.csv")) == without_timing(read_csv(tmp_path / "reference" /
                                                                                    "trials.csv"))
