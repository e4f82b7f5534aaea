"""Kill-and-resume: `bertkit embed` and `bertkit finetune` run as real processes, SIGKILLed at precise points
(bertkit/io/faults.py, env BERTKIT_KILL_AT; no sleeps, no timing), then re-run with the same command.

Guarantees checked after every kill and after the resume:
* embed: the finished store equals an uninterrupted run's byte for byte (features.npy, labels.npy), rows are
  neither missing nor duplicated, and every visible shard/array file loads (no partial file in place of a
  complete one);
* finetune: the re-run resumes from the last complete checkpoint (an interrupted checkpoint save is ignored)
  and ends with the same metrics and weights as an uninterrupted run at the same seed (tolerance 1e-6).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.io import faults

runner = CliRunner()
TOL = 1e-6
EMBED_KILL_POINTS = {
    "during a shard write (half of shard 1 on disk, not renamed)": "partial:.shard-00001.npy.*",
    "after merging, before the manifest (features.npy in place)": "replace:manifest.json",
    "between shards (shard 1 just renamed into place)": "replaced:shard-00001.npy",
    "while merging shards (features.npy written, not renamed)": "replace:features.npy",
    "after the manifest, before the shards are removed": "replaced:manifest.json",
}
FINETUNE_KILL_POINTS = {
    "right after the first optimizer step": "optimizer.step@1",
    "during a checkpoint save (model saved, optimizer not yet)": "save:optimizer.bin@2",
    "while swapping in the best model (before its rename)": "replace:best@1",
    "before a checkpoint folder is renamed into place": "replace:step-6",
}
"""Every fault point the suite exercises (docs/reliability.md states their number)."""


def _rows(n: int) -> list[tuple[str, str]]:
    good = ["great", "wonderful", "lovely", "superb", "delightful", "fine", "charming"]
    bad = ["awful", "terrible", "boring", "dreadful", "horrible", "dull", "tedious"]
    rows = []
    for i in range(n // 2):
        rows.append((f"a {good[i % 7]} film , truly {good[(i + 3) % 7]} {'!' * (i % 3)}", "pos"))
        rows.append((f"an {bad[i % 7]} movie , really {bad[(i + 2) % 7]} and {'long ' * (i % 5)}", "neg"))
    return rows


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows(40)), encoding="utf-8")
    return path


def run_killed(argv: list[str], point: str) -> subprocess.CompletedProcess:
    """Run `python -m bertkit ARGV` with BERTKIT_KILL_AT=point; it must die by SIGKILL."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", faults.ENV: point}
    proc = subprocess.run([sys.executable, "-m", "bertkit", *argv], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point} (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc


def run_ok(argv: list[str]) -> dict:
    result = runner.invoke(app, [*argv, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def visible_files(root: Path) -> list[Path]:
    """Files a reader could take for outputs: everything except hidden temp files of atomic writes."""
    return [p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)]


def assert_no_partial_files(root: Path) -> None:
    """Every visible .npy loads completely and every visible .json parses: nothing half-written is in place."""
    for path in visible_files(root):
        if path.suffix == ".npy":
            array = np.load(path)  # raises on a truncated file
            assert array.size > 0, path
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".safetensors":
            from safetensors.numpy import load_file

            load_file(str(path))


# ---------------------------------------------------------------- the hook itself


def test_kill_points_parse(monkeypatch):
    monkeypatch.setenv(faults.ENV, "replace:shard-*.npy, optimizer.step@3,embed.x@0")
    assert faults.kill_points() == {"replace:shard-*.npy": 1, "optimizer.step": 3, "embed.x": 1}
    monkeypatch.delenv(faults.ENV)
    assert faults.kill_points() == {} and faults.install_from_env() is False
    faults.maybe_kill("anything")  # unset: a no-op


def test_maybe_kill_sigkills_on_the_nth_hit(tmp_path):
    code = ("from bertkit.io import faults\nimport sys\n"
            "for i in range(5):\n    print(i, flush=True)\n    faults.maybe_kill('loop')\n")
    env = {**os.environ, faults.ENV: "loop@3"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL and proc.stdout.split() == ["0", "1", "2"]


# ---------------------------------------------------------------- embed


def embed_argv(model: Path, data: Path, out: Path) -> list[str]:
    return ["embed", "--model", str(model), "--data", str(data), "--out", str(out), "--shard-size", "8",
            "--batch-size", "4", "--quiet"]


def check_killed_store(out: Path) -> None:
    from bertkit.errors import UserError
    from bertkit.features import store

    assert_no_partial_files(out)
    if not (out / store.MANIFEST).exists():
        with pytest.raises(UserError, match="unfinished embedding store"):
            store.open(out)


def assert_same_store(out: Path, reference: Path) -> None:
    from bertkit.features import store

    for name in (store.FEATURES, store.LABELS):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), f"{name} differs from the uninterrupted run"
    ours, theirs = store.open(out), store.open(reference)
    assert len(ours) == len(theirs) == 40
    assert len(np.unique(np.asarray(ours.features), axis=0)) == len(np.unique(np.asarray(theirs.features), axis=0))
    np.testing.assert_array_equal(ours.labels, np.asarray([1, 0] * 20))  # rows in input order: pos, neg, ...
    assert ours.manifest["shape"] == theirs.manifest["shape"] and ours.manifest["identity"] == theirs.manifest["identity"]


EMBED_CHAINS = list(EMBED_KILL_POINTS.values())
FINETUNE_CHAINS = list(FINETUNE_KILL_POINTS.values())


@pytest.mark.parametrize("points", [
    EMBED_CHAINS[:2],
    pytest.param(EMBED_CHAINS[2:], marks=pytest.mark.slow),  # 3 kills in a row, then the re-run
], ids=["shard-write+manifest", "between-shards+merge"])
def test_embed_killed_and_resumed_equals_uninterrupted(points, tiny_bert_dir, data, tmp_path):
    reference = tmp_path / "reference"
    run_ok(embed_argv(tiny_bert_dir, data, reference))
    out = tmp_path / "store"
    argv = embed_argv(tiny_bert_dir, data, out)
    for point in points:
        run_killed(argv, point)
        check_killed_store(out)
        if point.startswith("partial:"):  # shard 0 is whole and in place, shard 1 is not
            shards = sorted(p.name for p in (out / "shards").glob("shard-*.npy"))
            assert shards == ["shard-00000.npy"]
            assert list((out / "shards").glob(".shard-00001.npy.*.tmp")), "the half-written temp file is hidden"
    from bertkit.features import store

    summary = run_ok(argv)
    finished_before = points[-1].startswith("replaced:manifest")  # the manifest made it: the store is complete
    assert summary["splits"][0]["status"] == ("complete" if finished_before else "resumed")
    assert_same_store(out, reference)
    again = run_ok(argv)  # a finished store is not touched again
    assert again["complete_already"] and again["rows_encoded"] == 0
    assert_same_store(out, reference)
    leftovers = [p.name for p in out.rglob("*") if p.name.endswith(".tmp") or p.name in (store.SHARDS, store.IDENTITY)]
    assert not leftovers, f"work files of killed runs are left in the finished store: {leftovers}"


# ---------------------------------------------------------------- finetune


def finetune_argv(model: Path, data: Path, out: Path) -> list[str]:
    return ["finetune", "--model", str(model), "--data", str(data), "--out", str(out), "--epochs", "2",
            "--batch-size", "8", "--save-every", "2", "--lr", "1e-3", "--seed", "7", "--quiet"]


def checkpoints(out: Path) -> list[str]:
    folder = out / "checkpoints"
    return sorted(p.name for p in folder.glob("step-*")) if folder.is_dir() else []


def assert_same_training(out: Path, reference: Path) -> None:
    ours = json.loads((out / "metrics.json").read_text())
    theirs = json.loads((reference / "metrics.json").read_text())
    assert ours["finished"] and ours["global_step"] == theirs["global_step"]
    assert ours["best_step"] == theirs["best_step"]
    assert ours["best_metric"] == pytest.approx(theirs["best_metric"], abs=TOL)
    assert len(ours["history"]) == len(theirs["history"])
    from safetensors.numpy import load_file

    for folder in ("final", "best"):  # the weights first: the strongest evidence that training resumed exactly
        mine, ref = load_file(str(out / folder / "model.safetensors")), load_file(str(reference / folder / "model.safetensors"))
        assert mine.keys() == ref.keys()
        for name in ref:
            np.testing.assert_allclose(mine[name], ref[name], atol=TOL, rtol=0, err_msg=f"{folder}/{name}")
    for a, b in zip(ours["history"], theirs["history"], strict=True):
        for key in ("step", "epoch", "samples_seen", "dev_accuracy", "dev_f1", "dev_mcc", "dev_loss"):
            assert a[key] == pytest.approx(b[key], abs=TOL), f"{key} at step {b['step']}: {a[key]} vs {b[key]}"
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [r["step"] for r in theirs["history"]], "metrics.jsonl has gaps or repeats"
    # the reported training loss must not depend on where the run was interrupted either
    for a, b in zip(ours["history"], theirs["history"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=TOL), (
            f"train_loss at step {b['step']}: {a['train_loss']} after resume vs {b['train_loss']} uninterrupted")


@pytest.mark.parametrize("points", [
    FINETUNE_CHAINS[:2],
    pytest.param(FINETUNE_CHAINS[2:], marks=pytest.mark.slow),
], ids=["first-step+checkpoint-save", "best-swap+checkpoint-rename"])
def test_finetune_killed_and_resumed_equals_uninterrupted(points, tiny_bert_dir, data, tmp_path):
    from bertkit.io.checkpoint_folders import latest_checkpoint

    reference = tmp_path / "reference"
    run_ok(finetune_argv(tiny_bert_dir, data, reference))
    out = tmp_path / "run"
    argv = finetune_argv(tiny_bert_dir, data, out)
    for point in points:
        run_killed(argv, point)
        assert_no_partial_files(out)
        assert not (out / "metrics.json").exists()
        after = latest_checkpoint(out)
        if point == "optimizer.step@1":
            assert after is None, "no checkpoint exists after a single step"
        if point.startswith("save:"):  # killed while saving step-4: step-2 is the last complete checkpoint
            assert after is not None and after.name == "step-2", after
            assert list((out / "checkpoints").glob(".tmp-step-*")), "the interrupted save stays in a hidden temp folder"
    summary = run_ok(argv)
    restored = summary["restored"]
    if any(p.startswith(("save:", "replace:step")) for p in points):
        assert restored is not None and restored["step"] > 0, "the re-run resumed from a checkpoint"
    assert_same_training(out, reference)
    assert not (out / "checkpoints").exists(), "a finished run's checkpoints (and temp checkpoint folders) are removed"
    assert not [p for p in out.iterdir() if p.name.startswith((".tmp-", ".old-"))], "temp model folders left behind"


# ---------------------------------------------------------------- a full disk (enospc:GLOB) in the small writes


def run_disk_full(argv: list[str], point: str) -> subprocess.CompletedProcess:
    """Run `python -m bertkit ARGV` with BERTKIT_KILL_AT=enospc:...; it must end with the one disk-full message."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", faults.ENV: point}
    proc = subprocess.run([sys.executable, "-m", "bertkit", *argv], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, f"{point}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert "disk full at" in proc.stderr and "re-run the same command to resume" in proc.stderr, proc.stderr
    return proc


@pytest.mark.slow  # the full disk at a checkpoint and before one: tests/test_integrity.py, in the default run
def test_finetune_full_disk_in_small_writes_then_same_command_finishes_exactly(tiny_bert_dir, data, tmp_path):
    """Not only checkpoints and model folders: the run's small files hit a full disk too - the best model's dev
    probabilities, then (re-run) the metrics log, then (re-run) metrics.json at the very end. Each is the disk-full
    message (exit 2, no traceback) and leaves no temp file; the same command then finishes with the uninterrupted
    run's weights and log."""
    reference = tmp_path / "reference"
    run_ok(finetune_argv(tiny_bert_dir, data, reference))
    out = tmp_path / "run"
    argv = finetune_argv(tiny_bert_dir, data, out)
    for point in ("enospc:.best_dev_proba.npy.*", "enospc:metrics.jsonl@2", "enospc:.metrics.json.*"):
        run_disk_full(argv, point)
        assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp-")], point
        assert not (out / "metrics.json").exists()
    run_ok(argv)
    assert_same_training(out, reference)


@pytest.mark.slow  # a full disk in embed: tests/test_integrity.py, in the default run
def test_embed_full_disk_at_start_and_at_the_manifest_then_same_command_is_byte_identical(tiny_bert_dir, data, tmp_path):
    """The store's first file (identity.json) and its last (manifest.json, after the merge) hit a full disk: each
    is the disk-full message, not a traceback or "choose a directory you can write to"; the re-run finishes the
    store byte-identical to an uninterrupted run, with no work files left."""
    reference = tmp_path / "reference"
    run_ok(embed_argv(tiny_bert_dir, data, reference))
    out = tmp_path / "store"
    argv = embed_argv(tiny_bert_dir, data, out)
    for point in ("enospc:.identity.json.*", "enospc:.manifest.json.*"):
        run_disk_full(argv, point)
        assert_no_partial_files(out)
        assert not [p for p in out.rglob("*.tmp")] and not (out / "manifest.json").exists(), point
    run_ok(argv)
    assert_same_store(out, reference)
    from bertkit.features import store

    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name in (store.SHARDS, store.IDENTITY)]


def test_disk_full_is_recognised_in_its_shapes_and_out_of_memory_is_not():
    import errno

    from bertkit.io import disk

    full = [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded"),
            RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4480 vs 4352"),
            RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
            type("SafetensorError", (Exception,), {})("Error while serializing: I/O error: No space left on device")]
    other = [RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you "
                          "tried to allocate 1073741824 bytes."), OSError(errno.EACCES, "Permission denied"),
             ValueError("no space left for a joke")]
    assert [disk.is_disk_full(e) for e in full] == [True] * len(full)
    assert [disk.is_disk_full(e) for e in other] == [False] * len(other)
