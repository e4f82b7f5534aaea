"""Nothing is lost and nothing silently stops being exact: verified checkpoints, diverging runs, a full disk,
damaged saved files, a model without a trained head (issue 13, part 3).

Full-disk cases are injected, never real: `shutil.disk_usage` is patched for the checks made before a write, and
`BERTKIT_KILL_AT=enospc:GLOB` (bertkit/io/faults.py) makes a write fail the way a full disk does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from older_records import unsealed
from safetensors.numpy import load_file
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.errors import UserError
from bertkit.io import checkpoint_folders as checkpoints
from bertkit.io import faults
from bertkit.models.compute import Compute

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


@pytest.mark.parametrize("damage", [  # one in the default run; the others the same path (`make test-slow`)
    pytest.param("random_states_0.pkl", marks=pytest.mark.slow),
    pytest.param("trainer_state.json", marks=pytest.mark.slow),
    "model.safetensors"])
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
    assert checkpoints.step_folders(cut) == [] and not (cut / "checkpoints").exists()  # finished: removed


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


@pytest.mark.slow  # the full disk while writing a checkpoint: test_full_disk_while_writing_a_checkpoint
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
        seen.update(max_length=kwargs["reading"].max_length, dtype=kwargs["dtype"])
        return real(*args, **kwargs)

    monkeypatch.setattr(extract, "extract_features", spy)
    result = invoke(["predict", "--probe", str(saved_probe), "--text", "a great film", "--max-length", "16",
                     "--precision", "bf16", "--quiet"])
    assert result.exit_code == 0, result.output
    import torch

    assert seen == {"max_length": 16, "dtype": torch.bfloat16}


# ---------------------------------------------------------------- verified on read (issue 36): saved model folders


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tiny_bert_dir) -> Path:
    """best/ of a tiny classifier fine-tuned and saved by bertkit: its bertkit_model.json records every file."""
    root = tmp_path_factory.mktemp("finetuned")
    data = root / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    result = invoke(finetune_argv(tiny_bert_dir, data, root / "run"))
    assert result.exit_code == 0, result.output
    return root / "run" / "best"


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _edit_config(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "id2label": {"0": "pos", "1": "neg"}}))


MODEL_DAMAGE = {
    "a byte flipped in the middle of the weights": (
        lambda f: flip_middle_byte(f / "model.safetensors"), r"model\.safetensors: its bytes changed since it was written"),
    "weights truncated": (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:-512]),
                          r"model\.safetensors: it is [\d,]+ bytes but was written as [\d,]+ \(changed since it was written\)"),
    "weights extended": (lambda f: (f / "model.safetensors").open("ab").write(b"\0" * 8),
                         r"model\.safetensors: .*\(changed since it was written\)"),
    "labels swapped in config.json": (_edit_config, r"config\.json: (its bytes changed|it is [\d,]+ bytes but was)"),
    "tokenizer.json edited": (lambda f: flip_middle_byte(f / "tokenizer.json"), r"tokenizer\.json: its bytes changed"),
    "tokenizer.json removed": (lambda f: (f / "tokenizer.json").unlink(), r"tokenizer\.json: it is missing"),
    "a second weights shard added": (
        lambda f: shutil.copy(f / "model.safetensors", f / "model-00002-of-00002.safetensors"),
        r"model-00002-of-00002\.safetensors: not in the record"),
    "the record is not JSON": (lambda f: (f / "bertkit_model.json").write_text("{\"step\": "),
                               r"bertkit_model\.json: not valid JSON"),
}


@pytest.mark.parametrize("damage", list(MODEL_DAMAGE))
def test_a_saved_model_folder_that_differs_from_its_record_is_refused_before_any_work(finetuned, data, tmp_path,
                                                                                     monkeypatch, damage):
    folder = tmp_path / "best"
    shutil.copytree(finetuned, folder)
    change, problem = MODEL_DAMAGE[damage]
    change(folder)
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["predict", "--model", str(folder), "--data", str(data), "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"Model folder {folder} is not the one bertkit saved" in result.output
    assert re.search(problem, result.output.replace("\n", " ")), result.output
    assert "Copy the folder again" in result.output and "re-run the command that wrote it" in result.output
    assert not (tmp_path / "cache").exists(), "the data was read before the model was checked"


def test_an_intact_saved_folder_loads_and_each_file_is_hashed_once(finetuned, monkeypatch):
    from bertkit.io import digests
    from bertkit.models import infer

    monkeypatch.setattr(digests, "_verified", set())
    hashed: list[str] = []
    real = digests.file_record
    monkeypatch.setattr(digests, "file_record", lambda path: hashed.append(Path(path).name) or real(path))
    model, tokenizer, labels = infer.load_for_inference(str(finetuned), Compute.resolve(None, "fp32"))
    assert list(labels.labels) == ["neg", "pos"] and len(tokenizer) > 1000
    recorded = json.loads((finetuned / "bertkit_model.json").read_text())["files"]
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(recorded)
    assert sorted(hashed) == sorted(recorded), "every recorded file is read once, and only once"


def test_a_model_record_without_its_digests_is_damaged_not_older(finetuned, tmp_path):
    """Issue 43: a bertkit_model.json that lacks the digests of the folder's files was read as "saved before records
    existed" and its files used unverified; it is damaged, and nothing loads from it."""
    from bertkit.models import loading

    folder = tmp_path / "old"
    shutil.copytree(finetuned, folder)
    info = unsealed(json.loads((folder / "bertkit_model.json").read_text()), None)  # older: a sealed one is
    info.pop("files")  # refused by its seal first
    (folder / "bertkit_model.json").write_text(json.dumps(info))
    for load in (lambda: loading.load_tokenizer(str(folder)), lambda: loading.load_classifier(str(folder),
                                                                                             require_head=True)):
        with pytest.raises(UserError, match=r"bertkit_model.json: it records no size and sha256 of the folder's files "
                                            r"\(damaged"):
            load()
    result = runner.invoke(app, ["predict", "--model", str(folder), "--text", "a great film", "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"Model folder {folder} is not the one bertkit saved" in " ".join(result.output.split())


# ---------------------------------------------------------------- verified on read: tokenizer files


def _without(folder: Path, target: Path, *names: str) -> Path:
    shutil.copytree(folder, target)
    for name in names:
        (target / name).unlink()
    return target


def test_a_folder_without_tokenizer_json_is_refused_before_any_work(tiny_bert_dir, data, tmp_path, monkeypatch):
    """transformers would load a 5-token tokenizer from tokenizer_config.json alone: every word [UNK]."""
    folder = _without(tiny_bert_dir, tmp_path / "model", "tokenizer.json")
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "store"
    result = runner.invoke(app, ["embed", "--model", str(folder), "--data", str(data), "--out", str(out), "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    message = " ".join(result.output.split())
    assert f"Model folder {folder} has no tokenizer: tokenizer.json is missing and so is vocab.txt" in message
    assert "every word would be read as [UNK]" in message and "save_pretrained(FOLDER)" in message
    assert not out.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("base", ["tiny_bert_dir", "tiny_distilbert_dir"])
def test_the_vocabulary_file_stands_in_for_tokenizer_json_and_its_absence_is_named(base, request, tmp_path):
    from bertkit.errors import UserError
    from bertkit.models import loading

    source = request.getfixturevalue(base)
    folder = _without(source, tmp_path / "model", "tokenizer.json")
    with pytest.raises(UserError, match=r"tokenizer\.json is missing and so is vocab\.txt"):
        loading.load_tokenizer(str(folder))
    shutil.copy(Path(loading.offline_model_dir()) / "vocab.txt", folder / "vocab.txt")  # the same vocabulary
    tokenizer = loading.load_tokenizer(str(folder))
    assert len(tokenizer) == 30522 and tokenizer.unk_token not in tokenizer.tokenize("a wonderful film")
    (folder / "vocab.txt").write_text("")  # present but empty: special tokens only
    with pytest.raises(UserError, match=r"has only \d+ tokens \(its special tokens\), so every word would be read"):
        loading.load_tokenizer(str(folder))


def test_a_folder_with_no_tokenizer_files_at_all_is_refused(tiny_bert_dir, tmp_path):
    from bertkit.errors import UserError
    from bertkit.models import loading

    folder = _without(tiny_bert_dir, tmp_path / "model", "tokenizer.json", "tokenizer_config.json")
    with pytest.raises(UserError, match=r"has no tokenizer: tokenizer\.json is missing and so is vocab\.txt"):
        loading.load_encoder(str(folder))


# ---------------------------------------------------------------- verified on read: ONNX export folders


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_bert_dir) -> tuple[Path, Path]:
    """(an fp32 ONNX export of a tiny classifier, its gate data)."""
    pytest.importorskip("onnxruntime")
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    root = tmp_path_factory.mktemp("onnx")
    torch.manual_seed(3)
    config = AutoConfig.from_pretrained(str(tiny_bert_dir), num_labels=2, id2label={0: "neg", 1: "pos"},
                                        label2id={"neg": 0, "pos": 1})
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():  # a head with a clear opinion: the fp32 gate's labels are not coin flips of rounding
        model.classifier.weight.mul_(20)
    model.save_pretrained(root / "clf")
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(root / "clf")
    data = root / "gate.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    result = invoke(["export", "--model", str(root / "clf"), "--data", str(data), "--out", str(root / "export"),
                     "--quantize", "none", "--quiet"])
    assert result.exit_code == 0, result.output
    return root / "export", data


def _half_overwritten(path: Path) -> None:
    data = path.read_bytes()
    half = len(data) // 2
    path.write_bytes(data[:half] + np.random.default_rng(0).bytes(len(data) - half))


@pytest.mark.parametrize("damage", ["half overwritten", "truncated", "truncated, record without digests"])
def test_a_damaged_model_onnx_is_refused_and_never_a_traceback(exported, tmp_path, damage):
    folder = tmp_path / "export"
    shutil.copytree(exported[0], folder)
    model = folder / "model.onnx"
    if damage == "half overwritten":
        _half_overwritten(model)
    else:
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    if damage.endswith("without digests"):  # issue 43: damaged, not older - refused before the graph is read
        info = unsealed(json.loads((folder / "bertkit_model.json").read_text()), "bertkit-model/1")
        info.pop("files")  # an older layout (unsealed): a sealed record is refused by its seal first
        (folder / "bertkit_model.json").write_text(json.dumps(info))
    for argv in (["predict", "--model", str(folder), "--text", "a great film"],
                 ["evaluate", "--model", str(folder), "--data", str(exported[1])]):
        result = runner.invoke(app, [*argv, "--quiet"])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        message = " ".join(result.output.split())
        expected = {"half overwritten": "model.onnx: its bytes changed since it was written",
                    "truncated": "model.onnx: it is",
                    "truncated, record without digests": "bertkit_model.json: it records no size and sha256"}[damage]
        assert expected in message
        assert "Copy the folder again" in message or "bertkit export --model MODEL" in message


def test_an_intact_export_still_predicts(exported):
    result = runner.invoke(app, ["predict", "--model", str(exported[0]), "--text", "a great film", "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["predictions"][0]["label"] in {"neg", "pos"}


# ---------------------------------------------------------------- verified on read: saved probes


def test_a_probe_whose_weights_changed_is_refused(saved_probe, tmp_path):
    probe = tmp_path / "probe"
    shutil.copytree(saved_probe, probe)
    flip_middle_byte(probe / "probe.safetensors")
    result = runner.invoke(app, ["predict", "--probe", str(probe), "--text", "a great film", "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    message = " ".join(result.output.split())
    assert f"The saved probe file {probe / 'probe.safetensors'} is damaged (its bytes changed since it was written" in message
    assert "probe.json records it as saved" in message and "Re-run `bertkit probe --out DIR`" in message


def test_a_probe_swapped_for_another_valid_probe_is_refused(saved_probe, tiny_bert_dir, tmp_path):
    """Shapes and values pass every content check: only the record tells the two probes apart."""
    other = tmp_path / "other"
    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    assert invoke(["probe", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(other), "--C", "0.01",
                   "--no-baselines", "--quiet"]).exit_code == 0
    probe = tmp_path / "probe"
    shutil.copytree(saved_probe, probe)
    shutil.copy(other / "probe" / "probe.safetensors", probe / "probe.safetensors")
    result = runner.invoke(app, ["predict", "--probe", str(probe), "--text", "a great film", "--quiet"])
    assert result.exit_code == 2 and "probe.safetensors is damaged" in result.output, result.output


def test_a_probe_record_without_its_digests_is_damaged_not_older(saved_probe, tmp_path):
    """Issue 43: a probe.json without the digest of its weights was read as older and its weights used unverified."""
    probe = tmp_path / "probe"
    shutil.copytree(saved_probe, probe)
    meta = unsealed(json.loads((probe / "probe.json").read_text()), "bertkit-probe/1")  # older: a sealed one is
    meta.pop("files")  # refused by its seal first
    (probe / "probe.json").write_text(json.dumps(meta))
    result = runner.invoke(app, ["predict", "--probe", str(probe), "--text", "a great film", "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    message = " ".join(result.output.split())
    assert f"The saved probe file {probe / 'probe.json'} is damaged (its files record has no size and sha256" in message
    assert "Re-run `bertkit probe --out DIR`" in message


# ---------------------------------------------------------------- verified on read: feature stores


@pytest.fixture(scope="module")
def stores(tmp_path_factory, tiny_bert_dir) -> dict[str, Path]:
    """Split stores (train + dev) of the same rows: [CLS] fp32, mean fp32, [CLS] int8."""
    root = tmp_path_factory.mktemp("stores")
    data = root / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    made = {}
    for name, extra in {"cls": [], "mean": ["--pool", "mean"], "int8": ["--precision", "int8"]}.items():
        made[name] = root / name
        result = invoke(["embed", "--model", str(tiny_bert_dir), "--data", str(data), "--dev", str(data), "--out",
                         str(made[name]), "--shard-size", "16", "--precision", "fp32", "--quiet", *extra])
        assert result.exit_code == 0, result.output
    return made


def _probe_store(store: Path, tmp_path: Path):
    return runner.invoke(app, ["probe", "--features", str(store), "--out", str(tmp_path / "probe-run"), "--quiet"])


STORE_DAMAGE = {
    "a byte flipped in the middle of train features": (lambda s: flip_middle_byte(s / "train" / "features.npy"),
                                                        r"Store .*train is damaged: features\.npy: its bytes changed"),
    "dev features truncated": (lambda s: (s / "dev" / "features.npy").write_bytes(
        (s / "dev" / "features.npy").read_bytes()[:-64]), r"Store .*dev is damaged: features\.npy: it is .*changed since it was written"),
    "a dev label changed": (lambda s: np.save(s / "dev" / "labels.npy", 1 - np.load(s / "dev" / "labels.npy")),
                            r"Store .*dev is damaged: labels\.npy: its bytes changed"),
}


@pytest.mark.parametrize("damage", list(STORE_DAMAGE))
def test_a_store_whose_arrays_changed_is_refused(stores, tmp_path, damage):
    store = tmp_path / "store"
    shutil.copytree(stores["cls"], store)
    change, problem = STORE_DAMAGE[damage]
    change(store)
    result = _probe_store(store, tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert re.search(problem, " ".join(result.output.split())), result.output
    assert "--overwrite" in result.output and not (tmp_path / "probe-run").exists()


@pytest.mark.parametrize("mixed", ["mean", "int8"])
def test_a_store_whose_splits_were_made_differently_is_refused(stores, tmp_path, mixed):
    """An int8 (or mean-pooled) train/ beside an fp32 [CLS] dev/: probed, the metrics would say one and be both."""
    store = tmp_path / "store"
    shutil.copytree(stores["cls"], store)
    shutil.rmtree(store / "train")
    shutil.copytree(stores[mixed] / "train", store / "train")
    result = _probe_store(store, tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    message = " ".join(result.output.split())
    expected = "pool: train 'mean', dev 'cls'" if mixed == "mean" else "dtype: train 'int8', dev 'fp32'"
    assert f"The splits of store {store} were not made the same way" in message and expected in message
    assert "Re-embed all of them in one run" in message and not (tmp_path / "probe-run").exists()


def test_a_store_manifest_without_its_digests_is_damaged_not_older(stores, tmp_path):
    """Issue 43: a manifest without the digests of the arrays was read as older and its arrays used unverified."""
    from bertkit.features import store as store_io

    store = tmp_path / "store"
    shutil.copytree(stores["cls"], store)
    manifest = unsealed(json.loads((store / "dev" / "manifest.json").read_text()), "bertkit-store/1")  # older: a
    manifest.pop("digests")  # sealed one is refused by its seal first
    (store / "dev" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"Store .*dev is damaged: the digests in its manifest.json are not valid"):
        store_io.open_splits(store)


def test_an_intact_store_is_hashed_once_per_array(stores, monkeypatch):
    from bertkit.features import store as store_io
    from bertkit.io import digests

    monkeypatch.setattr(digests, "_verified", set())
    hashed: list[str] = []
    real = digests.file_record
    monkeypatch.setattr(digests, "file_record", lambda path: hashed.append(Path(path).name) or real(path))
    opened = store_io.open_splits(stores["cls"])
    store_io.open_splits(stores["cls"])
    assert opened["train"].features.shape == (40, 32)
    assert sorted(hashed) == ["features.npy", "features.npy", "labels.npy", "labels.npy"]  # train and dev, once


# ---------------------------------------------------------------- verified on read: Arrow cache entries


def _cache_entry(cache: Path) -> Path:
    (entry,) = [p for p in (cache / "tables").iterdir() if not p.name.startswith(".")]
    return entry


def _replace_in(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) >= 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new, 1))


CACHE_DAMAGE = {
    "one row changed": (lambda e: _replace_in(e / "rows.arrow", b"superb", b"MALWRE"), r"rows\.arrow: its bytes changed"),
    "rows.arrow truncated": (lambda e: (e / "rows.arrow").write_bytes((e / "rows.arrow").read_bytes()[:300]),
                             r"rows\.arrow: it is 300 bytes"),
    "rows.arrow removed": (lambda e: (e / "rows.arrow").unlink(), r"rows\.arrow: it is missing"),
    "meta.json not JSON": (lambda e: (e / "meta.json").write_text("{\"columns\": ["), r"meta\.json is not valid JSON"),
    "meta.json without the digest": (
        lambda e: (e / "meta.json").write_text(json.dumps({k: v for k, v in json.loads((e / "meta.json").read_text())
                                                          .items() if k != "digest"})), r"meta\.json lacks digest"),
}


@pytest.mark.parametrize("damage", list(CACHE_DAMAGE))
def test_a_cache_entry_that_fails_verification_is_parsed_again_with_a_warning(data, tmp_path, caplog, damage):
    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split

    cache = tmp_path / "cache"
    opts = DataOptions(cache_dir=str(cache))
    first = list(load_dataset_split(opts, str(data)).texts)
    entry = _cache_entry(cache)
    change, why = CACHE_DAMAGE[damage]
    change(entry)
    with caplog.at_level("WARNING", logger="bertkit"):
        again = list(load_dataset_split(opts, str(data)).texts)
    assert again == first and not any("MALWRE" in t for t in again)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "failed verification" in warnings[0] and re.search(why, warnings[0]), warnings
    assert _cache_entry(cache) == entry  # rebuilt in place: the next read is clean
    (kept,) = [p for p in (cache / "tables").iterdir() if p.name.startswith(".failed-")]  # the changed bytes: moved
    assert str(kept) in warnings[0] and {f.name for f in kept.iterdir()} <= {"meta.json", "rows.arrow"} and any(kept.iterdir())
    caplog.clear()
    assert list(load_dataset_split(opts, str(data)).texts) == first and "failed verification" not in caplog.text


def test_a_changed_cache_entry_never_reaches_the_predictions(finetuned, data, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["predict", "--model", str(finetuned), "--data", str(data), "--text-column", "sentence", "--json", "--quiet"]
    clean = runner.invoke(app, argv)
    assert clean.exit_code == 0, clean.output
    _replace_in(_cache_entry(tmp_path / "cache") / "rows.arrow", b"superb", b"MALWRE")
    again = runner.invoke(app, argv)
    assert again.exit_code == 0, again.output
    assert "MALWRE" not in again.stdout and json.loads(again.stdout) == json.loads(clean.stdout)
    assert "failed verification" in again.stderr


# ---------------------------------------------------------------- nothing created before a refusal: --cache-dir


@pytest.mark.parametrize("command", ["tokens", "embed", "finetune", "probe", "evaluate"])
def test_a_cache_dir_inside_a_new_out_is_refused_and_creates_nothing(finetuned, data, tmp_path, command):
    out = tmp_path / "OUT"
    argv = {"tokens": ["tokens", "--model", str(finetuned), "--data", str(data)],
            "embed": ["embed", "--model", str(finetuned), "--data", str(data)],
            "finetune": ["finetune", "--model", str(finetuned), "--data", str(data), "--epochs", "1"],
            "probe": ["probe", "--model", str(finetuned), "--data", str(data)],
            "evaluate": ["evaluate", "--model", str(finetuned), "--data", str(data)]}[command]
    result = runner.invoke(app, [*argv, "--out", str(out), "--cache-dir", str(out / "cache"), "--quiet"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    message = " ".join(result.output.split())
    assert f"--cache-dir {out / 'cache'} is inside --out {out}" in message
    assert f"Pass a --cache-dir outside --out, e.g. --cache-dir {out}-cache" in message
    assert not out.exists(), "nothing may be created before a refusal"
    if command == "tokens":  # the corrected command runs, and the next one finds the same --out reusable
        fixed = runner.invoke(app, [*argv, "--out", str(out), "--cache-dir", f"{out}-cache", "--quiet"])
        assert fixed.exit_code == 0, fixed.output
        assert runner.invoke(app, [*argv, "--out", str(out), "--cache-dir", f"{out}-cache", "--quiet"]).exit_code == 0


def test_bertkit_cache_dir_inside_out_is_named_as_the_variable(data, tiny_bert_dir, tmp_path, monkeypatch):
    out = tmp_path / "OUT"
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(out / "cache"))
    result = runner.invoke(app, ["tokens", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(out)])
    assert result.exit_code == 2 and not out.exists(), result.output
    message = " ".join(result.output.split())
    assert "(from $BERTKIT_CACHE_DIR) is inside --out" in message and "Set BERTKIT_CACHE_DIR" in message


def test_probe_features_cached_in_the_run_are_verified_and_computed_again_once_deleted(tiny_bert_dir, data, tmp_path):
    """A cached features file whose bytes changed is one the run's record does not vouch for: the re-run is refused
    naming it (bertkit replaces only its own bytes); deleted, as the message says, it is computed again."""
    out = tmp_path / "run"
    argv = ["probe", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(out), "--layers", "-1",
            "--no-baselines", "--json", "--quiet"]
    first = runner.invoke(app, argv)
    assert first.exit_code == 0, first.output
    cached = out / "features" / "train-cls-2.npy"
    assert json.loads(cached.with_suffix(".json").read_text())["digest"]["size"] == cached.stat().st_size
    flip_middle_byte(cached)
    refused = runner.invoke(app, argv)
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "changed since bertkit wrote them (features/train-cls-2.npy)" in text, text
    cached.unlink()
    again = runner.invoke(app, argv)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["sweep"] == json.loads(first.stdout)["sweep"]  # computed again, the same
    assert cached.is_file()
    quiet = runner.invoke(app, argv)
    assert quiet.exit_code == 0 and "failed verification" not in quiet.stderr

@pytest.mark.parametrize("name", ["../victim.txt", "/etc/hostname", "sub/../../victim.txt", "link/victim.txt"])
def test_a_model_record_naming_a_file_outside_its_folder_is_damaged(name, finetuned, tmp_path):
    """Issue 43: every path in a record is relative, normalised and inside the folder it describes (links
    resolved); a model record naming another is damaged, and nothing is read on its word."""
    from bertkit.models import metadata

    folder = tmp_path / "model"
    shutil.copytree(finetuned, folder)
    (tmp_path / "victim.txt").write_text("not the model's\n")
    (folder / "link").symlink_to(tmp_path)
    info = unsealed(json.loads((folder / "bertkit_model.json").read_text()), "bertkit-model/1")  # older: a sealed
    info["files"][name] = {"size": 16, "sha256": "0" * 64}  # one is refused by its seal first
    (folder / "bertkit_model.json").write_text(json.dumps(info))
    assert metadata.record_problems(folder) == [f"{name}: the record names a path outside the folder (damaged)"]
    result = runner.invoke(app, ["predict", "--model", str(folder), "--text", "a great film", "--quiet"])
    assert result.exit_code == 2 and "the record names a path outside the folder" in " ".join(result.output.split())


def test_a_store_manifest_naming_a_file_outside_the_store_is_damaged(stores, tmp_path):
    from bertkit.features import store as store_io

    store = tmp_path / "store"
    shutil.copytree(stores["cls"], store)
    manifest = unsealed(json.loads((store / "train" / "manifest.json").read_text()), "bertkit-store/1")  # older
    manifest["digests"]["../../victim.npy"] = manifest["digests"]["features.npy"]
    (store / "train" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"Store .*train is damaged: \.\./\.\./victim\.npy: the record names a path "
                                        r"outside the folder \(damaged\)"):
        store_io.open_splits(store)


def _flip_a_middle_byte(weights: Path) -> None:
    size = weights.stat().st_size
    assert size > 3 * (1 << 20)  # a byte outside the first and last MiB exists
    with open(weights, "r+b") as handle:
        handle.seek(size // 2)
        byte = handle.read(1)
        handle.seek(size // 2)
        handle.write(bytes([byte[0] ^ 0x01]))


def test_a_store_is_not_resumed_or_reused_with_an_encoder_changed_in_the_middle(tmp_path, tiny_bert_dir):
    """The store's identity records the whole sha256 of its encoder's weights: a re-run after one byte in the middle
    changed is refused (it would mix features of two encoders), naming the key; an identity written before the key
    existed still matches (issue 43)."""
    from bertkit.features.identity import IDENTITY_DEFAULTS, identity_mismatch

    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    argv = ["embed", "--model", str(encoder), "--data", str(data), "--out", str(tmp_path / "store"), "--quiet"]
    assert invoke(argv).exit_code == 0
    _flip_a_middle_byte(encoder / "model.safetensors")
    again = invoke(argv)
    assert again.exit_code == 2 and "encoder_sha256" in again.output, again.output
    new = {**IDENTITY_DEFAULTS, "model": "m", "encoder_sha256": "abc"}
    assert identity_mismatch({"model": "m"}, new) == []
    assert identity_mismatch({"model": "m", "encoder_sha256": "x"}, new) == ["encoder_sha256: 'x' -> 'abc'"]


def test_a_probes_encoder_changed_in_the_middle_of_its_weights_is_refused(tmp_path, tiny_bert_dir):
    """The revision reads the first and last MiB of the weights; the probe also records their whole sha256, so a
    change anywhere (here one byte in the middle of a 3.9 MB file) is refused before predicting, naming the encoder
    and the digests, as a store in the same case is (issues 43, 57)."""
    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _rows()), encoding="utf-8")
    made = invoke(["probe", "--model", str(encoder), "--data", str(data), "--out", str(tmp_path / "run"),
                   "--no-baselines", "--quiet"])
    assert made.exit_code == 0, made.output
    meta = json.loads((tmp_path / "run" / "probe" / "probe.json").read_text())
    assert len(meta["encoder_sha256"]) == 64
    _flip_a_middle_byte(encoder / "model.safetensors")
    shown = invoke(["predict", "--probe", str(tmp_path / "run" / "probe"), "--text", "a great film"])
    assert shown.exit_code == 2, shown.output
    assert f"The encoder {encoder} of the probe" in shown.output and meta["encoder_sha256"] in shown.output


def test_a_word_probes_encoder_changed_in_the_middle_of_its_weights_is_refused(tmp_path, tiny_bert_dir):
    """The word probe records the whole sha256 of its encoder's weights as the sentence probe does: one byte changed
    in the middle of them is refused before tagging, naming the encoder and the digest."""
    from tagged_samples import DEV, SENTENCES, write_conll

    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    train, dev = write_conll(tmp_path / "train.iob2", SENTENCES * 3), write_conll(tmp_path / "dev.iob2", DEV)
    made = invoke(["probe", "--model", str(encoder), "--data", str(train), "--dev", str(dev), "--layers", "-1",
                   "--out", str(tmp_path / "run"), "--no-baselines", "--quiet"])
    assert made.exit_code == 0, made.output
    meta = json.loads((tmp_path / "run" / "probe" / "probe.json").read_text())
    assert len(meta["encoder_sha256"]) == 64
    tagged = invoke(["predict", "--probe", str(tmp_path / "run" / "probe"), "--words", '["Anna", "met", "Bob"]'])
    assert tagged.exit_code == 0, tagged.output  # the encoder it was fitted on: accepted
    _flip_a_middle_byte(encoder / "model.safetensors")
    shown = invoke(["predict", "--probe", str(tmp_path / "run" / "probe"), "--words", '["Anna", "met", "Bob"]'])
    assert shown.exit_code == 2, shown.output
    assert f"The encoder {encoder} of the probe" in shown.output and meta["encoder_sha256"] in shown.output
