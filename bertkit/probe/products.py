"""A pass's two products over a block of rows for a linear head: the logits Z W + b and the gradient's share Z^T R,
computed at `WIDE` output columns where a narrow head's would be slow (`wide`). Used by every head of the probe
engine (`bertkit.probe.engine`, `bertkit.probe.span_head`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

WIDE = 16
"""The output columns a narrow head's products are computed at (`wide`)."""
SMALL_PASS = 1 << 24
"""Products (rows x features x outputs) below which a fit's pass counts as small: such a fit runs on one thread
(`engine.threads_for`)."""


def wide(k: int) -> bool:
    """Whether a block's products for `k` output columns are computed at `WIDE` columns, the weights padded with zero
    columns and the residuals with zeros: for 2 to 15 columns, on blocks of every size. MKL's float32 GEMM (torch
    2.13, AVX2, 2 AMD EPYC cores) runs those narrow products slower than 16 columns
    (`benchmarks/bench_probe_gradient.py` -> `benchmarks/results/probe-gradient.json`): on 204,577 x 384 rows and 7
    columns the logits 82 ms against 45 ms at 16, the gradient share Z^T R 414 ms against 37 ms (R^T Z, the faster
    way round at 7, 107 ms); on 67,349 x 1,536 rows and 4 columns Z^T R 969 ms against 61 ms. A whole 7-tag fit on
    201,192 words in fresh processes, A B B A: 6.7-7.1 s at 16 columns against 14.1-16.7 s at 7 (48 and 52
    iterations). An earlier whole-fit measurement found no gain and reverted this (fd1e9d2), but it had run both
    sides on this checkout: its fit processes started in it, and `python -c` puts the working directory first on
    sys.path. Small blocks gain as much, on one thread as a small fit runs (`engine.threads_for`): both products on
    6,920 x 384 rows 17.3 ms at 3 columns and 21.8 ms at 7 against 7.9 and 8.7 ms at 16, 2,000 rows 5.2 and 6.6 ms
    against 1.5; a whole fit on 6,920 SST-2 sentence rows with 3 made-up classes 0.22 s against 0.14 s (7 classes
    0.81 s against 0.71 s, 62 iterations each, the same objective to 1e-9). One column (a GEMV) and 16 or more keep
    their width: as fast."""
    k = int(k)
    return 1 < k < WIDE


def widened(W: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (d, k), b (k,)) padded with zero columns to `WIDE` (`wide`): once per pass, for every block."""
    import torch.nn.functional as F

    k = W.shape[1]
    return (F.pad(W, (0, WIDE - k)), F.pad(b, (0, WIDE - k))) if 1 < k < WIDE else (W, b)


def logits_of(Z: torch.Tensor, W: torch.Tensor, b: torch.Tensor,
              wide_weights: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """A block's logits Z W + b ((rows, k)), computed at `WIDE` columns where `wide` says (`wide_weights`: the
    weights `widened`), the padding's columns left out of the view returned."""
    import torch

    k = W.shape[1]
    if wide(k):
        return torch.addmm(wide_weights[1], Z, wide_weights[0])[:, :k]
    return torch.addmm(b, Z, W)


def add_gradient(gW: torch.Tensor, Z: torch.Tensor, residual: torch.Tensor) -> None:
    """gW += Z^T R, the block's share of the gradient, computed at `WIDE` columns where `wide` says (the residuals
    written into a zero (rows, `WIDE`) buffer)."""
    import torch

    k = residual.shape[1]
    if wide(k):
        padded = torch.zeros(len(residual), WIDE, dtype=residual.dtype)
        padded[:, :k] = residual
        gW.add_((Z.T @ padded)[:, :k])
    else:
        gW.addmm_(Z.T, residual)
