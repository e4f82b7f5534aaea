"""matplotlib figures, drawn headless (Agg) and written atomically by the caller's path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bertkit.runs import atomic_path  # noqa: E402


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def length_histogram(lengths_by_split: dict[str, Sequence[int]], max_length: int, path: Path, title: str) -> Path:
    """Histogram of token lengths per split, with the --max-length cut marked."""
    fig, ax = plt.subplots(figsize=(7, 4))
    top = max(max(v) for v in lengths_by_split.values())
    bins = range(0, top + 2, max(1, (top + 1) // 60 or 1))
    for split, lengths in lengths_by_split.items():
        ax.hist(lengths, bins=bins, alpha=0.55, label=f"{split} ({len(lengths)} rows)")
    ax.axvline(max_length, color="crimson", linestyle="--", label=f"--max-length {max_length}")
    ax.set_xlabel("tokens per row (with [CLS]/[SEP])")
    ax.set_ylabel("rows")
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)
