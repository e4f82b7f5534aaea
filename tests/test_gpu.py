"""On a CUDA GPU (`pytest -m gpu`; benchmarks/gpu.sh runs these where a GPU is lent): the captured training step equals the
eager one, a graphed run resumes, fp16 runs eagerly, and inference on the GPU (own layers, bf16 weights, replayed
small batches) gives the CPU's fp32 features and logits within bf16 tolerance. Every test pins its device and
precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from bertkit.commands.finetune import FinetuneConfig  # noqa: E402
from bertkit.data.dataset import TextDataset  # noqa: E402
from bertkit.encoding.reading import Reading  # noqa: E402
from bertkit.errors import UserError  # noqa: E402
from bertkit.features.extract import extract_features  # noqa: E402
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV, SimulatedFailure  # noqa: E402
from bertkit.models import (  # noqa: E402
    fastforward,
    infer,
    loading,  # noqa: E402
)
from bertkit.models.compute import Compute  # noqa: E402
from bertkit.models.replay import Replayed  # noqa: E402
from bertkit.training.finetune import finetune  # noqa: E402

TEXTS = [f"a {'very ' * (i % 7)}good film number {i}" if i % 2 else f"a dull {'and slow ' * (i % 5)}movie {i}"
         for i in range(48)]


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


def cfg_for(model: Path, train: Path, dev: Path, out: Path, **overrides) -> FinetuneConfig:
    values = dict(model=str(model), data=str(train), dev=str(dev), out=str(out), epochs=2, lr=5e-3, batch_size=8,
                  warmup_ratio=0.1, save_every=None, precision="fp32")
    values.update(overrides)
    return FinetuneConfig.of(**values)


def weights(folder: Path) -> dict[str, np.ndarray]:
    return load_file(str(folder / "model.safetensors"))


NO_GRADIENT = "attention.self.key.bias"
"""A key bias adds the same number to every score of a query, which softmax ignores: its gradient is zero but for
rounding, and AdamW turns rounding into steps of about +-lr. Two correct implementations part there, so it is left
out of the comparisons below (measured on an H200: 0.12-0.40 relative, every other tensor within tolerance)."""


def close_weights(a: Path, b: Path, tolerance: float) -> None:
    """Every tensor within `tolerance` in relative L2 norm: elementwise tests would trip over AdamW, whose update
    is about lr x sign(gradient) for gradients near zero, so rounding can flip single elements by 2 x lr."""
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name in (n for n in wa if NO_GRADIENT not in n):
        diff = np.linalg.norm(wa[name].astype(np.float64) - wb[name]) / max(np.linalg.norm(wa[name]), 1e-12)
        assert diff < tolerance, (name, diff)


# ---------------------------------------------------------------- training


@pytest.mark.parametrize("precision,tolerance", [("fp32", 1e-3), ("bf16", 3e-2)])
def test_graphed_steps_equal_eager_steps(no_dropout_bert, toy_files, tmp_path, precision, tolerance):
    train, dev = toy_files
    eager = finetune(cfg_for(no_dropout_bert, train, dev, tmp_path / "eager", precision=precision, cuda_graphs="off",
                             eval_every="2"), progress=False)
    graphed = finetune(cfg_for(no_dropout_bert, train, dev, tmp_path / "graphed", precision=precision,
                               eval_every="2"), progress=False)
    launch = graphed.metrics["step_launch"]
    assert launch["mode"] == "cuda_graphs" and launch["captured_shapes"] >= 1, launch
    assert eager.metrics["step_launch"] == {"mode": "eager"}
    np.testing.assert_allclose([h["train_loss"] for h in graphed.metrics["history"]],
                               [h["train_loss"] for h in eager.metrics["history"]], rtol=tolerance)
    close_weights(tmp_path / "eager" / "final", tmp_path / "graphed" / "final", tolerance)


def relative_errors(folder: Path, reference: Path) -> dict[str, float]:
    """Per tensor (but `NO_GRADIENT`): relative L2 distance of `folder`'s final weights from `reference`'s."""
    wa, wr = weights(folder), weights(reference)
    return {name: float(np.linalg.norm(wa[name].astype(np.float64) - wr[name]) / max(np.linalg.norm(wr[name]), 1e-12))
            for name in wr if NO_GRADIENT not in name}


def test_compiled_layers_in_graphed_steps_are_as_close_to_fp32_as_eager_bf16(no_dropout_bert, toy_files, tmp_path):
    """--compile on a GPU: the layers compiled by Inductor inside the CUDA-graph steps train what eager steps train,
    as closely as bf16 allows: against an fp32 run, no further than eager bf16 steps are (Inductor sums and rounds in
    another order, so the two bf16 runs differ from each other by more than either differs from fp32 on a few
    zero-initialised biases: measured 0.13 on one on an H100). The sequence path; tagging has no GPU step yet."""
    train, dev = toy_files
    runs = {}
    for name, overrides in (("fp32", dict(precision="fp32", cuda_graphs="off")),
                            ("eager", dict(precision="bf16", cuda_graphs="off")),
                            ("compiled", dict(precision="bf16", compile=True))):
        runs[name] = finetune(cfg_for(no_dropout_bert, train, dev, tmp_path / name, eval_every="2", **overrides),
                              progress=False)
    launch = runs["compiled"].metrics["step_launch"]
    assert launch["mode"] == "cuda_graphs" and launch["compiled_layers"], launch
    np.testing.assert_allclose([h["train_loss"] for h in runs["compiled"].metrics["history"]],
                               [h["train_loss"] for h in runs["fp32"].metrics["history"]], rtol=3e-2)
    eager, compiled = (relative_errors(tmp_path / name / "final", tmp_path / "fp32" / "final")
                       for name in ("eager", "compiled"))
    assert np.mean(list(compiled.values())) <= 1.5 * np.mean(list(eager.values())) + 1e-3, (compiled, eager)
    for name, error in compiled.items():
        assert error <= max(3 * eager[name], 5e-2), (name, error, eager[name])


def test_graphed_accumulation_equals_a_larger_graphed_batch(no_dropout_bert, toy_files, tmp_path):
    train, dev = toy_files
    big = finetune(cfg_for(no_dropout_bert, train, dev, tmp_path / "big", batch_size=8), progress=False)
    acc = finetune(cfg_for(no_dropout_bert, train, dev, tmp_path / "acc", batch_size=4, grad_accum=2), progress=False)
    assert acc.metrics["step_launch"]["mode"] == big.metrics["step_launch"]["mode"] == "cuda_graphs"
    close_weights(tmp_path / "big" / "final", tmp_path / "acc" / "final", 1e-3)


def test_a_graphed_run_resumes_like_an_uninterrupted_one(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    """Dropout on: the captured steps draw from the restored CUDA generator."""
    train, dev = toy_files
    whole = finetune(cfg_for(tiny_bert_dir, train, dev, tmp_path / "whole"), progress=False)
    cfg = cfg_for(tiny_bert_dir, train, dev, tmp_path / "cut", save_every=3)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "4")
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    monkeypatch.delenv(FAIL_AFTER_STEPS_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3 and resumed.metrics["step_launch"]["mode"] == "cuda_graphs"
    np.testing.assert_allclose([h["train_loss"] for h in resumed.metrics["history"]],
                               [h["train_loss"] for h in whole.metrics["history"]], rtol=1e-3)
    close_weights(tmp_path / "whole" / "final", tmp_path / "cut" / "final", 1e-3)


def test_fp16_trains_eagerly_with_loss_scaling(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    run = finetune(cfg_for(tiny_bert_dir, train, dev, tmp_path / "fp16", precision="fp16"), progress=False)
    assert run.metrics["step_launch"] == {"mode": "eager"} and run.metrics["mixed_precision"] == "fp16"
    assert all(np.isfinite(v).all() for v in weights(tmp_path / "fp16" / "final").values())
    assert run.metrics["history"][-1]["train_loss"] < run.metrics["history"][0]["train_loss"] + 0.05


def test_a_non_finite_graphed_update_stops_the_run(tiny_bert_dir, toy_files, tmp_path):
    train, dev = toy_files
    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"became NaN/inf at step \d+"):
        finetune(cfg_for(tiny_bert_dir, train, dev, out, lr=3e38, batch_size=4, save_every=1), progress=False)
    for folder in sorted((out / "checkpoints").glob("step-*")):
        assert all(np.isfinite(v).all() for v in weights(folder).values()), folder


# ---------------------------------------------------------------- inference


@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_gpu_features_equal_cpu_fp32_within_half_precision(tiny_bert_dir, pool, precision):
    tokenizer = loading.load_tokenizer(str(tiny_bert_dir))
    cpu = loading.load_encoder(str(tiny_bert_dir)).eval()
    reference = extract_features(cpu, tokenizer, TextDataset(texts=TEXTS), pool=pool, batch_size=8,
                                 device="cpu", dtype=torch.float32)
    device, dtype = torch.device("cuda"), loading.DTYPE_NAMES[precision]
    gpu = loading.cast_for_inference(loading.load_encoder(str(tiny_bert_dir)), device, dtype).eval()
    for batch_size in (4, 4, "auto"):  # small batches twice: the second pass replays captured graphs
        got = extract_features(gpu, tokenizer, TextDataset(texts=TEXTS), pool=pool, batch_size=batch_size,
                               device=device, dtype=dtype)
        assert np.linalg.norm(got - reference) / np.linalg.norm(reference) < 2e-2
        cos = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
        assert cos.min() > 0.999


def test_gpu_embed_store_across_shards_equals_the_cpu_fp32_store(tiny_bert_dir, write_tsv, tmp_path):
    """`bertkit embed` on the GPU queues each shard's batches before waiting for the previous shard's outputs; the
    store it writes (7 shards) holds every row, in order, within bf16 tolerance of the CPU's fp32 store."""
    from bertkit.commands.embed import EmbedConfig, run
    from bertkit.features import store

    data = write_tsv("texts.tsv", [(t,) for t in TEXTS], ("sentence",))
    stores = {}
    for device, precision in (("cpu", "fp32"), ("cuda", "bf16")):
        out = tmp_path / f"store-{device}"
        run(EmbedConfig.of(model=str(tiny_bert_dir), data=str(data), text_column="sentence", out=str(out),
                        device=device, precision=precision, shard_size=7), progress=False)
        stores[device] = np.asarray(store.open(out).features)
    got, reference = stores["cuda"], stores["cpu"]
    assert got.shape == reference.shape == (len(TEXTS), 32)
    assert np.linalg.norm(got - reference) / np.linalg.norm(reference) < 2e-2
    cos = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
    assert cos.min() > 0.999


def test_gpu_predictions_equal_cpu_fp32(tiny_bert_dir, tmp_path):
    model = loading.load_classifier(str(tiny_bert_dir), {0: "a", 1: "b"})
    model.save_pretrained(tmp_path / "clf")
    loading.load_tokenizer(str(tiny_bert_dir)).save_pretrained(tmp_path / "clf")
    folder = str(tmp_path / "clf")
    cpu_model, tokenizer, _ = infer.load_for_inference(folder, Compute("cpu", "fp32"))
    reference = infer.classifier_logits(cpu_model, tokenizer, TextDataset(texts=TEXTS), reading=Reading(64),
                                        batch_size=8, precision="fp32")
    gpu_model, tokenizer, _ = infer.load_for_inference(folder, Compute.resolve(None, "bf16"))
    assert next(gpu_model.parameters()).device.type == "cuda"
    assert next(gpu_model.parameters()).dtype == torch.bfloat16
    got = infer.classifier_logits(gpu_model, tokenizer, TextDataset(texts=TEXTS), reading=Reading(64), batch_size=8,
                                  precision="bf16")
    np.testing.assert_allclose(got, reference, atol=3e-2)


def test_replayed_calls_equal_eager_calls_and_a_host_read_stays_eager(tiny_bert_dir, caplog):
    device = torch.device("cuda")
    model = loading.cast_for_inference(loading.load_encoder(str(tiny_bert_dir)), device, torch.bfloat16).eval()
    batch = {k: v.to(device) for k, v in fastforward.check_batch(model).items()}
    own = lambda b: fastforward.hidden_states(model, b, 2, False)[2]  # noqa: E731
    replayed = Replayed(own, device)
    with torch.inference_mode():
        expected = own(batch).clone()
        outputs = [replayed(batch).clone() for _ in range(4)]
    assert replayed.replays == 3  # the first call runs eagerly, the second captures and replays
    for out in outputs:
        torch.testing.assert_close(out, expected)

    def reads_back(b):
        return own(b) * float(b["input_ids"].sum())  # a host read: not capturable

    fallback = Replayed(reads_back, device)
    with torch.inference_mode(), caplog.at_level("WARNING", logger="bertkit.models.replay"):
        first = [fallback(batch) for _ in range(3)]
    assert fallback.replays == 0 and "runs eagerly" in caplog.text
    torch.testing.assert_close(first[2], first[0])
