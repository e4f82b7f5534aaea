"""The GPU benchmark in one go (`bash benchmarks/gpu.sh`, <= 8 minutes on one H100/H200): bertkit against the
alternatives at their best, side by side in the same lease, counted the standard way, and the gpu-marked tests.

Writes, under --out (benchmarks/results/gpu/latest/ by default; docs/gpus.md quotes benchmarks/results/gpu/):
  finetune.json  `steps`: the graphed BERT-base step at batch 32 per variant (plain, lean, cuDNN attention, compiled
                 layers) on 512-token documents and SST-2 rows, steady ms and MFU; `finetune_docs_512` and
                 `finetune_sst2`: `bertkit finetune` (and --compile) against transformers.Trainer eager and with
                 torch_compile (same rows, hyperparameters and weight decay), interleaved repeats, ratio of medians;
                 `minilm_seeds`: the real MiniLM's SST-2 dev accuracy, bertkit and Trainer, over seeds; `profile`.
  embed.json     `embed_sst2`, `embed_docs_512`: `bertkit embed` against sentence-transformers' best setting (swept over
                 batch sizes x bf16/fp16, ONNX backend where it runs), interleaved; bertkit's forward alone on
                 pre-tokenized ids, eager and compiled layers.
  tests.log      `pytest -m gpu` on this machine.
Both files start with `device`, `spec_bf16_dense_tflops`, `matmul_peak_bf16` and the headline `mfu_standard_*` and
ratio fields. MFU: `bertkit.measure.flops` (6·N per real token + attention for training, 2·N + attention for
inference, N = 85.05M for BERT-base, over the device's dense bf16 spec peak). The BERT-base models are random init.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_embed  # noqa: E402
import gpu_train  # noqa: E402
from gpu_common import GPU, PRECISIONS, ROOT, Count, Run, device_info, matmul_peak, prepare  # noqa: E402

SIZES = {"full": {"copies": 2, "rows": None, "docs_train": 1024, "docs_dev": 256, "doc_sentences": 32, "steps": 20,
                  "embed_docs": 8192, "st_docs": 1024, "minilm_rows": None, "tiny": False, "rounds": 2,
                  "seeds": (1, 2, 3), "st_batches": (64, 256, 1024), "st_doc_batches": (32, 128, 256)},
         "quick": {"copies": 2, "rows": 96, "docs_train": 48, "docs_dev": 16, "doc_sentences": 6, "steps": 2,
                   "embed_docs": 64, "st_docs": 32, "minilm_rows": 96, "tiny": True, "rounds": 2, "seeds": (1,),
                   "st_batches": (16,), "st_doc_batches": (16,)}}
SECTIONS = ("tests", "steps", "finetune_docs", "embed_docs", "finetune_sst2", "embed_sst2", "minilm", "profile")
"""In run order: the correctness evidence, then the figures the issue's criteria name, then the rest."""


def gpu_tests(out: Path, seconds: float, select: str) -> dict[str, Any]:
    log = out / "tests.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_gpu.py", "-p", "no:cacheprovider"]
    cmd += ["-k", select] if select else []
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(30, seconds))
        log.write_text(done.stdout + done.stderr)
        return {"exit_code": done.returncode, "summary": (done.stdout.strip().splitlines() or ["?"])[-1]}
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"timed out after {seconds:.0f} s\n{exc.stdout or ''}")
        return {"exit_code": None, "summary": "timed out"}


def headline(run: Run) -> None:
    """The fields the issue's criteria read, at the top of each file."""
    ft, emb = run.files["finetune"], run.files["embed"]
    steps = ft.get("steps") or {}
    for label, key in (("documents_512", "long"), ("sst2", "sst2_b32")):
        variants = {k: v for k, v in (steps.get(label) or {}).items() if isinstance(v, dict) and "mfu_standard" in v}
        if variants:
            best = max(variants, key=lambda k: variants[k]["mfu_standard"] or 0)
            ft[f"mfu_standard_{key}_training_steady_step"] = {"variant": best, "mfu": variants[best]["mfu_standard"],
                                                              "default_lean": variants.get("lean", {}).get(
                                                                  "mfu_standard")}
    for name, key in (("finetune_docs_512", "long"), ("finetune_sst2", "sst2_b32")):
        part = ft.get(name)
        if part:
            ft[f"mfu_standard_{key}_training_end_to_end"] = {
                k: part[k]["mfu_standard"] for k in ("bertkit", "bertkit_compiled") if k in part}
            ft[f"bertkit_vs_trainer_best_{key}"] = {"ratio": part["bertkit_vs_trainer_best"],
                                                    "trainer_best": part["trainer_best"], "same_lease": True}
    for name, key in (("embed_docs_512", "long"), ("embed_sst2", "sst2")):
        part = emb.get(name)
        if part:
            emb[f"mfu_standard_{key}_embed_end_to_end"] = part[part["bertkit_embed_best"]]["mfu_standard"]
            emb[f"mfu_standard_{key}_forward_only"] = {
                k: part[k].get("mfu_standard") for k in ("bertkit_forward_only", "bertkit_forward_only_compiled")
                if k in part}
            emb[f"bertkit_vs_st_best_{key}"] = {"ratio": part["bertkit_vs_st_best"], "same_lease": True,
                                                "st_best": part["sentence_transformers_sweep"]["best"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu" / "latest")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="folder with sst2/ (gpu.sh passes the carried copy)")
    parser.add_argument("--seconds", type=float, default=450, help="deadline for the sections (tests included)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the script itself")
    parser.add_argument("--tests", default="", help="pytest -k expression for the gpu tests (default: all)")
    parser.add_argument("--only", default="", help=f"comma list of sections to run (default: all): {SECTIONS}")
    args = parser.parse_args(argv)
    size = SIZES["quick" if args.quick else "full"]
    only = {s for s in args.only.split(",") if s}
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    run = Run(args.out, args.seconds, ("finetune", "embed"))

    def want(name: str) -> bool:
        return (not only or name in only) and (GPU or name not in ("tests", "steps", "profile"))

    with tempfile.TemporaryDirectory(prefix="bertkit-gpu-") as tmp:
        info = run.section("finetune", "environment", device_info) or {}
        peak_info = run.section("finetune", "matmul_peak_bf16", lambda: matmul_peak(args.quick)) or {}
        for file in run.files.values():
            file.update(device=info.get("device"), spec_bf16_dense_tflops=info.get("spec_bf16_dense_tflops"),
                        matmul_peak_bf16_tflops=peak_info.get("tflops"))
        run.files["embed"]["environment"] = info
        spec = info.get("spec_bf16_dense_tflops")
        if want("tests"):  # first: the correctness evidence (its own process)
            run.section("finetune", "gpu_tests", lambda: gpu_tests(args.out, min(150.0, run.left() - 120), args.tests), need=130)
        prep: dict[str, Any] = {}

        def prepared() -> dict[str, str]:  # the files keep a description; the sections get the objects
            prep.update(prepare(args.data, Path(tmp), size))
            return {k: str(v) for k, v in prep.items() if k not in ("config", "tokenizer")}

        if run.section("finetune", "prepare", prepared) is None:
            run.write()
            return 1
        count = Count(prep["config"], spec)
        work = prep["work"]
        if want("steps"):
            run.section("finetune", "steps", lambda: gpu_train.step_variants(
                prep, count, size["steps"], ("plain", "lean", "lean_cudnn", "compiled")), need=40)
        if want("finetune_docs"):
            run.section("finetune", "finetune_docs_512", lambda: gpu_train.compare(
                prep, count, "512-token documents", work / "docs_train.tsv", work / "docs_dev.tsv", 512,
                size["rounds"], with_compiled_bertkit=True), need=60)
        if want("embed_docs"):
            run.section("embed", "embed_docs_512", lambda: gpu_embed.compare(
                prep, count, "512-token documents", work / "docs_embed.tsv", 512, size["st_docs"],
                size["st_doc_batches"], PRECISIONS, size["rounds"], shard_sizes=(None, 512), compiled=True), need=45)
        if want("finetune_sst2"):
            run.section("finetune", "finetune_sst2", lambda: gpu_train.compare(
                prep, count, "SST-2 train", work / "sst2.tsv", work / "dev.tsv", 128, size["rounds"],
                with_compiled_bertkit=False), need=60)
        if want("embed_sst2"):
            run.section("embed", "embed_sst2", lambda: gpu_embed.compare(
                prep, count, f"SST-2 train x{size['copies']}", work / "sst2x.tsv", 128, 10**9, size["st_batches"],
                PRECISIONS, size["rounds"], compiled=False), need=30)
        if want("minilm"):
            run.section("finetune", "minilm_seeds", lambda: gpu_train.minilm_seeds(
                args.data, work, size["seeds"], size["minilm_rows"]), need=40)
        if want("profile"):
            for compiled in (False, True):
                run.section("finetune", f"profile_docs_512{'_compiled' if compiled else ''}",
                            lambda compiled=compiled: gpu_train.profile_step(prep, 5, compiled), need=10)
    headline(run)
    run.files["finetune"]["total_seconds"] = round(run.watch.stop(), 1)
    run.write()
    keys = ("device", "spec_bf16_dense_tflops", "matmul_peak_bf16_tflops", "gpu_tests", "errors", "skipped")
    for name, file in run.files.items():
        shown = {k: v for k, v in file.items() if k in keys or k.startswith(("mfu_standard", "bertkit_vs"))}
        print(name, json.dumps(shown, indent=1, default=str)[:5000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
