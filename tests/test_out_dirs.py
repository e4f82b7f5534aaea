"""--out ownership (issue 13): bertkit never destroys data it did not write.

Every command's --out is pointed at (a) a folder of someone else's files, (b) the current directory, (c) another
command's finished run - with and without --overwrite, and with a command that then fails validation. Each is
refused with exit 2 and every pre-existing file stays byte-identical (size, mtime, sha256). Then what bertkit may
do: replace its own run with --overwrite only once the new output is complete (a failed, refused or killed run
keeps the old one; a killed swap is finished or undone by the next run), adopt runs made before markers existed,
and refuse unreadable markers/configs clearly. `predict` never writes over its inputs or a file it did not write.

Premade runs are built once per session (`made`) and copied into each test's workspace.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit import runs
from bertkit.cli import app

runner = CliRunner()
COMMANDS = ("tokens", "embed", "probe", "finetune", "evaluate", "bench")
OTHER = {"tokens": "finetune", "embed": "finetune", "probe": "embed", "finetune": "evaluate", "evaluate": "finetune",
         "bench": "tokens"}
"""Whose finished run each command is pointed at in case (c): e.g. `evaluate --out` a fine-tuning run."""
BENCH_FAST = ["--min-iters", "1", "--min-seconds", "0", "--warmup", "0", "--rounds", "2", "--batch-sizes", "2",
              "--train-batch-size", "0", "--limit", "6", "--max-length", "16"]
FAILS_VALIDATION = {c: ["--max-length", "100000"] for c in COMMANDS} | {"evaluate": ["--label-column", "stars"]}
"""Options that bertkit refuses only after it looked at --out (evaluate does not check --max-length)."""


def _rows() -> str:
    good, bad = ["great", "wonderful", "lovely", "superb"], ["awful", "terrible", "boring", "dreadful"]
    lines = ["sentence\tlabel"]
    for i in range(16):
        lines += [f"a {good[i % 4]} film , truly {good[(i + 1) % 4]}\tpos", f"an {bad[i % 4]} movie , really {bad[i % 3]}\tneg"]
    return "\n".join(lines) + "\n"


def argv(command: str, out: str | Path, model: Path, data: Path, clf: Path | None, *extra: str) -> list[str]:
    """A valid, quick invocation of `command` writing to `out`."""
    base = {
        "tokens": ["tokens", "--model", str(model), "--data", str(data)],
        "embed": ["embed", "--model", str(model), "--data", str(data), "--shard-size", "16"],
        "probe": ["probe", "--model", str(model), "--data", str(data), "--no-baselines"],
        "finetune": ["finetune", "--model", str(model), "--data", str(data), "--epochs", "1", "--batch-size", "8",
                     "--save-every", "2", "--lr", "1e-3"],
        "evaluate": ["evaluate", "--model", str(clf), "--data", str(data)],
        "bench": ["bench", "--models", str(model), "--data", str(data), *BENCH_FAST],
    }[command]
    return [*base, "--out", str(out), "--quiet", *extra]


def invoke(args: list[str]):
    return runner.invoke(app, args, catch_exceptions=False)


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """{relative path: (size, mtime_ns, sha256)} of every file under root."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="session")
def made(tmp_path_factory, tiny_bert_dir) -> dict[str, Path]:
    """A finished run of every command (plus the data and the fine-tuned classifier they use)."""
    root = tmp_path_factory.mktemp("out-dirs")
    data = root / "train.tsv"
    data.write_text(_rows(), encoding="utf-8")
    found: dict[str, Path] = {"data": data}
    for command in ("finetune", *[c for c in COMMANDS if c != "finetune"]):  # evaluate needs the classifier
        found[command] = root / command
        result = invoke(argv(command, found[command], tiny_bert_dir, data, root / "finetune" / "best"))
        assert result.exit_code == 0, result.output
        marker = json.loads((found[command] / runs.MARKER).read_text())
        assert marker["format"] == runs.MARKER_FORMAT and marker["command"] == command and marker["bertkit"]
        assert {p.name for p in found[command].iterdir()} - {runs.MARKER} <= runs.RUN_ENTRIES[command]
    return found


class Workspace:
    """One test's files: copies of premade runs, someone else's folder, a current directory; all snapshotted."""

    def __init__(self, root: Path, made: dict[str, Path], model: Path):
        self.root, self.made, self.model = root, made, model

    def run_copy(self, command: str, name: str | None = None) -> Path:
        target = self.root / (name or f"{command}-run")
        shutil.copytree(self.made[command], target)
        return target

    def foreign(self) -> Path:
        mine = self.root / "mine"
        (mine / "data").mkdir(parents=True)
        (mine / "notes.txt").write_text("my notes\n")
        (mine / "data" / "table.csv").write_text("a,b\n1,2\n")
        (mine / "config.json").write_text('{"mine": true}\n')  # a name bertkit also writes: still not bertkit's
        return mine

    def argv(self, command: str, out: str | Path, *extra: str) -> list[str]:
        return argv(command, out, self.model, self.made["data"], self.made["finetune"] / "best", *extra)


@pytest.fixture
def ws(tmp_path, made, tiny_bert_dir) -> Workspace:
    return Workspace(tmp_path, made, tiny_bert_dir)


def assert_refused(result, before: dict, root: Path, problem: str | None = None) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    if problem is not None:
        assert problem in result.output.replace(str(root), "WS"), result.output
    after = snapshot(root)
    assert after == before, f"changed: {sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))}"


# ---------------------------------------------------------------- (a) someone's folder, (b) the cwd, (c) another run


@pytest.mark.parametrize("failing", [False, True], ids=["valid", "fails-validation"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
@pytest.mark.parametrize("target", ["foreign", "cwd", "other-run"])
@pytest.mark.parametrize("command", COMMANDS)
def test_refused_out_dirs_stay_byte_identical(command, target, overwrite, failing, ws, monkeypatch):
    if target == "foreign":
        out, problem = ws.foreign(), "holds files bertkit did not write (config.json, data/, notes.txt)"
    elif target == "cwd":  # even the command's own run is never written while it is the current directory
        monkeypatch.chdir(ws.run_copy(command))
        out, problem = Path("."), "--out . is the current directory"
    else:
        out = ws.run_copy(OTHER[command])
        problem = f"holds a `bertkit {OTHER[command]}` run; `bertkit {command}` never writes into another command's run"
    extra = [*(["--overwrite"] if overwrite else []), *(FAILS_VALIDATION[command] if failing else [])]
    before = snapshot(ws.root)
    result = invoke(ws.argv(command, out, *extra))
    assert_refused(result, before, ws.root, problem)
    assert "Choose another --out" in result.output or "Choose a new directory" in result.output


def test_cwd_given_as_its_absolute_path_home_and_root_are_refused(ws, monkeypatch):
    cwd = ws.run_copy("tokens")
    monkeypatch.chdir(cwd)
    home = ws.root / "home"
    (home / "docs").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    before = snapshot(ws.root)
    for out, problem in ((cwd, "is the current directory"), ("~", "is your home directory"), ("/", "is the filesystem root")):
        assert_refused(invoke(ws.argv("tokens", out, "--overwrite")), before, ws.root, problem)


# ---------------------------------------------------------------- its own run: replaced only at the end


@pytest.mark.parametrize("command", COMMANDS)
def test_overwrite_that_fails_validation_keeps_the_previous_run(command, ws):
    """The issue's case: a finished run survives `--overwrite` with an option that fails validation."""
    out = ws.run_copy(command)
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv(command, out, "--overwrite", *FAILS_VALIDATION[command])), before, ws.root)


def test_other_settings_are_refused_without_overwrite_and_replace_with_it(ws):
    out = ws.run_copy("tokens")
    before = snapshot(ws.root)
    refused = invoke(ws.argv("tokens", out, "--max-length", "64"))
    assert_refused(refused, before, ws.root, "holds a `bertkit tokens` run made with different settings:\n  --max-length: 128 -> 64")
    assert "--overwrite" in refused.output
    replaced = invoke(ws.argv("tokens", out, "--max-length", "64", "--overwrite", "--json"))
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(replaced.stdout)["outputs"]["report"] == str(out / "tokens.json")  # not the staging folder
    assert json.loads((out / "config.json").read_text())["config"]["max_length"] == 64
    assert sorted(p.name for p in out.iterdir()) == sorted([runs.MARKER, "config.json", "tokens.json", "token_lengths.png"])
    assert (out / runs.MARKER).read_bytes() == (ws.made["tokens"] / runs.MARKER).read_bytes()


def test_same_settings_recompute_in_place(ws):
    out = ws.run_copy("evaluate")
    again = invoke(ws.argv("evaluate", out))
    assert again.exit_code == 0, again.output
    assert not (out / runs.STAGING).exists() and (out / "predictions.csv").is_file()


def _python_bertkit(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env})


def test_killed_overwrite_finetune_keeps_the_old_run_then_resumes_in_staging(ws):
    out = ws.run_copy("finetune")
    before = snapshot(out)
    args = ws.argv("finetune", out, "--epochs", "2", "--overwrite")
    killed = _python_bertkit(args, BERTKIT_FAIL_AFTER_STEPS="3", BERTKIT_FAIL_MODE="kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    staged = out / runs.STAGING
    assert {k: v for k, v in snapshot(out).items() if not k.startswith(runs.STAGING)} == before
    assert (staged / "checkpoints").is_dir() and not (staged / runs.COMPLETE).exists()
    resumed = invoke([*args, "--json"])
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert summary["restored"]["checkpoint"].startswith(str(staged)) and summary["global_step"] == 8
    assert summary["out"] == str(out) and summary["outputs"]["best"] == str(out / "best")
    assert not staged.exists() and not (out / runs.OLD).exists()
    assert json.loads((out / "metrics.json").read_text())["epochs_run"] == 2
    finished = invoke([*args[:-1], "--json"])  # the new run, without --overwrite: finished, nothing to do
    assert finished.exit_code == 0 and json.loads(finished.stdout)["already_finished"]


@pytest.mark.parametrize("point, survivor", [("runs.commit.old-aside", 128), ("runs.commit.complete", 64)],
                         ids=["before-complete:old-restored", "after-complete:new-rolled-forward"])
def test_swap_killed_midway_is_finished_or_undone_by_the_next_run(point, survivor, ws):
    out = ws.run_copy("tokens")
    killed = _python_bertkit(ws.argv("tokens", out, "--max-length", "64", "--overwrite"), BERTKIT_KILL_AT=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / runs.OLD).is_dir()  # killed in the middle of the swap
    again = invoke(ws.argv("tokens", out, "--max-length", str(survivor)))  # the run that survived: reused in place
    assert again.exit_code == 0, again.output
    assert json.loads((out / "config.json").read_text())["config"]["max_length"] == survivor
    assert sorted(p.name for p in out.iterdir()) == sorted([runs.MARKER, "config.json", "tokens.json", "token_lengths.png"])
    if survivor == 128:
        assert (out / "token_lengths.png").read_bytes() == (ws.made["tokens"] / "token_lengths.png").read_bytes()


# ---------------------------------------------------------------- runs made before markers, and damaged ones


def test_run_without_marker_is_adopted_by_its_command_only(ws):
    legacy = ws.run_copy("finetune")
    (legacy / runs.MARKER).unlink()
    before = snapshot(ws.root)
    refused = invoke(ws.argv("evaluate", legacy, "--overwrite"))
    assert_refused(refused, before, ws.root, "holds a `bertkit finetune` run")
    done = invoke(ws.argv("finetune", legacy))  # its own command: recognised, finished, nothing written
    assert done.exit_code == 0 and "finished run" in done.output
    assert snapshot(ws.root) == before
    resumed = invoke(ws.argv("finetune", legacy, "--epochs", "2", "--overwrite"))  # claimed: the marker is added
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((legacy / runs.MARKER).read_text())["command"] == "finetune"
    (legacy / runs.MARKER).unlink()
    (legacy / "notes.txt").write_text("mine\n")  # and not when someone else's file sits in it
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv("finetune", legacy, "--overwrite")), before, ws.root, "did not write (notes.txt)")


def test_someone_elses_manifest_is_not_a_store(ws):
    theirs = ws.root / "theirs"
    theirs.mkdir()
    (theirs / "manifest.json").write_text('{"format": "their-own/3", "files": []}\n')
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv("embed", theirs, "--overwrite")), before, ws.root, "did not write (manifest.json)")


@pytest.mark.parametrize("command, name, content, problem, fix", [
    ("embed", runs.MARKER, "not json", f"has a {runs.MARKER} that bertkit did not write", "Choose another --out"),
    ("tokens", runs.MARKER, '{"format": "bertkit-run/1"}', f"has a {runs.MARKER} that bertkit did not write",
     "Choose another --out"),
    ("finetune", "config.json", "{not json", "config.json is not the config.json bertkit writes", "--overwrite"),
    ("evaluate", "config.json", "[1, 2]", "config.json is not the config.json bertkit writes", "--overwrite"),
    ("embed", "manifest.json", "{trunc", "manifest.json is not valid JSON", "--overwrite"),
])
def test_unreadable_marker_or_config_is_a_clear_error(command, name, content, problem, fix, ws):
    out = ws.run_copy(command)
    (out / name).write_text(content)
    before = snapshot(ws.root)
    result = invoke(ws.argv(command, out))
    assert_refused(result, before, ws.root, problem)
    assert fix in result.output


# ---------------------------------------------------------------- predict --out FILE


@pytest.mark.parametrize("case", ["data", "inside-model", "recipe", "foreign-file", "run-config", "directory"])
def test_predict_never_writes_over_its_inputs_or_other_files(case, ws, monkeypatch):
    data = ws.root / "new.tsv"
    data.write_text("sentence\na lovely film\nan awful movie\n")
    model = ws.run_copy("finetune") / "best"
    recipe = ws.root / "r.toml"
    recipe.write_text("[predict]\nbatch-size = 4\n")
    (ws.root / "results.csv").write_text("id,score\n1,0.5\n")
    monkeypatch.chdir(ws.root)
    out, problem = {
        "data": (data, "is the --data"), "inside-model": (model / "preds.csv", "is inside the --model"),
        "recipe": (recipe, "is the --recipe"), "foreign-file": (ws.root / "results.csv", "is not a predictions file"),
        "run-config": (model.parent / "config.json", "is not a predictions file"),
        "directory": (Path("."), "it is an existing directory"),
    }[case]
    before = snapshot(ws.root)
    result = invoke(["predict", "--model", str(model), "--data", str(data), "--recipe", str(recipe), "--out", str(out),
                     "--quiet"])
    assert_refused(result, before, ws.root, problem)
    assert "--out" in result.output


def test_predict_replaces_its_own_predictions(ws):
    data, out = ws.root / "new.tsv", ws.root / "preds.csv"
    data.write_text("sentence\na lovely film\nan awful movie\n")
    model = ["predict", "--model", str(ws.made["finetune"] / "best"), "--out", str(out), "--quiet"]
    assert invoke([*model, "--data", str(data)]).exit_code == 0 and runs.is_predictions_csv(out)
    again = invoke([*model, "--text", "one more"])
    assert again.exit_code == 0, again.output
    assert "one more" in out.read_text() and "a lovely film" not in out.read_text()
