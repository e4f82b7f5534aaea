"""Nothing is lost and nothing silently stops being exact: verified checkpoints, diverging runs, a full disk,
damaged saved files, a model without a trained head (issue 13, part 3).

Full-disk cases are injected, never real: `shutil.disk_usage` is patched for the checks made before a write, and
`BERTKIT_KILL_AT=enospc:GLOB` (bertkit/faults.py) makes a write fail the way a full disk does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.io import faults
from bertkit.training import checkpoints

runner = CliRunner()
Usage = namedtuple("Usage", "total used free")


def _rows(n: int = 40) -> list[tuple[str, str]]:
    good = ["great", "wonderful", "lovely", "superb", "delightful"]
    bad = ["awful", "terrible", "boring", "dreadful", "horrible"]
    rows = []
    for i in range(n // 2):
        rows.append((f"a {good[i % 5]} film , truly {good[(i + 2) % 5]}", "pos"))
        rows.append((f"an {bad[i % 5]} movie , really {bad[(i + 1) % 5]}", "neg"))
    return rows


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    return path


def finetune_argv(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["finetune", "--model", str(model), "--data", str(data), "--out", str(out), "--epochs", "1",
            "--batch-size", "4", "--save-every", "3", "--lr", "1e-3", "--precision", "fp32", "--quiet", *extra]


def invoke(argv: list[str]):
    return runner.invoke(app, argv, catch_exceptions=False)


def weights(folder: Path) -> dict[str, np.ndarray]:
    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        np.testing.assert_allclose(wa[name], wb[name], rtol=1e-6, atol=1e-7, err_msg=name)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def cut_run(model: Path, data: Path, out: Path, after_step: int, monkeypatch) -> None:
    """A run stopped right after optimizer step `after_step` (checkpoints every 3 steps)."""
    monkeypatch.setenv(faults.FAIL_AFTER_STEPS_ENV, str(after_step))
    with pytest.raises(faults.SimulatedFailure):
        invoke(finetune_argv(model, data, out))
    monkeypatch.delenv(faults.FAIL_AFTER_STEPS_ENV)


# ---------------------------------------------------------------- verified resume


@pytest.mark.parametrize("damage", ["random_states_0.pkl", "trainer_state.json", "model.safetensors"])
def test_a_damaged_checkpoint_is_refused_naming_the_intact_one(tiny_bert_dir, data, tmp_path, monkeypatch, damage):
    """Accelerate would skip a damaged RNG file and the resumed run would quietly differ: the checksum manifest
    catches every file, the run refuses and names the intact checkpoint; resuming from that one ends exact."""
    whole = tmp_path / "whole"
    assert invoke(finetune_argv(tiny_bert_dir, data, whole)).exit_code == 0
    cut = tmp_path / "cut"
    cut_run(tiny_bert_dir, data, cut, 7, monkeypatch)
    newest, older = checkpoints.step_folders(cut)[-1], checkpoints.step_folders(cut)[-2]
    assert (newest.name, older.name) == ("step-6", "step-3") and (newest / checkpoints.MANIFEST).is_file()
    target = newest / damage
    target.write_bytes(target.read_bytes()[:-7] + b"garbage")
    before = snapshot(cut)
    refused = runner.invoke(app, finetune_argv(tiny_bert_dir, data, cut))
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    text = " ".join(refused.output.split())
    assert f"holds files changed since bertkit wrote them (checkpoints/{newest.name}/{damage})" in text
    assert "or delete the changed ones, if they are bertkit's own files, damaged" in text
    assert snapshot(cut) == before  # refused: nothing touched, not even with --overwrite (bertkit's bytes or not?)
    assert runner.invoke(app, finetune_argv(tiny_bert_dir, data, cut, "--overwrite")).exit_code == 2
    assert snapshot(cut) == before
    target.unlink()  # the user's fix, as the message says: the checkpoint it was in is now incomplete
    if damage != checkpoints.STATE_FILE:  # (without its trainer state it is an unfinished save, passed over)
        refused = runner.invoke(app, finetune_argv(tiny_bert_dir, data, cut))
        assert refused.exit_code == 2 and f"{newest} is damaged ({damage} missing)" in refused.output
        assert f"previous checkpoint {older} is intact: delete {newest} to resume from it" in refused.output
        shutil.rmtree(newest)  # the user's fix, as the message says
    resumed = invoke(finetune_argv(tiny_bert_dir, data, cut, "--json"))
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["resumed_from"]["step"] == 3
    assert_same_weights(whole / "final", cut / "final")


def test_a_folder_in_checkpoints_that_is_not_ours_is_named_and_kept(tiny_bert_dir, data, tmp_path, monkeypatch):
    """Never loaded, never deleted: the resume is refused (exit 2, issue 20) until it is moved out of the run."""
    cut = tmp_path / "cut"
    cut_run(tiny_bert_dir, data, cut, 4, monkeypatch)
    mine = cut / "checkpoints" / "step-5.bak"
    mine.mkdir()
    (mine / "notes.txt").write_text("my backup\n")
    before = snapshot(cut)
    refused = invoke(finetune_argv(tiny_bert_dir, data, cut, "--json"))
    assert refused.exit_code == 2 and "did not write (checkpoints/step-5.bak/)" in refused.output
    assert snapshot(cut) == before
    mine.rename(tmp_path / "step-5.bak")
    result = invoke(finetune_argv(tiny_bert_dir, data, cut, "--json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["resumed_from"]["step"] == 3
    assert (tmp_path / "step-5.bak" / "notes.txt").read_text() == "my backup\n"
    assert [p.name for p in checkpoints.step_folders(cut)] == ["step-6", "step-9"]


# ---------------------------------------------------------------- a diverging run


def test_a_diverging_run_stops_with_the_step_the_cause_and_the_last_good_checkpoint(tiny_bert_dir, data, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, finetune_argv(tiny_bert_dir, data, out, "--lr", "5e5", "--save-every", "1",
                                              "--max-grad-norm", "0"))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "became NaN/inf at step" in result.output and "--lr 500000 is too high" in result.output
    saved = checkpoints.step_folders(out)
    for folder in saved:  # every checkpoint kept holds finite weights: nothing after the divergence was saved
        state = load_file(str(folder / "model.safetensors"))
        assert all(np.isfinite(v).all() for v in state.values()), folder
    if saved:
        assert f"last good checkpoint, {saved[-1]}, is kept" in result.output


# ---------------------------------------------------------------- a full disk


def test_full_disk_before_a_checkpoint_is_one_message_and_the_same_command_resumes(
        tiny_bert_dir, data, tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    assert invoke(finetune_argv(tiny_bert_dir, data, whole)).exit_code == 0
    out = tmp_path / "run"
    real = shutil.disk_usage
    calls = {"n": 0}

    def nearly_full(path):  # the first checkpoint fits; from the second on, 1 MB is free
        calls["n"] += 1
        usage = real(path)
        return usage if calls["n"] <= 2 else Usage(usage.total, usage.used, 1 << 20)

    monkeypatch.setattr(shutil, "disk_usage", nearly_full)
    result = runner.invoke(app, finetune_argv(tiny_bert_dir, data, out))
    monkeypatch.setattr(shutil, "disk_usage", real)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "disk full at" in result.output and "MB free" in result.output and "re-run the same command" in result.output
    assert not [p for p in out.rglob(".tmp-*")], "the failed save left its temp folder behind"
    resumed = invoke(finetune_argv(tiny_bert_dir, data, out))
    assert resumed.exit_code == 0, resumed.output
    assert_same_weights(whole / "final", out / "final")


def _bertkit(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env}
    return subprocess.run([sys.executable, "-m", "bertkit", *argv], capture_output=True, text=True, env=full_env,
                          timeout=600)


def test_full_disk_while_writing_a_checkpoint(tiny_bert_dir, data, tmp_path):
    """torch's zip writer fails mid-file ("enforce fail at inline_container.cc"): exit 2, the half-written
    checkpoint folder is removed, and the same command finishes the run exactly."""
    whole = tmp_path / "whole"
    assert invoke(finetune_argv(tiny_bert_dir, data, whole)).exit_code == 0
    out = tmp_path / "run"
    failed = _bertkit(finetune_argv(tiny_bert_dir, data, out), **{faults.ENV: "enospc:optimizer.bin@2"})
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-2000:]
    assert "disk full at" in failed.stderr
    assert not [p for p in out.rglob(".tmp-*")]
    assert [p.name for p in checkpoints.step_folders(out)] == ["step-3"]
    assert invoke(finetune_argv(tiny_bert_dir, data, out)).exit_code == 0
    assert_same_weights(whole / "final", out / "final")


def embed_argv(model: Path, data: Path, out: Path) -> list[str]:
    return ["embed", "--model", str(model), "--data", str(data), "--out", str(out), "--shard-size", "16",
            "--precision", "fp32", "--quiet"]


@pytest.mark.parametrize("point", ["enospc:.shard-00001.npy.*", "enospc:.features.npy.*"],
                         ids=["during a shard", "during the merge (preallocation)"])
def test_full_disk_in_embed_is_one_message_and_the_store_resumes_byte_identical(tiny_bert_dir, data, tmp_path, point):
    whole = tmp_path / "whole"
    assert invoke(embed_argv(tiny_bert_dir, data, whole)).exit_code == 0
    out = tmp_path / "store"
    failed = _bertkit(embed_argv(tiny_bert_dir, data, out), **{faults.ENV: point})
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-2000:]  # not SIGBUS (-7)
    assert "disk full at" in failed.stderr
    assert not [p for p in out.rglob("*.tmp")], "a half-written temp file was left behind"
    assert invoke(embed_argv(tiny_bert_dir, data, out)).exit_code == 0
    for name in ("features.npy", "labels.npy"):
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name


def test_full_disk_before_the_merge_is_checked_first(tiny_bert_dir, data, tmp_path, monkeypatch):
    from bertkit.features import store

    out = tmp_path / "store"
    real = shutil.disk_usage
    monkeypatch.setattr(store.StoreWriter, "finalize", _with_full_disk(store.StoreWriter.finalize, real, monkeypatch))
    result = runner.invoke(app, embed_argv(tiny_bert_dir, data, out))
    assert result.exit_code == 2 and "disk full at" in result.output and "Traceback" not in result.output
    assert not (out / "features.npy").exists() and list((out / "shards").glob("shard-*.npy"))  # shards kept


def _with_full_disk(finalize, real, monkeypatch):
    def run(self, *args, **kwargs):
        monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1 << 40, 1 << 40, 1024))
        try:
            return finalize(self, *args, **kwargs)
        finally:
            monkeypatch.setattr(shutil, "disk_usage", real)
    return run


# ---------------------------------------------------------------- damaged saved files, a model without a head


@pytest.fixture(scope="module")
def saved_probe(tmp_path_factory, tiny_bert_dir) -> Path:
    root = tmp_path_factory.mktemp("probe")
    data = root / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    result = invoke(["probe", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(root / "run"),
                     "--no-baselines", "--quiet"])
    assert result.exit_code == 0, result.output
    return root / "run" / "probe"


@pytest.mark.parametrize("damage", ["truncated weights", "json not json", "json without pool", "json bad pool"])
def test_a_damaged_saved_probe_names_the_file_not_an_option(saved_probe, tmp_path, damage):
    probe = tmp_path / "probe"
    shutil.copytree(saved_probe, probe)
    weights_file, meta_file = probe / "probe.safetensors", probe / "probe.json"
    meta = json.loads(meta_file.read_text())
    if damage == "truncated weights":
        weights_file.write_bytes(weights_file.read_bytes()[:40])
    elif damage == "json not json":
        meta_file.write_text("{\"label_map\": ")
    elif damage == "json without pool":
        meta.pop("pool")
        meta_file.write_text(json.dumps(meta))
    else:
        meta_file.write_text(json.dumps({**meta, "pool": "median"}))
    result = runner.invoke(app, ["predict", "--probe", str(probe), "--text", "a great film", "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    damaged = weights_file if damage == "truncated weights" else meta_file
    assert f"The saved probe file {damaged} is damaged" in result.output
    assert "bertkit probe --out DIR" in result.output and "--pool must" not in result.output


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_a_base_encoder_without_a_trained_head_is_refused(tiny_bert_dir, data, command):
    argv = [command, "--model", str(tiny_bert_dir), "--quiet"]
    argv += ["--text", "a great film"] if command == "predict" else ["--data", str(data)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "No fine-tuned classification head found" in result.output
    assert "bertkit finetune" in result.output and "--probe" in result.output


def test_predict_with_a_probe_honours_precision_and_max_length(saved_probe, monkeypatch):
    """`predict --probe` used to ignore both: they now reach the feature extraction."""
    from bertkit.features import extract

    seen = {}
    real = extract.extract_features

    def spy(*args, **kwargs):
        seen.update(max_length=kwargs["max_length"], dtype=kwargs["dtype"])
        return real(*args, **kwargs)

    monkeypatch.setattr(extract, "extract_features", spy)
    result = invoke(["predict", "--probe", str(saved_probe), "--text", "a great film", "--max-length", "16",
                     "--precision", "bf16", "--quiet"])
    assert result.exit_code == 0, result.output
    import torch

    assert seen == {"max_length": 16, "dtype": torch.bfloat16}
