"""`bertkit probe` on questions on passages (SQuAD): the span head's loss and gradient are the plain cross-entropy's,
its fit learns an easy set far above the overlap baseline, the table has a row per layer and the paper's
combinations, the run folder records the family, and bad input exits 2 naming the flag, leaving nothing behind."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from squad_samples import squad_questions, write_squad
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.probe import engine
from bertkit.probe.span_head import (
    SpanTargets,
    WindowMemoryRows,
    block_indices,
    fit_span_head,
    span_loss_and_gradient,
    window_curvature,
    window_cuts,
)


def tiny_problem(seed: int = 0, windows: int = 7, d: int = 5) -> tuple[np.ndarray, SpanTargets]:
    """Random standardised token vectors of `windows` windows of 3-9 tokens, each with a gold start <= end."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 10, size=windows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    starts = np.array([rng.integers(0, n) for n in lengths], dtype=np.int64)
    ends = np.array([rng.integers(s, n) for s, n in zip(starts, lengths, strict=True)], dtype=np.int64)
    X = rng.normal(size=(int(offsets[-1]), d)).astype(np.float32)
    return X, SpanTargets(offsets, starts, ends)


def reference_objective(X: np.ndarray, targets: SpanTargets, W: torch.Tensor, b: torch.Tensor, C: float) -> torch.Tensor:
    """The same objective written plainly: each window padded with -inf, torch's cross-entropy per head."""
    Z = torch.from_numpy(X).double()
    logits = Z @ W + b
    n = targets.n_windows
    width = int(np.diff(targets.window_offsets).max())
    padded = torch.full((n, width, 2), -torch.inf, dtype=torch.float64)
    for w in range(n):
        a, c = int(targets.window_offsets[w]), int(targets.window_offsets[w + 1])
        padded[w, :c - a] = logits[a:c]
    ce = torch.nn.functional.cross_entropy
    loss = ce(padded[..., 0], torch.from_numpy(targets.starts), reduction="sum") + ce(
        padded[..., 1], torch.from_numpy(targets.ends), reduction="sum")
    return loss / n + 0.5 / (C * n) * (W ** 2).sum()


def test_the_span_loss_and_gradient_are_the_plain_cross_entropys():
    X, targets = tiny_problem()
    rows = WindowMemoryRows(X.copy(), targets.window_offsets)
    rows.cuts = window_cuts(targets.window_offsets, 10)  # several blocks, each of whole windows
    assert len(rows.cuts) > 3 and set(rows.cuts) <= set(targets.window_offsets.tolist())
    rng = np.random.default_rng(1)
    W = torch.from_numpy(rng.normal(size=(5, 2))).double().requires_grad_()
    b = torch.from_numpy(rng.normal(size=2)).double().requires_grad_()
    expected = reference_objective(X, targets, W, b, C=0.5)
    expected.backward()
    value, gW, gb = span_loss_and_gradient(rows, targets, block_indices(rows.cuts, targets), W.detach().float(),
                                           b.detach().float(), 0.5)
    assert value == pytest.approx(expected.detach().item(), rel=1e-5)
    assert np.allclose(gW.numpy(), W.grad.numpy(), atol=1e-5) and np.allclose(gb.numpy(), b.grad.numpy(), atol=1e-5)


def test_the_fit_reaches_the_plain_objectives_minimum():
    X, targets = tiny_problem(seed=3, windows=12)
    rows = WindowMemoryRows(X.copy(), targets.window_offsets)
    solution = fit_span_head(rows, targets, C=1.0)
    W = torch.from_numpy(solution.coef.T.copy()).requires_grad_()
    b = torch.from_numpy(solution.intercept.copy()).requires_grad_()
    reference_objective(X, targets, W, b, 1.0).backward()
    assert solution.converged and float(W.grad.abs().max()) < 1e-3 and float(b.grad.abs().max()) < 1e-3
    # a streamed copy of the same rows (raw, standardisation folded in) reaches the same solution
    scaler = engine.standardizer_of(iter([X]))
    from bertkit.probe.span_head import WindowStreamedRows

    streamed = fit_span_head(WindowStreamedRows(lambda a, c: X[a:c], len(X), scaler, targets.window_offsets),
                             targets, C=1.0)
    standardised = fit_span_head(WindowMemoryRows(scaler.transform_in_place(X.copy()), targets.window_offsets),
                                 targets, C=1.0)
    assert np.allclose(streamed.coef, standardised.coef, atol=1e-3)


def test_the_curvature_l_bfgs_starts_from_is_each_heads_hessian_at_zero_weights():
    """Where every token of a window is equally likely, the Hessian of a head's weights is the mean over windows of
    their tokens' covariance (plus the penalty); the estimate on every block is that exactly, and the start and end
    heads share it (their Hessian is block-diagonal)."""
    X, targets = tiny_problem(seed=5, windows=30, d=4)
    rows = WindowMemoryRows(X.copy(), targets.window_offsets)
    rows.cuts = window_cuts(targets.window_offsets, 40)
    C = 0.5
    hessian = torch.autograd.functional.hessian(
        lambda W: reference_objective(X, targets, W.reshape(4, 2), torch.zeros(2, dtype=torch.float64), C),
        torch.zeros(8, dtype=torch.float64))
    estimate = window_curvature(rows, block_indices(rows.cuts, targets)).numpy()[:4, :4] + np.eye(4) / (C * 30)
    for head in (0, 1):
        np.testing.assert_allclose(hessian[head::2, head::2].numpy(), estimate, atol=1e-5)
    np.testing.assert_allclose(hessian[0::2, 1::2].numpy(), 0.0, atol=1e-12)


@pytest.fixture(scope="module")
def wide_bert_dir(tiny_bert_dir, tmp_path_factory):
    """A random 2-layer BERT of hidden 128 (the tiny BERT's tokenizer): wide enough that a linear head tells the
    colour words from the others and their positions (hidden 32 cannot: its position vectors are as large)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = tmp_path_factory.mktemp("wide-bert")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def squad_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("span-probe")
    train = write_squad(root / "train.json", squad_questions(60, 0, long_share=0.1))
    dev = write_squad(root / "dev.json", squad_questions(20, 1, long_share=0.1))
    return train, dev


def probe_args(model, train, dev, *more, stride="16"):
    return ["probe", "--model", str(model), "--data", str(train), "--dev", str(dev), "--max-length", "64",
            "--doc-stride", stride, *more]


def test_the_table_learns_the_easy_set_and_the_run_records_the_family(wide_bert_dir, squad_files, tmp_path):
    train, dev = squad_files
    out = tmp_path / "run"
    result = CliRunner().invoke(app, probe_args(wide_bert_dir, train, dev, "--out", str(out), "--json"))
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["family"] == "spans" and metrics["reading"]["doc_stride"] == 16
    labels = [row["label"] for row in metrics["rows"]]
    assert labels == ["embeddings (layer 0)", "layer 1 (second-to-last)", "layer 2 (last)", "sum of last 2",
                      "concat of last 2", "sum of all layers"]
    best = max(metrics["rows"], key=lambda row: row["f1"])
    overlap = metrics["baselines"]["overlap: the passage sentence with the most question words"]
    assert overlap["f1"] < 30 and best["f1"] >= 90  # the colour word: a linear head on any layer finds it
    assert "random-init encoder" in metrics["baselines"] and metrics["random_encoder_row"] == metrics["best"]
    assert all(row["objective"] < 2 * np.log(16) for row in metrics["rows"])  # below the uniform guess's loss
    assert all(row["intervals"]["f1"][0] <= row["f1"] <= row["intervals"]["f1"][1] for row in metrics["rows"])
    config = json.loads((out / "config.json").read_text())
    assert config["family"] == "spans" and config["spans"]["reading"]["max_length"] == 64
    assert (out / "probe_layers.png").is_file()


def test_the_table_prints_every_row_with_the_best_starred(tiny_bert_dir, squad_files):
    train, dev = squad_files
    result = CliRunner().invoke(app, probe_args(tiny_bert_dir, train, dev, "--layers", "0,2", "--no-baselines",
                                                "--limit", "30"))
    assert result.exit_code == 0, result.output
    assert "embeddings (layer 0)" in result.output and "layer 2 (last)" in result.output
    assert " *" in result.output and "best:" in result.output and "concat" not in result.output
    assert "train 30 questions" in result.output


@pytest.mark.parametrize(("more", "message"), [
    (["--cv", "5"], "--cv does not apply to span probes"),
    (["--text-column", "question"], "--text-column does not apply to span probes"),
    (["--pool", "mean"], "--pool"),
    (["--combine", "sum"], "--combine"),
    ([], "--doc-stride 60 leaves no room in a window"),
])
def test_options_that_do_not_apply_exit_2_and_leave_nothing(tiny_bert_dir, squad_files, tmp_path, more, message):
    train, dev = squad_files
    out = tmp_path / "run"
    args = probe_args(tiny_bert_dir, train, dev, "--out", str(out), *more, stride="16" if more else "60")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not out.exists()


def test_the_span_probe_holds_its_out_while_it_works_and_a_failure_leaves_nothing(tiny_bert_dir, squad_files, tmp_path,
                                                                                   monkeypatch):
    """As the word probe: --out held (its lock) from the start of the table, so a second run there is refused at
    once rather than after its work; a failed run leaves --out as it was."""
    from bertkit.families import span_probe
    from bertkit.io import runlock

    train, dev = squad_files
    out = tmp_path / "run"
    seen = {}

    def table(*args, **kwargs):
        seen["holder"] = runlock.holder(out / runlock.LOCK)
        raise RuntimeError("the table failed")

    monkeypatch.setattr(span_probe, "probe_table", table)
    with pytest.raises(RuntimeError, match="the table failed"):
        CliRunner().invoke(app, probe_args(tiny_bert_dir, train, dev, "--out", str(out)), catch_exceptions=False)
    assert seen["holder"] == os.getpid() and not out.exists()


def test_no_dev_set_and_a_dev_file_that_is_not_squad_exit_2(tiny_bert_dir, squad_files, tmp_path):
    train, _ = squad_files
    result = CliRunner().invoke(app, ["probe", "--model", str(tiny_bert_dir), "--data", str(train)])
    assert result.exit_code == 2 and "needs --data (SQuAD training questions) and --dev" in " ".join(
        result.output.split())
    table = tmp_path / "dev.tsv"
    table.write_text("text\tlabel\na\t0\n")
    result = CliRunner().invoke(app, ["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--dev",
                                      str(table), "--task", "spans"])
    assert result.exit_code == 2 and "does not look like a SQuAD set" in " ".join(result.output.split())
