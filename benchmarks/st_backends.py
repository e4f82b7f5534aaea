"""sentence-transformers' inference backends on one model and one set of texts, each at its documented setting.

Runs in its own virtual environment (benchmarks/.venv-st, made by `bench_embed.py`): ST's ONNX backend needs
optimum-onnx and its OpenVINO backend optimum-intel, and both pin transformers < 4.58, which bertkit's environment
(transformers 5) cannot have. Everything is built offline from the local model folder:

- torch fp32: `SentenceTransformer(folder)`.
- onnx: `backend="onnx"` (optimum's export of the folder).
- onnx int8: `export_dynamic_quantized_onnx_model` with each of ST's CPU configurations (avx2 = uint8 weights,
  avx512_vnni = int8 weights; both run on any x86 CPU, so both are measured and the faster counts).
- openvino fp32: `backend="openvino"`.
- openvino int8: `export_static_quantized_openvino_model` (post-training static quantization), calibrated on the
  first rows of the given calibration file (ST's default would download GLUE SST-2 from the hub; this is the
  same data, read locally).

Each backend encodes the same texts with `encode(batch_size=32)` (ST's default), warm-up first; the time is the
best of `--repeats`. Prints one JSON object: per backend rows/s, seconds and the mean cosine similarity of its
embeddings with torch fp32's.

    python benchmarks/st_backends.py --model DIR --texts FILE --calibration FILE --out FILE [--repeats 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bertkit's timing (stdlib + numpy), after this env's own

from bertkit.measure.timing import Stopwatch  # noqa: E402


def timed_encode(model, texts: list[str], repeats: int) -> tuple[float, np.ndarray]:
    model.encode(texts[:64], batch_size=32, show_progress_bar=False)  # warm-up: first-call allocations, JIT
    best, out = float("inf"), None
    for _ in range(repeats):
        with Stopwatch() as watch:
            out = model.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)
        best = min(best, watch.seconds)
    return best, out


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.mean(np.sum(a * b, axis=1)))


def calibration_folder(rows_file: Path, workdir: Path, n: int = 300) -> Path:
    """A local dataset folder (train.csv with a `sentence` column) for ST's OpenVINO calibration."""
    folder = workdir / "calibration"
    folder.mkdir()
    texts = [line.split("\t")[0] for line in rows_file.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
    with open(folder / "train.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence"])
        writer.writerows([t] for t in texts)
    return folder


def backends(folder: Path, calibration: Path, workdir: Path):
    """(name, loader) for every backend; the loaders build their exports on first use (not timed)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.backend import (
        export_dynamic_quantized_onnx_model,
        export_static_quantized_openvino_model,
    )

    def onnx_int8(config: str):
        def load():
            base = SentenceTransformer(str(folder), device="cpu", backend="onnx")
            export_dynamic_quantized_onnx_model(base, config, str(folder))
            name = next(p.name for p in (folder / "onnx").iterdir() if config in p.name)
            return SentenceTransformer(str(folder), device="cpu", backend="onnx",
                                       model_kwargs={"file_name": f"onnx/{name}"})
        return load

    def openvino_int8():
        base = SentenceTransformer(str(folder), device="cpu", backend="openvino")
        from optimum.intel import OVQuantizationConfig

        calib = calibration_folder(calibration, workdir)
        export_static_quantized_openvino_model(base, OVQuantizationConfig(num_samples=300), str(folder),
                                               dataset_name=str(calib), dataset_config_name="default",
                                               dataset_split="train", column_name="sentence")
        name = next(p.name for p in (folder / "openvino").iterdir() if "qint8" in p.name and p.suffix == ".xml")
        return SentenceTransformer(str(folder), device="cpu", backend="openvino",
                                   model_kwargs={"file_name": f"openvino/{name}"})

    def saved(backend: str):
        def load():
            model = SentenceTransformer(str(folder), device="cpu", backend=backend)
            model.save_pretrained(str(folder))  # keeps the export beside the model for the int8 variants
            return model
        return load

    return [
        ("st_torch_fp32", lambda: SentenceTransformer(str(folder), device="cpu")),
        ("st_onnx", saved("onnx")),
        ("st_onnx_int8_avx2", onnx_int8("avx2")),
        ("st_onnx_int8_avx512_vnni", onnx_int8("avx512_vnni")),
        ("st_openvino", saved("openvino")),
        ("st_openvino_int8_static", openvino_int8),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a sentence-transformers model folder (read, not changed)")
    parser.add_argument("--texts", required=True, help="headerless TSV whose first column is the text")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--calibration", required=True, help="headerless TSV for OpenVINO's static calibration")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    lines = Path(args.texts).read_text(encoding="utf-8").splitlines()
    texts = [line.split("\t")[0] for line in lines if line.strip()][: args.rows]
    import importlib.metadata as md

    versions = {p: md.version(p) for p in ("sentence-transformers", "transformers", "torch", "onnxruntime",
                                            "optimum", "optimum-onnx", "optimum-intel", "openvino")
                if _installed(p)}
    result = {"rows": len(texts), "versions": versions, "python": sys.version.split()[0], "backends": {}}
    with tempfile.TemporaryDirectory(prefix="st-backends-") as tmp:
        folder = Path(tmp) / "model"
        shutil.copytree(args.model, folder)
        reference = None
        for name, load in backends(folder, Path(args.calibration), Path(tmp)):
            try:
                model = load()
                seconds, embeddings = timed_encode(model, texts, args.repeats)
            except Exception as exc:  # a backend that does not build here is reported, not fatal
                result["backends"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                print(f"[st] {name}: failed ({exc!r:.200})", file=sys.stderr, flush=True)
                continue
            reference = embeddings if reference is None else reference
            result["backends"][name] = {"seconds": seconds, "rows_per_s": len(texts) / seconds,
                                        "cosine_vs_torch_fp32": mean_cosine(reference, embeddings)}
            print(f"[st] {name}: {len(texts) / seconds:.1f} rows/s", file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")


def _installed(package: str) -> bool:
    import importlib.metadata as md

    try:
        md.version(package)
        return True
    except md.PackageNotFoundError:
        return False


if __name__ == "__main__":
    main()
