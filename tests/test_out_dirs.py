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

from bertkit.cli.app import app
from bertkit.errors import UserError
from bertkit.io import ownership, predictions_out, record, rundir, runlock
from bertkit.training.trials_report import copy_model

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
                     "--save-every", "2", "--lr", "1e-3", "--keep-checkpoints"],
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
        marker = json.loads((found[command] / ownership.MARKER).read_text())
        assert marker["format"] == ownership.MARKER_FORMAT and marker["command"] == command and marker["bertkit"]
        assert (found[command] / record.RECORD).is_file() and ownership.unowned(found[command]) == []
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
    assert sorted(p.name for p in out.iterdir()) == sorted([ownership.MARKER, record.RECORD, runlock.LOCK, "config.json", "tokens.json",
                                                            "token_lengths.png"])
    assert (out / ownership.MARKER).read_bytes() == (ws.made["tokens"] / ownership.MARKER).read_bytes()
    assert ownership.unowned(out) == []


def test_same_settings_recompute_in_place(ws):
    out = ws.run_copy("evaluate")
    again = invoke(ws.argv("evaluate", out))
    assert again.exit_code == 0, again.output
    assert not (out / ownership.STAGING).exists() and (out / "predictions.csv").is_file()


def _python_bertkit(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env})


def test_killed_overwrite_finetune_keeps_the_old_run_then_resumes_in_staging(ws):
    out = ws.run_copy("finetune")
    before = snapshot(out)
    args = ws.argv("finetune", out, "--epochs", "2", "--overwrite")
    killed = _python_bertkit(args, BERTKIT_FAIL_AFTER_STEPS="3", BERTKIT_FAIL_MODE="kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    staged = out / ownership.STAGING
    kept = {k: v for k, v in snapshot(out).items() if not k.startswith((ownership.STAGING, record.RECORD))}
    assert kept == {k: v for k, v in before.items() if k != record.RECORD}  # the record grew: the killed run's writes
    assert (staged / "checkpoints").is_dir() and not (staged / ownership.COMPLETE).exists()
    resumed = invoke([*args, "--json"])
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert summary["restored"]["checkpoint"].startswith(str(staged)) and summary["global_step"] == 8
    assert summary["out"] == str(out) and summary["outputs"]["best"] == str(out / "best")
    assert not staged.exists() and not (out / ownership.OLD).exists()
    assert json.loads((out / "metrics.json").read_text())["epochs_run"] == 2
    finished = invoke([*args[:-1], "--json"])  # the new run, without --overwrite: finished, nothing to do
    assert finished.exit_code == 0 and json.loads(finished.stdout)["already_finished"]


@pytest.mark.parametrize("point, survivor", [("runs.commit.old-aside", 128), ("runs.commit.complete", 64)],
                         ids=["before-complete:old-restored", "after-complete:new-rolled-forward"])
def test_swap_killed_midway_is_finished_or_undone_by_the_next_run(point, survivor, ws):
    out = ws.run_copy("tokens")
    killed = _python_bertkit(ws.argv("tokens", out, "--max-length", "64", "--overwrite"), BERTKIT_KILL_AT=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / ownership.OLD).is_dir()  # killed in the middle of the swap
    again = invoke(ws.argv("tokens", out, "--max-length", str(survivor)))  # the run that survived: reused in place
    assert again.exit_code == 0, again.output
    assert json.loads((out / "config.json").read_text())["config"]["max_length"] == survivor
    assert sorted(p.name for p in out.iterdir()) == sorted([ownership.MARKER, record.RECORD, runlock.LOCK, "config.json", "tokens.json",
                                                            "token_lengths.png"])
    assert ownership.unowned(out) == []
    if survivor == 128:
        assert (out / "token_lengths.png").read_bytes() == (ws.made["tokens"] / "token_lengths.png").read_bytes()


# ---------------------------------------------------------------- runs made before markers, and damaged ones


LEGACY = {  # how a run without its record comes about (a run an older bertkit made has neither record nor file lists)
    "older-bertkit": (record.RECORD,),
    "older-bertkit-no-file-lists": (record.RECORD, f"best/{ownership.FILE_LIST}", f"final/{ownership.FILE_LIST}"),
    "before-markers": (record.RECORD, ownership.MARKER),
}


@pytest.mark.parametrize("overwrite", [False, True], ids=["rerun", "overwrite"])
@pytest.mark.parametrize("removed", list(LEGACY))
def test_a_run_without_records_is_refused_with_how_to_move_it_aside(removed, overwrite, ws):
    """The issue's case: a run saved before file lists existed had its user README.md in best/ replaced by a
    generated card on --overwrite. A run without a record is never guessed at: refused, with the move-aside fix."""
    out = ws.run_copy("finetune")
    for name in LEGACY[removed]:
        (out / name).unlink()
    (out / "best" / "README.md").write_text("# my notes on this model\n")
    before = snapshot(ws.root)
    result = invoke(ws.argv("finetune", out, "--epochs", "2", *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, "--out WS/finetune-run holds a `bertkit finetune` run without the record")
    text = " ".join(result.output.replace(str(ws.root), "WS").split())
    assert "does not guess" in text and "Move that run aside (e.g. `mv WS/finetune-run WS/finetune-run.old`)" in text
    refused = invoke(ws.argv("evaluate", out, "--overwrite"))  # another command: named as such, still refused
    assert_refused(refused, before, ws.root, "holds a `bertkit finetune` run; `bertkit evaluate` never writes")
    shutil.move(out, ws.root / "finetune-run.old")  # the fix the message gives
    assert invoke(ws.argv("finetune", out)).exit_code == 0 and ownership.unowned(out) == []
    assert (ws.root / "finetune-run.old" / "best" / "README.md").read_text() == "# my notes on this model\n"


@pytest.mark.parametrize("relative, content", [
    ("best/README.md", "# my own card\n"),  # a user's card over bertkit's
    ("metrics.json", '{"edited": true}\n'),
    ("training_table.csv", None),  # appended to
    ("final/model.safetensors", None),  # the same size, other bytes
    ("checkpoints/step-4/optimizer.bin", None),
    (ownership.MARKER, None),  # bertkit's own marker, touched
], ids=["user-card", "edited-metrics", "appended-table", "same-size-weights", "optimizer", "marker"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["rerun", "overwrite"])
def test_a_recorded_file_whose_bytes_changed_is_refused_naming_it(relative, content, overwrite, ws):
    """Only files with the bytes bertkit recorded writing are its own: an edited one is named and kept, and once
    its bytes are bertkit's again the same command runs."""
    out = ws.run_copy("finetune")
    path = out / relative
    original = path.read_bytes()
    if content is not None:
        path.write_text(content)
    elif relative.endswith(".csv"):
        path.write_bytes(original + b"my,row\n")
    elif relative == ownership.MARKER:
        path.write_bytes(original.replace(b'"finetune"', b'"finetune" '))
    else:
        path.write_bytes(original[:-8] + bytes(8 - i for i in range(8)))
    if relative != "metrics.json":
        (out / "metrics.json").unlink()  # an unfinished run: a re-run would resume it (and replace best/)
    before = snapshot(ws.root)
    result = invoke(ws.argv("finetune", out, *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, f"holds files changed since bertkit wrote them ({relative})")
    path.write_bytes(original)
    if relative != "metrics.json":
        assert invoke(ws.argv("finetune", out, *(["--overwrite"] if overwrite else []))).exit_code == 0


def test_someone_elses_manifest_is_not_a_store(ws):
    theirs = ws.root / "theirs"
    theirs.mkdir()
    (theirs / "manifest.json").write_text('{"format": "their-own/3", "files": []}\n')
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv("embed", theirs, "--overwrite")), before, ws.root, "did not write (manifest.json)")


@pytest.mark.parametrize("command, name, content, problem, fix", [
    ("embed", ownership.MARKER, "not json", f"has a {ownership.MARKER} that bertkit did not write", "Choose another --out"),
    ("tokens", ownership.MARKER, '{"format": "bertkit-run/1"}', f"has a {ownership.MARKER} that bertkit did not write",
     "Choose another --out"),
    ("finetune", "config.json", "{not json", "holds files changed since bertkit wrote them (config.json)", "Move them"),
    ("evaluate", "config.json", "[1, 2]", "holds files changed since bertkit wrote them (config.json)", "Move them"),
    ("embed", "manifest.json", "{trunc", "holds files changed since bertkit wrote them (manifest.json)", "Move them"),
    ("tokens", record.RECORD, "not a record\n", f"has a {record.RECORD} that bertkit did not write", "Choose another"),
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
    assert invoke([*model, "--data", str(data)]).exit_code == 0 and predictions_out.is_predictions_csv(out)
    again = invoke([*model, "--text", "one more"])
    assert again.exit_code == 0, again.output
    assert "one more" in out.read_text() and "a lovely film" not in out.read_text()


# ---------------------------------------------------------------- issue 20: what bertkit did not write, at any depth


@pytest.fixture(scope="session")
def made_distill(made, tiny_bert_dir) -> Path:
    """A finished `bertkit distill` run (student copied from the premade classifier; no report: quick)."""
    out = made["data"].parent / "distill"
    result = invoke(["distill", "--teacher", str(made["finetune"] / "best"), "--data", str(made["data"]),
                     "--student-layers", "1", "--epochs", "1", "--batch-size", "8", "--no-report", "--out", str(out),
                     "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def _put(root: Path, relative: str, content: str = "mine\n") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


DEEP = [  # (command, a user's file inside that command's run, how the message shows it)
    ("finetune", "best/notes.txt", "best/notes.txt"),
    ("finetune", "final/predictions.csv", "final/predictions.csv"),
    ("finetune", "checkpoints/mine.txt", "checkpoints/mine.txt"),
    ("finetune", "checkpoints/step-4/notes.txt", "checkpoints/step-4/notes.txt"),
    ("finetune", "checkpoints/step-4.bak/trainer_state.json", "checkpoints/step-4.bak/"),
    ("finetune", "best/student/config.json", "best/student/"),  # bertkit's names, but not where bertkit writes them
    ("finetune", ".tmp-notes/notes.txt", ".tmp-notes/"),  # named like bertkit's temp folders, but not one of them
    ("finetune", ".bertkit-next/best/notes.txt", ".bertkit-next/"),  # no --overwrite run left a staging folder
    ("embed", "shards/notes.txt", "shards/"),  # the store's shards were removed once it was complete
    ("probe", "probe/README.md", "probe/README.md"),
    ("probe", "features/mine.npy", "features/mine.npy"),
    ("bench", "quality/notes.txt", "quality/"),  # this bench measured no quality: bertkit made no quality/
    # issue 36: named like bertkit's temp files and folders (its own unique-name shapes too), at every depth
    ("tokens", ".draft.tmp", ".draft.tmp"),
    ("finetune", "best/.notes.tmp", "best/.notes.tmp"),
    ("finetune", "checkpoints/step-4/.optimizer.bin.0badc0de.tmp", "checkpoints/step-4/.optimizer.bin.0badc0de.tmp"),
    ("finetune", ".tmp-final-0badc0de/model.safetensors", ".tmp-final-0badc0de/"),
    ("finetune", "checkpoints/.tmp-step-6-0badc0de/optimizer.bin", "checkpoints/.tmp-step-6-0badc0de/"),
    ("embed", ".features.npy.0badc0de.tmp", ".features.npy.0badc0de.tmp"),
    ("probe", "probe/.probe.json.1a2b3c4d.tmp", "probe/.probe.json.1a2b3c4d.tmp"),
    ("evaluate", ".predictions.csv.deadbeef.tmp", ".predictions.csv.deadbeef.tmp"),
    ("bench", ".bertkit-old/bench.json", ".bertkit-old/"),  # bertkit's swap folder's name, not one it made
]


@pytest.mark.parametrize("overwrite", [False, True], ids=["rerun", "overwrite"])
@pytest.mark.parametrize("command, relative, shown", DEEP, ids=[f"{c}:{r}" for c, r, _ in DEEP])
def test_user_files_inside_a_run_refuse_it_and_stay(command, relative, shown, overwrite, ws):
    """The issue's case: `--overwrite` (or a re-run, which replaces best/ and rotates checkpoints) removed a user's
    files inside the run's folders. Now the run is refused, naming them, and every byte stays."""
    out = ws.run_copy(command)
    _put(out, relative)
    before = snapshot(ws.root)
    result = invoke(ws.argv(command, out, *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, f"WS/{command}-run holds files bertkit did not write ({shown})")
    assert f"Move them out of {out}, or choose another --out" in result.output.replace("\n", " ")


def test_a_distill_run_saved_under_best_is_refused_then_the_run_goes_on_once_it_is_moved(ws, made_distill):
    out = ws.run_copy("finetune")
    shutil.copytree(made_distill, out / "best" / "student")
    (out / "metrics.json").unlink()  # an unfinished run: the re-run resumes (and would replace best/)
    before = snapshot(ws.root)
    refused = invoke(ws.argv("finetune", out))
    assert_refused(refused, before, ws.root, "holds files bertkit did not write (best/student/)")
    shutil.move(out / "best" / "student", ws.root / "student")
    resumed = invoke(ws.argv("finetune", out, "--json"))
    assert resumed.exit_code == 0, resumed.output
    assert snapshot(ws.root / "student") == snapshot(made_distill)


def test_many_user_files_are_named_five_and_counted(ws):
    out = ws.run_copy("finetune")
    for i in range(7):
        _put(out, f"best/note-{i}.txt")
    result = invoke(ws.argv("finetune", out, "--overwrite"))
    assert result.exit_code == 2 and "best/note-0.txt, best/note-1.txt" in result.output and "and 2 more" in result.output


def test_model_folders_list_their_files_and_only_those_are_bertkits(ws):
    """best/ and final/ carry the list of what bertkit saved there: a user's file is foreign even under a name a
    tokenizer could have written (vocab.txt; this one writes tokenizer.json)."""
    out = ws.run_copy("finetune")
    for name in ("best", "final"):
        listed = json.loads((out / name / ownership.FILE_LIST).read_text())
        assert listed["format"] == ownership.FILE_LIST_FORMAT
        assert sorted(listed["files"]) == sorted(p.name for p in (out / name).iterdir() if p.name != ownership.FILE_LIST)
        assert "vocab.txt" not in listed["files"]
    _put(out, "best/vocab.txt", "[PAD]\n")
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv("finetune", out, "--overwrite")), before, ws.root, "(best/vocab.txt)")


def test_a_file_put_into_the_run_while_it_runs_stops_the_swap_and_stays(ws):
    """`commit` checks again: an --overwrite run takes time, and a file may be put into best/ meanwhile."""
    out = ws.run_copy("finetune")
    run = rundir.claim_run_dir(out, "finetune", overwrite=True)
    copy_model(out / "best", run.path / "best")  # the new output (a stand-in, recorded as bertkit's)
    _put(out, "best/notes.txt")
    before = snapshot(ws.root)
    with pytest.raises(UserError, match=r"did not write \(best/notes\.txt\)"):
        run.commit()
    assert snapshot(ws.root) == before and (out / ownership.STAGING / "best").is_dir()


def test_removals_take_only_bertkits_files_and_keep_the_rest(ws):
    """The low-level removal (checkpoint rotation, old model folders, shards, staging): bertkit's files go, a file
    that came after the run was checked stays, with the folders that hold it."""
    out = ws.run_copy("finetune")
    step = out / "checkpoints" / "step-2"
    _put(step, "sub/notes.txt")
    assert ownership.remove_recorded(step) == [step / "sub"]
    assert sorted(snapshot(step)) == ["sub/notes.txt"]
    assert ownership.remove_recorded(out / "final") == [] and not (out / "final").exists()
    (out / "best" / "README.md").write_text("my own card\n")  # a recorded file whose bytes changed: it stays
    assert ownership.remove_recorded(out / "best") == [out / "best" / "README.md"]
    assert sorted(snapshot(out / "best")) == ["README.md"]


def _new_events(rec: record.Record, before: bytes) -> list[dict]:
    """The events the record gained since it held `before` (every version holds the previous one's events)."""
    old = len(before.splitlines())
    return [json.loads(line) for line in rec.file.read_bytes().splitlines()[old:]]


def test_a_removal_writes_the_record_once_however_many_files_go(ws, monkeypatch):
    """One new version of the record per removal, not one per file: a folder that goes whole is one `gone` (it
    takes everything below it); where something stays, each entry that went is named, the folders kept listed."""
    out = ws.run_copy("finetune")
    rec = record.Record.at(out)
    writes: list[str] = []
    monkeypatch.setattr(record.faults, "kill_point", writes.append)  # reached once per version written
    whole, partly = out / "checkpoints" / "step-4", out / "checkpoints" / "step-2"
    files = sorted(p.relative_to(out).as_posix() for p in partly.rglob("*") if p.is_file())
    before = rec.file.read_bytes()
    assert ownership.remove_recorded(whole) == [] and not whole.exists()
    assert writes == ["record.draft"] and _new_events(rec, before) == [{"gone": "checkpoints/step-4"}]
    assert not [rel for rel in rec.entries() if rel.startswith("checkpoints/step-4")]
    _put(partly, "sub/notes.txt")
    before, writes[:] = rec.file.read_bytes(), []
    assert ownership.remove_recorded(partly) == [partly / "sub"]
    assert writes == ["record.draft"] and sorted(e["gone"] for e in _new_events(rec, before)) == files
    assert [rel for rel in rec.entries() if rel.startswith("checkpoints/step-2")] == ["checkpoints/step-2"]


def test_a_nested_run_records_what_went_in_its_own_record_and_goes_whole_from_the_outer_one(tmp_path):
    outer = tmp_path / "outer"
    trial = outer / "trial"
    (trial / "best").mkdir(parents=True)
    outer_rec = record.Record.create(outer, "sweep")
    outer_rec.add(record.RUN, "trial")
    inner = record.Record.create(trial, "finetune")
    inner.add(record.DIR, "best")
    for name in ("metrics.json", "best/model.bin"):
        (trial / name).write_text(name)
        inner.add_file(name, *record.file_digest(trial / name))
    _put(trial, "best/notes.txt")
    before = outer_rec.file.read_bytes()
    assert ownership.remove_recorded(trial) == [trial / "best" / "notes.txt"]
    assert sorted(record.Record(trial).entries()) == ["best"] and outer_rec.file.read_bytes() == before
    (trial / "best" / "notes.txt").unlink()
    assert ownership.remove_recorded(trial) == [] and not trial.exists()
    assert _new_events(outer_rec, before) == [{"gone": "trial"}] and outer_rec.entries() == {}


def test_a_kill_between_a_removal_and_its_record_leaves_a_run_the_next_one_accepts(ws):
    """What a removal took is recorded gone after it went: a kill in between (here: while the record's next
    version is written) leaves entries for paths no longer there and the record's draft, both bertkit's by the
    record. The run is still accepted as it is, and the next run that claims it tidies both away."""
    out = ws.run_copy("finetune")
    step = out / "checkpoints" / "step-2"
    code = f"from bertkit.io import ownership; ownership.remove_recorded({str(step)!r})"
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "BERTKIT_KILL_AT": "record.draft"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    rec = record.Record(out)
    assert not step.exists() and rec.entry("checkpoints/step-2/" + record.RECORD) is None
    assert rec.entry("checkpoints/step-2") is not None and (out / rec.draft()).is_file()
    assert ownership.unowned(out) == []
    finished = invoke([*ws.argv("finetune", out), "--json"])
    assert finished.exit_code == 0 and json.loads(finished.stdout)["already_finished"], finished.output
    again = invoke(ws.argv("finetune", out, "--overwrite"))
    assert again.exit_code == 0, again.output
    assert not [p for p in out.iterdir() if p.name.startswith(record.RECORD + ".")] and ownership.unowned(out) == []


# ---------------------------------------------------------------- issue 20: no --out contains, or is inside, an input


def test_finetune_never_overwrites_the_model_it_reads(ws):
    out = ws.run_copy("finetune")
    before = snapshot(ws.root)
    result = invoke(argv("finetune", out, out / "best", ws.made["data"], None, "--overwrite"))
    assert_refused(result, before, ws.root, "--out WS/finetune-run contains the --model WS/finetune-run/best")
    assert "never writes over what it reads" in result.output and "Choose another --out" in result.output


@pytest.mark.parametrize("overwrite", [False, True], ids=["rerun", "overwrite"])
def test_distill_never_overwrites_its_teacher(overwrite, ws, made_distill):
    """The issue's case: `distill --teacher RUN/best --out RUN --overwrite` replaced the teacher with the student."""
    out = ws.root / "distill-run"
    shutil.copytree(made_distill, out)
    args = ["distill", "--teacher", str(out / "best"), "--data", str(ws.made["data"]), "--student-layers", "1",
            "--epochs", "1", "--batch-size", "8", "--no-report", "--out", str(out), "--quiet"]
    before = snapshot(ws.root)
    result = invoke([*args, *(["--overwrite"] if overwrite else [])])
    assert_refused(result, before, ws.root, "--out WS/distill-run contains the --teacher WS/distill-run/best")


INPUT_FLAG = {"tokens": "--model", "embed": "--model", "probe": "--model", "finetune": "--model",
              "evaluate": "--model", "bench": "--models", "distill": "--teacher"}


@pytest.mark.parametrize("command", list(INPUT_FLAG))
def test_out_inside_an_input_is_refused_for_every_command(command, ws):
    """A run is never written into a folder it reads (here the model), a symlink to it included."""
    model = ws.root / "model"
    shutil.copytree(ws.made["finetune"] / "best" if command in ("evaluate", "distill") else ws.model, model)
    (ws.root / "link").symlink_to(model)
    out = ws.root / "link" / "run"
    args = (["distill", "--teacher", str(model), "--data", str(ws.made["data"]), "--out", str(out), "--quiet"]
            if command == "distill" else argv(command, out, model, ws.made["data"], model))
    before = snapshot(ws.root)
    result = invoke(args)
    assert_refused(result, before, ws.root, f"--out WS/link/run is inside the {INPUT_FLAG[command]} WS/model")
    assert not out.exists()


def test_evaluate_never_overwrites_the_data_it_reads(ws):
    out = ws.run_copy("evaluate")
    data = out / "predictions.csv"  # bertkit's own file, read back as data: still an input
    before = snapshot(ws.root)
    result = invoke(["evaluate", "--model", str(ws.made["finetune"] / "best"), "--data", str(data), "--text-column",
                     "text", "--label-column", "label", "--out", str(out), "--overwrite", "--quiet"])
    assert_refused(result, before, ws.root, "--out WS/evaluate-run contains the --data WS/evaluate-run/predictions.csv")


def test_input_paths_names_every_input_by_the_flag_typed():
    from bertkit.commands.bench import BenchConfig
    from bertkit.commands.distill import DistillConfig
    from bertkit.commands.probe import ProbeConfig

    distill = DistillConfig.of(teacher="runs/t/best", data="a.tsv", dev="b.tsv", out="runs/s",
                               metric=("my_metric.py:strict", "glue:mrpc"), metric_for_best="glue")
    assert ownership.input_paths(distill) == [("--teacher", "runs/t/best"), ("--data", "a.tsv"), ("--dev", "b.tsv"),
                                              ("--metric", "my_metric.py"), ("--metric", "glue")]
    bench = BenchConfig.of(models="x,y")
    assert ownership.input_paths(bench) == [("--models", "x"), ("--models", "y")]
    probe = ProbeConfig.of(features="store", test="t.tsv")
    assert ownership.input_paths(probe) == [("--features", "store"), ("--test", "t.tsv")]


# ---------------------------------------------------------------- issue 20: predict replaces its own predictions


def test_every_predictions_header_predict_writes_is_recognised(tmp_path):
    import numpy as np

    from bertkit.data.dataset import TextDataset
    from bertkit.scoring.predictions import write_predictions_csv

    rows = TextDataset(["a", "b"], pairs=["c", "d"], line_numbers=[2, 3])
    shapes = {"single_label": (np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0, 0])),
              "multi_label": (np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([[1, 0], [1, 1]])),
              "regression": (np.array([[1.5], [2.5]]), np.array([1.0, 3.0]))}
    for task, (values, truth) in shapes.items():
        for dataset in (rows, TextDataset(["a", "b"])):
            for y_true in (None, truth):
                path = tmp_path / f"{task}.csv"
                write_predictions_csv(path, dataset, values, ["pos", "neg"], y_true=y_true, task=task)
                assert predictions_out.is_predictions_csv(path), path.read_text().splitlines()[0]
    for header in ("id,score", "row,predicted", "row,text,predicted,confidence", "row,label,text,predicted",
                   "row,text,predicted,notes", "text,row,predicted,p_a"):
        (tmp_path / "theirs.csv").write_text(header + "\n")
        assert not predictions_out.is_predictions_csv(tmp_path / "theirs.csv"), header


@pytest.mark.parametrize("shape", ["regression", "multi_label"])
def test_predict_replaces_its_own_predictions_of_every_shape(shape, ws):
    """The issue's case: predict refused its own regression / multi-label CSV as "not a predictions file"."""
    rows = []
    for i in range(24):
        good = i % 2 == 0
        text = f"{'a great' if good else 'an awful'} film number {i}"
        rows.append({"text": text, "label": (3.0 if good else 1.0) + i % 5 / 4} if shape == "regression" else
                    {"text": text, "labels": ["good"] if good else ["bad", "long"]})
    train = ws.root / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    probe = ws.root / "probe-run"
    made = invoke(["probe", "--model", str(ws.model), "--data", str(train), "--no-baselines", "--out", str(probe),
                   "--quiet"])
    assert made.exit_code == 0, made.output
    out = ws.root / "preds.csv"
    for text in ("a great film", "an awful film"):
        result = invoke(["predict", "--probe", str(probe), "--text", text, "--out", str(out), "--quiet"])
        assert result.exit_code == 0, result.output
        assert text in out.read_text()
    assert predictions_out.is_predictions_csv(out) and "a great film" not in out.read_text()
    header = out.read_text().splitlines()[0]
    assert header == "row,text,predicted" if shape == "regression" else header.startswith("row,text,predicted,p_")
    again = invoke(["probe", "--model", str(ws.model), "--data", str(train), "--no-baselines", "--out", str(probe),
                    "--overwrite", "--quiet"])  # the shape's own plot (scatter / per-label F1) is bertkit's too
    assert again.exit_code == 0, again.output


def test_a_killed_write_leaves_a_recorded_temp_the_next_run_removes_and_nothing_that_looks_like_it(ws):
    """Temp files are recorded (by their unique names) before they are made: the next run removes exactly the
    one a SIGKILL left; a file named the same way that bertkit never recorded is refused, named, and kept."""
    out = ws.root / "tokens-run"
    killed = _python_bertkit(ws.argv("tokens", out), BERTKIT_KILL_AT="replace:tokens.json")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (left,) = [p for p in out.iterdir() if p.name.startswith(".tokens.json.") and p.name.endswith(".tmp")]
    entry = record.Record.at(out).entry(left.name)
    assert entry is not None and entry.kind == record.TEMP  # recorded before it was made
    look_alike = out / ".tokens.json.0badc0de.tmp"
    look_alike.write_text("mine\n")
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv("tokens", out)), before, ws.root, "did not write (.tokens.json.0badc0de.tmp)")
    shutil.move(look_alike, ws.root / look_alike.name)
    again = invoke(ws.argv("tokens", out))
    assert again.exit_code == 0, again.output
    assert not left.exists() and (ws.root / look_alike.name).read_text() == "mine\n"
    assert ownership.unowned(out) == [] and (out / "tokens.json").is_file()


def test_the_record_lists_every_file_with_its_size_and_digest_and_every_folder(ws):
    from bertkit.io.record import file_digest

    for command in ("finetune", "embed", "probe", "bench"):
        out = ws.made[command]
        entries = record.Record.at(out).entries()
        for path in out.rglob("*"):
            rel = path.relative_to(out).as_posix()
            if rel == record.RECORD:
                continue
            entry = entries[rel]
            if path.is_dir():
                assert entry.kind in (record.DIR, record.RUN), rel
            else:
                assert entry.kind == record.FILE and entry.versions == {file_digest(path)}, rel


def test_the_record_reads_past_a_torn_line_and_ignores_it(tmp_path):
    """A kill in the middle of an append leaves a line without its end: it was never acted on, so it is not read,
    and the next event starts on a line of its own."""
    rec = record.Record.create(tmp_path, "tokens")
    rec.add(record.DIR, "a")
    with open(rec.file, "ab") as handle:
        handle.write(b'{"file":"a/x","size":3,"sha')  # torn
    fresh = record.Record(tmp_path)
    assert set(fresh.entries()) == {"a"}
    rec.add_file("a/y", 2, "00")
    assert set(record.Record(tmp_path).entries()) == {"a", "a/y"} and rec.valid()
    rec.copy("a", "b", record.DIR)
    rec.gone("a")
    assert set(record.Record(tmp_path).entries()) == {"b", "b/y"}


def test_a_saved_model_folder_is_readable_as_the_umask_says(tiny_bert_dir, write_tsv, toy_rows, tmp_path):
    """transformers writes model.safetensors 0600; bertkit's model folders follow the umask like every other file
    (another user of a shared machine can load the model)."""
    import os
    import stat

    from bertkit.commands.finetune import FinetuneConfig
    from bertkit.commands.finetune import run as finetune

    train = write_tsv("train.tsv", toy_rows, ("sentence", "label"))
    old = os.umask(0o022)
    try:
        finetune(FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), out=str(tmp_path / "run"), epochs=1,
                                batch_size=8, save_every=None, precision="fp32"), progress=False)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "run" / "final").iterdir() if p.is_file()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes


# ---------------------------------------------------------------- issue 43: a record is trusted only inside its folder


def _outside_lines(out: Path, victim: Path) -> dict[str, list[dict]]:
    """Record lines a damaged (or forged) record could hold, each naming `victim` (outside --out) some way."""
    size, sha = record.file_digest(victim)
    return {
        "dotdot-temp": [{"temp": f"../{victim.name}"}],
        "dotdot-file": [{"file": f"../{victim.name}", "size": size, "sha256": sha}],
        "absolute": [{"temp": str(victim)}],
        "dotdot-dir": [{"dir": ".."}],
        "dot-parts": [{"temp": f"./sub/../../{victim.name}"}],
        "through-a-link": [{"dir": "link"}, {"temp": f"link/{victim.name}"}],
    }


@pytest.mark.parametrize("overwrite", [False, True], ids=["rerun", "overwrite"])
@pytest.mark.parametrize("case", ["dotdot-temp", "dotdot-file", "absolute", "dotdot-dir", "dot-parts",
                                  "through-a-link"])
def test_a_record_naming_paths_outside_its_folder_is_damaged_and_nothing_is_removed(case, overwrite, ws):
    """The issue's cases: a record line naming ../victim, an absolute path, `..` or a path through a link leading
    out made the next run delete files outside --out (exit 0), or fail with a traceback (`{"dir": ".."}` with
    --overwrite). Now the record is damaged: exit 2 naming it and the fix, every byte everywhere as it was."""
    out = ws.run_copy("tokens")
    victim = ws.root / "victim.txt"
    victim.write_text("not bertkit's\n")
    (ws.root / "elsewhere").mkdir()
    (ws.root / "elsewhere" / victim.name).write_text("not bertkit's either\n")
    (out / "link").symlink_to(ws.root / "elsewhere")
    rec = record.Record.at(out)
    with open(rec.file, "ab") as handle:  # as a damaged or forged record would hold them
        handle.write(b"".join(json.dumps(line).encode() + b"\n" for line in _outside_lines(out, victim)[case]))
    before = snapshot(ws.root)
    result = invoke(ws.argv("tokens", out, *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, f"--out WS/tokens-run has a damaged record: WS/tokens-run/{record.RECORD} "
                                            "names paths outside WS/tokens-run")
    text = " ".join(result.output.replace(str(ws.root), "WS").split())
    assert "has removed nothing" in text and "Move that run aside (e.g. `mv WS/tokens-run WS/tokens-run.old`)" in text
    assert (out / "link").is_symlink()


def test_removals_never_act_on_a_record_naming_paths_outside_its_folder(ws):
    """The low-level removals refuse a damaged record too (whoever calls them): nothing outside, nothing inside."""
    out = ws.run_copy("tokens")
    victim = ws.root / "victim.txt"
    victim.write_text("not bertkit's\n")
    record.Record.at(out).add(record.TEMP, "config.json")  # a proper entry, so the removal has something to do
    with open(record.Record.at(out).file, "ab") as handle:
        handle.write(json.dumps({"temp": "../victim.txt"}).encode() + b"\n")
    assert record.Record.at(out).outside() == ["../victim.txt"]
    before = snapshot(ws.root)
    assert ownership.remove_temps(out) == []
    assert ownership.remove_recorded(out / "tokens.json") == [out / "tokens.json"]
    assert snapshot(ws.root) == before


def test_a_nested_run_whose_record_leads_out_of_it_is_named_and_kept(tmp_path):
    outer = tmp_path / "outer"
    (outer / "trial").mkdir(parents=True)
    record.Record.create(outer, "sweep").add(record.RUN, "trial")
    inner = record.Record.create(outer / "trial", "finetune")
    inner.add(record.TEMP, "../../victim.txt")
    (tmp_path / "victim.txt").write_text("not bertkit's\n")
    assert [(u.path, u.why) for u in ownership.unowned(outer)] == [("trial/", ownership.DAMAGED)]
    assert ownership.remove_recorded(outer / "trial") == [outer / "trial"]
    assert (tmp_path / "victim.txt").read_text() == "not bertkit's\n"


# ---------------------------------------------------------------- issue 43: predict's --out is bertkit's by a record


@pytest.mark.parametrize("case", ["header-only", "edited", "record-not-bertkits", "record-of-other-bytes"])
def test_predict_replaces_a_file_only_when_its_record_vouches_for_the_bytes(case, ws):
    """The issue's case: `predict --out notes.csv` replaced a user's CSV whose header happened to be
    `row,text,predicted`. A header makes nothing bertkit's: only the record predict writes beside its CSV does."""
    out = ws.root / "notes.csv"
    side = predictions_out.record_path(out)
    args = ["predict", "--model", str(ws.made["finetune"] / "best"), "--text", "a lovely film", "--out", str(out),
            "--quiet"]
    if case == "header-only":
        out.write_text("row,text,predicted\n1,my own text,my own label\n")
        problem = "bertkit has no record of writing it though its header is predict's"
    else:
        assert invoke(args).exit_code == 0 and side.is_file()
        if case == "edited":
            out.write_text(out.read_text() + "2,my own row,pos\n")
            problem = "its bytes changed since bertkit wrote it"
        elif case == "record-not-bertkits":
            side.write_text("my notes\n")
            problem = f"{side.name} beside it is not a record bertkit wrote"
        else:
            out.write_text("row,text,predicted\n1,my own text,my own label\n")  # the record is of predict's bytes
            problem = "its bytes changed since bertkit wrote it"
    before = snapshot(ws.root)
    result = invoke(args)
    assert_refused(result, before, ws.root, f"--out WS/notes.csv exists and is not a predictions file bertkit wrote "
                                            f"({problem}")
    assert "Choose another --out" in result.output


def test_predict_keeps_a_record_of_the_bytes_it_wrote_and_replaces_them(ws):
    out = ws.root / "preds.csv"
    args = ["predict", "--model", str(ws.made["finetune"] / "best"), "--out", str(out), "--quiet", "--text"]
    assert invoke([*args, "a lovely film"]).exit_code == 0
    side = json.loads(predictions_out.record_path(out).read_text())
    assert side["format"] == predictions_out.RECORD_FORMAT and side["versions"] == [list(record.file_digest(out))]
    first = record.file_digest(out)
    assert invoke([*args, "an awful movie"]).exit_code == 0 and "an awful movie" in out.read_text()
    side = json.loads(predictions_out.record_path(out).read_text())
    assert side["versions"] == [list(first), list(record.file_digest(out))]  # both, until the rename was done
    out.unlink()  # the record alone: the next run writes the file again
    assert invoke([*args, "a third one"]).exit_code == 0 and "a third one" in out.read_text()


# ---------------------------------------------------------------- issue 43: records are replaced whole, never appended


@pytest.mark.parametrize("command, extra", [("tokens", ()), ("tokens", ("--max-length", "64", "--overwrite")),
                                            ("finetune", ())], ids=["tokens-rerun", "tokens-overwrite", "finetune-resume"])
def test_a_hard_linked_snapshot_of_a_run_keeps_its_bytes_while_the_run_goes_on(command, extra, ws):
    """The issue's case: resuming a run that was `cp -al` snapshotted appended to the snapshot's record through the
    hard link (and to its metrics.jsonl). Every write now goes to a new file renamed into place."""
    out = ws.run_copy(command)
    if command == "finetune":
        (out / "metrics.json").unlink()  # an unfinished run: the re-run resumes it and logs again
    snap = ws.root / "snapshot"
    shutil.copytree(out, snap, copy_function=os.link)
    before = snapshot(snap)
    result = invoke(ws.argv(command, out, *extra))
    assert result.exit_code == 0, result.output
    assert snapshot(snap) == before
    assert record.Record.at(out).file.stat().st_nlink == 1 and ownership.unowned(out) == []


def test_the_record_is_a_new_file_each_time_and_names_its_next_draft(tmp_path):
    rec = record.Record.create(tmp_path, "tokens")
    link = tmp_path / "link-to-record"
    os.link(rec.file, link)
    first, draft = rec.file.read_bytes(), rec.draft()
    assert draft is not None and draft.startswith(record.RECORD + ".")
    rec.add(record.DIR, "a")
    assert link.read_bytes() == first  # the old version, untouched
    assert rec.draft() != draft and set(record.Record(tmp_path).entries()) == {"a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([record.RECORD, link.name])  # no draft left


def test_a_draft_of_the_record_a_kill_left_is_removed_by_the_next_run_and_a_look_alike_is_kept(ws):
    """A kill between writing the record's next version and renaming it leaves that draft: the record on disk
    announced its name, so the next run removes it. A file named like a draft that the record does not announce is
    someone else's: named, kept."""
    out = ws.root / "tokens-run"
    killed = _python_bertkit(ws.argv("tokens", out), BERTKIT_KILL_AT="record.draft@4")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (left,) = [p for p in out.iterdir() if p.name.startswith(record.RECORD + ".")]
    assert left.name == record.Record(out).draft()
    look_alike = out / f"{record.RECORD}.0badc0de.tmp"
    look_alike.write_text("mine\n")
    before = snapshot(ws.root)
    assert_refused(invoke(ws.argv("tokens", out)), before, ws.root, f"did not write ({look_alike.name})")
    look_alike.unlink()
    again = invoke(ws.argv("tokens", out))
    assert again.exit_code == 0, again.output
    assert not left.exists() and ownership.unowned(out) == [] and (out / "tokens.json").is_file()


def test_an_appended_log_shared_by_a_hard_link_gets_a_copy_of_its_own_first(tmp_path):
    from bertkit.io.atomic import append_jsonl

    log = tmp_path / "metrics.jsonl"
    append_jsonl(log, {"step": 1})
    os.link(log, tmp_path / "snapshot.jsonl")
    append_jsonl(log, {"step": 2})
    assert (tmp_path / "snapshot.jsonl").read_text() == '{"step": 1}\n'
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2]


# ---------------------------------------------------------------- issue 43: one writer per folder


HOLD = """import sys
from bertkit.io import rundir
rundir.claim_run_dir(sys.argv[1], sys.argv[2])
print("claimed", flush=True)
sys.stdin.read()
"""
"""Another bertkit process that claims --out (as a run starting does) and holds it until its stdin closes."""


def _holding(out: Path, command: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out), command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.stdout.readline().strip() == "claimed"
    return proc


@pytest.mark.parametrize("fresh", [False, True], ids=["its-run", "a-new-folder"])
@pytest.mark.parametrize("command", ["embed", "finetune"])
def test_a_second_run_on_the_same_out_is_refused_naming_the_process_that_holds_it(command, fresh, ws):
    """The issue's cases: two `embed --out X` (or `finetune --out X`) at once. The second is refused, naming the
    process of the first, and changes nothing; once the first ends (here: SIGKILL, its lock goes with it), it runs."""
    out = ws.root / "new-run" if fresh else ws.run_copy(command)
    holder = _holding(out, command)
    try:
        before = snapshot(ws.root)
        for extra in ([], ["--overwrite"]):
            refused = invoke(ws.argv(command, out, *extra))
            assert_refused(refused, before, ws.root, f"--out {out} is being written right now by another bertkit run "
                                                     f"(process {holder.pid} holds its lock".replace(str(ws.root), "WS"))
            assert "Wait for that run to end" in refused.output and "choose another --out" in refused.output
    finally:
        holder.kill()
        holder.wait()
    after = invoke(ws.argv(command, out))
    assert after.exit_code == 0, after.output
    assert ownership.unowned(out) == []


def test_a_run_holds_its_lock_until_it_ends_and_the_lock_file_is_recorded_empty(ws):
    out = ws.root / "tokens-run"
    run = rundir.claim_run_dir(out, "tokens")
    assert runlock.holder(out / runlock.LOCK) == os.getpid()
    entry = record.Record.at(out).entry(runlock.LOCK)
    assert entry is not None and entry.versions == {record.file_digest(out / runlock.LOCK)} and entry.versions == {
        (0, hashlib.sha256(b"").hexdigest())}
    run.commit()
    assert runlock.holder(out / runlock.LOCK) is None and (out / runlock.LOCK).stat().st_size == 0


@pytest.mark.parametrize("line", [{"file": "tokens.json"}, {"file": "tokens.json", "size": 3},
                                  {"file": "tokens.json", "size": 3, "sha256": "00"}], ids=["bare", "no-sha", "short-sha"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["rerun", "overwrite"])
def test_a_run_record_listing_a_file_without_its_digests_is_damaged_not_older(line, overwrite, ws):
    """Issue 43: every file bertkit records carries its size and sha256; a record that lacks them is damaged."""
    out = ws.run_copy("tokens")
    with open(record.Record.at(out).file, "ab") as handle:
        handle.write(json.dumps(line).encode() + b"\n")
    before = snapshot(ws.root)
    result = invoke(ws.argv("tokens", out, *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, f"has a damaged record: WS/tokens-run/{record.RECORD} lists files without "
                                            f"their size and sha256 (tokens.json)")


# ---------------------------------------------------------------- issue 43: temp folders hold only what is recorded


def _killed_finetune(ws: Workspace, point: str, *extra: str) -> Path:
    out = ws.root / "finetune-run"
    killed = _python_bertkit(ws.argv("finetune", out, *extra), BERTKIT_KILL_AT=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    return out


@pytest.mark.parametrize("overwrite", [False, True], ids=["resume", "overwrite"])
def test_a_user_file_in_a_killed_checkpoints_temp_folder_is_named_kept_and_never_removed_with_it(overwrite, ws):
    """The issue's case: the temp folder of a checkpoint save a kill interrupted was removed whole by the next run,
    a user's file inside it too. Only what the record lists goes (the library files of that save are recorded by
    name before it starts); anything else stops the run, named, and stays."""
    out = _killed_finetune(ws, "save:optimizer.bin@2")  # while saving step-4 (step-2 saved: its files are known)
    (tmp,) = (out / "checkpoints").glob(".tmp-step-4-*")
    assert record.Record.at(out).entry(f"checkpoints/{tmp.name}/model.safetensors").kind == record.OPEN
    _put(tmp, "notes.txt")
    before = snapshot(ws.root)
    result = invoke(ws.argv("finetune", out, *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, f"holds files bertkit did not write (checkpoints/{tmp.name}/notes.txt)")
    shutil.move(tmp / "notes.txt", ws.root / "notes.txt")
    resumed = invoke(ws.argv("finetune", out, "--json"))
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["restored"]["step"] == 2
    assert not tmp.exists() and (ws.root / "notes.txt").read_text() == "mine\n" and ownership.unowned(out) == []


@pytest.mark.parametrize("overwrite", [False, True], ids=["resume", "overwrite"])
def test_a_user_file_in_the_tensorboard_folder_of_a_killed_run_is_neither_removed_nor_adopted(overwrite, ws):
    """The issue's cases: a user's file in tensorboard/ of a killed run was deleted by --overwrite, and adopted into
    the record by a plain resume (the folder was the library's whole). The writer's files are recorded by their
    paths once it made them; anything else there is not bertkit's."""
    out = _killed_finetune(ws, "optimizer.step@3", "--report-to", "tensorboard")
    entries = record.Record.at(out).entries()
    events = [p for p in (out / "tensorboard").rglob("*") if p.is_file()]
    assert events and all(entries[p.relative_to(out).as_posix()].kind == record.OPEN for p in events)
    _put(out, "tensorboard/notes.txt")
    before = snapshot(ws.root)
    result = invoke(ws.argv("finetune", out, "--report-to", "tensorboard", *(["--overwrite"] if overwrite else [])))
    assert_refused(result, before, ws.root, "holds files bertkit did not write (tensorboard/notes.txt)")
    shutil.move(out / "tensorboard" / "notes.txt", ws.root / "notes.txt")
    resumed = invoke(ws.argv("finetune", out, "--report-to", "tensorboard"))
    assert resumed.exit_code == 0, resumed.output
    assert ownership.unowned(out) == [] and (ws.root / "notes.txt").read_text() == "mine\n"


def test_sealing_a_librarys_folder_records_the_files_it_made_and_nothing_else(tmp_path):
    from bertkit.io import library_files

    out = tmp_path / "run"
    run = rundir.claim_run_dir(out, "finetune")
    folder = record.make_dirs(out / "tensorboard")
    before = library_files.listing(folder)
    _put(folder, "sub/events.1", "event bytes")  # what the library makes in the call
    library_files.note_new(folder, before)
    _put(folder, "notes.txt")  # a user's file, after the call
    library_files.seal_open(folder)
    entries = record.Record.at(out).entries()
    assert entries["tensorboard/sub"].kind == record.DIR and "tensorboard/notes.txt" not in entries
    assert entries["tensorboard/sub/events.1"].versions == {record.file_digest(folder / "sub" / "events.1")}
    assert [u.path for u in ownership.unowned(out)] == ["tensorboard/notes.txt"]
    run.commit()


def test_a_kill_during_the_first_checkpoint_save_is_resumed_its_files_recorded_by_accelerates_names(ws):
    """The first save of a run has no earlier checkpoint to name the files it writes: accelerate's names for this
    run's objects are recorded before it starts, so the next run removes what the kill left and resumes."""
    out = _killed_finetune(ws, "save:optimizer.bin@1")
    (tmp,) = (out / "checkpoints").glob(".tmp-step-2-*")
    entries = record.Record.at(out).entries()
    assert {entries[p.relative_to(out).as_posix()].kind for p in tmp.iterdir()} == {record.OPEN}
    resumed = invoke(ws.argv("finetune", out, "--json"))
    assert resumed.exit_code == 0, resumed.output
    assert not tmp.exists() and ownership.unowned(out) == []


def test_a_kill_during_the_first_save_of_best_is_resumed_its_files_recorded_by_the_libraries_names(ws):
    out = _killed_finetune(ws, "replace:bertkit_model.json@1")  # model and tokenizer saved into best/'s temp folder
    (tmp,) = out.glob(".tmp-best-*")
    entries = record.Record.at(out).entries()
    assert entries[f"{tmp.name}/model.safetensors"].kind == record.OPEN and ownership.unowned(out) == []
    resumed = invoke(ws.argv("finetune", out))
    assert resumed.exit_code == 0, resumed.output
    assert not tmp.exists() and ownership.unowned(out) == []


@pytest.mark.parametrize("replaced, problem", [
    ("final/config.json", "holds files bertkit did not write (final/config.json)"),  # a link: never bertkit's
    ("final", "names paths outside WS/finetune-run, directly or through a link (final/.bertkit-files.json"),
], ids=["a-file", "a-folder"])
def test_a_recorded_path_replaced_by_a_link_leading_out_is_refused_and_its_target_kept(replaced, problem, ws):
    """A link bertkit did not make is never followed: in place of a recorded file it is named as not bertkit's; in
    place of a recorded folder, the record's paths below it lead out through it, so the record is not trusted."""
    out = ws.run_copy("finetune")
    elsewhere = ws.root / "elsewhere"
    shutil.move(out / replaced, elsewhere)
    (out / replaced).symlink_to(elsewhere)
    (out / "metrics.json").unlink()  # an unfinished run: a re-run would replace final/
    before = snapshot(ws.root)
    for extra in ([], ["--overwrite"]):
        assert_refused(invoke(ws.argv("finetune", out, *extra)), before, ws.root, problem)
    assert ownership.remove_recorded(out / replaced) == [out / replaced] and snapshot(ws.root) == before


def test_a_record_an_older_bertkit_appended_to_is_still_read_and_rewritten_whole(ws):
    """Records written before issue 43 (no draft named in the header, lines appended, a torn last line) keep their
    meaning: the run is bertkit's, and the next version is written whole, naming its draft."""
    out = ws.run_copy("tokens")
    rec = record.Record.at(out)
    lines = rec.file.read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    header.pop("draft")
    rec.file.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(lines[1:])
                         + b'{"file":"tokens.json","si')  # torn by a kill mid-append
    assert record.Record(out).draft() is None and ownership.unowned(out) == []
    again = invoke(ws.argv("tokens", out, "--max-length", "64", "--overwrite"))
    assert again.exit_code == 0, again.output
    assert record.Record(out).draft() is not None and ownership.unowned(out) == []
    assert not rec.file.read_bytes().endswith(b'"si')


@pytest.mark.parametrize("command, extra", [("finetune", ["--max-length", "1000"]), ("embed", ["--max-length", "1000"]),
                                            ("probe", ["--layers", "9"]), ("probe", ["--cv", "30"])],
                         ids=["finetune-max-length", "embed-max-length", "probe-layers", "probe-cv"])
def test_a_refusal_before_the_work_makes_no_out(command, extra, ws):
    """Issue 43: what the model's files or the labels refuse is refused before a new --out is made."""
    out = ws.root / f"new-{command}"
    result = invoke(ws.argv(command, out, *extra))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert not out.exists()
