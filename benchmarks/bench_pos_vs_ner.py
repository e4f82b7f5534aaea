"""The layer-wise POS-vs-NER recipe, both sides: `bertkit probe --recipe words-pos-vs-ner-offline` on the universal
POS tags of UD English-EWT (../shared/data/ud_ewt_pos) and again on the entities of Universal NER English-EWT
(../shared/data/uner_ewt, IOB2), the same English-EWT text, with the packaged MiniLM (embeddings + 6 layers). Each
side is one CLI run in a fresh process (its metrics.json, config.json and probe_layers.png are kept under
benchmarks/results/words-pos-vs-ner-offline/{pos,ner}/); this script reads the two records back, names the layer
where each per-layer curve peaks, and draws both curves on one plot (each as a share of its own peak, so the two
metrics, token accuracy and strict entity F1, can be read on one axis).

Writes benchmarks/results/words-pos-vs-ner-offline/summary.json and pos-vs-ner.png.

Usage: python benchmarks/bench_pos_vs_ner.py [--limit N]   (first N train and dev sentences; default: the recipe's)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.measure.timing import Stopwatch  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
RECIPE = "words-pos-vs-ner-offline"
SIDES = {"pos": [], "ner": ["--data", str(SHARED / "uner_ewt" / "train.iob2"),
                            "--dev", str(SHARED / "uner_ewt" / "dev.iob2")]}
"""The recipe reads UPOS; the NER side is the same recipe on the entity tagging of the same text."""


KEPT = ("metrics.json", "config.json", "probe_layers.png")
"""What a side's results folder keeps of its run (the run itself is written to a fresh scratch folder)."""


def run_side(name: str, extra: list[str], out: Path) -> dict[str, Any]:
    """One `bertkit probe` run in a fresh process, written to a scratch folder of its own (one run writes a folder:
    an earlier run's results are never the run's --out), its `KEPT` files then copied into `out`; its wall seconds,
    peak RSS and metrics.json."""
    with tempfile.TemporaryDirectory(prefix="bench-pos-vs-ner-") as scratch:
        run = _probe_run(name, extra, Path(scratch) / name)
        out.mkdir(parents=True, exist_ok=True)
        for file in KEPT:
            shutil.copyfile(Path(scratch) / name / file, out / file)
    return run


def _probe_run(name: str, extra: list[str], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    rss_file = out.parent / f"{name}.maxrss"  # GNU time's %M: the child's peak resident set, KiB
    timer = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file)] if Path("/usr/bin/time").exists() else []
    with Stopwatch() as watch:
        done = subprocess.run([*timer, sys.executable, "-m", "bertkit", "probe", "--recipe", RECIPE, *extra, "--out",
                               str(out), "-q"], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: bertkit probe exit {done.returncode}\n{done.stderr[-3000:]}")
    peak_kib = int(rss_file.read_text().split()[-1]) if timer else None
    rss_file.unlink(missing_ok=True)
    metrics = json.loads((out / "metrics.json").read_text())
    return {"seconds": round(watch.seconds, 1), "peak_rss_mib": round(peak_kib / 1024) if peak_kib else None,
            "metrics": metrics}


def layer_curve(metrics: dict[str, Any]) -> list[tuple[str, float, list[float] | None]]:
    """(row label, headline score, 95% interval) per single-layer row, embeddings first, as metrics.json lists them."""
    entity = metrics["metric"] == "entity F1"
    curve = []
    for row in metrics["rows"]:
        scores = row["scores"]
        value = scores["entities"]["f1"] if entity else scores["token_accuracy"]
        curve.append((row["label"], float(value), scores.get("interval")))
    return curve


def side_summary(run: dict[str, Any]) -> dict[str, Any]:
    metrics = run["metrics"]
    curve = layer_curve(metrics)
    peak = max(curve, key=lambda row: row[1])
    return {"metric": metrics["metric"], "peak_layer": metrics.get("peak_layer") or peak[0],
            "peak": {"row": peak[0], "score": round(peak[1], 4), "ci95": peak[2]},
            "layers": [{"row": label, "score": round(value, 4), "ci95": ci} for label, value, ci in curve],
            "baselines": metrics.get("baselines"), "sentences": metrics["sentences"], "words": metrics["words"],
            "seconds": run["seconds"], "peak_rss_mib": run["peak_rss_mib"]}


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, side in summary["sides"].items():
        scores = [row["score"] for row in side["layers"]]
        top = max(scores)
        ax.plot(range(len(scores)), [s / top for s in scores], marker="o",
                label=f"{name.upper()}: {side['metric']} (peak {side['peak']['row']}, {top:.3f})")
    ax.set_xticks(range(len(scores)), [str(i) for i in range(len(scores))])
    ax.set_xlabel("hidden state (0 = embeddings)")
    ax.set_ylabel("dev score / its peak")
    ax.set_title("MiniLM-L6 word probes per layer: POS vs entities (English-EWT)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N train and dev sentences (default: recipe's)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / RECIPE)
    args = parser.parse_args()
    if not (SHARED / "ud_ewt_pos").is_dir() or not (SHARED / "uner_ewt").is_dir():
        raise SystemExit(f"needs {SHARED}/ud_ewt_pos and uner_ewt")
    limit = ["--limit", str(args.limit)] if args.limit else []
    args.out.mkdir(parents=True, exist_ok=True)
    sides = {}
    for name, extra in SIDES.items():
        sides[name] = side_summary(run_side(name, [*extra, *limit], args.out / name))
        print(f"[pos-vs-ner] {name}: peak {sides[name]['peak']} in {sides[name]['seconds']} s", flush=True)
    summary = {"recipe": RECIPE, "model": "minilm-offline (6 layers, hidden 384)", "sides": sides,
               "peaks": {name: side["peak"]["row"] for name, side in sides.items()},
               "machine": {"cpu_count": os.cpu_count(), "load_average_after": os.getloadavg()},
               "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    plot(summary, args.out / "pos-vs-ner.png")
    write_json_atomic(args.out / "summary.json", summary)
    print(f"peaks: {summary['peaks']}; wrote {args.out / 'summary.json'}, {args.out / 'pos-vs-ner.png'}")


if __name__ == "__main__":
    main()
