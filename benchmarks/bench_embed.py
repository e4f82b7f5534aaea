"""Feature-extraction throughput: the seed notebook's way vs sentence-transformers vs the transformers pipeline
vs `bertkit embed`, each at its best setting on this machine, plus model FLOPs utilisation against a measured
matmul peak.

Same run, same data, alternatives side by side (ratios are what to read: the machine may be shared, so absolute
numbers move with the load; `os.getloadavg()` is recorded before and after each measurement).

- MiniLM-L6 (the packaged real encoder) on SST-2 train (6,920 sentences; --quick: 400).
- BERT-base / DistilBERT-base shapes (BertConfig() / DistilBertConfig(), random init, labelled as such) on a
  slice (--rows-base, default 300; --quick: 64).
- Precision adapts to the machine. Where bf16 is native (AVX512-BF16/AMX), bertkit and sentence-transformers
  also run in bf16 on the same rows as fp32 and "vs ST" is against sentence-transformers' faster setting.
  Where it is not, bf16 autocast is emulated and several times slower than fp32: it is measured on a small
  slice only (--rows-bf16, default 64; --quick: 16), next to fp32 and sentence-transformers on that slice.

- int8 and ONNX (MiniLM): `bertkit embed --precision int8` (torch dynamic int8) and `bertkit embed` on
  `bertkit export --kind features` folders (ONNX fp32 and int8, run by onnxruntime), next to
  sentence-transformers' own ONNX, ONNX int8 (dynamic, its avx2 and avx512_vnni configurations), OpenVINO and
  OpenVINO int8 (static, calibrated on local SST-2 rows) backends, which run in a side environment
  (benchmarks/st_side.py: optimum needs transformers < 4.58). Exports are built before timing, for both libraries.
  "vs ST" is against sentence-transformers' fastest backend on the same rows.

    python benchmarks/bench_embed.py [--quick] [--no-st-backends] [--out benchmarks/results/embed.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
ST_PREFIXES = ("sentence_transformers", "st_")
"""Rows that are sentence-transformers (its torch path here; its ONNX/OpenVINO backends from the side environment)."""
SST2 = ROOT.parent / "shared" / "data" / "sst2" / "train.tsv"

from transformers.utils import logging as hf_logging  # noqa: E402

from bertkit.models import loading  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402
from bertkit.measure.timing import Stopwatch, repeat, timed_step  # noqa: E402

# ---------------------------------------------------------------- measuring


def timed(fn: Callable[[], Any], repeats: int = 1) -> dict[str, Any]:
    """Best wall time of `repeats` calls, with the load average around the measurement."""
    load_before = os.getloadavg()[0]
    best = min(sample[0] for sample in repeat(timed_step(fn), 0, repeats, 0.0))
    return {"seconds": best, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def matmul_peak(dtype: torch.dtype, n: int, repeats: int = 5) -> float:
    """Measured matmul GFLOP/s on this machine for `dtype` (best of `repeats`)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    best = min(sample[0] for sample in repeat(timed_step(lambda: torch.mm(a, b)), 1, repeats, 0.0))
    return 2 * n**3 / best / 1e9


def measure_peaks() -> dict[str, float]:
    """fp32 and bf16 matmul GFLOP/s (bf16 on a small matrix where it is emulated: there it is very slow)."""
    if loading.cpu_supports_bf16():
        return {"fp32": matmul_peak(torch.float32, 1024), "bf16": matmul_peak(torch.bfloat16, 1024)}
    return {"fp32": matmul_peak(torch.float32, 1024), "bf16": matmul_peak(torch.bfloat16, 256, repeats=3)}


def encoder_flops(config: Any, lengths: np.ndarray) -> float:
    """Forward FLOPs of the encoder layers on unpadded sequences (matmuls: projections, FFN, attention)."""
    h, layers = config.hidden_size, config.num_hidden_layers
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 4 * h)
    s = lengths.astype(np.float64)
    per_layer = 8 * s * h * h + 4 * s * h * ffn + 4 * s * s * h
    return float(layers * per_layer.sum())


# ---------------------------------------------------------------- the alternatives


def seed_way(model: Any, tokenizer: Any, texts: list[str], chunk: int = 256) -> np.ndarray:
    """The seed notebook: encode each sentence, pad all to the global max, run, slice [:, 0, :].

    (The notebook runs every row in one batch; here the padded matrix is fed in chunks of 256 rows so memory
    stays bounded. Padding to the global max, no sorting, no inference_mode: as in the notebook.)
    """
    tokenized = [tokenizer.encode(t, add_special_tokens=True) for t in texts]
    width = max(len(t) for t in tokenized)
    padded = np.array([t + [0] * (width - len(t)) for t in tokenized])
    mask = np.where(padded != 0, 1, 0)
    out = []
    for start in range(0, len(texts), chunk):
        ids = torch.tensor(padded[start : start + chunk])
        with torch.no_grad():
            last_hidden_states = model(ids, attention_mask=torch.tensor(mask[start : start + chunk]))
        out.append(last_hidden_states[0][:, 0, :].numpy())
    return np.concatenate(out)


def st_encode(st_model: Any, texts: list[str]) -> np.ndarray:
    return st_model.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)


def pipeline_way(pipe: Any, texts: list[str]) -> np.ndarray:
    """transformers feature-extraction pipeline, batch 32, tensors returned (cheaper than nested lists)."""
    outs = pipe(texts, batch_size=32, truncation=True, max_length=128, return_tensors=True)
    return np.stack([o[0, 0].numpy() for o in outs])


def bertkit_way(model: str, data: Path, limit: int, dtype: str, out: Path, batch_size: str = "auto") -> dict[str, Any]:
    """`bertkit embed` end to end, in process: read the data, load the model, encode, write the store."""
    from bertkit.commands import embed

    shutil.rmtree(out, ignore_errors=True)
    cfg = embed.EmbedConfig.of(model=model, data=str(data), text_column="0", label_column="1", limit=limit, precision=dtype,
                      out=str(out), batch_size=batch_size)
    return dataclasses.asdict(embed.run(cfg, progress=False))


def export_features(model_name: str, folder: Path, quantize: str, data: Path) -> Path:
    """`bertkit export --kind features` ([CLS] of the last layer, as `bertkit embed`'s default), gated on 500 rows."""
    cmd = [sys.executable, "-m", "bertkit", "export", "--model", model_name, "--out", str(folder), "--kind", "features",
           "--quantize", quantize, "--data", str(data), "--text-column", "0", "--label-column", "1", "--limit", "500",
           "--overwrite", "--quiet"]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return folder


def st_side_backends(model_name: str, data: Path, rows: int, workdir: Path) -> dict[str, Any]:
    """sentence-transformers' ONNX / ONNX int8 / OpenVINO / OpenVINO int8 backends (benchmarks/st_side.py)."""
    import st_side

    return st_side.measure_st_backends(Path(loading.resolve_model_name(model_name)), data, rows, data,
                                       workdir / "st-side.json")


# ---------------------------------------------------------------- one model


def base_shape_folder(kind: str, workdir: Path) -> Path:
    """A random-init BERT-base / DistilBERT-base (exact shapes) saved with the bert-base-uncased vocabulary."""
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    folder = workdir / kind
    model = BertModel(BertConfig()) if kind == "bert-base" else DistilBertModel(DistilBertConfig())
    model.save_pretrained(folder, safe_serialization=True)
    loading.load_tokenizer("minilm-offline").save_pretrained(folder)
    return folder


def bench_model(label: str, model_name: str, texts: list[str], data: Path, workdir: Path, peaks: dict[str, float],
                bf16_rows: int, with_pipeline: bool, with_onnx: bool = False, st_side: bool = False) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    encoder = loading.load_encoder(model_name)
    tokenizer = loading.load_tokenizer(model_name)
    lengths = np.array([len(x) for x in tokenizer(texts)["input_ids"]])
    st_model = SentenceTransformer(loading.resolve_model_name(model_name), device="cpu")
    n, tokens = len(texts), int(lengths.sum())
    flops = encoder_flops(encoder.config, lengths)
    runs: dict[str, dict[str, Any]] = {}

    def record(name: str, measured: dict[str, Any], rows: int, n_tokens: int, n_flops: float, peak: float) -> None:
        s = measured["seconds"]
        runs[name] = {**measured, "rows": rows, "tokens": n_tokens, "rows_per_s": rows / s, "tokens_per_s": n_tokens / s,
                      "gflops_per_s": n_flops / s / 1e9, "mfu": n_flops / s / 1e9 / peak}

    print(f"[{label}] {n} rows, {tokens} tokens", file=sys.stderr, flush=True)
    record("seed_notebook", timed(lambda: seed_way(encoder, tokenizer, texts)), n, tokens, flops, peaks["fp32"])
    record("sentence_transformers", timed(lambda: st_encode(st_model, texts)), n, tokens, flops, peaks["fp32"])
    if with_pipeline:
        from transformers import pipeline

        pipe = pipeline("feature-extraction", model=encoder, tokenizer=tokenizer, device="cpu")
        record("transformers_pipeline", timed(lambda: pipeline_way(pipe, texts)), n, tokens, flops, peaks["fp32"])
    if st_side:  # sentence-transformers' ONNX / OpenVINO backends (side environment), on the same rows
        side = st_side_backends(model_name, data, n, workdir)
        for name, measured in side.get("backends", {}).items():
            if "seconds" in measured:
                record(name, {"seconds": measured["seconds"], "cosine_vs_torch_fp32": measured["cosine_vs_torch_fp32"]},
                       n, tokens, flops, peaks["fp32"])
        side_info = {k: v for k, v in side.items() if k != "backends"}
        side_info["failed"] = {k: v["error"] for k, v in side.get("backends", {}).items() if "error" in v}
    out = workdir / f"store-{label}"
    record("bertkit_fp32", timed(lambda: bertkit_way(model_name, data, n, "fp32", out)), n, tokens, flops, peaks["fp32"])
    record("bertkit_int8", timed(lambda: bertkit_way(model_name, data, n, "int8", out)), n, tokens, flops, peaks["fp32"])
    if with_onnx:  # `bertkit export` folders (export time is not counted, as for ST's exports)
        for quantize in ("none", "int8"):
            folder = export_features(model_name, workdir / f"onnx-{label}-{quantize}", quantize, data)
            name = "bertkit_onnx" + ("_int8" if quantize == "int8" else "")
            record(name, timed(lambda f=folder: bertkit_way(str(f), data, n, "auto", out)), n, tokens, flops, peaks["fp32"])
    if loading.cpu_supports_bf16():  # native bf16: both libraries' bf16 setting on every row
        st_bf16 = SentenceTransformer(loading.resolve_model_name(model_name), device="cpu").to(torch.bfloat16)
        record("sentence_transformers_bf16", timed(lambda: st_encode(st_bf16, texts)), n, tokens, flops, peaks["bf16"])
        record("bertkit_bf16", timed(lambda: bertkit_way(model_name, data, n, "bf16", out)), n, tokens, flops,
               peaks["bf16"])
    elif bf16_rows:
        _bf16_block(record, model_name, data, out, st_model, texts, lengths, encoder.config, bf16_rows, peaks)
    add_ratios(runs)
    return {"model": label, "model_name": model_name, "rows": n, "tokens": tokens, "bf16_rows": bf16_rows,
            "params": loading.parameter_count(encoder), "runs": runs, **({"st_side": side_info} if st_side else {})}


def add_ratios(runs: dict[str, dict[str, Any]]) -> None:
    """vs ST = rows/s over sentence-transformers' best setting measured on the same rows; vs seed likewise."""
    st_best = max(r["rows_per_s"] for k, r in runs.items() if k.startswith(ST_PREFIXES) and "_small" not in k)
    seed_rate = runs["seed_notebook"]["rows_per_s"]
    st_small = runs.get("sentence_transformers_small", {}).get("rows_per_s")
    for name, r in runs.items():
        small = name.endswith("_small")
        r["vs_sentence_transformers"] = r["rows_per_s"] / (st_small if small else st_best)
        r["vs_seed"] = None if small else r["rows_per_s"] / seed_rate


def _bf16_block(record: Callable[..., None], model_name: str, data: Path, out: Path, st_model: Any, texts: list[str],
                lengths: np.ndarray, config: Any, bf16_rows: int, peaks: dict[str, float]) -> None:
    """Where bf16 is emulated (no AVX512-BF16/AMX), i.e. slow: bf16 vs fp32 (and sentence-transformers) on the
    same few rows only, to show the cost."""
    small = lengths[:bf16_rows]
    small_flops = encoder_flops(config, small)
    record("bertkit_fp32_small", timed(lambda: bertkit_way(model_name, data, bf16_rows, "fp32", out)), bf16_rows,
           int(small.sum()), small_flops, peaks["fp32"])
    record("bertkit_bf16_small", timed(lambda: bertkit_way(model_name, data, bf16_rows, "bf16", out)), bf16_rows,
           int(small.sum()), small_flops, peaks["bf16"])
    record("sentence_transformers_small", timed(lambda: st_encode(st_model, texts[:bf16_rows])), bf16_rows,
           int(small.sum()), small_flops, peaks["fp32"])


# ---------------------------------------------------------------- main


def print_table(results: dict[str, Any]) -> None:
    print(f"{'model':<16}{'method':<30}{'rows':>6}{'rows/s':>9}{'tok/s':>9}{'vs ST':>7}{'vs seed':>8}{'MFU':>7}")
    for block in results["models"]:
        for name, r in block["runs"].items():
            seed = f"{r['vs_seed']:.2f}" if r["vs_seed"] is not None else "-"
            print(f"{block['model']:<16}{name:<30}{r['rows']:>6}{r['rows_per_s']:>9.1f}{r['tokens_per_s']:>9.0f}"
                  f"{r['vs_sentence_transformers']:>7.2f}{seed:>8}{r['mfu']:>7.1%}")


def precision_notes(native_bf16: bool) -> list[str]:
    """What the bf16 rows mean on this machine (the notes must be true on both kinds of CPU)."""
    if native_bf16:
        return ["This CPU runs bf16 natively (AVX512-BF16/AMX): bertkit and sentence-transformers are measured in fp32 "
                "and bf16 on the same rows; vs ST is against sentence-transformers' faster setting."]
    return ["This CPU has no AVX512-BF16/AMX, so bf16 is emulated and slower than fp32: bf16 is measured on a small "
            "slice only (*_small rows, MiniLM), next to fp32 and sentence-transformers on the same slice; fp32 is "
            "every library's best setting here."]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: a few hundred rows")
    parser.add_argument("--rows", type=int, default=None, help="MiniLM rows (default: all of SST-2 train)")
    parser.add_argument("--rows-base", type=int, default=None, help="rows for the BERT-/DistilBERT-base shapes")
    parser.add_argument("--rows-bf16", type=int, default=None, help="rows for the bf16 vs fp32 comparison")
    parser.add_argument("--skip-base", action="store_true", help="MiniLM only")
    parser.add_argument("--no-st-backends", action="store_true",
                        help="skip sentence-transformers' ONNX/OpenVINO backends (they need benchmarks/.venv-st, made once)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "embed.json"))
    args = parser.parse_args(argv)
    if not SST2.is_file():
        raise SystemExit(f"{SST2} not found: the benchmark needs ../shared/data/sst2/train.tsv")
    texts_all = [line.split("\t")[0] for line in SST2.read_text(encoding="utf-8").splitlines() if line.strip()]
    n_minilm = args.rows or (400 if args.quick else len(texts_all))
    n_base = args.rows_base or (64 if args.quick else 300)
    n_bf16 = args.rows_bf16 or (16 if args.quick else 64)
    total = Stopwatch().start()
    peaks = measure_peaks()
    print(f"matmul peak: fp32 {peaks['fp32']:.1f} GFLOP/s, bf16 {peaks['bf16']:.2f} GFLOP/s", file=sys.stderr)
    results: dict[str, Any] = {
        "benchmark": "embed", "quick": args.quick, "args": vars(args), "data": str(SST2), "machine": machine_info(),
        "versions": package_versions(), "cpu_supports_bf16": loading.cpu_supports_bf16(),
        "matmul_peak_gflops": peaks, "loadavg_start": os.getloadavg(), "models": [],
        "notes": [
            "Ratios compare methods measured in the same run; the machine is shared, see load_before/load_after.",
            "bertkit_* times are end to end: read the TSV, load the model, tokenize, encode, write the store.",
            *precision_notes(loading.cpu_supports_bf16()),
            "bert-base/distilbert-base are BertConfig()/DistilBertConfig() with random weights (shapes only).",
            "MFU = encoder matmul FLOPs on unpadded tokens / time / measured matmul peak of the same dtype "
            "(int8 and ONNX rows: against the fp32 peak).",
            "sentence_transformers* rows run in this environment; st_* rows are sentence-transformers' ONNX/OpenVINO "
            "backends in benchmarks/.venv-st (versions in st_side); sentence-transformers pools by mean (the model's "
            "setting), bertkit embed by [CLS] (its default, the Alammar workflow).",
        ],
    }
    with tempfile.TemporaryDirectory(prefix="bench-embed-") as tmp:
        workdir = Path(tmp)
        data = workdir / "sst2-train.tsv"
        shutil.copyfile(SST2, data)
        results["models"].append(bench_model("minilm-l6", "minilm-offline", texts_all[:n_minilm], data, workdir, peaks,
                                             n_bf16, with_pipeline=True, with_onnx=True,
                                             st_side=not args.no_st_backends))
        if not args.skip_base:
            for kind in ("distilbert-base", "bert-base"):
                folder = base_shape_folder(kind, workdir)
                results["models"].append(bench_model(kind, str(folder), texts_all[:n_base], data, workdir, peaks,
                                                     0, with_pipeline=False))
                shutil.rmtree(folder, ignore_errors=True)
    results["loadavg_end"] = os.getloadavg()
    # The peak is the best of a measurement before and after (a busy machine lowers both); MFU is recomputed
    # against it, so it is never flattered by a peak measured in a bad moment.
    end_peaks = measure_peaks()
    results["matmul_peak_gflops"] = {k: max(peaks[k], end_peaks[k]) for k in peaks}
    results["matmul_peak_samples"] = {"start": peaks, "end": end_peaks}
    for block in results["models"]:
        for name, r in block["runs"].items():
            peak = results["matmul_peak_gflops"]["bf16" if "bf16" in name else "fp32"]
            r["mfu"] = r["gflops_per_s"] / peak
    results["seconds"] = total.stop()
    out = Path(args.out)
    write_json_atomic(out, results)
    print_table(results)
    print(f"wrote {out} ({results['seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
