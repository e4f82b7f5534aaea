"""What "verified on read" costs: reading a 400k-row feature store (and a 400k-row input's Arrow cache entry) with
and without checking its files against their recorded digests.

1. Store: 400,000 rows x 384 dims (MiniLM's hidden size), float32 (614 MB), written through the real writer
   (`StoreWriter`: shards, then the merge that hashes features.npy as it copies, labels.npy hashed as saved). The
   features are random numbers: what is measured is bytes, not a model. Timed: `store.open` with verification
   (size check + one streaming sha256 pass over each array) and without (`verify=False`: it maps the files and
   reads nothing yet); a plain streaming read of features.npy (no hashing) for scale; the merge with and without
   hashing (one run each). Reads: the median of --repeats runs with the files in the page cache. The machine is
   shared, so the cache is not dropped: from a cold disk the verified open also waits for the disk, a read the
   probe that follows would otherwise make itself.
2. Cache: a 400,000-row TSV parsed into the Arrow cache once, then `ingest.cached_table` (verify + map) against
   `RowTable.open` alone (map only).
3. Model: a BERT-base-shaped classifier folder (`BertConfig()`, random init, 438 MB) with its record: the record
   check (`metadata.verify_model_folder`) against the `from_pretrained` load it precedes (`--model-only` adds just
   this to an existing results file).
4. Memory: the Python allocation peak (tracemalloc) while verifying the store's arrays (`store.verify_arrays`):
   one read block, whatever the number of rows.

Writes benchmarks/results/verify-overhead.json (--rows N: another size; --out another file).

    python benchmarks/bench_verify.py [--rows 400000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bertkit.data import ingest  # noqa: E402
from bertkit.data.table import RowTable  # noqa: E402
from bertkit.features import store  # noqa: E402
from bertkit.io import digests  # noqa: E402
from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402
from bertkit.measure.timing import Stopwatch, repeat, timed_step  # noqa: E402

DIM = 384
SHARD_ROWS = 10_000


def median_seconds(fn: Callable[[], Any], repeats: int, reset: Callable[[], None] | None = None) -> float:
    """The median wall time of `fn()` over `repeats` runs (`reset()` before each, untimed)."""
    return statistics.median(sample[0] for sample in repeat(timed_step(fn, setup=reset), 0, repeats, 0.0))


def write_store(path: Path, rows: int) -> float:
    """A complete store of `rows` random float32 rows through StoreWriter; the seconds its merge (+ hashing) took."""
    writer = store.StoreWriter(path, {"bench": "verify"}, rows, SHARD_ROWS, (DIM,), "float32")
    writer.prepare(create=True)
    rng = np.random.default_rng(0)
    for k, (start, end) in enumerate(writer.ranges):
        writer.write_shard(k, rng.standard_normal((end - start, DIM), dtype=np.float32), {"tokens": 0})
    with Stopwatch() as watch:
        writer.finalize({"rows": rows}, rng.integers(0, 2, rows))
    return watch.seconds


class _NotHashing(digests.HashingWriter):
    """The writer the store's merge uses, minus the hashing: the merge's cost without digests, for comparison."""

    def write(self, data: Any) -> int:
        written = self.handle.write(data)
        self.size += written
        return written


def merge_without_hashing(path: Path, rows: int) -> float:
    real = digests.HashingWriter
    digests.HashingWriter = _NotHashing  # type: ignore[misc]
    try:
        return write_store(path, rows)
    finally:
        digests.HashingWriter = real  # type: ignore[misc]


def plain_pass(path: Path) -> None:
    """One streaming read of the file, nothing computed: the floor of any pass over its bytes."""
    with open(path, "rb") as handle:
        while handle.read(digests.BLOCK):
            pass


def store_numbers(folder: Path, rows: int, repeats: int) -> dict[str, Any]:
    merge_without_hash = merge_without_hashing(folder / "store-unhashed", rows)
    shutil.rmtree(folder / "store-unhashed")
    path = folder / "store"
    merge_with_hash = write_store(path, rows)
    features = path / store.FEATURES
    verified = median_seconds(lambda: store.open(path), repeats, digests.forget_verified)
    unverified = median_seconds(lambda: store.open(path, verify=False), repeats)
    one_pass = median_seconds(lambda: plain_pass(features), repeats)
    hash_only = median_seconds(lambda: digests.file_record(features), repeats)
    digests.forget_verified()
    manifest = store.open(path, verify=False).manifest
    tracemalloc.start()
    store.verify_arrays(path, manifest)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "rows": rows, "dim": DIM, "dtype": "float32", "features_bytes": features.stat().st_size,
        "open_verified_s": round(verified, 4), "open_unverified_s": round(unverified, 4),
        "verification_overhead_s": round(verified - unverified, 4),
        "verification_ms_per_100k_rows": round(1000 * (verified - unverified) / rows * 100_000, 2),
        "plain_streaming_read_of_features_s": round(one_pass, 4),
        "sha256_of_features_s": round(hash_only, 4),
        "verification_over_one_plain_pass": round((verified - unverified) / one_pass, 2),
        "merge_with_hashing_s": round(merge_with_hash, 3), "merge_without_hashing_s": round(merge_without_hash, 3),
        "verify_python_peak_bytes": peak,
    }


def write_tsv(path: Path, rows: int) -> None:
    words = ["a", "fine", "film", "dull", "plot", "great", "cast", "weak", "ending", "lovely", "score", "boring"]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("sentence\tlabel\n")
        for i in range(rows):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(6 + i % 14))
            handle.write(f"{text} {i}\t{i % 2}\n")


def cache_numbers(folder: Path, rows: int, repeats: int) -> dict[str, Any]:
    data = folder / "rows.tsv"
    write_tsv(data, rows)
    cache = folder / "cache"
    with Stopwatch() as watch:
        ingest.local_table(data, "utf-8", "auto", False, None, str(cache))
    parse = watch.seconds
    (entry,) = [p for p in (cache / "tables").iterdir() if not p.name.startswith(".")]
    meta = json.loads((entry / ingest.META_FILE).read_text())
    verified = median_seconds(lambda: ingest.cached_table(entry), repeats, digests.forget_verified)
    mapped = median_seconds(lambda: RowTable.open(entry / ingest.ROWS_FILE, meta), repeats)
    return {"rows": rows, "input_bytes": data.stat().st_size, "rows_arrow_bytes": (entry / ingest.ROWS_FILE).stat().st_size,
            "first_parse_s": round(parse, 3), "open_verified_s": round(verified, 4),
            "open_unverified_s": round(mapped, 4), "verification_overhead_s": round(verified - mapped, 4)}


def model_numbers(folder: Path, repeats: int) -> dict[str, Any]:
    """A BERT-base-shaped classifier (`BertConfig()` defaults, random init: bytes, not a model; 438 MB of fp32
    safetensors) saved with its record as bertkit saves one, then: the record check alone
    (`metadata.verify_model_folder`: the size check and one streaming sha256 pass over each recorded file), and the
    load it precedes (`from_pretrained`, unverified), medians of `repeats` with the files in the page cache."""
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
    )

    from bertkit.encoding.reading import Reading
    from bertkit.models.loading import OFFLINE_NAME, resolve_model_name
    from bertkit.models.metadata import verify_model_folder, write_model_info

    path = folder / "bert-base"
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(num_labels=2)).save_pretrained(path)
    AutoTokenizer.from_pretrained(resolve_model_name(OFFLINE_NAME)).save_pretrained(path)  # bert-base-uncased vocab
    write_model_info(path, {"reading": Reading().to_json()})
    verify_s = median_seconds(lambda: verify_model_folder(path), repeats, digests.forget_verified)
    load_s = median_seconds(lambda: AutoModelForSequenceClassification.from_pretrained(path), repeats)
    weights = (path / "model.safetensors").stat().st_size
    return {"shape": "BertConfig() defaults (BERT-base), random init", "weights_bytes": weights,
            "verify_s": round(verify_s, 4), "from_pretrained_s": round(load_s, 4),
            "verify_over_load": round(verify_s / load_s, 3),
            "verify_mb_per_s": round(weights / 1e6 / verify_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results" / "verify-overhead.json"))
    parser.add_argument("--model-only", action="store_true",
                        help="only the BERT-base model folder, added to the results file's other numbers")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bertkit-bench-verify-"))
    if args.model_only:
        try:
            report = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
            report["model"] = {**model_numbers(folder, args.repeats), "loadavg": list(os.getloadavg())}
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        write_json_atomic(Path(args.out), report)
        print(report["model"])
        return
    try:
        report = {
            "benchmark": "verify-overhead", "machine": machine_info(),
            "versions": {k: v for k, v in package_versions().items() if k in ("python", "bertkit", "numpy", "pyarrow")},
            "loadavg_start": list(os.getloadavg()), "repeats": args.repeats,
            "notes": ["Warm page cache (the machine is shared; caches were not dropped). Medians of the repeats.",
                      "verification_overhead_s = open_verified_s - open_unverified_s: the size check plus one "
                      "streaming sha256 pass over features.npy and labels.npy (the cache: over rows.arrow)."],
            "store": store_numbers(folder, args.rows, args.repeats),
            "cache": cache_numbers(folder, args.rows, args.repeats),
            "model": model_numbers(folder, args.repeats),
            "loadavg_end": list(os.getloadavg()),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    write_json_atomic(Path(args.out), report)
    print(f"wrote {args.out}")
    print({k: report["store"][k] for k in ("open_verified_s", "open_unverified_s", "verification_overhead_s",
                                           "plain_streaming_read_of_features_s", "verify_python_peak_bytes")})


if __name__ == "__main__":
    main()
