"""The GPU benchmark's embedding part: `bertkit embed` end to end against sentence-transformers at its best (batch
sizes x bf16/fp16, its ONNX backend where the machine has it), interleaved; and bertkit's GPU forward alone on
pre-tokenized ids (eager layers and compiled ones), so end to end can be read against it. Counted the standard way
(`gpu_common.Count`: 2·N per real token plus attention)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gpu_common import (
    GPU,
    RANDOM_INIT,
    SYNC,
    Count,
    Stopwatch,
    interleaved,
    median_of,
    read_tsv,
    token_lengths,
)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def st_model(folder: Path, dtype: torch.dtype, max_length: int) -> Any:
    """sentence-transformers on the same encoder, [CLS] pooling (bertkit embed's default), weights in `dtype`."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoConfig

    word = models.Transformer(str(folder), max_seq_length=max_length)
    width = AutoConfig.from_pretrained(str(folder)).hidden_size
    model = SentenceTransformer(modules=[word, models.Pooling(width, "cls")], device="cuda" if GPU else "cpu")
    return model.to(dtype)


def st_encode(model: Any, texts: list[str], batch: int) -> dict[str, Any]:
    with Stopwatch(SYNC) as watch:
        model.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)
    return {"seconds": round(watch.seconds, 3), "rows_per_second": round(len(texts) / watch.seconds, 1)}


def st_sweep(folder: Path, texts: list[str], max_length: int, batches: tuple[int, ...],
             precisions: tuple[str, ...]) -> dict[str, Any]:
    """sentence-transformers' encode at each precision x batch size (model loaded and warmed up first): the best
    setting is what the comparison then repeats."""
    runs = {}
    for name in precisions:
        model = st_model(folder, DTYPES[name], max_length)
        model.encode(texts[:1024], batch_size=128, show_progress_bar=False)
        for batch in batches:
            runs[f"{name}_batch{batch}"] = {"precision": name, "batch": batch, **st_encode(model, texts, batch)}
        del model
        torch.cuda.empty_cache() if GPU else None
    best = max(runs, key=lambda k: runs[k]["rows_per_second"])
    return {"rows": len(texts), "runs": runs, "best": best, "onnx_backend": st_onnx(folder, texts[:256], max_length)}


def st_onnx(folder: Path, texts: list[str], max_length: int) -> dict[str, Any]:
    """sentence-transformers' ONNX backend, where the machine can run it (it needs optimum, which pins a
    transformers older than bertkit's 5.x): measured, or why not."""
    try:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(folder), backend="onnx", device="cuda" if GPU else "cpu",
                                    model_kwargs={"provider": "CUDAExecutionProvider" if GPU else
                                                  "CPUExecutionProvider"})
        model.max_seq_length = max_length
        model.encode(texts[:32], batch_size=32, show_progress_bar=False)
        return {"available": True, **st_encode(model, texts, 128)}
    except Exception as exc:  # recorded: the comparison then stands on the torch backend
        return {"available": False, "why": f"{type(exc).__name__}: {str(exc)[:300]}"}


def bertkit_embed(folder: Path, data: Path, out: Path, precision: str, max_length: int,
                  shard_size: int | None = None) -> dict[str, Any]:
    """`bertkit embed` as the CLI runs it (data read, model loaded, store written): its own rows/s (tokenizing,
    encoding, writing the store) and the wall time of the whole call."""
    from bertkit.commands import embed

    shutil.rmtree(out, ignore_errors=True)
    extra = {} if shard_size is None else {"shard_size": shard_size}
    cfg = embed.EmbedConfig.of(model=str(folder), data=str(data), text_column="0", label_column="1", precision=precision,
                            out=str(out), max_length=max_length, **extra)
    with Stopwatch(SYNC) as watch:
        summary = dataclasses.asdict(embed.run(cfg, progress=False))
    wall = watch.seconds
    shutil.rmtree(out, ignore_errors=True)
    return {"rows": summary["rows_encoded"], "seconds": summary["seconds"], "rows_per_second": summary["rows_per_s"],
            "wall_seconds_incl_read_and_load": round(wall, 3)}


def forward_only(folder: Path, texts: list[str], precision: str, max_length: int, compiled: bool) -> dict[str, Any]:
    """bertkit's GPU forward alone: the rows tokenized first (not timed), then the batches queued, run and their
    [CLS] features copied back (`features.extract.start_features`, what embed runs per shard); `compiled`: the
    layers through `layers.compiled_layer()` (the first, compiling call not timed; its time reported)."""
    from bertkit.data.dataset import TextDataset
    from bertkit.encoding import encode
    from bertkit.encoding.reading import Reading
    from bertkit.features.extract import start_features
    from bertkit.features.settings import Pooling
    from bertkit.models import fastforward, loading

    device = loading.choose_device(None)
    dtype = loading.choose_dtype(precision, device)
    encoder = loading.cast_for_inference(loading.load_encoder(str(folder)), device, dtype).eval()
    tokenizer = loading.load_tokenizer(str(folder))
    spec = Pooling.from_options("cls", "-1", "concat", False)
    dataset = TextDataset(texts=texts)
    with Stopwatch() as tokenizing:
        windows = encode.encode_for(tokenizer, dataset, Reading(max_length))

    def run() -> float:
        with Stopwatch(SYNC) as watch:
            start_features(encoder, tokenizer, dataset, spec, reading=Reading(max_length), batch_size=None,
                           device=device, dtype=dtype, windows=windows)()
        return watch.seconds

    fastforward.COMPILE_INFERENCE_LAYERS = compiled
    try:
        first = run()
        seconds = [run(), run()]
    finally:
        fastforward.COMPILE_INFERENCE_LAYERS = False
    return {"compiled_layers": compiled, "tokenizing_seconds_not_timed": round(tokenizing.seconds, 3),
            "first_call_seconds": round(first, 3), "seconds_runs": [round(s, 3) for s in seconds],
            "seconds": round(float(np.median(seconds)), 3)}


def compare(prep: dict[str, Any], count: Count, label: str, data: Path, max_length: int, st_rows: int,
            st_batches: tuple[int, ...], precisions: tuple[str, ...], rounds: int,
            shard_sizes: tuple[int | None, ...] = (None,), compiled: bool = False) -> dict[str, Any]:
    """sentence-transformers swept, then its best setting and `bertkit embed` (at each shard size; None: the default)
    interleaved `rounds` times; bertkit's forward alone (eager and, with `compiled`, compiled layers) on the same rows;
    ratios of medians."""
    folder, work = prep["bert_encoder"], prep["work"]
    texts = read_tsv(data)[0]
    st_texts = texts[:st_rows]
    lengths = token_lengths(texts, prep["tokenizer"], max_length)
    st_lengths = lengths[:st_rows]
    sweep = st_sweep(folder, st_texts, max_length, st_batches, precisions)
    best = sweep["runs"][sweep["best"]]
    st = st_model(folder, DTYPES[best["precision"]], max_length)
    st.encode(st_texts[:1024], batch_size=128, show_progress_bar=False)
    contenders = {"sentence_transformers_best": lambda: st_encode(st, st_texts, best["batch"])}
    for shard in shard_sizes:
        contenders[f"bertkit_embed{'' if shard is None else f'_shard{shard}'}"] = (
            lambda shard=shard: bertkit_embed(folder, data, work / "store", precisions[0], max_length, shard))
    runs = interleaved(contenders, rounds)
    contenders.clear()  # the last reference to sentence-transformers' model: its memory goes before ours is measured
    torch.cuda.empty_cache() if GPU else None
    result: dict[str, Any] = {"data": f"{label}: {len(texts)} rows ({st_rows} for sentence-transformers), "
                              f"{lengths.mean():.1f} tokens on average (max {max_length})", "model": RANDOM_INIT,
                              "pool": "cls, last layer", "same_lease": True, "rounds": rounds,
                              "sentence_transformers_sweep": sweep, "runs": runs}
    for name, samples in runs.items():
        rate = median_of(samples, "rows_per_second")
        rows = st_lengths if name.startswith("sentence") else lengths
        result[name] = {**count.inference(rows, len(rows) / rate), "median_rows_per_second": rate}
    for layers_compiled in (False, True)[: 1 + compiled]:
        key = "bertkit_forward_only" + ("_compiled" if layers_compiled else "")
        try:
            alone = forward_only(folder, texts, precisions[0], max_length, layers_compiled)
            result[key] = {**alone, **count.inference(lengths, alone["seconds"])}
        except Exception as exc:  # the compiled variant may not run somewhere; the rest stands
            result[key] = {"error": repr(exc)[:500]}
    # sentence-transformers at its best: the faster of its swept best and the median of its repeats (a repeat was
    # seen at 0.4x the sweep's rate on an H100), so the ratio never rests on its slow run
    st_rate = max(result["sentence_transformers_best"]["median_rows_per_second"], best["rows_per_second"])
    result["sentence_transformers_best_rows_per_second"] = st_rate
    embeds = [name for name in runs if name.startswith("bertkit_embed")]
    fastest = max(embeds, key=lambda n: result[n]["median_rows_per_second"])
    result["bertkit_embed_best"] = fastest
    result["bertkit_vs_st_best"] = round(result[fastest]["median_rows_per_second"] / st_rate, 2)
    alone = result["bertkit_forward_only"].get("seconds")
    if alone:
        result["end_to_end_vs_forward_only_seconds"] = round(len(texts) / result[fastest]["median_rows_per_second"]
                                                             / alone, 3)
    return result
