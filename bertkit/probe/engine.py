"""The fitting engine every probe uses: linear heads on standardised features, solved in torch, float32, on all the
threads torch has, one block of rows at a time.

The objective is scikit-learn's, so a probe fitted here is comparable to one fitted by `LogisticRegression(lbfgs)`
on the same standardised features: C * sum_i s_i * loss_i + 1/2 ||W||^2 (the intercept unpenalised; s_i the sample
weights, 1 or the class weights of `balanced`: n / (classes * rows of the class)), minimised in the scale scikit-
learn minimises it, divided by C * sum_i s_i, and stopped as it stops: the largest absolute gradient entry at most
`TOL` (1e-4, LogisticRegression's tol), or `MAX_ITER` iterations. The losses:
- `SOFTMAX`: multinomial cross-entropy over K >= 3 classes, one weight row per class;
- `SIGMOID`: binary cross-entropy per output column: one column for two classes (the second class's row, as
  LogisticRegression keeps it), or one per tag for tag sets (one-vs-rest: the tags' independent problems solved as
  one, their sum, whose optimum is every tag's own).
Ridge regression (`ridge_solutions`) is closed-form: one eigendecomposition of the standardised Gram matrix
gives every alpha.

The solver is L-BFGS (`bertkit.probe.lbfgs`), its first inverse-Hessian estimate the objective's curvature at zero
weights (`Curvature`: the Gram matrix of the standardised rows, one Cholesky factor) instead of a scaled identity: an
encoder layer's features are strongly correlated even standardised, and plain L-BFGS spent most of its iterations
learning it (SST-2 [CLS] probes ~260 iterations, 7-16 from the curvature; the concat of the last four layers on 204k
POS words 44 passes, where it had needed ~200). The curvature at the starting point itself (its rows' p (1 - p)) was
tried too: on warm-started softmax rows its first steps went too far, a second pass each.
A fit can start from another's solution (`init`): a C path is fitted from the smallest C up, each C from the last.

Rows come in blocks (`MemoryRows`: an in-memory matrix, standardised once, viewed block by block; `StreamedRows`:
raw rows read block by block - from layer files - with the standardisation folded into the weights), so the same
arithmetic serves a matrix that fits in memory and one that does not, and the two give the same solution to
float32 rounding (tested)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.probe.heads import Standardizer
from bertkit.probe.lbfgs import HISTORY, MAX_ITER, TOL, minimize_lbfgs
from bertkit.probe.products import SMALL_PASS, add_gradient, logits_of, widened

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BLOCK_BYTES = 64 << 20
"""Rows per block: as many as fill 64 MiB of float32 features. Big blocks: each block costs a few parallel regions
(a matrix product, a softmax), whose start-up is the price of a block, and a busy 2-core machine makes it high."""
SOFTMAX, SIGMOID = "softmax", "sigmoid"
MOMENT_ROWS = 2048
"""Rows per chunk of `standardizer_of`'s float64 moments."""


# ---------------------------------------------------------------- rows


def standardizer_of(blocks: Iterator[np.ndarray]) -> Standardizer:
    """Mean and scale of rows given block by block, as StandardScaler's (to ~1e-14): float64 moments of `MOMENT_ROWS`
    rows at a time, merged (Chan et al., as StandardScaler's incremental mean and variance); a feature constant to
    rounding gets scale 1. Chunks that small stay in cache: 204,577 x 384 rows in ~0.1 s, where whole-block float64
    arrays took ~0.6 s (6,920 x 384 SST-2 rows: 5 ms against 21, once per cell and fold of a sweep)."""
    import torch

    n, mean, m2 = 0, None, None
    for block in blocks:
        for start in range(0, len(block), MOMENT_ROWS):
            chunk = torch.tensor(block[start:start + MOMENT_ROWS], dtype=torch.float64)  # a copy: centred in place
            k, chunk_mean = len(chunk), chunk.mean(dim=0)
            chunk_m2 = chunk.sub_(chunk_mean).square_().sum(dim=0)
            if mean is None:
                n, mean, m2 = k, chunk_mean, chunk_m2
                continue
            delta, total = chunk_mean - mean, n + k
            mean = mean + delta * (k / total)
            m2 = m2 + chunk_m2 + delta ** 2 * (n * k / total)
            n = total
    if mean is None or m2 is None:
        raise ValueError("no rows to standardise")
    mean, var = mean.numpy(), (m2 / n).numpy()
    eps = np.finfo(np.float64).eps
    constant = var <= n * eps * var + (n * mean * eps) ** 2  # StandardScaler's test for a constant feature
    scale = np.where(constant, 1.0, np.sqrt(var))
    return Standardizer(mean, var, scale, n)


def block_rows_for(d: int, block_bytes: int = BLOCK_BYTES) -> int:
    """How many rows of `d` float32 features make one block."""
    return max(1024, block_bytes // (4 * max(d, 1)))


def array_blocks(X: np.ndarray, block_rows: int | None = None) -> Iterator[np.ndarray]:
    block_rows = block_rows or block_rows_for(int(X.shape[1]))
    for start in range(0, len(X), block_rows):
        yield X[start:start + block_rows]


class MemoryRows:
    """Standardised float32 rows held in memory (`Z`, (n, d)), given as views of `block_rows` rows."""

    def __init__(self, Z: np.ndarray, block_rows: int | None = None) -> None:
        import torch

        if Z.dtype != np.float32 or not Z.flags.c_contiguous:
            raise ValueError("MemoryRows needs a C-contiguous float32 matrix")
        self.n, self.d = int(Z.shape[0]), int(Z.shape[1])
        self.block_rows = block_rows or block_rows_for(self.d)
        self.tensor = torch.from_numpy(Z)

    def blocks(self) -> Iterator[tuple[int, torch.Tensor]]:
        for start in range(0, self.n, self.block_rows):
            yield start, self.tensor[start:start + self.block_rows]

    def raw_weights(self, W: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The weights that give the standardised rows' logits from the blocks as they come: these blocks are."""
        return W, b

    def standardized_gradient(self, gW: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        """The gradient in W from the blocks' share X^T R (and R's column sums `gb`): the same here."""
        return gW

    def standardized(self, block: torch.Tensor) -> torch.Tensor:
        """A block's rows standardised: these blocks are."""
        return block


class StreamedRows:
    """Raw rows read `block_rows` at a time (`read(start, stop)`: rows start:stop as a C-contiguous float32 array,
    which may be a buffer the next call reuses) and never standardised: the standardisation is folded into the
    weights instead (logits = X (W / scale) + b - (mean / scale) W; the gradient unfolded the same way), so a block
    costs its reading and the two products, and memory holds one block, whatever n is. Folding cancels large terms
    only where the intercept's gradient is large (mean * sum of residuals), which vanishes at the optimum."""

    def __init__(self, read: Callable[[int, int], np.ndarray], n: int, scaler: Standardizer,
                 block_rows: int | None = None) -> None:
        import torch

        self.read, self.n, self.d = read, n, scaler.n_features_in_
        self.block_rows = block_rows or block_rows_for(self.d)
        self.inverse = torch.from_numpy((1.0 / scaler.scale_).astype(np.float32))
        self.shift = torch.from_numpy((scaler.mean_ / scaler.scale_).astype(np.float32))

    def blocks(self) -> Iterator[tuple[int, torch.Tensor]]:
        import torch

        for start in range(0, self.n, self.block_rows):
            block = self.read(start, min(self.n, start + self.block_rows))
            yield start, torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))

    def raw_weights(self, W: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return W * self.inverse[:, None], b - self.shift @ W

    def standardized_gradient(self, gW: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        return gW.mul_(self.inverse[:, None]).sub_(self.shift[:, None] * gb[None, :])

    def standardized(self, block: torch.Tensor) -> torch.Tensor:
        return block * self.inverse - self.shift


# ---------------------------------------------------------------- targets and objective


@dataclass(frozen=True)
class Targets:
    """What a logistic head is fitted to: class ids (n,) for `SOFTMAX` over `n_outputs` classes, or 0/1 columns
    (n, n_outputs) for `SIGMOID`; sample weights (None: all 1) and their sum."""

    kind: str
    values: Any
    n_outputs: int
    weights: Any = None
    total: float = 0.0

    @classmethod
    def classes(cls, ids: np.ndarray, n_classes: int, class_weight: str | None = None) -> Targets:
        """Class ids 0..n_classes-1: softmax for three or more, one sigmoid column (class 1) for two."""
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        weights = None
        if class_weight == "balanced":  # n / (classes * count), as compute_class_weight("balanced")
            counts = np.bincount(ids, minlength=n_classes).astype(np.float64)
            weights = torch.from_numpy((len(ids) / (n_classes * counts[ids])).astype(np.float32))
        elif class_weight is not None:
            raise ValueError(f"class_weight must be None or 'balanced'; got {class_weight!r}")
        total = float(len(ids)) if weights is None else float(weights.double().sum())
        if n_classes == 2:
            return cls(SIGMOID, torch.from_numpy((ids == 1).astype(np.float32)[:, None]), 1, weights, total)
        return cls(SOFTMAX, torch.from_numpy(ids), n_classes, weights, total)

    @classmethod
    def columns(cls, Y: np.ndarray) -> Targets:
        """0/1 columns (n, tags), each its own binary problem (one-vs-rest)."""
        import torch

        Y = np.asarray(Y, dtype=np.float32)
        return cls(SIGMOID, torch.from_numpy(np.ascontiguousarray(Y)), int(Y.shape[1]), None, float(len(Y)))

    def block(self, start: int, size: int) -> tuple[Any, Any]:
        weights = None if self.weights is None else self.weights[start:start + size]
        return self.values[start:start + size], weights


def loss_and_gradient(rows: Any, targets: Targets, W: torch.Tensor, b: torch.Tensor,
                      C: float) -> tuple[float, torch.Tensor, torch.Tensor]:
    """The objective (scaled by 1 / (C * sum of weights)) at (W (d, outputs), b (outputs,)), and its gradient: one
    pass over the rows, block by block (logits, the loss, the residuals, the gradient's share)."""
    import torch
    import torch.nn.functional as F

    gW, gb, loss = torch.zeros_like(W), torch.zeros_like(b), 0.0
    W_raw, b_raw = rows.raw_weights(W, b)
    wide_weights = widened(W_raw, b_raw)
    for start, Z in rows.blocks():
        values, weights = targets.block(start, len(Z))
        logits = logits_of(Z, W_raw, b_raw, wide_weights)
        if targets.kind == SOFTMAX:
            log_p = torch.log_softmax(logits, dim=1)
            picked = log_p.gather(1, values[:, None])[:, 0]
            residual = log_p.exp_()
            residual.scatter_add_(1, values[:, None], torch.full((len(Z), 1), -1.0))
            row_loss = -picked
        else:
            row_loss = (F.softplus(logits) - values * logits).sum(dim=1)
            residual = torch.sigmoid(logits).sub_(values)
        if weights is not None:
            row_loss = row_loss * weights
            residual.mul_(weights[:, None])
        loss += float(row_loss.sum(dtype=torch.float64))
        add_gradient(gW, Z, residual)
        gb += residual.sum(dim=0)
    gW = rows.standardized_gradient(gW, gb)
    scale, penalty = 1.0 / targets.total, 1.0 / (C * targets.total)
    objective = loss * scale + 0.5 * penalty * float((W.double() ** 2).sum())
    return objective, gW.mul_(scale).add_(W, alpha=penalty), gb.mul_(scale)


def decisions(rows: Any, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """The logits (n, outputs) float32 of a head (`coef` (outputs, d), `intercept`) on `rows`, block by block."""
    import torch

    W, b = rows.raw_weights(torch.from_numpy(np.ascontiguousarray(coef.T, dtype=np.float32)),
                            torch.from_numpy(np.asarray(intercept, dtype=np.float32)))
    out = np.empty((rows.n, len(intercept)), dtype=np.float32)
    with torch.inference_mode():
        wide_weights = widened(W, b)
        for start, Z in rows.blocks():
            out[start:start + len(Z)] = logits_of(Z, W, b, wide_weights).numpy()
    return out


# ---------------------------------------------------------------- the starting curvature


CURVATURE_ROWS = 20_000
"""Rows the starting curvature is estimated on (every r-th row of the fit's; at least 16 per feature)."""


@dataclass(frozen=True)
class Curvature:
    """L-BFGS's first inverse-Hessian estimate (`apply`): the objective's curvature at zero weights, where every
    output's probability is uniform, inverted: (w0 G + penalty on the weights)^-1 on each output column's weights and
    intercept. G is the Gram matrix of the standardised rows and a column of ones (the intercept's), weighted by the
    rows' sample weights; w0 the loss's second derivative there, p (1 - p) at p = 1 / classes (softmax) or 1/4
    (sigmoid). Kept as the Cholesky factor of that one (d + 1, d + 1) matrix, which every column shares. For a
    sigmoid head it is the Hessian at zero weights; for a softmax, that Hessian's diagonal blocks."""

    factor: torch.Tensor

    @classmethod
    def of(cls, loss_hessian: torch.Tensor, penalty: float) -> Curvature:
        """The estimate from the loss's curvature at zero weights (`loss_curvature`) and the penalty 1 / (C * sum
        of weights)."""
        import torch

        matrix = loss_hessian.clone()
        matrix.diagonal()[:-1].add_(penalty)  # the weights', not the intercept's (its row holds the rows' weight)
        return cls(torch.linalg.cholesky(matrix))

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """The estimate times `v`, a flat vector laid out as `fit_head`'s (W (d, k) row by row, then b (k,))."""
        import torch

        k = v.numel() // self.factor.shape[0]
        V = torch.cat([v[:-k].reshape(-1, k), v[-k:][None]])
        out = torch.cholesky_solve(V, self.factor)
        return torch.cat([out[:-1].reshape(-1), out[-1]])


def loss_curvature(rows: Any, targets: Targets, max_rows: int = CURVATURE_ROWS) -> torch.Tensor:
    """The loss's Hessian at zero weights for each output column, w0 G / (sum of weights) ((d + 1, d + 1) float64;
    `Curvature`), the Gram matrix estimated on every r-th row (as many as `max_rows`, or 16 per feature where that
    is more), read block by block as the fit reads them. It does not depend on C: a C path computes it once."""
    import torch

    d = rows.d
    stride = max(1, rows.n // max(max_rows, 16 * (d + 1)))
    G = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    with torch.inference_mode():
        for start, block in rows.blocks():
            first = (-start) % stride
            Z = rows.standardized(block[first::stride])
            if not len(Z):
                continue
            _, weights = targets.block(start, len(block))
            if weights is None:
                weighted, weight = Z, float(len(Z))
            else:
                picked = weights[first::stride]
                weighted, weight = Z * picked[:, None], float(picked.double().sum())
            G[:d, :d] += (weighted.T @ Z).double()  # Z^T diag(s) Z, then the ones column's share: no (n, d + 1) copy
            G[d, :d] += weighted.sum(dim=0, dtype=torch.float64)
            G[d, d] += weight
    G[:d, d] = G[d, :d]
    total = float(G[d, d])
    second = 0.25 if targets.kind == SIGMOID else (1.0 - 1.0 / targets.n_outputs) / targets.n_outputs
    return G.mul_(second / total)


# ---------------------------------------------------------------- solver


@dataclass(frozen=True)
class LinearSolution:
    """A fitted linear head: `coef` (outputs, d), `intercept` (outputs,), float64 copies of the float32 solution;
    the iterations it took, whether it met the tolerance, and the objective it reached."""

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: int
    converged: bool
    objective: float


def fit_linear(rows: Any, targets: Targets, C: float, *, init: LinearSolution | None = None, tol: float = TOL,
               max_iter: int = MAX_ITER, loss_hessian: torch.Tensor | None = None) -> LinearSolution:
    """The logistic head minimising the objective (see the module) on `rows` at `C`, from `init` (a solution of the
    same shape: a neighbouring C's or layer's) or from zero, L-BFGS started from the curvature at zero weights
    (`Curvature`; `loss_hessian`: `loss_curvature(rows, targets)` when the caller has it, as a C path does)."""

    def curvature() -> Callable[[Any], Any]:
        hessian = loss_curvature(rows, targets) if loss_hessian is None else loss_hessian
        return Curvature.of(hessian, 1.0 / (C * targets.total)).apply

    solution = fit_head(rows.n, rows.d, targets.n_outputs,
                        lambda W, b: loss_and_gradient(rows, targets, W, b, C), init=init, tol=tol, max_iter=max_iter,
                        curvature=curvature)
    if not solution.converged:
        log.warning("the probe's fit stopped after %d iterations, before its gradient reached %g (C=%g): its scores "
                    "stand, its objective may improve a little with more iterations", solution.n_iter, tol, C)
    return solution


def fit_head(n: int, d: int, k: int, objective: Callable[[Any, Any], tuple[float, Any, Any]], *,
             init: LinearSolution | None = None, tol: float = TOL, max_iter: int = MAX_ITER,
             curvature: Callable[[], Callable[[Any], Any]] | None = None) -> LinearSolution:
    """The linear head (W (d, k), b (k,)) minimising `objective(W, b)` -> (value, gradient in W, in b) over `n` rows
    with L-BFGS in float64 steps on float32 passes, from `init` (a solution of the same shape: a neighbouring C's or
    layer's) or from zero; `curvature()`: L-BFGS's first inverse-Hessian estimate (`Curvature.apply`), if any.
    Every head of the probes is solved here (`fit_linear`, the span head)."""
    import torch

    x0 = torch.zeros(d * k + k, dtype=torch.float64)
    if init is not None and init.coef.shape == (k, d):
        x0[:d * k] = torch.from_numpy(np.ascontiguousarray(init.coef.T)).reshape(-1)
        x0[d * k:] = torch.from_numpy(np.asarray(init.intercept, dtype=np.float64))

    def fun(x: torch.Tensor) -> tuple[float, torch.Tensor]:
        value, gW, gb = objective(x[:d * k].reshape(d, k).float(), x[d * k:].float())
        return value, torch.cat([gW.reshape(-1), gb]).double()

    with torch.inference_mode():  # the curvature's Gram matrix is a big product: all threads
        precondition = None if curvature is None else curvature()
    with torch.inference_mode(), threads_for(n * d * k):
        x, value, n_iter, converged = minimize_lbfgs(fun, x0, tol=tol, max_iter=max_iter, history=HISTORY,
                                                     precondition=precondition)
    coef = x[:d * k].reshape(d, k).float().double().numpy().T.copy()
    return LinearSolution(coef, x[d * k:].float().double().numpy(), n_iter, converged, value)


@contextmanager
def threads_for(size: int) -> Iterator[None]:
    """One thread for a fit whose passes are small (`size` = rows x features x outputs below `SMALL_PASS`): there
    the start-up of a parallel region costs more than the arithmetic it shares; torch's threads otherwise."""
    import torch

    threads = torch.get_num_threads()
    if size >= SMALL_PASS or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- ridge


def ridge_solutions(Z: np.ndarray, y: np.ndarray, alphas: Sequence[float]) -> list[tuple[np.ndarray, float]]:
    """(coef (d,), intercept) of ridge regression (||y - Z w - b||^2 + alpha ||w||^2, b unpenalised) on
    standardised `Z` for every alpha: the centred Gram matrix decomposed once, in float64."""
    import torch

    Zt = torch.from_numpy(np.ascontiguousarray(Z, dtype=np.float32)).double()
    center, target = Zt.mean(dim=0), torch.from_numpy(np.asarray(y, dtype=np.float64))
    Zc = Zt - center
    eigenvalues, U = torch.linalg.eigh(Zc.T @ Zc)
    projected = U.T @ (Zc.T @ (target - target.mean()))
    out = []
    for alpha in alphas:
        coef = U @ (projected / (eigenvalues.clamp_min(0) + float(alpha)))
        out.append((coef.numpy(), float(target.mean() - center @ coef)))
    return out
