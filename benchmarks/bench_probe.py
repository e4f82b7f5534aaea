"""Probe benchmark: Alammar's exact C search versus `bertkit probe`'s, on the same features and folds.

Features: packaged MiniLM (`minilm-offline`), `[CLS]` of the last layer, SST-2 train/dev from ../shared/data/sst2,
extracted once with `bertkit.features.extract.extract_features` and cached in benchmarks/.cache/ (reused by later runs).

- seed: `GridSearchCV(LogisticRegression(), {"C": np.linspace(0.0001, 100, 20)}, cv=5)` on the raw features,
  exactly as in Alammar's notebook (sklearn defaults: lbfgs, max_iter=100, so high C values stop at the cap).
- bertkit: `probe.fit_probe(X, y, cv=5, C_grid=<same 20 values>)`: standardized features, the same 5
  stratified folds, each fold's C values fitted as a warm-started path, single-threaded BLAS; C chosen by the lowest
  held-out log-loss (bertkit's criterion; the seed ranks by accuracy), so the chosen C may differ.

Reports wall time of both, their ratio, the chosen C and the dev accuracy of each; target: bertkit <= 10% of the
seed's time with dev accuracy within 0.5 point. Writes benchmarks/results/probe.json (`--quick`: probe-quick.json, on
the first 1,000 train rows).

Usage: python benchmarks/bench_probe.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.encoding.reading import Reading  # noqa: E402
from bertkit.measure.timing import Stopwatch  # noqa: E402

SST2 = ROOT.parent / "shared" / "data" / "sst2"
CACHE = HERE / ".cache"
GRID = np.linspace(0.0001, 100, 20)


def features(split: str, run_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM [CLS] last-layer features and label ids of an SST-2 split (cached after the first run).

    With `run_dir` (a `bertkit probe --pool cls --layers all` run on SST-2 with the same model), the last layer of
    its cached `features/<split>-cls-all.npy` is used instead of extracting again (checked against its key file).
    """
    from bertkit.data.labels import LabelMap
    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split
    from bertkit.features.extract import extract_features
    from bertkit.models import loading

    revision = loading.model_revision("minilm-offline")
    path = CACHE / f"probe-minilm-cls-{revision.replace(':', '-')}-{split}.npz"
    if path.is_file():
        cached = np.load(path)
        return cached["X"], cached["y"]
    ds = load_dataset_split(DataOptions(text_column="0", label_column="1"), str(SST2 / f"{split}.tsv"))
    y = LabelMap((0, 1)).encode(ds.labels or [], split)
    if run_dir is not None:
        key = json.loads((run_dir / "features" / f"{split}-cls-all.json").read_text())
        if key["revision"] != revision or key["data"] != ds.fingerprint or key["max_length"] != 128:
            raise SystemExit(f"{run_dir} holds features of another model/data; run without --features-from")
        X = np.ascontiguousarray(np.load(run_dir / "features" / f"{split}-cls-all.npy")[:, -1])
        print(f"[probe] {split}: last-layer [CLS] features from {run_dir}", flush=True)
        _save_cache(path, X, y)
        return X, y
    tokenizer, encoder = loading.load_tokenizer("minilm-offline"), loading.load_encoder("minilm-offline")
    with Stopwatch() as watch:
        X = extract_features(encoder, tokenizer, ds, pool="cls", layers="-1", reading=Reading(128), batch_size=64)
    print(f"[probe] extracted {split}: {X.shape} in {watch.seconds:.0f} s", flush=True)
    _save_cache(path, X, y)
    return X, y


def _save_cache(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / ".gitignore").write_text("*\n")  # cached features stay out of git
    np.savez(path, X=X, y=y)


def run_seed(X: np.ndarray, y: np.ndarray, D: np.ndarray, yd: np.ndarray) -> dict:
    """Alammar's notebook, verbatim: grid search on raw features, then the dev score of the best estimator."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV

    with Stopwatch() as watch, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        grid_search = GridSearchCV(LogisticRegression(), {"C": GRID}, cv=5)
        grid_search.fit(X, y)
    return {"seconds": round(watch.seconds, 2), "best_C": float(grid_search.best_params_["C"]),
            "cv_accuracy": float(grid_search.best_score_), "dev_accuracy": float(grid_search.score(D, yd)),
            "convergence_warnings": sum(issubclass(w.category, ConvergenceWarning) for w in caught)}


def run_bertkit(X: np.ndarray, y: np.ndarray, D: np.ndarray, yd: np.ndarray) -> dict:
    from bertkit.probe.fit import fit_probe

    with Stopwatch() as watch:
        fit = fit_probe(X, y, cv=5, C_grid=list(GRID), seed=42)
    chosen = next(r for r in fit.cv_results or [] if r["C"] == fit.C)
    return {"seconds": round(watch.seconds, 2), "best_C": fit.C, "cv_accuracy": chosen["mean"],
            "cv_log_loss": chosen["log_loss"],
            "dev_accuracy": float((fit.predict(D) == yd).mean())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="first 1,000 train rows only (smoke run)")
    parser.add_argument("--features-from", type=Path, default=None,
                        help="reuse the cached features of a `bertkit probe --pool cls --layers all` SST-2 run directory")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not SST2.is_dir():
        print(f"[probe] {SST2} not found; this benchmark needs the shared SST-2 files", flush=True)
        return 1
    from bertkit.io.atomic import write_json_atomic
    from bertkit.io.trail import machine_info, package_versions

    X, y = features("train", args.features_from)
    D, yd = features("dev", args.features_from)
    if args.quick:
        X, y = X[:1000], y[:1000]
    load_before = os.getloadavg()
    ours = run_bertkit(X, y, D, yd)
    print(f"[probe] bertkit: {ours}", flush=True)
    seed = run_seed(X, y, D, yd)
    print(f"[probe] seed:    {seed}", flush=True)
    ratio = ours["seconds"] / seed["seconds"]
    gap = abs(ours["dev_accuracy"] - seed["dev_accuracy"]) * 100
    result = {
        "benchmark": "probe C search: Alammar GridSearchCV on raw features vs bertkit fit_probe (same grid, same folds)",
        "features": "minilm-offline [CLS], last layer, max_length 128, SST-2 (../shared/data/sst2)",
        "rows": {"train": int(len(y)), "dev": int(len(yd))}, "quick": args.quick,
        "grid": [float(c) for c in GRID], "folds": "StratifiedKFold(5), no shuffle (GridSearchCV's default)",
        "seed": seed, "bertkit": ours,
        "time_ratio": round(ratio, 4), "dev_accuracy_gap_points": round(gap, 2),
        "target": "time_ratio <= 0.10 and dev_accuracy_gap_points <= 0.5",
        "target_met": bool(ratio <= 0.10 and gap <= 0.5),
        "loadavg_before": [round(v, 2) for v in load_before], "loadavg_after": [round(v, 2) for v in os.getloadavg()],
        "machine": machine_info(), "versions": package_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    out = HERE / "results" / ("probe-quick.json" if args.quick else "probe.json")
    write_json_atomic(out, result)
    print(json.dumps({k: result[k] for k in ("time_ratio", "dev_accuracy_gap_points", "target_met")}), flush=True)
    print(f"[probe] wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
