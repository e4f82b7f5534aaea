"""A span head on frozen token vectors: the start and end scores of a question-answering model as two linear probes
(token score = w . h + b), each a softmax over one window's tokens with cross-entropy to the gold token, as
BertForQuestionAnswering's head and loss read them; fitted by the probe engine's solver (`bertkit.probe.engine`:
torch, float32, full-batch L-BFGS, standardised features).

The objective is the engine's in scikit-learn's scale with the window as the sample: (1 / N) sum over the N training
windows of (start cross-entropy + end cross-entropy) + 1 / (2 C N) ||W||^2, the two intercepts unpenalised. The start
and end heads share no weights: their sum is minimised where each is (one L-BFGS run fits both). A window that does
not hold its question's answer points at its [CLS] token, as fine-tuning labels it (`encoding.qa_windows`).

Rows are a run of windows' tokens one after another (window w's tokens are `window_offsets[w]:window_offsets[w +
1]`); they come in blocks cut at window boundaries (a softmax never straddles two blocks): in memory, standardised
once (`WindowMemoryRows`), or read block by block from the layer files with the standardisation folded into the
weights (`WindowStreamedRows`), so a row too big to hold costs one block of memory."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.probe import engine, products
from bertkit.probe.heads import Standardizer

if TYPE_CHECKING:
    import torch

OUTPUTS = 2
"""A start and an end score per token."""


@dataclass(frozen=True)
class SpanTargets:
    """What a span head is fitted to: each window's token range (`window_offsets`, n_windows + 1 entries) and its gold
    start and end token (indices inside the window)."""

    window_offsets: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @property
    def n_windows(self) -> int:
        return len(self.window_offsets) - 1


def window_cuts(window_offsets: np.ndarray, block_rows: int) -> np.ndarray:
    """Token offsets where blocks start (and the last ends): each block whole windows, about `block_rows` tokens (at
    least one window)."""
    n, cuts = int(window_offsets[-1]), [0]
    while cuts[-1] < n:
        at = cuts[-1]
        last = int(np.searchsorted(window_offsets, at + block_rows, side="right")) - 1  # last start within reach
        after = int(window_offsets[last])
        cuts.append(after if after > at else int(window_offsets[np.searchsorted(window_offsets, at, side="right")]))
    return np.asarray(cuts, dtype=np.int64)


class WindowMemoryRows(engine.MemoryRows):
    """Standardised rows in memory (`engine.MemoryRows`), given in blocks of whole windows."""

    def __init__(self, Z: np.ndarray, window_offsets: np.ndarray) -> None:
        super().__init__(Z)
        self.cuts = window_cuts(window_offsets, self.block_rows)

    def blocks(self) -> Iterator[tuple[int, torch.Tensor]]:
        for start, stop in zip(self.cuts[:-1], self.cuts[1:], strict=True):
            yield int(start), self.tensor[start:stop]


class WindowStreamedRows(engine.StreamedRows):
    """Raw rows read block by block, standardisation folded into the weights (`engine.StreamedRows`), in blocks of
    whole windows."""

    def __init__(self, read: Callable[[int, int], np.ndarray], n: int, scaler: Standardizer,
                 window_offsets: np.ndarray) -> None:
        super().__init__(read, n, scaler)
        self.cuts = window_cuts(window_offsets, self.block_rows)

    def blocks(self) -> Iterator[tuple[int, torch.Tensor]]:
        import torch

        for start, stop in zip(self.cuts[:-1], self.cuts[1:], strict=True):
            block = self.read(int(start), int(stop))
            yield int(start), torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))


@dataclass(frozen=True)
class BlockIndex:
    """One block's windows: each token's window (0-based in the block) and each window's gold start and end token
    (block rows)."""

    window_of: Any
    gold: Any


def block_indices(cuts: np.ndarray, targets: SpanTargets) -> dict[int, BlockIndex]:
    """Block start -> its `BlockIndex`, computed once per fit."""
    import torch

    offsets = targets.window_offsets
    out = {}
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        first, last = (int(np.searchsorted(offsets, at)) for at in (start, stop))
        local = offsets[first:last + 1] - start
        window_of = np.repeat(np.arange(last - first), np.diff(local))
        gold = np.stack([local[:-1] + targets.starts[first:last], local[:-1] + targets.ends[first:last]], axis=1)
        out[int(start)] = BlockIndex(torch.from_numpy(window_of), torch.from_numpy(gold.astype(np.int64)))
    return out


def window_softmax(logits: torch.Tensor, window_of: torch.Tensor, n_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(each token's probability within its window, per column; each window's log normaliser (n_windows, 2))."""
    import torch

    index = window_of[:, None].expand(-1, logits.shape[1])
    top = torch.full((n_windows, logits.shape[1]), -torch.inf).scatter_reduce_(0, index, logits, "amax")
    shifted = (logits - top[window_of]).exp_()
    sums = torch.zeros_like(top).index_add_(0, window_of, shifted)
    return shifted.div_(sums[window_of]), top + sums.log()


def span_loss_and_gradient(rows: Any, targets: SpanTargets, index: dict[int, BlockIndex], W: torch.Tensor,
                           b: torch.Tensor, C: float) -> tuple[float, torch.Tensor, torch.Tensor]:
    """The objective (module docstring) at (W (d, 2), b (2,)) and its gradient: one pass over the rows, block by
    block (logits, each window's softmax, the residuals, the gradient's share)."""
    import torch

    gW, gb, loss = torch.zeros_like(W), torch.zeros_like(b), 0.0
    W_raw, b_raw = rows.raw_weights(W, b)
    wide_weights = products.widened(W_raw, b_raw)
    columns = torch.arange(OUTPUTS)
    for start, Z in rows.blocks():
        block = index[start]
        logits = products.logits_of(Z, W_raw, b_raw, wide_weights)
        residual, log_norm = window_softmax(logits, block.window_of, len(block.gold))
        loss += float((log_norm - logits[block.gold, columns]).sum(dtype=torch.float64))
        residual[block.gold, columns] -= 1.0
        products.add_gradient(gW, Z, residual)  # two columns: computed at 16 (`products.wide`)
        gb += residual.sum(dim=0)
    gW = rows.standardized_gradient(gW, gb)
    n = targets.n_windows
    objective = loss / n + 0.5 / (C * n) * float((W.double() ** 2).sum())
    return objective, gW.div_(n).add_(W, alpha=1.0 / (C * n)), gb.div_(n)


def window_curvature(rows: Any, index: dict[int, BlockIndex], max_rows: int = engine.CURVATURE_ROWS) -> torch.Tensor:
    """The loss's Hessian at zero weights for each head ((d + 1, d + 1) float64, `engine.Curvature`): there every
    token of a window is equally likely, so it is the mean over windows of the covariance of a window's standardised
    token vectors, (1 / N) sum_w (1 / L_w) sum_t (z_t - mean_w)(z_t - mean_w)^T, estimated on every r-th block of
    whole windows (about `max_rows` tokens, or 16 per feature where that is more). The intercepts cancel in every
    window's softmax (no curvature, no gradient): 1 on their diagonal keeps the factor whole."""
    import torch

    D = rows.d + 1
    stride = max(1, rows.n // max(max_rows, 16 * D))
    G, windows = torch.zeros(D, D, dtype=torch.float64), 0
    with torch.inference_mode():
        for number, (start, block) in enumerate(rows.blocks()):
            if number % stride:  # every r-th block: blocks hold whole windows
                continue
            Z, window_of = rows.standardized(block), index[start].window_of
            n_windows = len(index[start].gold)
            counts = torch.bincount(window_of, minlength=n_windows).to(Z.dtype)
            means = torch.zeros(n_windows, Z.shape[1]).index_add_(0, window_of, Z).div_(counts[:, None])
            centred = Z - means[window_of]
            G[:-1, :-1] += ((centred / counts[window_of][:, None]).T @ centred).double()
            windows += n_windows
    G[:-1, :-1] /= max(windows, 1)
    G[-1, -1] = 1.0
    return G


def fit_span_head(rows: Any, targets: SpanTargets, C: float, *, init: engine.LinearSolution | None = None,
                  tol: float = engine.TOL, max_iter: int = engine.MAX_ITER) -> engine.LinearSolution:
    """The start and end heads minimising the objective on `rows` at `C` (coef (2, d), intercept (2,)), from `init`
    (a solution of the same shape: a neighbouring layer's) or from zero (`engine.fit_head`), L-BFGS started from the
    curvature at zero weights (`window_curvature`)."""
    index = block_indices(rows.cuts, targets)

    def curvature() -> Callable[[Any], Any]:
        return engine.Curvature.of(window_curvature(rows, index), 1.0 / (C * targets.n_windows)).apply

    return engine.fit_head(rows.n, rows.d, OUTPUTS,
                           lambda W, b: span_loss_and_gradient(rows, targets, index, W, b, C), init=init, tol=tol,
                           max_iter=max_iter, curvature=curvature)


@dataclass(frozen=True)
class FittedSpanHead:
    """A fitted span head: its solution (where the next row's fit can start), the training rows' standardiser, and
    the fit's seconds (standardisation included)."""

    solution: engine.LinearSolution
    scaler: Standardizer
    seconds: float

    def logits(self, read: Callable[[int, int], np.ndarray], n: int) -> np.ndarray:
        """(n, 2) start and end scores of raw rows (`read(start, stop)`; standardised as the training rows were)."""
        rows = engine.StreamedRows(read, n, self.scaler)
        return engine.decisions(rows, self.solution.coef, self.solution.intercept)


def fitted_span_head(X: Any, targets: SpanTargets, C: float, init: engine.LinearSolution | None = None,
                     owned: bool = False) -> FittedSpanHead:
    """The head fitted on training rows `X`: an (n, d) float32 matrix (standardised in place when `owned`, else in a
    copy) or a `probe.words.StreamedMatrix` read block by block at every pass."""
    started = time.perf_counter()
    if isinstance(X, np.ndarray):
        scaler = engine.standardizer_of(engine.array_blocks(X))
        mine = owned and X.dtype == np.float32 and X.flags.c_contiguous and X.flags.writeable
        Z = X if mine else np.array(X, dtype=np.float32, order="C")
        rows: Any = WindowMemoryRows(scaler.transform_in_place(Z), targets.window_offsets)
    else:
        step = engine.block_rows_for(X.dim)
        scaler = engine.standardizer_of(X.read(a, min(X.n, a + step)) for a in range(0, X.n, step))
        rows = WindowStreamedRows(X.read, X.n, scaler, targets.window_offsets)
    solution = fit_span_head(rows, targets, C, init=init)
    return FittedSpanHead(solution, scaler, time.perf_counter() - started)
