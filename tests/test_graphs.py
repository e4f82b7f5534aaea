"""The host-free step (`bertkit.training.graphs`) and the layers it runs (`fastforward.hidden_states`), on the CPU.

On a CPU nothing is captured: the step runner runs every step eagerly through the code a CUDA graph replays (bucket
padding, device-side loss total, the update that skips itself on a non-finite norm). These tests force it on and
compare it with the eager loop; tests/test_gpu.py compares the captured graphs themselves on a GPU."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.encoding.batches import ahead
from bertkit.errors import UserError
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV, SimulatedFailure
from bertkit.models import fastforward, layers, loading
from bertkit.training import graphs, launch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


@pytest.fixture
def runner_on_cpu(monkeypatch):
    """Steps through the graph runner on the CPU (it captures nothing there: every step runs its code eagerly)."""
    monkeypatch.setattr(launch, "graphs_unavailable", lambda session: None)


def make_cfg(model: Path, train: Path, dev: Path, out: Path, **overrides) -> FinetuneConfig:
    values = dict(model=str(model), data=str(train), dev=str(dev), out=str(out), epochs=2, lr=5e-3, batch_size=8,
                  warmup_ratio=0.1, save_every=None, precision="fp32")
    values.update(overrides)
    return FinetuneConfig.of(**values)


def weights(folder: Path) -> dict[str, np.ndarray]:
    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a: Path, b: Path, rtol: float, atol: float) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        np.testing.assert_allclose(wb[name], wa[name], rtol=rtol, atol=atol, err_msg=name)


# ---------------------------------------------------------------- the runner against the eager loop


@pytest.mark.parametrize("accumulate", [False, True])
def test_runner_steps_equal_the_eager_loop(no_dropout_bert, toy_files, tmp_path, monkeypatch, accumulate):
    """Same data, same seed, dropout off: the runner's bucket-padded, host-free steps give the eager loop's losses
    and weights (within float32 rounding: padding to 32 changes the summation, and the learning rate is a float32
    tensor)."""
    train, dev = toy_files
    extra = {"batch_size": 4, "grad_accum": 2} if accumulate else {}
    eager = finetune(make_cfg(no_dropout_bert, train, dev, tmp_path / "eager", eval_every="2", **extra),
                     progress=False)
    monkeypatch.setattr(launch, "graphs_unavailable", lambda session: None)
    graphed = finetune(make_cfg(no_dropout_bert, train, dev, tmp_path / "graphed", eval_every="2", **extra),
                       progress=False)
    assert eager.metrics["step_launch"] == {"mode": "eager"}
    assert graphed.metrics["step_launch"]["mode"] == "cuda_graphs"
    assert graphed.metrics["step_launch"]["captured_shapes"] == 0  # a CPU captures nothing
    assert graphed.metrics["global_step"] == eager.metrics["global_step"]
    np.testing.assert_allclose([h["train_loss"] for h in graphed.metrics["history"]],
                               [h["train_loss"] for h in eager.metrics["history"]], rtol=2e-4)
    assert_same_weights(tmp_path / "eager" / "final", tmp_path / "graphed" / "final", rtol=2e-3, atol=2e-5)


def test_runner_run_resumes_exactly(tiny_bert_dir, toy_files, tmp_path, monkeypatch, runner_on_cpu):
    """Dropout on: killed after step 4 with a checkpoint at step 3, the resumed runner run equals an uninterrupted
    one (its loss total, learning-rate tensors and generator come back from the checkpoint)."""
    train, dev = toy_files
    whole = finetune(make_cfg(tiny_bert_dir, train, dev, tmp_path / "whole"), progress=False)
    cfg = make_cfg(tiny_bert_dir, train, dev, tmp_path / "cut", save_every=3)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "4")
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    monkeypatch.delenv(FAIL_AFTER_STEPS_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3 and isinstance(resumed.restored.lr, float)
    assert [h["train_loss"] for h in resumed.metrics["history"]] == pytest.approx(
        [h["train_loss"] for h in whole.metrics["history"]], rel=1e-6)
    assert_same_weights(tmp_path / "whole" / "final", tmp_path / "cut" / "final", rtol=1e-6, atol=1e-7)


def test_an_eager_run_resumes_a_runner_checkpoint(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    """A checkpoint saved by a runner run (learning rates as tensors, capturable groups) resumes eagerly too, as
    on a machine without a GPU: the optimizer settings come back as plain numbers."""
    train, dev = toy_files
    cfg = make_cfg(tiny_bert_dir, train, dev, tmp_path / "run", save_every=3)
    monkeypatch.setattr(launch, "graphs_unavailable", lambda session: None)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "4")
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    monkeypatch.undo()
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3 and resumed.metrics["step_launch"] == {"mode": "eager"}
    assert resumed.metrics["global_step"] == 10 and np.isfinite(resumed.metrics["best_metric"])


def test_a_non_finite_update_stops_a_runner_run_before_anything_is_saved(tiny_bert_dir, toy_files, tmp_path,
                                                                          runner_on_cpu):
    """--lr 3e38: the update overflows the weights; the run stops with the step and the cause, every checkpoint it
    kept holds finite weights."""
    train, dev = toy_files
    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"became NaN/inf at step \d+ \(epoch 1\).*--lr 3e\+38 is too high"):
        finetune(make_cfg(tiny_bert_dir, train, dev, out, lr=3e38, batch_size=4, save_every=1), progress=False)
    for folder in sorted((out / "checkpoints").glob("step-*")):
        assert all(np.isfinite(v).all() for v in weights(folder).values()), folder


def test_the_update_skips_itself_on_a_non_finite_gradient_and_reports_the_step(no_dropout_bert):
    """A NaN loss: the update leaves weights and AdamW's step count as they were, and `read` names the step."""
    runner, encoded = _runner(no_dropout_bert, lr=1e-2)
    before = [p.detach().clone() for p in runner.params]
    runner.objective.poison = True
    runner.step(runner.prepare([np.arange(4)], 4), global_step=6)
    loss, rows, first_bad = runner.read()
    assert np.isnan(loss) and rows == 4 and first_bad == 7
    assert all(torch.equal(a, p.detach()) for a, p in zip(before, runner.params, strict=True))
    assert all(float(s["step"]) == 0 for s in runner.optimizer.state.values())
    runner.objective.poison = False
    runner.step(runner.prepare([np.arange(4)], 4), global_step=7)
    assert runner.read()[2] == 7  # the first bad step is kept until the run stops
    assert not all(torch.equal(a, p.detach()) for a, p in zip(before, runner.params, strict=True))


def test_read_returns_the_loss_total_since_the_last_read(no_dropout_bert):
    runner, encoded = _runner(no_dropout_bert, lr=0.0)
    runner.step(runner.prepare([np.arange(4), np.arange(4, 7)], 7), global_step=0)
    loss, rows, bad = runner.read()
    assert rows == 7 and bad == 0 and loss > 0
    assert runner.read()[:2] == (0.0, 0)


class _Objective:
    """Cross-entropy on label (row % 2), or NaN when poisoned."""

    poison = False

    def loss(self, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(logits.float(), rows % 2)
        return loss * float("nan") if self.poison else loss


def _runner(model_dir: Path, lr: float) -> tuple[graphs.StepRunner, object]:
    from bertkit.data.dataset import TextDataset
    from bertkit.encoding.encode import encode_dataset

    torch.manual_seed(0)
    model = loading.load_classifier(str(model_dir), {0: "a", 1: "b"})
    tokenizer = loading.load_tokenizer(str(model_dir))
    texts = [f"row {i} " + "word " * (i % 5) for i in range(8)]
    encoded = encode_dataset(tokenizer, TextDataset(texts=texts), 64)
    net = fastforward.SequenceClassifier(model)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, fused=True)
    runner = graphs.StepRunner(net, optimizer, _Objective(), encoded, 0, frozenset({"input_ids", "attention_mask"}),
                               torch.float32, 1.0, torch.device("cpu"), 64)
    return runner, encoded


# ---------------------------------------------------------------- shapes


def test_widths_are_padded_to_buckets_within_max_length():
    assert [graphs.padded_width(n, 128) for n in (1, 31, 32, 33, 100, 128)] == [32, 32, 32, 64, 128, 128]
    assert graphs.padded_width(20, 24) == 24  # never past --max-length (a shorter model limit)
    assert graphs.shape_of(np.array([32, 32]), 128) == graphs.Shape(2, 32, masked=False)
    assert graphs.shape_of(np.array([32, 7]), 128) == graphs.Shape(2, 32, masked=True)


def test_planned_shapes_count_every_micro_batch_of_the_plan(no_dropout_bert):
    runner, encoded = _runner(no_dropout_bert, lr=0.0)
    plan = [[np.arange(4)], [np.arange(4, 8)], [np.arange(2), np.arange(2, 4)]]
    counts = graphs.planned_shapes(runner, plan)
    assert sum(counts.values()) == 4 and counts.most_common(1)[0][1] >= 2
    assert isinstance(counts, Counter)


# ---------------------------------------------------------------- batches ahead


def test_ahead_keeps_order_and_hands_over_errors():
    assert list(ahead(range(10), lambda x: x * x, depth=2)) == [(x, x * x) for x in range(10)]

    def fail(x: int) -> int:
        if x == 3:
            raise ValueError("row 3")
        return x

    got = []
    with pytest.raises(ValueError, match="row 3"):
        for item in ahead(range(10), fail):
            got.append(item)
    assert got == [(0, 0), (1, 1), (2, 2)]


def test_ahead_stops_its_worker_when_the_consumer_stops():
    import threading

    prepared = []
    stream = ahead(range(1000), lambda x: prepared.append(x) or x, depth=2)
    assert next(stream) == (0, 0)
    stream.close()
    for thread in threading.enumerate():
        if thread.name == "bertkit-batches":
            thread.join(timeout=5)
            assert not thread.is_alive()
    assert len(prepared) < 10


# ---------------------------------------------------------------- the layers a captured step runs


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_own_layers_equal_the_models_hidden_states(tiny_bert_dir, tiny_distilbert_dir, kind):
    """`hidden_states` (embeddings + `block_forward` per layer) equals the model's own hidden states, with padding
    masked and, without a mask, on unpadded rows."""
    model = loading.load_encoder(str(tiny_bert_dir if kind == "bert" else tiny_distilbert_dir)).eval()
    batch = fastforward.check_batch(model)
    with torch.no_grad():
        own = model(**batch, output_hidden_states=True).hidden_states
        mine = fastforward.hidden_states(model, batch, 2, training=False, keep=(0, 1))
        row = {k: v[:1] for k, v in batch.items() if k != "attention_mask"}
        own_row = model(**row, output_hidden_states=True).hidden_states
        mine_row = fastforward.hidden_states(model, row, 2, training=False)
    for i in (0, 1, 2):
        keep = batch["attention_mask"].bool()  # padded positions are garbage in both
        torch.testing.assert_close(mine[i][keep], own[i][keep], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mine_row[2], own_row[2], rtol=1e-4, atol=1e-5)


def test_the_classifier_checks_its_own_layers_and_uses_them_on_a_gpu_only(tiny_bert_dir):
    net = fastforward.SequenceClassifier(loading.load_classifier(str(tiny_bert_dir), {0: "a", 1: "b"}).eval())
    assert net.fast  # the check at wrap time covers the model's layers, its own, and an unmasked row
    assert fastforward.own_layers_for(torch.device("cuda")) and not fastforward.own_layers_for(torch.device("cpu"))
    batch = fastforward.check_batch(net.model)
    with torch.no_grad():
        torch.testing.assert_close(net.fast_logits(**batch, own_layers=True), net.own_logits(**batch),
                                   rtol=1e-4, atol=1e-5)


def test_compile_on_a_gpu_keeps_the_graphed_steps_only_with_compiled_layers(caplog):
    """--compile on a GPU: with the layers compiled (`SequenceClassifier.compile_layers`) the steps stay CUDA graphs;
    a model on its own forward (compiled whole) steps eagerly, and says why in an info line."""
    from types import SimpleNamespace

    unwrapped = SimpleNamespace(fast=True, layer=layers.compiled_layer())
    accelerator = SimpleNamespace(device=torch.device("cuda"), num_processes=1, mixed_precision="bf16",
                                  unwrap_model=lambda net: unwrapped)
    compute = SimpleNamespace(cuda_graphs="auto", compile=True)
    session = SimpleNamespace(cfg=SimpleNamespace(compute=compute), accelerator=accelerator, net=None)
    assert launch.graphs_unavailable(session) is None
    unwrapped.layer = None
    assert launch.graphs_unavailable(session) == "--compile on the model's own forward"
    with caplog.at_level("INFO", logger="bertkit.training.launch"):
        assert launch.start_graphs(session, state=None) is None
    assert "--compile on the model's own forward" in caplog.text


def test_compile_layers_applies_only_on_the_fast_path(tiny_bert_dir):
    model = loading.load_classifier(str(tiny_bert_dir), {0: "a", 1: "b"})
    fast, own = fastforward.SequenceClassifier(model), fastforward.SequenceClassifier(model, fast=False)
    assert fast.compile_layers() and fast.layer is layers.compiled_layer()
    assert not own.compile_layers() and own.layer is None
