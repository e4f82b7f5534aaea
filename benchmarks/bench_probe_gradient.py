"""The probe engine's gradient product for few output columns (issue 56): Z^T R against (R^T Z)^T, side by side.

CPU BLAS (torch 2.13) runs Z^T R - rows x features transposed, times the residuals' 2 to 11 columns - several times
slower than R^T Z, the same product the other way round; `engine.add_gradient` takes R^T Z there (`engine.NARROW`).
Two measurements, alternated so a drift in the machine's load hits both alike:

1. the product alone, on random float32 blocks of the shapes the probes meet (entity tags, SQuAD's start/end
   columns, a concat of four layers, the POS tag set), best of 5 each;
2. a whole fit (`engine.fit_linear`, C = 1) of an entity-tag probe on real features: MiniLM's layer 3 for every word
   of UNER English-EWT's training file (`bertkit embed`), tiled 8 times to the ~200k words of the issue's table, with
   the old product (`NARROW = 2`: always Z^T R) and the new one, in A B B A order.

    .venv/bin/python benchmarks/bench_probe_gradient.py --out benchmarks/results/probe-gradient.json
"""

from __future__ import annotations

import argparse
import json
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


def products() -> list[dict]:
    rows = []
    for n, d, k in SHAPES:
        Z, R, gW = torch.randn(n, d), torch.randn(n, k), torch.zeros(d, k)
        old = best_of(lambda Z=Z, R=R, gW=gW: gW.zero_().addmm_(Z.T, R))
        new = best_of(lambda Z=Z, R=R, gW=gW: gW.zero_().add_((R.T @ Z).T))
        rows.append({"rows": n, "features": d, "columns": k, "zt_r_ms": round(old * 1e3, 1),
                     "rt_z_ms": round(new * 1e3, 1), "zt_r_over_rt_z": round(old / new, 2),
                     "engine_takes": "R^T Z" if 1 < k < engine.NARROW else "Z^T R"})
        print(json.dumps(rows[-1]), flush=True)
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


def fits(tiles: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        X, ids, classes = entity_features(Path(tmp))
    X, ids = np.ascontiguousarray(np.tile(X, (tiles, 1))), np.tile(ids, tiles)
    engine.standardizer_of(engine.array_blocks(X)).transform_in_place(X)
    rows, targets = engine.MemoryRows(X), engine.Targets.classes(ids, classes)
    runs = []
    for narrow in (engine.NARROW, 2, 2, engine.NARROW):  # A B B A
        saved, engine.NARROW = engine.NARROW, narrow
        try:
            start = time.perf_counter()
            solution = engine.fit_linear(rows, targets, 1.0)
            seconds = time.perf_counter() - start
        finally:
            engine.NARROW = saved
        runs.append({"product": "Z^T R" if narrow == 2 else "R^T Z", "seconds": round(seconds, 2),
                     "iterations": solution.n_iter, "objective": solution.objective})
        print(json.dumps(runs[-1]), flush=True)
    old = min(r["seconds"] for r in runs if r["product"] == "Z^T R")
    new = min(r["seconds"] for r in runs if r["product"] == "R^T Z")
    return {"words": int(len(X)), "tiles": tiles, "classes": classes, "features": "MiniLM layer 3, UNER EWT train",
            "runs": runs, "old_seconds": old, "new_seconds": new, "fit_speedup": round(old / new, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=8)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "probe-gradient.json"))
    args = parser.parse_args()
    result = {"benchmark": "probe-gradient", "issue": 56, "machine": machine_record(),
              "threads": torch.get_num_threads(), "load_before": load_avg(), "products": products()}
    if UNER.is_file():
        result["fit"] = fits(args.tiles)
    result["load_after"] = load_avg()
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
