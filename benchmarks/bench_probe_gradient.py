"""The probe engine's products for few output columns (issue 56): each width against 16 columns, side by side.

MKL's float32 GEMM (torch 2.13 on this AMD EPYC, AVX2) runs a product with 2 to 15 columns - the logits Z W and the
gradient's share Z^T R of a head with that many outputs - slower than the same product at 16 columns; the engine
computes such blocks at 16, zero-padded (`probe.products.wide`). Two measurements:

1. the products alone, on random float32 blocks of the shapes the probes meet (entity tags, SQuAD's start/end
   columns, a concat of four layers, the POS tag set): the logits at the head's width and at 16, Z^T R, (R^T Z)^T
   (the engine's way before) and Z^T R at 16; best of 5 each;
2. a whole fit (`engine.fit_linear`, C = 1) of an entity-tag probe on real features: MiniLM's layer 3 for every word
   of UNER English-EWT's training file (`bertkit embed`), tiled 8 times to the ~200k words of the issue's table, by
   the engine before this change (`--before`, default HEAD~1: R^T Z for the gradient, the logits at 7 columns) and
   this tree's, each in its own process, in A B B A order.

    .venv/bin/python benchmarks/bench_probe_gradient.py --before COMMIT --out benchmarks/results/probe-gradient.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from anchor_common import load_avg, machine_record  # noqa: E402

from bertkit.probe import engine  # noqa: E402

SHAPES = ((204577, 384, 7), (204577, 384, 17), (67349, 384, 2), (67349, 384, 4), (67349, 384, 9),
          (67349, 1536, 4), (67349, 384, 1), (67349, 384, 12))
UNER = ROOT.parent / "shared" / "data" / "uner_ewt" / "train.iob2"


def best_of(fn, repeats: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def product_times(n: int, d: int, k: int) -> dict[str, float | None]:
    """Best-of-5 seconds of each way to a block's two products for `k` output columns."""
    Z, R, W, b = torch.randn(n, d), torch.randn(n, k), torch.randn(d, k), torch.zeros(k)
    W16, b16, R16 = torch.nn.functional.pad(W, (0, max(0, 16 - k))), torch.zeros(max(16, k)), torch.zeros(n, max(16, k))
    R16[:, :k] = R
    narrow = k < 16
    return {"logits_ms": best_of(lambda: torch.addmm(b, Z, W)),
            "logits_at_16_ms": best_of(lambda: torch.addmm(b16, Z, W16)[:, :k]) if narrow else None,
            "zt_r_ms": best_of(lambda: Z.T @ R), "rt_z_ms": best_of(lambda: (R.T @ Z).T),
            "zt_r_at_16_ms": best_of(lambda: (Z.T @ R16)[:, :k]) if narrow else None}


def products() -> list[dict]:
    from bertkit.probe import products as engine_products

    rows = []
    for n, d, k in SHAPES:
        times = product_times(n, d, k)
        row = {"rows": n, "features": d, "columns": k,
               **{key: None if v is None else round(v * 1e3, 1) for key, v in times.items()},
               "engine_computes_at": 16 if engine_products.wide(k) else k}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def entity_features(work: Path) -> tuple[np.ndarray, np.ndarray, int]:
    from bertkit.commands.embed import EmbedConfig
    from bertkit.commands.embed import run as embed

    embed(EmbedConfig.of(data=str(UNER), layers="3", out=str(work / "store")), progress=False)
    X = np.load(work / "store" / "vectors.npy").astype(np.float32)
    with open(work / "store" / "sentences.jsonl", encoding="utf-8") as handle:
        tags = [t for line in handle for t in json.loads(line)["tags"]]
    names = sorted(set(tags))
    return X, np.array([names.index(t) for t in tags]), len(names)


FIT_CHILD = r"""
import json, sys, time
import numpy as np
import torch
from bertkit.probe import engine
X, ids = np.load(sys.argv[1]), np.load(sys.argv[2])
rows, targets = engine.MemoryRows(np.ascontiguousarray(X)), engine.Targets.classes(ids, int(ids.max()) + 1)
start = time.perf_counter()
solution = engine.fit_linear(rows, targets, 1.0)
print(json.dumps({"seconds": round(time.perf_counter() - start, 2), "iterations": solution.n_iter,
                  "objective": solution.objective}))
"""


def fits(tiles: int, before: str) -> dict:
    from bench_probe_engine import export_tree

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        X, ids, classes = entity_features(work)
        X, ids = np.ascontiguousarray(np.tile(X, (tiles, 1))), np.tile(ids, tiles)
        engine.standardizer_of(engine.array_blocks(X)).transform_in_place(X)
        np.save(work / "X.npy", X)
        np.save(work / "ids.npy", ids)
        del X
        trees = {"before": export_tree(before, work / "before"), "after": ROOT}
        runs = []
        for tree in ("before", "after", "after", "before"):  # A B B A
            env = {**os.environ, "PYTHONPATH": str(trees[tree]), "OMP_WAIT_POLICY": "PASSIVE"}
            done = subprocess.run([sys.executable, "-c", FIT_CHILD, str(work / "X.npy"), str(work / "ids.npy")],
                                  env=env, capture_output=True, text=True, check=True,
                                  cwd=str(work))  # not this checkout: `python -c` puts the cwd first on sys.path
            runs.append({"tree": tree, **json.loads(done.stdout.strip().splitlines()[-1])})
            print(json.dumps(runs[-1]), flush=True)
    old = min(r["seconds"] for r in runs if r["tree"] == "before")
    new = min(r["seconds"] for r in runs if r["tree"] == "after")
    return {"words": int(len(ids)), "tiles": tiles, "classes": classes, "features": "MiniLM layer 3, UNER EWT train",
            "before": before, "runs": runs, "before_seconds": old, "after_seconds": new,
            "fit_speedup": round(old / new, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=8)
    parser.add_argument("--before", default=None, help="the engine before the 16-column products (default HEAD~1)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "probe-gradient.json"))
    args = parser.parse_args()
    result = {"benchmark": "probe-gradient", "issue": 56, "machine": machine_record(),
              "threads": torch.get_num_threads(), "load_before": load_avg(), "products": products()}
    if UNER.is_file():
        before = args.before or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD~1"], capture_output=True,
                                               text=True, check=True).stdout.strip()
        result["fit"] = fits(args.tiles, before)
    result["load_after"] = load_avg()
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
