"""bertkit finetune: the Accelerate loop on tiny models (learning, pairs, labels, accumulation, resume, best)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.encoding.batches import global_batches, micro_batches
from bertkit.errors import UserError
from bertkit.io.checkpoint_folders import latest_checkpoint
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV as FAIL_HOOK_ENV
from bertkit.io.faults import FAIL_MODE_ENV, SimulatedFailure

ROOT = Path(__file__).resolve().parent.parent
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


def make_cfg(model: Path, train: Path, dev: Path, out: Path, **overrides) -> FinetuneConfig:
    """A tiny run pinned to fp32: the tests below compare numbers exactly, and `auto` would be bf16 on a CPU
    with native bf16 (tests of bf16 and of `auto` itself pass precision explicitly)."""
    values = dict(model=str(model), data=str(train), dev=str(dev), out=str(out), epochs=2, lr=5e-3, batch_size=8,
                  warmup_ratio=0.1, save_every=None, precision="fp32")
    values.update(overrides)
    return FinetuneConfig.of(**values)


def weights(folder: Path) -> dict[str, np.ndarray]:
    return load_file(str(folder / "model.safetensors"))


def test_batches_split_the_same_global_batch_across_processes_and_accumulation():
    lengths = np.arange(100) % 17 + 3
    batches = global_batches(lengths, 8, seed=1, epoch=0, min_rows=2)
    assert sorted(np.concatenate(batches).tolist()) == list(range(96)) + [96, 97, 98, 99]
    assert [b.tolist() for b in batches] == [b.tolist() for b in global_batches(lengths, 8, 1, 0, 2)]
    assert [b.tolist() for b in batches] != [b.tolist() for b in global_batches(lengths, 8, 1, 1, 2)]
    pieces = micro_batches(batches[0], n_processes=2, grad_accum=2, process_index=1)
    assert len(pieces) == 2 and np.concatenate(pieces).tolist() == batches[0][4:].tolist()


def test_loss_decreases_and_learns_a_separable_set(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=6, eval_every="2"), progress=False)
    losses = [h["train_loss"] for h in result.metrics["history"]]
    assert losses[-1] < losses[0] * 0.8
    assert result.metrics["best_dev"]["accuracy"] >= 0.9
    assert len(result.epoch_table) == 6 and result.epoch_table[-1].epoch == 6
    for name in ("metrics.json", "metrics.jsonl", "training_table.csv", "curves.png", "confusion_matrix.png", "reliability.png",
                 "dev_errors.csv", "config.json", "best/model.safetensors", "final/model.safetensors"):
        assert (tmp_path / "run" / name).exists(), name
    jsonl = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(jsonl) == len(result.metrics["history"])


def test_string_labels_round_trip_and_plain_transformers_loads_the_folder(tiny_bert_dir, toy_files, tmp_path):
    from transformers import AutoModelForSequenceClassification, pipeline

    train, dev = toy_files
    finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=1), progress=False)
    best = tmp_path / "run" / "best"
    model = AutoModelForSequenceClassification.from_pretrained(best)
    assert model.config.id2label == {0: "neg", 1: "pos"}
    assert model.config.label2id == {"neg": 0, "pos": 1}
    assert (best / "model.safetensors").exists() and not list(best.glob("*.bin"))
    classify = pipeline("text-classification", model=str(best))
    out = classify(["a wonderful film", "an awful movie"])
    assert {o["label"] for o in out} <= {"neg", "pos"} and all(0.0 <= o["score"] <= 1.0 for o in out)


def test_sentence_pairs_use_token_type_ids_where_the_model_has_them(tiny_bert_dir, tiny_distilbert_dir, write_tsv, tmp_path):
    rows = [(f"the cat sat {i}", f"a cat sat {i}" if i % 2 else f"dogs fly {i}", "entailment" if i % 2 else "not_entailment")
            for i in range(24)]
    header = ("sentence1", "sentence2", "label")
    train, dev = write_tsv("pairs.tsv", rows, header), write_tsv("pairs_dev.tsv", rows[:8], header)
    for model in (tiny_bert_dir, tiny_distilbert_dir):  # BERT takes token_type_ids, DistilBERT does not
        out = tmp_path / model.name
        result = finetune(make_cfg(model, train, dev, out, epochs=1, text_pair_column="sentence2"), progress=False)
        assert result.metrics["best_dev"]["n"] == 8
        errors = (out / "dev_errors.csv").read_text().splitlines()[0]
        assert "text_pair" in errors


@pytest.mark.parametrize(("pair", "too_small", "smallest"), [(False, 2, 3), (True, 4, 5)])
def test_a_max_length_without_room_for_the_text_is_refused_before_the_run(tiny_bert_dir, write_tsv, tmp_path, pair,
                                                                        too_small, smallest):
    rows = [(f"the cat sat {i}", f"a dog ran {i}", "ab"[i % 2]) for i in range(16)]
    train = write_tsv("pairs.tsv", rows, ("sentence1", "sentence2", "label"))
    cfg = make_cfg(tiny_bert_dir, train, train, tmp_path / "run", max_length=too_small,
                   text_pair_column="sentence2" if pair else None)
    with pytest.raises(UserError, match=rf"--max-length {too_small} cannot hold a {'sentence pair' if pair else 'text'}"
                                        rf".*pass --max-length {smallest} or more"):
        finetune(cfg, progress=False)
    assert not (tmp_path / "run").exists()


def test_grad_accumulation_equals_a_larger_batch(no_dropout_bert, toy_files, tmp_path):
    train, dev = toy_files
    big = finetune(make_cfg(no_dropout_bert, train, dev, tmp_path / "big", batch_size=8, eval_every="1"), progress=False)
    acc = finetune(make_cfg(no_dropout_bert, train, dev, tmp_path / "acc", batch_size=4, grad_accum=2, eval_every="1"),
                   progress=False)
    np.testing.assert_allclose([h["train_loss"] for h in acc.metrics["history"]],
                               [h["train_loss"] for h in big.metrics["history"]], rtol=1e-4, atol=1e-5)
    w_big, w_acc = weights(tmp_path / "big" / "final"), weights(tmp_path / "acc" / "final")
    for name in w_big:
        np.testing.assert_allclose(w_acc[name], w_big[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    train, dev = toy_files  # dropout on: the restored RNG state matters too
    whole = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "whole"), progress=False)
    cfg = make_cfg(tiny_bert_dir, train, dev, tmp_path / "cut", save_every=3)
    monkeypatch.setenv(FAIL_HOOK_ENV, "4")  # steps 1-4 run, checkpoint at 3, crash after 4
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    assert latest_checkpoint(tmp_path / "cut").name == "step-3"
    monkeypatch.delenv(FAIL_HOOK_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3 and resumed.restored.epoch == 1 and resumed.restored.batch_in_epoch == 3
    assert resumed.restored.lr > 0
    assert resumed.restored.verified is True  # every file matched its checksum: no note about it
    assert [n for n in resumed.notes if "baseline" not in n] == []
    assert resumed.metrics["global_step"] == whole.metrics["global_step"] == 10
    assert resumed.metrics["best_metric"] == pytest.approx(whole.metrics["best_metric"])
    assert [h["train_loss"] for h in resumed.metrics["history"]] == pytest.approx([h["train_loss"] for h in whole.metrics["history"]], rel=1e-5)
    assert [h["dev_loss"] for h in resumed.metrics["history"]] == pytest.approx([h["dev_loss"] for h in whole.metrics["history"]], rel=1e-5)
    w_whole, w_resumed = weights(tmp_path / "whole" / "final"), weights(tmp_path / "cut" / "final")
    for name in w_whole:
        np.testing.assert_allclose(w_resumed[name], w_whole[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert len((tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()) == 2  # one per epoch, no duplicates
    assert len(list((tmp_path / "cut" / "checkpoints").glob("step-*"))) <= 2

    again = finetune(cfg, progress=False)  # a finished run is reported, not retrained
    assert again.already_finished and again.metrics["global_step"] == 10


@pytest.mark.slow  # kills at every finetune point: tests/test_faults.py, in the default run
def test_sigkill_mid_run_leaves_a_resumable_run(tiny_bert_dir, toy_files, tmp_path, record_as_bertkit):
    train, dev = toy_files
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "bertkit", "finetune", "--model", str(tiny_bert_dir), "--data", str(train),
           "--dev", str(dev), "--out", str(out), "--epochs", "2", "--batch-size", "8", "--lr", "5e-3",
           "--save-every", "2", "--quiet"]
    env = {**os.environ, **ONE_THREAD, "HF_HUB_OFFLINE": "1", FAIL_HOOK_ENV: "3", FAIL_MODE_ENV: "kill"}
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -9
    # what a kill during a save leaves behind (recorded as bertkit records them): a temp folder, and a step folder
    # without its trainer state (an older bertkit's unfinished save)
    leftover = out / "checkpoints" / ".tmp-step-4-0badc0de"
    leftover.mkdir()
    record_as_bertkit(out, leftover, temp=True)
    shutil.copytree(out / "checkpoints" / "step-2", out / "checkpoints" / "step-5")
    (out / "checkpoints" / "step-5" / "trainer_state.json").unlink()
    record_as_bertkit(out, out / "checkpoints" / "step-5")
    result = CliRunner().invoke(app, cmd[3:-1] + ["--json"])  # the same command, resumed (in-process: faster)
    assert result.exit_code == 0, result.output
    assert not leftover.exists()
    restored = json.loads(result.stdout)["restored"]
    assert restored["step"] == 2 and restored["checkpoint"].endswith("step-2") and restored["lr"] > 0
    assert json.loads((out / "metrics.json").read_text())["global_step"] == 10


def test_best_checkpoint_is_the_best_evaluation(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=3, eval_every="2",
                               metric_for_best="loss"), progress=False)
    history = result.metrics["history"]
    best = min(history, key=lambda h: h["dev_loss"])
    assert result.metrics["best_step"] == best["step"]
    assert json.loads((tmp_path / "run" / "best" / "bertkit_model.json").read_text())["step"] == best["step"]
    assert [h["best"] for h in history].count(True) >= 1 and history[0]["best"]


def test_early_stopping_and_freeze_encoder(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    result = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=20, lr=1e-9, eval_every="1",
                               early_stopping_patience=2, freeze_encoder=True, class_weight="balanced",
                               metric_for_best="loss"), progress=False)
    assert result.metrics["stopped_early"] and result.metrics["global_step"] < 100
    before, after = weights(tiny_bert_dir), weights(tmp_path / "run" / "final")
    name = "embeddings.word_embeddings.weight"
    np.testing.assert_array_equal(after["bert." + name], before[name])


def test_cli_refuses_a_different_config_on_the_same_out_and_reports_finished(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    runner = CliRunner()
    args = ["finetune", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev), "--out",
            str(tmp_path / "run"), "--epochs", "1", "--batch-size", "8", "--quiet"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "Training" in first.output and "best accuracy" in first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "finished run" in again.output
    other = runner.invoke(app, [*args, "--lr", "1e-4"])
    assert other.exit_code == 2 and "--lr" in other.output and "--overwrite" in other.output
    replaced = runner.invoke(app, [*args, "--lr", "1e-4", "--overwrite", "--json"])
    assert replaced.exit_code == 0
    assert json.loads(replaced.stdout)["global_step"] == 5


def test_config_validation_names_the_flags(tmp_path):
    with pytest.raises(UserError) as err:
        FinetuneConfig.of(data="x.tsv", out=str(tmp_path), epochs=0, eval_every="sometimes", metric_for_best="bleu",
                       precision="int8")
    message = str(err.value)
    for flag in ("--epochs", "--eval-every", "--metric-for-best", "--precision"):
        assert flag in message


@pytest.mark.slow
def test_two_cpu_processes_agree_with_one(no_dropout_bert, toy_files, tmp_path):
    """torchrun x2 (gloo, MULTI_CPU) sees the same global batches as one process with twice the batch."""
    train, dev = toy_files
    torchrun = Path(sys.executable).parent / "torchrun"
    common = ["finetune", "--model", str(no_dropout_bert), "--data", str(train), "--dev", str(dev),
              "--epochs", "2", "--lr", "5e-3", "--quiet", "--json", "--eval-every", "1"]
    env = {**os.environ, **ONE_THREAD, "HF_HUB_OFFLINE": "1"}
    two = subprocess.run([str(torchrun), "--nproc_per_node", "2", "-m", "bertkit.cli", *common, "--batch-size", "4",
                          "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    one = subprocess.run([sys.executable, "-m", "bertkit", *common, "--batch-size", "8", "--out", str(tmp_path / "one")],
                         env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    m_two, m_one = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("two", "one"))
    assert m_two["processes"] == 2 and m_one["processes"] == 1
    assert two.stdout.count('"global_step"') == 1  # only the main process printed
    np.testing.assert_allclose([h["dev_loss"] for h in m_two["history"]], [h["dev_loss"] for h in m_one["history"]], rtol=1e-3)
    assert m_two["best_dev"]["n"] == m_one["best_dev"]["n"] == 20
    assert sorted(p.name for p in (tmp_path / "two").iterdir() if p.name in {"best", "final"}) == ["best", "final"]


@pytest.mark.slow
def test_minilm_full_sst2_one_epoch(minilm_dir, shared_data, tmp_path):
    cfg = FinetuneConfig.of(model=str(minilm_dir), data=str(shared_data / "sst2" / "train.tsv"),
                         dev=str(shared_data / "sst2" / "dev.tsv"), text_column="0", label_column="1", epochs=1,
                         lr=5e-5, batch_size=32, out=str(tmp_path / "sst2"), save_every=None)
    result = finetune(cfg, progress=False)
    assert result.metrics["best_dev"]["accuracy"] >= 0.84


def test_loop_equals_a_hand_written_pytorch_loop(no_dropout_bert, toy_files, tmp_path):
    """Same batches, AdamW (no decay on bias/LayerNorm), linear warmup, clipping: plain PyTorch gives the same weights."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from bertkit.data.splits import load_splits
    from bertkit.encoding.batches import pad_batch
    from bertkit.encoding.encode import encode_dataset
    from bertkit.encoding.reading import DEFAULT_MAX_LENGTH
    from bertkit.models import loading

    train, dev = toy_files
    cfg = make_cfg(no_dropout_bert, train, dev, tmp_path / "run", epochs=2, lr=1e-3, weight_decay=0.1, max_grad_norm=0.5)
    finetune(cfg, progress=False)

    splits = load_splits(cfg.inputs)
    tokenizer = loading.load_tokenizer(str(no_dropout_bert))
    enc = encode_dataset(tokenizer, splits.train, DEFAULT_MAX_LENGTH)  # the run read the tiny model (no record) at 128
    y = torch.as_tensor(splits.label_map.encode(splits.train.labels, "train"))
    torch.manual_seed(cfg.inputs.seed)
    from accelerate.utils import set_seed

    set_seed(cfg.inputs.seed)
    model = loading.load_classifier(str(no_dropout_bert), splits.label_map.id2label).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    per_epoch = len(global_batches(enc.lengths, 8, cfg.inputs.seed, 0, 1))
    sched = get_linear_schedule_with_warmup(opt, int(np.ceil(0.1 * per_epoch * 2)), per_epoch * 2)
    for epoch in range(2):
        for batch in global_batches(enc.lengths, 8, cfg.inputs.seed, epoch, 1):
            logits = model(**pad_batch(enc, batch, tokenizer.pad_token_id)).logits
            torch.nn.functional.cross_entropy(logits, y[batch]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            sched.step()
            opt.zero_grad()
    ours = weights(tmp_path / "run" / "final")
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(ours[name], value.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_library_run_prints_no_transformers_save_bars(tiny_bert_dir, toy_files, tmp_path, capsys):
    """progress=False means quiet: the saves of best/ and final/ do not show transformers' "Writing model shards"."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()  # as after any from_pretrained outside the CLI
    train, dev = toy_files
    finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", epochs=1), progress=False)
    assert "Writing model shards" not in capsys.readouterr().err


def test_bf16_and_auto_precision_train_in_the_same_process(tiny_bert_dir, toy_files, tmp_path, auto_dtype):
    """bf16 runs on every CPU (emulated where not native: the model is tiny), and `auto` resolves per machine;
    runs of different precisions follow each other in one process (Accelerate's state is released in between)."""
    train, dev = toy_files
    bf16 = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "bf16", epochs=1, precision="bf16"), progress=False)
    assert bf16.metrics["mixed_precision"] == "bf16"
    assert all(np.isfinite(h["train_loss"]) and np.isfinite(h["dev_loss"]) for h in bf16.metrics["history"])
    auto = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "auto", epochs=1, precision="auto"), progress=False)
    assert auto.metrics["mixed_precision"] == {"bf16": "bf16", "fp32": "no"}[auto_dtype]
    fp32 = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "fp32", epochs=1), progress=False)
    assert fp32.metrics["mixed_precision"] == "no"


@pytest.mark.parametrize("max_grad_norm", [1.0, 0.0])
def test_an_update_that_overflows_the_weights_is_never_saved(tiny_bert_dir, toy_files, tmp_path, max_grad_norm):
    """--lr 3e38: step 1's loss is finite but its update leaves inf/NaN weights. The run stops at that step, before
    the checkpoint it would save, and the checkpoint it calls the last good one holds finite weights."""
    train, dev = toy_files
    out = tmp_path / "run"
    cfg = make_cfg(tiny_bert_dir, train, dev, out, lr=3e38, batch_size=4, save_every=1, max_grad_norm=max_grad_norm)
    with pytest.raises(UserError, match=r"The model weights became NaN/inf at step \d+ \(epoch 1\).*--lr 3e\+38 is too high") as err:
        finetune(cfg, progress=False)
    saved = sorted((out / "checkpoints").glob("step-*"))
    assert saved, "the steps before the overflow were checkpointed"
    for folder in saved:
        assert all(np.isfinite(v).all() for v in weights(folder).values()), folder
    assert f"The last good checkpoint, {latest_checkpoint(out)}, is kept" in str(err.value)
    assert not (out / "best").exists() or all(np.isfinite(v).all() for v in weights(out / "best").values())


def test_a_checkpoint_saved_before_checksums_still_resumes_and_says_so(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    """A checkpoint without bertkit_checkpoint.json (written by an older bertkit) is loaded as before; the run's
    result and metrics.json record that it was not verified."""
    from bertkit.io import checkpoint_folders as checkpoints

    train, dev = toy_files
    cfg = make_cfg(tiny_bert_dir, train, dev, tmp_path / "cut", save_every=3, epochs=1)
    monkeypatch.setenv(FAIL_HOOK_ENV, "4")
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    monkeypatch.delenv(FAIL_HOOK_ENV)
    (latest_checkpoint(tmp_path / "cut") / checkpoints.MANIFEST).unlink()
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3 and resumed.restored.verified is False
    assert any("saved before checkpoints carried checksums" in note for note in resumed.notes)
    saved = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert saved["resumed_from"]["verified"] is False and saved["global_step"] == 5


def test_a_resumed_run_removes_unfinished_checkpoint_saves_and_nothing_else(tiny_bert_dir, toy_files, tmp_path,
                                                                            monkeypatch, record_as_bertkit):
    """A kill mid-save leaves a temp folder checkpoints/.tmp-step-N-XXXXXXXX (checkpoint-sized), recorded before it
    was made. A re-run with another --save-every never saves step N again, so resuming removes it; a newer step
    folder without trainer state is passed over (noted) and removed with the next save, so two real checkpoints
    are kept. Folders and files bertkit did not record - whatever their names, its own temp names included - are
    named, the run is refused until they are moved out (issue 20), and they stay as they were."""
    train, dev = toy_files
    out = tmp_path / "cut"
    monkeypatch.setenv(FAIL_HOOK_ENV, "4")
    with pytest.raises(SimulatedFailure):
        finetune(make_cfg(tiny_bert_dir, train, dev, out, save_every=3, epochs=1), progress=False)
    monkeypatch.delenv(FAIL_HOOK_ENV)
    killed_save = out / "checkpoints" / ".tmp-step-4-0badc0de"  # what SIGKILL during save_state of step 4 leaves
    killed_save.mkdir()
    (killed_save / "optimizer.bin").write_bytes(b"half a file")
    record_as_bertkit(out, killed_save, temp=True)
    unfinished = out / "checkpoints" / "step-9"  # a step folder without its trainer state: a save that never finished
    shutil.copytree(out / "checkpoints" / "step-3", unfinished)
    (unfinished / "trainer_state.json").unlink()
    record_as_bertkit(out, unfinished)
    mine = [out / "checkpoints" / name for name in (".tmp-notes", ".tmp-step-4-deadbeef", ".tmp-step-4.keep",
                                                    "step-9.bak")]
    for folder in mine:
        folder.mkdir()
        (folder / "notes.txt").write_text("mine\n")
    look_alike = out / "checkpoints" / ".optimizer.bin.1a2b3c4d.tmp"  # named like an atomic write's temp file
    look_alike.write_text("mine\n")
    with pytest.raises(UserError, match=r"did not write \(checkpoints/\.optimizer\.bin\.1a2b3c4d\.tmp, "
                                        r"checkpoints/\.tmp-notes/, checkpoints/\.tmp-step-4-deadbeef/, "
                                        r"checkpoints/\.tmp-step-4\.keep/, checkpoints/step-9\.bak/\)"):
        finetune(make_cfg(tiny_bert_dir, train, dev, out, save_every=2, epochs=1), progress=False)
    assert killed_save.is_dir() and all((folder / "notes.txt").read_text() == "mine\n" for folder in mine)
    for path in [*mine, look_alike]:  # the user's fix, as the message says
        path.rename(tmp_path / path.name)
    resumed = finetune(make_cfg(tiny_bert_dir, train, dev, out, save_every=2, epochs=1, keep_checkpoints=True),
                       progress=False)
    assert resumed.restored.step == 3 and not killed_save.exists()
    assert any(f"{unfinished} has no trainer_state.json" in note for note in resumed.notes)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-4", "step-5"]
    assert all((tmp_path / folder.name / "notes.txt").read_text() == "mine\n" for folder in mine)
    assert (tmp_path / look_alike.name).read_text() == "mine\n"
