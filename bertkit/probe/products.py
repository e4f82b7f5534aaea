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
"""Products (rows x features x outputs) below which a block or a fit's pass counts as small: its products keep their
width here, and a fit of such passes runs on one thread (`engine.threads_for`)."""


def wide(k: int, Z: torch.Tensor) -> bool:
    """Whether a block's products for `k` output columns are computed at `WIDE` columns, the weights padded with zero
    columns and the residuals with zeros: for 2 to 15 columns on a block of at least `SMALL_PASS` products. MKL's
    float32 GEMM (torch 2.13, AVX2, 2 AMD EPYC cores) runs 16 columns faster than any narrower width from 2 up: on
    201,192 x 384 rows the logits took 51 ms at 16 columns against 70-115 ms at 2-8, the gradient share Z^T R 43 ms
    against 372-504 ms (and R^T Z, the faster way round at those widths, 69-139 ms); on 1,536 features a pass's two
    products at 7 columns 736 ms against 404 ms at 16 (`benchmarks/bench_probe_gradient.py`). The narrow products'
    speed is not steady on a shared machine: a whole 7-tag fit on 201,192 x 384 rows in fresh processes took 19.8 s
    at 7 columns against 21.4 s at 16 in one spell (162 iterations each, 01:50 UTC), and 15.1-16.7 s against 7.0-8.4
    s in another (56 iterations, A B B A twice, 03:54 the next session); a pass at 7 columns took 120-280 ms within
    those hours, one at 16 120-150 ms. At 16 a pass is about as fast as the narrow one at its best, and does not lose
    2x when the narrow one slows. One column (a GEMV), 16 or more and small blocks keep their width: as fast, and a
    small fit's float32 sums stay those it has always had (a fit to a tolerance at float32's noise floor, as the
    engine's tests run, converges on them)."""
    k = int(k)
    return 1 < k < WIDE and Z.shape[0] * Z.shape[1] * k >= SMALL_PASS


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
    if wide(k, Z):
        return torch.addmm(wide_weights[1], Z, wide_weights[0])[:, :k]
    return torch.addmm(b, Z, W)


def add_gradient(gW: torch.Tensor, Z: torch.Tensor, residual: torch.Tensor) -> None:
    """gW += Z^T R, the block's share of the gradient, computed at `WIDE` columns where `wide` says (the residuals
    written into a zero (rows, `WIDE`) buffer)."""
    import torch

    k = residual.shape[1]
    if wide(k, Z):
        padded = torch.zeros(len(residual), WIDE, dtype=residual.dtype)
        padded[:, :k] = residual
        gW.add_((Z.T @ padded)[:, :k])
    else:
        gW.addmm_(Z.T, residual)
