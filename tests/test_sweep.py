"""bertkit sweep: grids and Optuna searches of tiny fine-tunes (each trial an ordinary finetune run), the best model,
the tables, resuming after a SIGKILL, refusing a changed space, pruning, seeds, and the missing-Optuna message."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
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
    assert scored["metrics"]["accuracy"] == pytest.approx(best, abs=1e-9)
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

    from bertkit.training import trials as sweep_core

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
    from bertkit.commands.sweep import SweepConfig
    from bertkit.errors import UserError

    dims = SweepConfig.of(data="x", out="o", search="optuna", trials=3,
                       space=("lr=1e-5:1e-4:log", "epochs=1:3", "batch-size=16,32")).dimensions
    assert [(d.name, d.log, d.integer, d.values) for d in dims] == [("lr", True, False, ()), ("epochs", False, True, ()),
                                                                     ("batch_size", False, False, (16, 32))]
    for kw, message in [({"space": ("lr=1e-4:1e-5",)}, "LOW must be below HIGH"),
                        ({"space": ("lr=0:1e-4:log",)}, "--lr"),
                        ({"space": ("model=a:b",)}, "a range is LOW:HIGH"),
                        ({"grid": ("lr=1e-4",)}, "--grid is for --search grid"),
                        ({"space": ()}, "needs at least one --space")]:
        with pytest.raises(UserError, match=message):
            SweepConfig.of(data="x", out="o", search="optuna", **kw)
    with pytest.raises(UserError, match="given twice"):
        SweepConfig.of(data="x", out="o", grid=("lr=1e-4", "lr=2e-4"))


@pytest.mark.slow  # two processes, each a whole sweep
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


@pytest.mark.slow  # a killed sweep resumes: test_killed_in_the_second_trial_resumes_without_rerunning_the_first
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


# ---------------------------------------------------------------- issue 36: by record, final paths, values checked


def text_files(root: Path) -> dict[str, str]:
    """Every file under `root` that holds text (JSON, cards, tables, logs), by relative path."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".csv", ".yml", ".txt"):
            found[str(path.relative_to(root))] = path.read_text(encoding="utf-8")
    return found


def test_sweep_overwrite_records_the_final_paths_never_the_staging_folder(tiny_bert_dir, toy_files, tmp_path):
    """The issue's case: every trial's config.json, metrics.json outputs and card Reproduce line (OUT/best's too)
    said OUT/.bertkit-next/... after `sweep --overwrite`."""
    from bertkit.io import ownership

    out = tmp_path / "sweep"
    run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3", "--epochs", "1"))
    summary = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3,1e-3", "--epochs", "1",
                                "--overwrite", "--keep-checkpoints"))
    staged = {name: text for name, text in text_files(out).items() if ownership.STAGING in text}
    assert not staged, f"the staging folder is recorded in {sorted(staged)}"
    for row in summary["rows"]:
        trial = out / "trials" / row["trial"]
        assert json.loads((trial / "config.json").read_text())["config"]["out"] == str(trial)
        outputs = json.loads((trial / "metrics.json").read_text())["outputs"]
        assert outputs["best"] == str(trial / "best") and outputs["final"] == str(trial / "final")
        assert f"--out {trial}" in (trial / "best" / "README.md").read_text()
    best = out / "trials" / summary["best"]["trial"]
    assert f"--out {best}" in (out / "best" / "README.md").read_text()
    assert ownership.unowned(out) == []


def test_folders_named_like_trials_and_temp_looking_files_are_never_taken_for_bertkits(tiny_bert_dir, toy_files,
                                                                                     tmp_path):
    """The issue's case: a backup copy of a trial (`000_my_backup`) and a `.plan.tmp` under OUT/trials were deleted
    by `sweep --overwrite`. Whatever their names, at any depth, what bertkit did not record stays and is named."""
    out = tmp_path / "sweep"
    argv = sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3,1e-3", "--epochs", "1")
    summary = run_ok(argv)
    first = out / "trials" / summary["rows"][0]["trial"]
    mine = {out / "trials" / "000_my_backup": None, out / "trials" / "007_lr=0.1_seed=7": None,
            out / "trials" / ".plan.tmp": "keep\n", first / ".notes.tmp": "mine\n",
            first / "best" / ".config.json.0badc0de.tmp": "mine\n", out / ".bertkit-next" / "notes.txt": "mine\n"}
    for path, content in mine.items():
        if content is None:
            shutil.copytree(first, path)  # a copy of a trial, with its own record and marker
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for extra in ([], ["--overwrite"]):
        refused = runner.invoke(app, [*sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3", "--epochs",
                                                  "1"), *extra])
        assert refused.exit_code == 2, refused.output
        text = " ".join(refused.output.split())
        shown = (f"did not write (.bertkit-next/, trials/.plan.tmp, trials/{first.name}/.notes.tmp, "
                 f"trials/{first.name}/best/.config.json.0badc0de.tmp, trials/000_my_backup/, and 1 more)")
        assert shown in text, text  # (the sixth: trials/007_lr=0.1_seed=7/)
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    for path in [*(p for p in mine if p.parent.name != ".bertkit-next"), out / ".bertkit-next"]:  # as named
        shutil.move(path, tmp_path / f"moved-{path.name}")
    replaced = run_ok([*sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=5e-3", "--epochs", "1"),
                       "--overwrite"])
    assert sorted(p.name for p in (out / "trials").iterdir()) == [replaced["rows"][0]["trial"]]
    assert (tmp_path / "moved-000_my_backup" / "best" / "model.safetensors").is_file()


def test_every_value_is_checked_with_every_other_before_any_trial(tiny_bert_dir, toy_files, tmp_path):
    """A value fine alone can fail with another dimension's value (a model with fewer positions than a --max-length
    of the grid): refused before anything is made, naming both, for a grid and for an Optuna space's range ends."""
    short = tmp_path / "tiny-64"
    shutil.copytree(tiny_bert_dir, short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    out = tmp_path / "sweep"
    for space in (["--grid", f"model={tiny_bert_dir},{short}", "--grid", "max-length=32,100"],
                  ["--search", "optuna", "--trials", "2", "--space", f"model={tiny_bert_dir},{short}", "--space",
                   "max-length=32:100"]):
        result = runner.invoke(app, sweep_argv(tiny_bert_dir, toy_files, out, "--max-length", "32", *space))
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        where = space[0] if space[0] != "--search" else "--space"
        text = " ".join(result.output.split())
        assert f"{where} values model={short}, max-length=100" in text and "more than model" in text, text
        assert not out.exists()


# ------------------------------------------------ issue 43: like with like, every value before trial 0, keys


@pytest.mark.parametrize("space", ["metric-for-best=accuracy,loss", "task=single-label,regression",
                                   "metric=mcc,f1", "label-column=label,other", "dev=a.tsv,b.tsv",
                                   "dev-fraction=0.1,0.2"])
def test_a_space_over_what_the_ranking_metric_means_is_refused(space):
    from bertkit.commands.sweep import SweepConfig
    from bertkit.errors import UserError

    option = space.partition("=")[0]
    for kw in ({"grid": (space,)}, {"search": "optuna", "space": (space,)}):
        with pytest.raises(UserError) as err:
            SweepConfig.of(data="x", out="o", **kw)
        message = " ".join(str(err.value).split())
        assert f"--{option} changes" in message and "numbers that mean different things" in message, message
        assert f"Give --{option} once as an option of the sweep" in message


def test_the_ranking_refusal_exits_2_before_anything_is_made(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    result = runner.invoke(app, sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "metric-for-best=accuracy,loss"))
    assert result.exit_code == 2 and "Traceback" not in result.output and "--metric-for-best changes" in result.output
    assert not out.exists()


def test_lr_auto_is_resolved_recorded_and_merged_with_its_value(tiny_bert_dir, toy_files, tmp_path):
    """The tiny model (hidden 32) gets lr 3e-4 from `auto`: lr=auto,3e-4,1e-3 is two configurations, not three; the
    rows record the number used; the kept trial keeps its folder name as given (older sweeps resume)."""
    out = tmp_path / "sweep"
    summary = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=auto,3e-4,1e-3", "--epochs", "1"))
    rows = read_csv(out / "trials.csv")
    assert [(r["trial"], r["lr"]) for r in rows] == [("000_lr=auto_seed=7", "0.0003"), ("002_lr=0.001_seed=7", "0.001")]
    assert sorted(p.name for p in (out / "trials").iterdir()) == ["000_lr=auto_seed=7", "002_lr=0.001_seed=7"]
    assert [r["lr"] for r in summary["rows"]] == [3e-4, 1e-3] and summary["trials"] == 2
    assert {g["params"]["lr"] for g in summary["ranking"]} == {3e-4, 1e-3}
    (note,) = summary["notes"]
    assert "configuration 001 (lr=0.0003) resolves to the settings of configuration 000" in note
    assert json.loads((out / "sweep.json").read_text())["notes"] == [note]
    again = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", "lr=auto,3e-4,1e-3", "--epochs", "1"))
    assert again["rows"] == summary["rows"]  # finished: nothing runs again


def test_best_model_is_the_best_trials_folder_and_its_searched_values_stay(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "sweep"
    summary = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", f"model={tiny_bert_dir}", "--epochs", "1"))
    best = summary["best"]
    assert best["model"] == f"trials/{best['trial']}/best" and (out / best["model"] / "config.json").is_file()
    assert best["params"] == {"model": str(tiny_bert_dir)} and summary["outputs"]["best"] == "best"


def test_sweep_summary_reads_its_own_file_and_an_older_one():
    from bertkit.training.trials_report import SweepSummary

    row = {"trial": "000_lr=0.001_seed=7", "lr": 0.001, "seed": 7, "status": "complete", "metric": "accuracy",
           "best": 0.9, "best_step": 4, "steps": 4, "epochs_run": 1, "train_seconds": 0.5, "samples_per_second": 80.0}
    older = {"search": "grid", "space": [{"option": "lr", "values": [0.001]}], "metric": "accuracy",
             "direction": "max", "seeds": 1, "trials": 1, "pruned": 0,
             "best": {**row, "rank": 1, "model": "best"},
             "ranking": [{"params": {"lr": 0.001}, "trials": [row["trial"]], "seeds": [7], "values": [0.9],
                          "mean": 0.9, "std": 0.0, "pruned": False, "rank": 1}],
             "rows": [row], "outputs": {"best": "best", "trials.csv": "trials.csv", "sweep.json": "sweep.json",
                                        "figure": "sweep.png", "trials": "trials"}}
    summary = SweepSummary.from_json(older)
    assert summary.best is not None and summary.best.model == "best" and summary.best.row.params == {"lr": 0.001}
    assert summary.rows[0].best == 0.9 and summary.ranking[0].mean == 0.9 and summary.notes == ()
    written = summary.to_json()
    assert {k: v for k, v in written.items() if k not in ("notes",)} == {
        **older, "best": {**older["best"], "params": {"lr": 0.001}}}
    assert SweepSummary.from_json(written) == summary


def test_trial_folder_names_stay_short_enough_for_any_file_system():
    from bertkit.training.trial_plans import MAX_NAME_BYTES, Plan

    assert Plan(0, {"lr": "auto"}, 42).name == "000_lr=auto_seed=42"
    assert Plan(3, {"lr": 3e-4, "batch_size": 16}, 7).name == "003_lr=0.0003_batch-size=16_seed=7"
    one, two = (Plan(1, {"model": f"/models/{stem * 120}/checkpoint"}, 42).name for stem in ("ab", "cd"))
    assert max(len(one.encode()), len(two.encode())) <= MAX_NAME_BYTES and one != two
    assert re.fullmatch(r"001_model=[\w-]*checkpoint-[0-9a-f]{8}_seed=42", one), one


def test_a_sweeps_figure_cuts_long_values_to_their_ends_and_keeps_them_apart(tmp_path):
    """Model paths as a sweep's values: each tick keeps the path's end after an ellipsis, so the figure's axes have
    room (matplotlib warned "Tight layout not applied" and drew a squashed figure); two values that would read the
    same are numbered; numbers keep 3 significant digits."""
    import warnings

    from bertkit.plots import TICK_CHARS, sweep_figure, tick_labels

    long_a, long_b = "/runs/a/" + "x" * 120 + "/model-one", "/runs/b/" + "x" * 120 + "/model-one"  # same end
    assert tick_labels([0.00123456, 2, "bert"]) == ["0.00123", "2", "bert"]
    cut = tick_labels(["/short", long_a])
    assert cut[0] == "/short" and cut[1].startswith("…") and cut[1].endswith("/model-one")
    assert len(cut[1]) == TICK_CHARS
    same_end = tick_labels([long_a, long_b])
    assert same_end[0].startswith("1: …") and same_end[1].startswith("2: …")
    rows = [{"model": m, "lr": lr, "status": "complete", "best": 0.5 + i / 10}
            for i, (m, lr) in enumerate([(long_a, 1e-5), (long_b, 1e-5), (long_a, 3e-5), (long_b, 3e-5)])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Tight layout not applied"
        path = sweep_figure(rows, ["model", "lr"], "accuracy", tmp_path / "sweep.png", "a sweep of two model paths")
    assert path.stat().st_size > 0


def test_a_long_existing_path_value_runs_and_an_impossible_one_is_refused(tiny_bert_dir, toy_files, tmp_path):
    """A 250-character model path of the grid: its trial folder gets a bounded name (no OSError after trial 0); a
    path with a 300-character name cannot be opened: refused before anything is made, no traceback."""
    long = tmp_path / ("a" * 120) / ("b" * 120)
    shutil.copytree(tiny_bert_dir, long)
    out = tmp_path / "sweep"
    summary = run_ok(sweep_argv(tiny_bert_dir, toy_files, out, "--grid", f"model={tiny_bert_dir},{long}",
                                "--epochs", "1"))
    assert summary["trials"] == 2 and all((out / "trials" / r["trial"] / "best").is_dir() for r in summary["rows"])
    impossible = tmp_path / ("c" * 300)
    result = runner.invoke(app, sweep_argv(tiny_bert_dir, toy_files, tmp_path / "other", "--grid",
                                           f"model={tiny_bert_dir},{impossible}"))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "is 300 bytes long" in " ".join(result.output.split()) and not (tmp_path / "other").exists()
