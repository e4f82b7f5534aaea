"""int8 and ONNX inference on real weights: what they cost in accuracy and what they buy in latency.

1. Features (the packaged MiniLM, [CLS] of the last layer, SST-2 train/dev from ../shared/data/sst2): both splits
   embedded with `bertkit embed` in fp32, in `--precision int8` (torch dynamic int8), and from ONNX exports
   (`bertkit export --kind features`, fp32 and int8). The same probe (`fit_probe`, 5-fold C search on train) is
   fitted on each and scored on dev: the int8 loss is dev accuracy in points below fp32's. Mean cosine vs fp32.
2. A fine-tuned classifier (MiniLM fine-tuned on SST-2 with the `sst2-finetune-offline` recipe; made once into
   benchmarks/.cache/sst2-finetune unless --classifier names one): exported to ONNX int8 and fp32 through the accuracy
   gate on SST-2 dev (export_report.json: label agreement with PyTorch fp32, accuracy before/after, the largest
   logit difference); `--precision int8` scored the same way.
3. Batch-1 predict latency, fp32 / int8 / ONNX fp32 / ONNX int8: warm (model loaded and wrapped once, then one
   text per call through `infer.classifier_logits`, the function `bertkit predict` runs: tokenize, pad, forward,
   logits), median and p95 over --latency-rows dev sentences; and one-shot `bertkit predict --text` as a new
   process (start, imports, load, predict), median of 3.

All settings run in this one script on this machine, side by side. Writes benchmarks/results/int8.json
(--quick: int8-quick.json, 1,000 train rows, 200 dev rows, 50 latency rows).

    python benchmarks/bench_int8.py [--quick] [--classifier DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
SST2 = ROOT.parent / "shared" / "data" / "sst2"
CACHE = HERE / ".cache"
BERTKIT = [sys.executable, "-m", "bertkit"]
SETTINGS = ("fp32", "int8", "onnx_fp32", "onnx_int8")

from bertkit.encoding.reading import Reading  # noqa: E402
from bertkit.io.atomic import write_json_atomic  # noqa: E402
from bertkit.io.trail import machine_info, package_versions  # noqa: E402
from bertkit.measure.timing import Stopwatch  # noqa: E402
from bertkit.models import loading  # noqa: E402
from bertkit.models.compute import Compute  # noqa: E402


def bertkit_cli(*args: str) -> dict[str, Any]:
    """Run a bertkit command with --json (quiet); its JSON, or the failure (exit 2 of a refusal included)."""
    done = subprocess.run([*BERTKIT, *args, "--json", "--quiet"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        return {"exit_code": done.returncode, "error": (done.stderr or done.stdout).strip()[-800:]}
    return json.loads(done.stdout)


def export(model: str, out: Path, kind: str, quantize: str, gate_data: Path, limit: int | None,
           force: bool = False) -> dict[str, Any]:
    """`bertkit export` of `model` into `out`; its export_report.json (or the refusal)."""
    args = ["export", "--model", model, "--out", str(out), "--kind", kind, "--quantize", quantize,
            "--data", str(gate_data), "--text-column", "0", "--label-column", "1", "--overwrite",
            *(["--force"] if force else [])]
    if limit:
        args += ["--limit", str(limit)]
    with Stopwatch() as watch:
        result = bertkit_cli(*args)
    report_file = out / "export_report.json"
    report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.is_file() else result
    return {"seconds": round(watch.seconds, 1), "report": report}


# ---------------------------------------------------------------- 1. features + probe


def embed_split(model: str, data: Path, precision: str, out: Path, limit: int | None) -> tuple[np.ndarray, Any]:
    """Features and label ids of one SST-2 split via `bertkit embed` (the command, in process)."""
    from bertkit.commands import embed
    from bertkit.features import store

    shutil.rmtree(out, ignore_errors=True)
    cfg = embed.EmbedConfig.of(model=model, data=str(data), text_column="0", label_column="1", limit=limit,
                            precision=precision, out=str(out))
    with Stopwatch() as watch:
        embed.run(cfg, progress=False)
    opened = store.open(out)
    return np.asarray(opened.features, dtype=np.float32), (np.asarray(opened.labels), opened.label_map, watch.seconds)


def probe_accuracy(train: tuple[np.ndarray, np.ndarray], dev: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    from bertkit.probe.fit import fit_probe

    fit = fit_probe(train[0], train[1], cv=5)
    return {"C": fit.C, "dev_accuracy": float(np.mean(fit.model.predict(dev[0]) == dev[1]))}


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.mean(np.sum(a * b, axis=1)))


def features_block(workdir: Path, n_train: int | None, n_dev: int | None) -> dict[str, Any]:
    """Probe dev accuracy on fp32 / int8 / ONNX fp32 / ONNX int8 features of the packaged MiniLM."""
    exports = {q: workdir / f"minilm-features-{q}" for q in ("none", "int8")}
    block: dict[str, Any] = {"model": "minilm-offline", "pool": "cls", "layers": "-1", "exports": {}, "settings": {}}
    for quantize, folder in exports.items():
        block["exports"][quantize] = export("minilm-offline", folder, "features", quantize, SST2 / "dev.tsv", n_dev)
    sources = {"fp32": ("minilm-offline", "fp32"), "int8": ("minilm-offline", "int8"),
               "onnx_fp32": (str(exports["none"]), "auto"), "onnx_int8": (str(exports["int8"]), "auto")}
    reference_dev = None
    for name, (model, precision) in sources.items():
        if not Path(model).exists() and model != "minilm-offline":
            block["settings"][name] = {"error": "export refused or failed; see exports"}
            continue
        x_train, (y_train, _, t_train) = embed_split(model, SST2 / "train.tsv", precision, workdir / "s", n_train)
        x_dev, (y_dev, _, t_dev) = embed_split(model, SST2 / "dev.tsv", precision, workdir / "s", n_dev)
        reference_dev = x_dev if reference_dev is None else reference_dev
        result = probe_accuracy((x_train, y_train), (x_dev, y_dev))
        result.update(cosine_vs_fp32=mean_cosine(reference_dev, x_dev), embed_seconds=round(t_train + t_dev, 2),
                      rows=len(y_train) + len(y_dev))
        block["settings"][name] = result
        print(f"[features] {name}: dev accuracy {result['dev_accuracy']:.4f}", file=sys.stderr, flush=True)
    base = block["settings"]["fp32"]["dev_accuracy"]
    for result in block["settings"].values():
        if "dev_accuracy" in result:
            result["points_vs_fp32"] = round(100 * (result["dev_accuracy"] - base), 2)
    return block


# ---------------------------------------------------------------- 2. classifier + gate


def fine_tuned_classifier(given: str | None) -> Path:
    """A MiniLM fine-tuned on SST-2: --classifier, or made once with the offline recipe (about 4 minutes)."""
    if given:
        return Path(given)
    run = CACHE / "sst2-finetune"
    if not (run / "best" / "config.json").is_file():
        print(f"[classifier] fine-tuning {run} once (sst2-finetune-offline)", file=sys.stderr, flush=True)
        result = bertkit_cli("finetune", "--recipe", "sst2-finetune-offline", "--out", str(run))
        if "error" in result:
            raise SystemExit(f"fine-tuning failed: {result['error']}")
    return run / "best"


def predictions(model: str, precision: str, data: Path, limit: int | None) -> tuple[np.ndarray, float]:
    """Label ids predicted for `data` (library: what `bertkit evaluate` runs) and the accuracy."""
    from bertkit.commands import evaluate

    with tempfile.TemporaryDirectory() as tmp:
        cfg = evaluate.EvaluateConfig.of(model=model, data=str(data), text_column="0", label_column="1", limit=limit,
                             precision=precision, out=str(Path(tmp) / "eval"))
        result = evaluate.run(cfg).metrics.to_json()
        import pandas as pd

        labels = pd.read_csv(Path(tmp) / "eval" / "predictions.csv")["predicted"].astype(str).to_numpy()
    return labels, float(result["accuracy"])


def classifier_block(classifier: Path, workdir: Path, n_dev: int | None) -> dict[str, Any]:
    block: dict[str, Any] = {"model": str(classifier), "exports": {}, "torch_int8": {}}
    for quantize in ("none", "int8"):
        block["exports"][quantize] = export(str(classifier), workdir / f"classifier-{quantize}", "classifier",
                                            quantize, SST2 / "dev.tsv", n_dev)
    if not (workdir / "classifier-int8").is_dir():  # refused by the gate: kept with --force for the latency rows
        block["exports"]["int8_forced"] = export(str(classifier), workdir / "classifier-int8", "classifier", "int8",
                                                 SST2 / "dev.tsv", n_dev, force=True)
    fp32_labels, fp32_accuracy = predictions(str(classifier), "fp32", SST2 / "dev.tsv", n_dev)
    int8_labels, int8_accuracy = predictions(str(classifier), "int8", SST2 / "dev.tsv", n_dev)
    block["torch_int8"] = {"agreement": float(np.mean(fp32_labels == int8_labels)), "accuracy_fp32": fp32_accuracy,
                           "accuracy_int8": int8_accuracy}
    return block


# ---------------------------------------------------------------- 3. batch-1 latency


def warm_latency(model_dir: str, precision: str, texts: list[str]) -> dict[str, float]:
    """Per-text milliseconds with the model loaded once: one text per call through infer.classifier_logits."""
    from bertkit.data.dataset import TextDataset
    from bertkit.models import infer, onnx
    from bertkit.models.fastforward import SequenceClassifier

    compute = infer.export_compute_of(model_dir, precision) or Compute.resolve(None, precision)
    model, tokenizer, _ = infer.load_for_inference(model_dir, compute)
    if not isinstance(model, onnx.OnnxModel):  # wrapped once, as a server would: the fast path's check runs once
        model = SequenceClassifier(model)
    run = lambda text: infer.classifier_logits(model, tokenizer, TextDataset([text]), reading=Reading(128),  # noqa: E731
                                               batch_size=1, precision=precision)
    for text in texts[:5]:  # warm-up
        run(text)
    times = []
    for text in texts:
        with Stopwatch() as watch:
            run(text)
        times.append(1000 * watch.seconds)
    return {"median_ms": statistics.median(times), "p95_ms": float(np.percentile(times, 95)), "calls": len(times)}


def one_shot_latency(model_dir: str, precision: str, text: str, repeats: int = 3) -> dict[str, float]:
    """`bertkit predict --model DIR --text TEXT` as a new process: start, imports, load, predict (median)."""
    times = []
    for _ in range(repeats):
        with Stopwatch() as watch:
            result = bertkit_cli("predict", "--model", model_dir, "--text", text, "--precision", precision)
        times.append(watch.seconds)
        if "error" in result:
            return {"error": result["error"]}
    return {"median_s": statistics.median(times), "runs": repeats}


def latency_block(classifier: Path, workdir: Path, n_rows: int) -> dict[str, Any]:
    texts = [line.split("\t")[0] for line in (SST2 / "dev.tsv").read_text(encoding="utf-8").splitlines()
             if line.strip()][:n_rows]
    sources = {"fp32": (str(classifier), "fp32"), "int8": (str(classifier), "int8"),
               "onnx_fp32": (str(workdir / "classifier-none"), "auto"),
               "onnx_int8": (str(workdir / "classifier-int8"), "auto")}
    block: dict[str, Any] = {"texts": len(texts), "mean_tokens": None, "warm": {}, "one_shot": {}}
    tokenizer = loading.load_tokenizer(str(classifier))
    block["mean_tokens"] = float(np.mean([len(ids) for ids in tokenizer(texts)["input_ids"]]))
    for name, (model, precision) in sources.items():
        if not Path(model).is_dir():
            block["warm"][name] = {"error": "no such model (export refused?)"}
            continue
        block["warm"][name] = warm_latency(model, precision, texts)
        print(f"[latency] {name}: {block['warm'][name]['median_ms']:.1f} ms", file=sys.stderr, flush=True)
    for name, (model, precision) in sources.items():
        if Path(model).is_dir():
            block["one_shot"][name] = one_shot_latency(model, precision, texts[0])
    return block


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 train rows, 200 dev rows, 50 latency texts")
    parser.add_argument("--classifier", default=None, help="a fine-tuned SST-2 model folder (default: made once)")
    parser.add_argument("--latency-rows", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not (SST2 / "train.tsv").is_file():
        raise SystemExit(f"{SST2} not found: the benchmark needs ../shared/data/sst2")
    n_train, n_dev = (1000, 200) if args.quick else (None, None)
    n_latency = args.latency_rows or (50 if args.quick else 300)
    out = Path(args.out or HERE / "results" / ("int8-quick.json" if args.quick else "int8.json"))
    total = Stopwatch().start()
    results: dict[str, Any] = {
        "benchmark": "int8", "quick": args.quick, "machine": machine_info(), "versions": package_versions(),
        "cpu_supports_bf16": loading.cpu_supports_bf16(), "loadavg_start": os.getloadavg(),
        "notes": ["int8 = torch dynamic int8 (linear layers); onnx_* = `bertkit export` folders run by onnxruntime.",
                  "Latency 'warm' is per text with the model loaded; 'one_shot' is a whole `bertkit predict` process."],
    }
    classifier = fine_tuned_classifier(args.classifier)
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        workdir = Path(tmp)
        results["features"] = features_block(workdir, n_train, n_dev)
        results["classifier"] = classifier_block(classifier, workdir, n_dev)
        results["latency"] = latency_block(classifier, workdir, n_latency)
    results["loadavg_end"] = os.getloadavg()
    results["seconds"] = round(total.stop(), 1)
    write_json_atomic(out, results)
    print(json.dumps({k: results[k] for k in ("features", "classifier", "latency")}, indent=1, default=str)[:6000])
    print(f"wrote {out} ({results['seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
