"""`bertkit embed` end to end: the store format, resume after failures, identity checks, splits, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.data.dataset import TextDataset
from bertkit.features import store
from bertkit.features.extract import extract_features
from bertkit.models import loading

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture
def toy_tsv(write_tsv, toy_rows):
    return write_tsv("toy.tsv", toy_rows, header=("sentence", "label"))


def embed(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, ["embed", "--quiet", *args], env=env)


def store_bytes(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def store_content(path: Path) -> dict[str, bytes]:
    """`store_bytes` for comparing two runs: the run marker's only varying field, its creation time, left out, and
    the record of what bertkit wrote (its history differs from run to run) checked to vouch for every file instead."""
    from bertkit.io import ownership, record

    found = store_bytes(path)
    assert found.pop(record.RECORD) and ownership.unowned(path) == []
    marker = json.loads(found.pop(".bertkit-run.json"))
    assert marker.pop("created") and marker["command"] == "embed"
    return {**found, ".bertkit-run.json": json.dumps(marker).encode()}


def test_store_readable_by_numpy_and_open(tiny_bert_dir, toy_tsv, toy_rows, tmp_path):
    out = tmp_path / "store"  # fp32 pinned: the store is compared with the in-memory fp32 API below
    result = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", str(out), "--shard-size", "16",
                   "--dtype", "fp32")
    assert result.exit_code == 0, result.output
    assert "40 rows" in result.output and "rows/s" in result.output
    assert sorted(p.name for p in out.iterdir()) == [".bertkit-lock", ".bertkit-record.jsonl", ".bertkit-run.json", "features.npy",
                                                     "labels.npy", "manifest.json"]
    assert json.loads((out / ".bertkit-run.json").read_text())["command"] == "embed"  # the run directory's owner
    plain = np.load(out / "features.npy")  # no bertkit needed
    st = store.open(out)
    assert isinstance(st.features, np.memmap) and st.features.shape == (40, 32) and len(st) == 40
    np.testing.assert_array_equal(plain, st.features)
    assert st.label_map is not None and st.label_map.labels == ("neg", "pos")
    assert st.label_map.decode(st.labels) == [label for _, label in toy_rows]
    m = st.manifest
    assert m["model"] == str(tiny_bert_dir) and m["revision"].startswith("local-sha256:")
    assert (m["pool"], m["layers"], m["max_length"], m["dtype"], m["store_dtype"]) == ("cls", "-1", 128, "fp32", "float32")
    assert m["rows"] == 40 and m["data_fingerprint"].startswith("sha256:") and m["n_truncated"] == 0
    assert m["bertkit_version"] and m["identity"]["shard_size"] == 16
    # the store holds exactly what the in-memory API computes, in the file's row order
    encoder, tokenizer = loading.load_encoder(str(tiny_bert_dir)), loading.load_tokenizer(str(tiny_bert_dir))
    direct = extract_features(encoder, tokenizer, TextDataset([t for t, _ in toy_rows]), batch_size=8)
    np.testing.assert_allclose(st.features, direct, atol=1e-5)
    assert store.open_splits(out)["train"].manifest == m


def test_rerun_of_complete_store_is_a_no_op(tiny_bert_dir, toy_tsv, tmp_path):
    args = ["--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", str(tmp_path / "s")]
    assert embed(*args).exit_code == 0
    before = store_bytes(tmp_path / "s")
    again = embed(*args)
    assert again.exit_code == 0 and "already complete" in again.output
    assert store_bytes(tmp_path / "s") == before


def test_changed_setting_refused_unless_overwrite(tiny_bert_dir, tiny_distilbert_dir, toy_tsv, tmp_path):
    out = str(tmp_path / "s")
    assert embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", out).exit_code == 0
    changed = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", out, "--pool", "mean")
    assert changed.exit_code == 2 and "pool: 'cls' -> 'mean'" in changed.output and "--overwrite" in changed.output
    other_model = embed("--model", str(tiny_distilbert_dir), "--data", str(toy_tsv), "--out", out)
    assert other_model.exit_code == 2 and "model:" in other_model.output
    replaced = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", out, "--pool", "mean", "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert store.open(out).manifest["pool"] == "mean"


def test_default_dtype_is_what_auto_resolves_to_here(tiny_bert_dir, toy_tsv, tmp_path, auto_dtype):
    out = tmp_path / "store"
    result = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", str(out), "--limit", "8")
    assert result.exit_code == 0, result.output
    manifest = store.open(out).manifest
    assert manifest["dtype"] == auto_dtype and np.isfinite(store.open(out).features).all()


@pytest.mark.parametrize("extra", [[], ["--layers", "all", "--store-dtype", "float16", "--normalize"]])
def test_resume_after_injected_failure_is_byte_identical(tiny_bert_dir, toy_tsv, tmp_path, extra):
    common = ["--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--shard-size", "8", "--batch-size", "3", *extra]
    clean = tmp_path / "clean"
    assert embed(*common, "--out", str(clean)).exit_code == 0
    broken = tmp_path / "broken"
    failed = embed(*common, "--out", str(broken), env={store.FAIL_HOOK_ENV: "2"})
    assert isinstance(failed.exception, RuntimeError) and "injected failure" in str(failed.exception)
    assert not (broken / "manifest.json").exists()
    assert sorted(p.name for p in (broken / "shards").glob("*.npy")) == ["shard-00000.npy", "shard-00001.npy"]
    with pytest.raises(Exception, match="unfinished"):
        store.open(broken)
    # a different setting is refused for an unfinished store too
    refused = embed(*common, "--out", str(broken), "--max-length", "64")
    assert refused.exit_code == 2 and "max_length: 128 -> 64" in refused.output
    resumed = embed(*common, "--out", str(broken))
    assert resumed.exit_code == 0, resumed.output
    assert "resumed: 2 of 5 shards were already done" in resumed.output
    assert store_content(broken) == store_content(clean)
    if extra:
        st = store.open(broken)
        assert st.features.shape == (40, 3, 32) and st.features.dtype == np.float16
        assert st.layer_names == ["embeddings", "layer 1", "layer 2"]
        np.testing.assert_allclose(np.linalg.norm(st.features.astype(np.float32), axis=-1), 1.0, atol=2e-3)


@pytest.mark.slow  # kills at every embed point: tests/test_faults.py, in the default run
def test_sigkill_then_rerun_is_byte_identical(tiny_bert_dir, toy_tsv, tmp_path):
    """A real SIGKILL (self-inflicted after 3 shards, through the test hook) in a subprocess, then resume."""
    common = [sys.executable, "-m", "bertkit", "embed", "--quiet", "--model", str(tiny_bert_dir), "--data",
              str(toy_tsv), "--shard-size", "8"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    killed = subprocess.run([*common, "--out", str(tmp_path / "k")], cwd=ROOT, capture_output=True, text=True,
                            env={**env, store.FAIL_HOOK_ENV: "3", store.FAIL_SIGNAL_ENV: "KILL"})
    assert killed.returncode == -9
    assert len(list((tmp_path / "k" / "shards").glob("*.npy"))) == 3
    done = subprocess.run([*common, "--out", str(tmp_path / "k"), "--json"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # --json: stdout is JSON only
    assert summary["rows"] == 40 and summary["rows_encoded"] == 16 and summary["splits"][0]["status"] == "resumed"
    clean = subprocess.run([*common, "--out", str(tmp_path / "c")], cwd=ROOT, capture_output=True, text=True, env=env)
    assert clean.returncode == 0, clean.stderr
    assert store_content(tmp_path / "k") == store_content(tmp_path / "c")


def test_kill_while_merging_shards_then_rerun_is_byte_identical(tiny_bert_dir, toy_tsv, tmp_path):
    """SIGKILL just before features.npy is renamed into place: the re-run clears the stale temp file."""
    pytest.importorskip("bertkit.io.faults")
    args = ["--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--shard-size", "16"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BERTKIT_KILL_AT": "replace:features.npy"}
    killed = subprocess.run([sys.executable, "-m", "bertkit", "embed", "--quiet", *args, "--out", str(tmp_path / "k")],
                            cwd=ROOT, capture_output=True, text=True, env=env)
    assert killed.returncode == -9, killed.stderr
    assert list((tmp_path / "k").glob(".features.npy.*.tmp")) and not (tmp_path / "k" / "manifest.json").exists()
    assert embed(*args, "--out", str(tmp_path / "k")).exit_code == 0
    assert embed(*args, "--out", str(tmp_path / "c")).exit_code == 0
    assert store_content(tmp_path / "k") == store_content(tmp_path / "c")


def test_dev_and_test_give_one_store_per_split(tiny_bert_dir, write_tsv, toy_rows, tmp_path):
    train = write_tsv("train.tsv", toy_rows, header=("sentence", "label"))
    dev = write_tsv("dev.tsv", toy_rows[:6], header=("sentence", "label"))
    test = write_tsv("test.tsv", [(t,) for t, _ in toy_rows[:4]], header=("sentence",))
    out = tmp_path / "splits"
    result = embed("--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev), "--test", str(test),
                   "--out", str(out), "--pool", "mean")
    assert result.exit_code == 0, result.output
    splits = store.open_splits(out)
    assert list(splits) == ["train", "dev", "test"]
    assert [len(s) for s in splits.values()] == [40, 6, 4]
    assert splits["dev"].label_map == splits["train"].label_map
    np.testing.assert_array_equal(splits["dev"].labels, splits["train"].labels[:6])
    np.testing.assert_allclose(splits["dev"].features, splits["train"].features[:6], atol=1e-5)
    assert splits["test"].labels is None
    assert store.open(out).path == out / "train"
    # switching to a single store in the same directory is refused without --overwrite
    single = embed("--model", str(tiny_bert_dir), "--data", str(train), "--out", str(out), "--pool", "mean")
    assert single.exit_code == 2 and "one store per split" in single.output


def test_truncation_counted_and_max_length_checked(tiny_bert_dir, toy_tsv, tmp_path):
    result = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", str(tmp_path / "t"),
                   "--max-length", "8")
    assert result.exit_code == 0, result.output
    n_cut = store.open(tmp_path / "t").manifest["n_truncated"]
    assert n_cut > 0 and f"{n_cut} rows truncated at --max-length 8" in result.output
    too_long = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", str(tmp_path / "u"),
                     "--max-length", "512")
    assert too_long.exit_code == 2 and "--max-length 512" in too_long.output and "128" in too_long.output


def test_bad_out_and_bad_input_are_user_errors(tiny_bert_dir, toy_tsv, write_tsv, tmp_path):
    model = ["--model", str(tiny_bert_dir)]
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    is_file = embed(*model, "--data", str(toy_tsv), "--out", str(a_file))
    assert is_file.exit_code == 2 and "is an existing file" in is_file.output
    under_file = embed(*model, "--data", str(toy_tsv), "--out", str(a_file / "sub"))
    assert under_file.exit_code == 2 and "is a file" in under_file.output
    if Path("/proc").is_dir():
        unwritable = embed(*model, "--data", str(toy_tsv), "--out", "/proc/bertkit-store-test")
        assert unwritable.exit_code == 2 and "Cannot write to --out" in unwritable.output
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.md").write_text("mine")
    refused = embed(*model, "--data", str(toy_tsv), "--out", str(foreign), "--overwrite")
    assert refused.exit_code == 2 and "holds files bertkit did not write (notes.md)" in refused.output
    assert (foreign / "notes.md").read_text() == "mine"
    empty_rows = write_tsv("empty.tsv", [("fine text", "a"), ("  ", "b")], header=("sentence", "label"))
    empty = embed(*model, "--data", str(empty_rows), "--out", str(tmp_path / "e"))
    assert empty.exit_code == 2 and "empty text" in empty.output
    bad_opts = embed(*model, "--data", str(toy_tsv), "--out", str(tmp_path / "o"), "--pool", "first",
                     "--batch-size", "0", "--layers", "top")
    assert bad_opts.exit_code == 2
    assert all(f in bad_opts.output for f in ("--pool", "--batch-size", "--layers"))


def test_open_rejects_non_stores(tmp_path):
    with pytest.raises(Exception, match="not a bertkit embedding store"):
        store.open(tmp_path)
    with pytest.raises(Exception, match="not a bertkit embedding store"):
        store.open_splits(tmp_path)


def test_distilbert_store_and_recipe(tiny_distilbert_dir, toy_tsv, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[embed]\npool = "max"\nlayers = "-2,-1"\nbatch-size = 7\n')
    result = embed("--model", str(tiny_distilbert_dir), "--data", str(toy_tsv), "--out", str(tmp_path / "d"),
                   "--recipe", str(recipe))
    assert result.exit_code == 0, result.output
    st = store.open(tmp_path / "d")
    assert st.features.shape == (40, 64) and st.manifest["pool"] == "max"
    assert st.manifest["architecture"] == "DistilBertModel"


@pytest.mark.slow
def test_torchrun_two_processes_match_single_process(tiny_bert_dir, toy_tsv, tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    common = ["-m", "bertkit.cli", "embed", "--quiet", "--model", str(tiny_bert_dir), "--data", str(toy_tsv),
              "--shard-size", "8", "--pool", "mean"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    two = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", *common, "--out",
                          str(tmp_path / "two")], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("train: 40 rows") == 1  # only rank 0 prints
    one = subprocess.run([sys.executable, *common, "--out", str(tmp_path / "one")], cwd=ROOT, capture_output=True,
                         text=True, env=env)
    assert one.returncode == 0, one.stderr
    a, b = store.open(tmp_path / "two"), store.open(tmp_path / "one")
    assert a.manifest["identity"] == b.manifest["identity"]
    np.testing.assert_allclose(a.features, b.features, atol=1e-5)
    np.testing.assert_array_equal(a.labels, b.labels)


# ---------------------------------------------------------------- issue 22: the merge streams

@pytest.mark.parametrize("row_shape,dtype,shard_size", [((7,), "float32", 5), ((3, 5), "float16", 5),
                                                        ((4,), "float32", 100)])
def test_merge_writes_the_bytes_of_a_memory_mapped_merge(tmp_path, row_shape, dtype, shard_size):
    """features.npy is written with plain writes (header, then each shard's bytes): the same bytes as the
    open_memmap merge it replaced, for 1-d and layer-axis rows, several shards and a short last one."""
    rng = np.random.default_rng(0)
    n_rows = 23
    writer = store.StoreWriter(tmp_path / "s", {"model": "m"}, n_rows, shard_size, row_shape, dtype)
    writer.prepare()
    whole = rng.normal(size=(n_rows, *row_shape)).astype(dtype)
    for k, (start, end) in enumerate(writer.ranges):
        writer.write_shard(k, whole[start:end], {})
    reference = tmp_path / "reference.npy"
    merged = np.lib.format.open_memmap(reference, mode="w+", dtype=np.dtype(dtype), shape=whole.shape)
    for k, (start, end) in enumerate(writer.ranges):
        merged[start:end] = np.load(writer.shard_file(k), mmap_mode="r")
    merged.flush()
    del merged
    opened = writer.finalize({"pool": "cls"}, labels=np.arange(n_rows) % 2)
    assert (tmp_path / "s" / store.FEATURES).read_bytes() == reference.read_bytes()
    assert np.array_equal(opened.features, whole)


def test_merge_refuses_a_shard_of_another_shape(tmp_path):
    writer = store.StoreWriter(tmp_path / "s", {"model": "m"}, 6, 3, (4,), "float32")
    writer.prepare()
    writer.write_shard(0, np.zeros((3, 4), np.float32), {})
    np.save(writer.shard_file(1), np.zeros((3, 4), np.float64))  # passes no check of the writer: the merge's own
    with open(writer.shard_file(1), "rb") as shard, open(tmp_path / "out", "wb") as out, \
            pytest.raises(ValueError, match="expected"):
        store.copy_npy_data(shard, out, (3, 4), np.dtype("float32"))


# ---------------------------------------------------------------- --precision int8


def test_int8_store_says_int8_is_close_to_fp32_and_never_mixes_with_it(tiny_bert_dir, toy_tsv, tmp_path):
    common = ["--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--shard-size", "8", "--batch-size", "3"]
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    assert embed(*common, "--out", str(fp32), "--precision", "fp32").exit_code == 0
    result = embed(*common, "--out", str(int8), "--precision", "int8")
    assert result.exit_code == 0, result.output
    assert "int8 on cpu" in result.output
    manifest = store.open(int8).manifest
    assert manifest["dtype"] == "int8" and manifest["identity"]["dtype"] == "int8"
    # measured on the tiny BERT: largest difference 1e-3 (features up to ~2): int8, but close
    features, reference = store.open(int8).features, store.open(fp32).features
    assert not np.array_equal(features, reference)
    np.testing.assert_allclose(features, reference, atol=5e-3, rtol=0)
    # an fp32 store is not resumed or reused in int8, nor the other way round
    refused = embed(*common, "--out", str(fp32), "--precision", "int8")
    assert refused.exit_code == 2 and "dtype: 'fp32' -> 'int8'" in refused.output and "--overwrite" in refused.output
    refused = embed(*common, "--out", str(int8), "--precision", "fp32")
    assert refused.exit_code == 2 and "dtype: 'int8' -> 'fp32'" in refused.output


def test_unfinished_int8_store_resumes_in_int8_only(tiny_bert_dir, toy_tsv, tmp_path):
    common = ["--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--shard-size", "8", "--batch-size", "3",
              "--precision", "int8"]
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    assert embed(*common, "--out", str(clean)).exit_code == 0
    failed = embed(*common, "--out", str(broken), env={store.FAIL_HOOK_ENV: "2"})
    assert isinstance(failed.exception, RuntimeError)
    mixed = embed(*common[:-1], "fp32", "--out", str(broken))
    assert mixed.exit_code == 2 and "dtype: 'int8' -> 'fp32'" in mixed.output
    resumed = embed(*common, "--out", str(broken))
    assert resumed.exit_code == 0 and "resumed: 2 of 5 shards" in resumed.output, resumed.output
    assert store_content(broken) == store_content(clean)


def test_int8_on_a_gpu_is_refused_before_any_work(tiny_bert_dir, toy_tsv, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(loading, "device_problem", lambda *args, **kw: None)  # as if this machine had a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    result = embed("--model", str(tiny_bert_dir), "--data", str(toy_tsv), "--out", str(tmp_path / "s"),
                   "--device", "cuda", "--precision", "int8")
    assert result.exit_code == 2, result.output
    assert "int8 is a CPU precision here" in result.output and "--device cpu" in result.output
    assert not (tmp_path / "s").exists()
