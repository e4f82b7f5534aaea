"""matplotlib figures, drawn headless (Agg) and written atomically by the caller's path. The figures of a model's dev
predictions and a run's curves are drawn by one function each and written by `save_figure`, so a caller that draws
several (a fine-tuning run's `training_figures`) writes them together."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bertkit.io.atomic import atomic_path  # noqa: E402
from bertkit.measure.distill_report import throughput_unit
from bertkit.measure.report import peak_memory_mb


def save_figure(fig, path: Path) -> Path:
    """Write a drawn figure as PNG at `path` (atomically) and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def length_histogram(counts_by_split: dict[str, Sequence[int]], max_length: int, path: Path, title: str) -> Path:
    """Histogram of token lengths per split, with the --max-length cut marked; `counts_by_split[split][n]` is how many
    rows of the split have n tokens (the length report's histogram: no per-row values)."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    counts = {split: np.asarray(c) for split, c in counts_by_split.items()}
    top = max(int(np.flatnonzero(c)[-1]) for c in counts.values())
    bins = range(0, top + 2, max(1, (top + 1) // 60 or 1))
    for split, c in counts.items():
        ax.hist(np.arange(len(c)), bins=bins, weights=c, alpha=0.55, label=f"{split} ({int(c.sum())} rows)")
    ax.axvline(max_length, color="crimson", linestyle="--", label=f"--max-length {max_length}")
    ax.set_xlabel("tokens per row (with [CLS]/[SEP])")
    ax.set_ylabel("rows")
    ax.set_title(title)
    ax.legend()
    return save_figure(fig, path)


def curve_series(history: Sequence[dict], metric: str,
                 train_log: Sequence[dict] = ()) -> dict[str, tuple[list[float], list[float]]]:
    """What `training_curves` draws, by series name: (optimizer steps, values). The training loss at every logged
    step (`train_log`, every --log-every steps; the evaluations' means when nothing was logged), the dev loss and
    dev metrics at every evaluation."""
    train = ([e["step"] for e in train_log], [e["train_loss"] for e in train_log]) if train_log else (
        [h["step"] for h in history], [h["train_loss"] for h in history])
    series = {"train loss": train, "dev loss": ([h["step"] for h in history], [h["dev_loss"] for h in history])}
    for name in dict.fromkeys(["accuracy", "mcc", metric]):
        key = f"dev_{name}"
        if name != "loss" and history and all(isinstance(h.get(key), (int, float)) for h in history):
            series[f"dev {name}"] = ([h["step"] for h in history], [h[key] for h in history])
    return series


def training_curves(history: Sequence[dict], metric: str, title: str, train_log: Sequence[dict] = ()):
    """Fine-tuning curves: the training loss at every logged step and the dev loss (left axis), the dev metrics
    at every evaluation (right axis), by optimizer step."""
    fig, ax = plt.subplots(figsize=(7, 4))
    series = curve_series(history, metric, train_log)
    right = ax.twinx()
    for color, (name, (steps, values)) in enumerate(series.items()):
        axis = ax if name.endswith("loss") else right
        dense = name == "train loss" and len(steps) > len(history)
        axis.plot(steps, values, marker="." if dense else "o" if axis is ax else "s", color=f"C{color}",
                  linestyle="-" if axis is ax else "--", label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    right.set_ylabel("dev metric")
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right")
    ax.set_title(title)
    return fig


def training_figures(out: Path, history: Sequence[dict], metric: str, title: str, train_log: Sequence[dict],
                     best_dev: dict | None, y_dev: Sequence[float], proba, label_names: Sequence[str], task: str,
                     best_step: int | None) -> list[Path]:
    """A fine-tuning run's figures in `out`: curves.png, and the best model's dev plots from its scores (`best_dev`)
    and dev outputs (`proba`): dev_scatter.png (regression), confusion_matrix.png and reliability.png (classes).
    All are drawn, then written."""
    drawn = {"curves.png": training_curves(history, metric, title, train_log)}
    best, at = best_dev or {}, f"best, step {best_step}"
    if task == "regression":
        drawn["dev_scatter.png"] = regression_scatter(y_dev, proba[:, 0], f"dev: true vs predicted {label_names[0]} ({at})")
    if best.get("confusion_matrix") is not None:
        drawn["confusion_matrix.png"] = confusion_matrix(best["confusion_matrix"], label_names,
                                                         f"dev confusion matrix ({at})")
    if best.get("reliability"):
        drawn["reliability.png"] = reliability_diagram(best["reliability"], best["ece"], f"dev calibration ({at})")
    return [save_figure(fig, out / name) for name, fig in drawn.items()]


def confusion_matrix(matrix: Sequence[Sequence[int]], labels: Sequence[str], title: str):
    """Confusion matrix heat map (rows = true label, columns = predicted), counts in the cells: scikit-learn's
    ConfusionMatrixDisplay of the matrix the metrics computed."""
    import numpy as np
    from sklearn.metrics import ConfusionMatrixDisplay

    size = max(3.5, 0.6 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    display = ConfusionMatrixDisplay(np.asarray(matrix), display_labels=list(labels))
    display.plot(ax=ax, cmap="Blues", colorbar=False, xticks_rotation=45, values_format="d")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    return fig


def reliability_diagram(table: Sequence[dict], ece: float, title: str):
    """Reliability diagram of a classifier's dev predictions: per confidence bin (`scoring.metrics.reliability_table`)
    the accuracy against the mean confidence, the diagonal where they agree, and the rows per bin underneath (a bar
    over few rows says little). Bars under the diagonal are over-confidence."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(4.5, 5.2), sharex=True, height_ratios=(3, 1))
    centres = [(row["low"] + row["high"]) / 2 for row in table]
    widths = [row["high"] - row["low"] for row in table]
    top.bar(centres, [row["accuracy"] for row in table], width=widths, edgecolor="black", color="#4c72b0",
            label="accuracy")
    top.bar(centres, [row["confidence"] - row["accuracy"] for row in table], width=widths,
            bottom=[row["accuracy"] for row in table], color="crimson", alpha=0.35, label="gap to confidence")
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    top.set(ylim=(0, 1), ylabel="accuracy", title=f"{title}\nECE {ece:.3f} (0 = calibrated)")
    top.legend(loc="upper left", fontsize=8)
    bottom.bar(centres, [row["n"] for row in table], width=widths, color="grey")
    bottom.set(xlim=(0, 1), xlabel="confidence (top class probability)", ylabel="rows")
    return fig


def regression_scatter(y_true: Sequence[float], y_pred: Sequence[float], title: str):
    """True vs predicted values, one dot per row, with the y = x line a perfect model would sit on."""
    import numpy as np

    true, pred = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(true, pred, s=12, alpha=0.6)
    low, high = float(min(true.min(), pred.min())), float(max(true.max(), pred.max()))
    ax.plot([low, high], [low, high], color="crimson", linestyle="--", label="predicted = true")
    ax.set_xlabel("true")
    ax.set_ylabel("predicted")
    ax.legend(loc="upper left")
    ax.set_title(title)
    return fig


def per_label_f1(per_label: dict[str, dict], path: Path, title: str) -> Path:
    """Horizontal bars of each tag's F1 (multi-label), support in the tick labels."""
    names = list(per_label)
    fig, ax = plt.subplots(figsize=(6, max(2.5, 0.35 * len(names) + 1)))
    ax.barh(range(len(names)), [per_label[n]["f1"] for n in names])
    ax.set_yticks(range(len(names)), [f"{n} ({per_label[n]['support']})" for n in names])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("F1 (tag support in brackets)")
    ax.set_title(title)
    return save_figure(fig, path)


def probe_layer_curve(rows: Sequence[dict], baselines: dict[str, float], path: Path, title: str,
                      metric: str = "accuracy") -> Path:
    """Probe score per layer, one line per pooling (with 95% bootstrap bands when rows carry them), the best
    cell starred, and baselines as horizontal dashed lines."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    pools = list(dict.fromkeys(r["pool"] for r in rows))
    names = list(dict.fromkeys(r["layer_name"] for r in rows))
    x_of = {name: i for i, name in enumerate(names)}
    for pool in pools:
        mine = [r for r in rows if r["pool"] == pool]
        xs = [x_of[r["layer_name"]] for r in mine]
        ax.plot(xs, [r[metric] for r in mine], marker="o", label=f"{pool} pooling")
        if metric == "accuracy" and all(r.get("accuracy_ci95") for r in mine):
            ax.fill_between(xs, [r["accuracy_ci95"][0] for r in mine], [r["accuracy_ci95"][1] for r in mine], alpha=0.15)
    best = next((r for r in rows if r.get("best")), None)
    if best is not None:
        ax.plot([x_of[best["layer_name"]]], [best[metric]], marker="*", markersize=18, color="crimson", linestyle="none",
                label=f"best: {best['pool']} {best['layer_name']} ({best[metric]:.3f})")
    for (name, score), style in zip(baselines.items(), ["--", ":", "-."] * 3, strict=False):
        ax.axhline(score, color="gray", linestyle=style, linewidth=1, label=f"{name} ({score:.3f})")
    ax.set_xticks(range(len(names)), names, rotation=30 if len(names) > 6 else 0)
    ax.set_xlabel("hidden state (layer)")
    ax.set_ylabel(f"dev {metric}")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, path)


def bench_bars(report: dict, path: Path) -> Path:
    """`bertkit bench` figure: one bar panel per metric (size, latency, throughput, training, memory), per model."""
    paper = report.get("protocol") == "paper"
    panels = ["params", "size", "paper"] if paper else ["params", "size", "latency", "throughput", "train", "memory"]
    if "train" in panels and all(v is None for v in _ModelBars(report["models"]).values("train_step", "step_ms", "mean")):
        panels.remove("train")  # --train-batch-size 0: no training step was measured, no empty panel
    cols = 3
    fig, axes = plt.subplots((len(panels) + cols - 1) // cols, cols, figsize=(5.2 * cols, 4.2 * ((len(panels) + 2) // cols)),
                             squeeze=False)
    chart = _ModelBars(report["models"])
    for ax, panel in zip(axes.flat, panels, strict=False):
        BENCH_PANELS[panel](ax, chart, report)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(_bench_title(report), fontsize=11)
    fig.tight_layout()
    return save_figure(fig, path)


class _ModelBars:
    """One bar per model, in the models' colours, labelled by their folder or hub name."""

    def __init__(self, models: list) -> None:
        import numpy as np

        self.models = models
        self.labels = [Path(m["label"].replace(" (random init)", "")).name
                       + ("\n(random init)" if m.get("random_init") else "") for m in models]
        self.colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        self.x = np.arange(len(models))

    def bars(self, ax, values, title, unit, bottom=None, hatch=None, label=None, offset=0.0, width=0.6):
        """Draw one bar per model (None: no bar) and return the bars."""
        import numpy as np

        vals = [np.nan if v is None else v for v in values]
        drawn = ax.bar(self.x + offset, vals, width, bottom=bottom, color=self.colors[: len(self.models)], hatch=hatch,
                       label=label, edgecolor="black", linewidth=0.5)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.set_xticks(self.x, self.labels, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        return drawn

    def values(self, *keys) -> list:
        """The value at `keys` in each model's record (None where it is missing)."""
        found = []
        for m in self.models:
            node = m
            for k in keys:
                node = node.get(k) if isinstance(node, dict) else None
            found.append(node)
        return found


def _annotate(ax, drawn, fmt: str) -> None:
    """Write each bar's top value (of a stacked bar: the total) above it."""
    import numpy as np

    for rect in drawn:
        h = rect.get_y() + rect.get_height()
        if np.isfinite(h):
            ax.annotate(fmt.format(h), (rect.get_x() + rect.get_width() / 2, h), ha="center", va="bottom", fontsize=8)


def _params_panel(ax, chart: _ModelBars, report: dict) -> None:
    _annotate(ax, chart.bars(ax, [m["parameters"] / 1e6 for m in chart.models], "Parameters", "millions"), "{:.1f}M")


def _size_panel(ax, chart: _ModelBars, report: dict) -> None:
    title = "Size on disk (safetensors)"
    _annotate(ax, chart.bars(ax, chart.values("size_mb_fp32"), title, "MB", offset=-0.2, width=0.4, label="fp32"),
              "{:.0f}")
    _annotate(ax, chart.bars(ax, chart.values("size_mb_fp16"), title, "MB", offset=0.2, width=0.4, hatch="//",
                             label="fp16"), "{:.0f}")
    _hatch_legend(ax, {"fp32": "", "fp16": "//"})


def _paper_panel(ax, chart: _ModelBars, report: dict) -> None:
    model_s = chart.values("paper_protocol", "model_seconds")
    title = f"Full pass over {report.get('data', {}).get('rows', '?')} sentences, batch 1 (paper protocol)"
    chart.bars(ax, model_s, title, "seconds", label="model")
    _annotate(ax, chart.bars(ax, chart.values("paper_protocol", "tokenize_seconds"), title, "seconds", bottom=model_s,
                             hatch="..", label="tokenization"), "{:.1f}s")
    _hatch_legend(ax, {"model": "", "tokenization": ".."})


def _latency_panel(ax, chart: _ModelBars, report: dict) -> None:
    model_ms = chart.values("latency", "model_ms", "p50")  # the medians bench's table prints and its claims divide
    title = "Batch-1 latency (median)"
    chart.bars(ax, model_ms, title, "ms", label="model")
    _annotate(ax, chart.bars(ax, chart.values("latency", "tokenize_ms", "p50"), title, "ms", bottom=model_ms,
                             hatch="..", label="tokenization"), "{:.0f} ms")
    _hatch_legend(ax, {"model": "", "tokenization (stacked)": ".."})


def _train_panel(ax, chart: _ModelBars, report: dict) -> None:
    steps = chart.values("train_step", "step_ms", "mean")
    batch = next((b for b in chart.values("train_step", "batch_size") if b is not None), "?")
    _annotate(ax, chart.bars(ax, [None if s is None else s / 1000 for s in steps],
                             f"Training step, batch {batch} (fwd+bwd+AdamW)", "seconds"), "{:.2f}s")


def _memory_panel(ax, chart: _ModelBars, report: dict) -> None:

    peaks = [peak_memory_mb(m) for m in chart.models]
    _annotate(ax, chart.bars(ax, peaks, "Peak memory above start (max over runs)", "MB"), "{:.0f}")


def _bench_title(report: dict) -> str:
    """Machine, device, precision, threads, load, and the claims in a line."""
    env = report.get("environment", {})
    note = " — random-init shapes (speed/size only)" if any(m.get("random_init") for m in report["models"]) else ""
    load = env.get("loadavg") or []
    return (f"bertkit bench{note}\n{env.get('machine', {}).get('cpu', '')}, {env.get('device', '')}, "
            f"{env.get('dtype', '')}, {env.get('torch_threads', '?')} threads"
            + (f", load average {load[0]:.1f}" if load else "") + _claims_line(report.get("claims", {})))


def _throughput_panel(ax, models: list, colors: list) -> None:
    """Rows/s per batch size: one bar per model, dynamic padding solid, static padding hatched."""
    import numpy as np

    sizes = sorted({r["batch_size"] for m in models for r in m.get("throughput", [])})
    groups = [(b, p) for b in sizes for p in ("dynamic", "static")]
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        lookup = {(r["batch_size"], r["padding"]): r["rows_per_s"] for r in m.get("throughput", [])}
        xs = np.arange(len(groups)) + (i - (len(models) - 1) / 2) * width
        ax.bar(xs, [lookup.get(g, np.nan) for g in groups], width, color=colors[i % len(colors)],
               hatch=["" if p == "dynamic" else "//" for _, p in groups], edgecolor="black", linewidth=0.5,
               label=Path(m["label"].replace(" (random init)", "")).name)
    ax.set_xticks(np.arange(len(groups)), [f"b{b}\n{'dyn' if p == 'dynamic' else 'static'}" for b, p in groups],
                  fontsize=8)
    ax.set_title("Throughput (dynamic = length-sorted, static = padded to --max-length)", fontsize=9)
    ax.set_ylabel("rows / s")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def _throughput_bars(ax, chart: _ModelBars, report: dict) -> None:
    _throughput_panel(ax, chart.models, chart.colors)


BENCH_PANELS = {"params": _params_panel, "size": _size_panel, "paper": _paper_panel, "latency": _latency_panel,
                "throughput": _throughput_bars, "train": _train_panel, "memory": _memory_panel}
"""`bench_bars`' panels by name: each draws one metric for every model on its axes."""


def _hatch_legend(ax, hatches: dict) -> None:
    """A legend of fill patterns (colours stand for models, patterns for the parts of a bar)."""
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=h, label=name) for name, h in hatches.items()],
              fontsize=8)


def _claims_line(claims: dict) -> str:
    """The measured claims next to the paper's, one line for the title: 'R% fewer parameters (paper 40%); Sx at
    batch 1 (paper 1.63x); ...' (empty without a candidate and a baseline)."""
    if "candidate" not in claims:
        return ""
    parts = []
    reduction = (claims.get("parameter_reduction_pct") or {}).get("measured")
    if reduction is not None:
        parts.append(f"{reduction:.1f}% fewer parameters (paper 40%)")
    for key, what in (("speedup_batch1_x", "at batch 1"), ("speedup_best_batch_x", "at best batch"),
                      ("speedup_paper_protocol_x", "full pass, batch 1")):
        claim = claims.get(key) or {}
        if claim.get("measured") is not None:
            parts.append(f"{claim['measured']:.2f}x {what} (paper {claim['paper']:.2f}x)")
    return "\n" + "; ".join(parts) if parts else ""


def distill_bars(report: dict, path: Path) -> Path:
    """Teacher vs student: parameters, batch-1 latency, best-batch throughput and dev quality, one panel each,
    with the DistilBERT claims' verdicts in the title."""
    models = report["models"]
    names = list(models)
    panels = [("parameters (M)", [models[n]["parameters"] / 1e6 for n in names]),
              ("batch-1 latency (ms)", [models[n]["latency_b1_ms"] for n in names]),
              (f"best throughput ({throughput_unit(report)})", [models[n]["best_rows_per_s"] for n in names]),
              (f"dev {report['metric']}", [models[n]["dev"].get(report["metric"]) or 0.0 for n in names])]
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 3.4))
    for ax, (title, values) in zip(axes, panels, strict=True):
        bars = ax.bar(names, values, color=["#4c72b0", "#dd8452"])
        ax.bar_label(bars, fmt="%.3g")
        ax.set_title(title, fontsize=10)
    verdicts = ", ".join(f"{k.split('_')[0]} {'pass' if c['pass'] else 'FAIL'}" for k, c in report["claims"].items())
    fig.suptitle(f"distilled student vs teacher — DistilBERT claims: {verdicts}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


TICK_CHARS = 24
"""The longest tick label of a sweep's figure (a 250-character model path left no room for the axes)."""


def tick_labels(values: Sequence[object], width: int = TICK_CHARS) -> list[str]:
    """Sweep values as ticks: numbers to 3 digits, longer text cut to its end (where paths differ) after an
    ellipsis; where two cut labels read the same, each label gets its position."""
    full = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in values]
    cut = [text if len(text) <= width else "…" + text[-(width - 1):] for text in full]
    return [f"{i + 1}: {text}" for i, text in enumerate(cut)] if len(set(cut)) < len(set(full)) else cut


def sweep_figure(rows: Sequence[dict], params: Sequence[str], metric: str, path: Path, title: str) -> Path:
    """A sweep's trials: the best dev metric against each searched option (dots: trials, x: pruned, line: the mean
    per value), and for a two-option grid a heat map of the mean over the seeds."""
    import numpy as np

    varied = [p for p in params if len({str(r[p]) for r in rows}) > 1] or list(params[:1])
    grid = len(varied) == 2 and all(len({r[p] for r in rows}) <= 8 for p in varied)  # a grid, not Optuna's floats
    fig, axes = plt.subplots(1, len(varied) + grid or 1, figsize=(4.2 * (len(varied) + grid or 1), 3.6), squeeze=False)
    for ax, name in zip(axes[0], varied or [None], strict=False):
        keys = sorted({r[name] for r in rows}, key=lambda v: (isinstance(v, str), v)) if name else [None]
        where = {k: i for i, k in enumerate(keys)}
        for pruned, marker in ((False, "o"), (True, "x")):
            chosen = [r for r in rows if (r["status"] == "pruned") == pruned and r["best"] is not None]
            if chosen:
                ax.scatter([where[r[name]] if name else 0 for r in chosen], [r["best"] for r in chosen],
                           marker=marker, alpha=0.7, label="pruned" if pruned else "trial")
        means = [np.mean([r["best"] for r in rows if (r[name] if name else None) == k and r["best"] is not None] or
                         [np.nan]) for k in keys]
        ax.plot(range(len(keys)), means, color="C3", label="mean")
        ax.set_xticks(range(len(keys)), tick_labels(keys))
        ax.set_xlabel(f"--{name}" if name else "")
        ax.set_ylabel(f"best dev {metric}")
        ax.legend(fontsize="small")
    if grid:
        _sweep_heatmap(axes[0][-1], rows, varied, metric)
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def _sweep_heatmap(ax, rows: Sequence[dict], names: Sequence[str], metric: str) -> None:
    import numpy as np

    ys, xs = (sorted({r[n] for r in rows}, key=lambda v: (isinstance(v, str), v)) for n in names)
    cells = np.full((len(ys), len(xs)), np.nan)
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            found = [r["best"] for r in rows if r[names[0]] == y and r[names[1]] == x and r["best"] is not None]
            cells[i, j] = np.mean(found) if found else np.nan
    image = ax.imshow(cells, cmap="viridis", aspect="auto")
    for i in range(len(ys)):
        for j in range(len(xs)):
            if np.isfinite(cells[i, j]):
                ax.text(j, i, f"{cells[i, j]:.3f}", ha="center", va="center", color="white", fontsize="small")
    ax.set_xticks(range(len(xs)), tick_labels(xs))
    ax.set_yticks(range(len(ys)), tick_labels(ys))
    ax.set_xlabel(f"--{names[1]}")
    ax.set_ylabel(f"--{names[0]}")
    ax.set_title(f"mean best dev {metric}")
    ax.figure.colorbar(image, ax=ax)
