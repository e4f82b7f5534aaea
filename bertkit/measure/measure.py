"""The measurements of `bertkit bench`: size on disk and load time, batch-1 latency, throughput per batch size,
a training step, or the paper's protocol; `run_bench` runs them all for every model, interleaved (timing.py).
Sentences are timed as rows of text; tagged sentences (given as words, `BenchSettings.reading` a reading of words)
as a tagger reads them: each in its windows of word pieces; questions on passages (`BenchSettings.questions`) as a
question-answering model reads them: each question in its windows, counted per window (rows) and per question."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.dataset import TextDataset
from bertkit.encoding.encode import Encoded, encode_for
from bertkit.encoding.qa_windows import QAReading, qa_windows
from bertkit.encoding.reading import Reading
from bertkit.encoding.words import align_words
from bertkit.errors import UserError
from bertkit.io import trail
from bertkit.measure.contenders import Contender
from bertkit.measure.report import compute_claims
from bertkit.measure.steps import (
    forward_step,
    latency_step,
    prepare_batches,
    question_latency_step,
    tag_latency_step,
    train_step,
)
from bertkit.measure.timing import Budget, Step, interleaved, summarize
from bertkit.models import infer, loading, quantize

log = logging.getLogger(__name__)


@dataclass
class BenchSettings:
    """What `run_bench` needs besides the models and texts (`run.benchmark` builds it from a BenchConfig)."""

    batch_sizes: tuple[int, ...] = (1, 8, 32)
    max_length: int = 128
    train_batch_size: int = 32
    protocol: str = "standard"
    seed: int = 42
    budget: Budget = field(default_factory=Budget)
    int8: bool = False
    """--precision int8: each model's dynamic-int8 copy is timed beside it (fp32), interleaved; see `int8_twins`."""
    words: Reading | None = None
    """Tagged data: how its sentences (given as words) are read, windows of `max_length` pieces
    (`Reading.of_words`); None: the texts are rows of text."""
    questions: QAReading | None = None
    """Questions on passages (the texts are `data.squad.Question`s): how each is read, windows of `max_length` tokens
    sharing `doc_stride` (`encoding.qa_windows`); None: not questions."""


def batch1_step(c: Contender, texts: Sequence[Any], s: BenchSettings, device: Any, dtype: Any) -> Step:
    """The batch-1 step of `c` over `texts`: a row of text, a sentence given as words read as a tagger reads it, or a
    question read in its windows as a question-answering model reads it."""
    if s.questions is not None:
        return question_latency_step(c, texts, s.questions, device, s.budget, dtype)
    if s.words is not None:
        return tag_latency_step(c, texts, s.words, device, s.budget, dtype)
    return latency_step(c, texts, s.max_length, device, s.budget, dtype)


def measure_sizes(contenders: Sequence[Contender], workdir: Path, budget: Budget) -> dict[str, dict[str, Any]]:
    """Parameter count, safetensors size (fp32, fp16) and load time from a local safetensors folder.

    Load time is timed from the saved fp32 folder (page cache warm after the save), once per round, interleaved.
    """
    results: dict[str, dict[str, Any]] = {}
    folders = {}
    for i, c in enumerate(contenders):
        folder = workdir / f"model-{i}"
        fp32_bytes = save_safetensors(c, folder, "fp32")
        fp16_bytes = save_safetensors(c, workdir / f"model-{i}-fp16", "fp16")
        folders[c.label] = folder
        results[c.label] = {
            "parameters": loading.parameter_count(c.model),
            "size_mb_fp32": fp32_bytes / 1e6,
            "size_mb_fp16": fp16_bytes / 1e6,
            "build_seconds": c.build_seconds,
            "folder": str(folder),
        }
    loads: dict[str, list[float]] = {c.label: [] for c in contenders}
    for _ in range(max(1, budget.rounds)):
        for c in contenders:
            start = budget.clock()
            loaded = (loading.load_classifier(str(folders[c.label]), tokens=c.tagger, questions=c.answerer)
                      if c.tagger or c.answerer else loading.load_encoder(str(folders[c.label])))
            loads[c.label].append(budget.clock() - start)
            del loaded
    for label, seconds in loads.items():
        results[label]["load_seconds"] = float(np.median(seconds))
        results[label]["load_seconds_all"] = seconds
    return results


def save_safetensors(c: Contender, folder: Path, precision: str) -> int:
    """Save the model (and tokenizer) as safetensors in `precision`; returns the bytes of the weight files."""
    import torch
    from transformers.utils import logging as hf_logging

    folder.mkdir(parents=True, exist_ok=True)
    if precision == "fp32":
        hf_logging.disable_progress_bar()  # loading re-enables transformers' bars; a temp save needs none
        c.model.save_pretrained(folder, safe_serialization=True)
        c.tokenizer.save_pretrained(folder)
    else:
        from safetensors.torch import save_file

        state = {k: v.detach().to(torch.float16).contiguous().cpu() for k, v in c.model.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def measure_latency(
    contenders: Sequence[Contender], texts: Sequence[str], s: BenchSettings, device: Any, dtype: Any
) -> dict[str, dict[str, Any]]:
    """Batch-1 latency over real sentences: model time and tokenization time, summarized separately."""
    import torch

    budget = s.budget
    steps = {c.label: batch1_step(c, texts, s, device, dtype) for c in contenders}
    with torch.inference_mode(), loading.autocast(device, dtype):
        samples, memory = interleaved([c.label for c in contenders], steps, budget, device)
    out = {}
    for label, rows in samples.items():
        model_s = [r[0] for r in rows]
        tok_s = [r[1] for r in rows]
        out[label] = {"model_ms": summarize(model_s), "tokenize_ms": summarize(tok_s),
                      "end_to_end_ms": summarize([a + b for a, b in rows]), "memory": memory[label]}
    return out


def measure_throughput(
    contenders: Sequence[Contender], encoded: Encoded, pad_id: int, s: BenchSettings, device: Any, dtype: Any
) -> dict[str, list[dict[str, Any]]]:
    """Rows/s and tokens/s per batch size, dynamic (length-sorted) vs static padding to --max-length."""
    import torch

    out: dict[str, list[dict[str, Any]]] = {c.label: [] for c in contenders}
    for batch_size in s.batch_sizes:
        for padding, pad_to in (("dynamic", None), ("static", s.max_length)):
            batches = prepare_batches(encoded, batch_size, pad_id, pad_to, s.seed)
            log.info("throughput: batch size %d, %s padding", batch_size, padding)
            steps = {c.label: forward_step(c, batches, device, s.budget, dtype) for c in contenders}
            with torch.inference_mode(), loading.autocast(device, dtype):
                samples, memory = interleaved([c.label for c in contenders], steps, s.budget, device)
            for label, rows in samples.items():
                out[label].append(_throughput_record(batch_size, padding, rows, memory[label]))
    return out


def _throughput_record(batch_size: int, padding: str, rows: list[tuple[float, ...]], memory: dict) -> dict[str, Any]:
    seconds = sum(r[0] for r in rows)
    n_rows, tokens, padded = (int(sum(r[k] for r in rows)) for k in (1, 2, 3))
    return {"batch_size": batch_size, "padding": padding, "iterations": len(rows), "seconds": seconds,
            "rows": n_rows, "rows_per_s": n_rows / seconds if seconds else 0.0,
            "tokens_per_s": tokens / seconds if seconds else 0.0,
            "padded_tokens_per_s": padded / seconds if seconds else 0.0,
            "padding_share": 1.0 - tokens / padded if padded else 0.0,
            "batch_ms": summarize([r[0] for r in rows]), "memory": memory}


def measure_train_step(
    contenders: Sequence[Contender], encoded: Encoded, pad_id: int, s: BenchSettings, device: Any, dtype: Any
) -> dict[str, dict[str, Any]]:
    """Seconds per training step (forward+backward+AdamW) at --train-batch-size, dynamic padding."""
    batches = prepare_batches(encoded, s.train_batch_size, pad_id, None, s.seed, with_labels=True)
    for c in contenders:
        c.model.train()
    try:
        steps = {c.label: train_step(c, batches, device, dtype, s.budget) for c in contenders}
        samples, memory = interleaved([c.label for c in contenders], steps, s.budget, device)
    finally:
        for c in contenders:
            c.model.eval()
            c.model.zero_grad(set_to_none=True)
        steps = {}
    out = {}
    for c in contenders:
        rows = samples[c.label]
        seconds = sum(r[0] for r in rows)
        weight_mb = sum(p.numel() * p.element_size() for p in c.model.parameters() if p.requires_grad) / 1e6
        out[c.label] = {"batch_size": s.train_batch_size, "step_ms": summarize([r[0] for r in rows]),
                        "rows_per_s": sum(r[1] for r in rows) / seconds if seconds else 0.0,
                        "memory": memory[c.label],
                        # AdamW's two moments are allocated in the warm-up step, so they are not in the peak
                        # above (gradients are: they are freed after every step and allocated again)
                        "gradients_mb": weight_mb, "adamw_state_mb": 2 * weight_mb}
    return out


def measure_paper_protocol(
    contenders: Sequence[Contender], texts: Sequence[str], s: BenchSettings, device: Any, dtype: Any
) -> dict[str, dict[str, Any]]:
    """One full pass over `texts` at batch size 1 per model (interleaved in `rounds` chunks): total seconds."""
    import torch

    budget = s.budget
    chunks = np.array_split(np.arange(len(texts)), max(1, budget.rounds))
    totals = {c.label: {"model_seconds": 0.0, "tokenize_seconds": 0.0, "rows": 0} for c in contenders}
    with torch.inference_mode(), loading.autocast(device, dtype):
        for c in contenders:  # warm-up on the first sentences (not counted)
            step = batch1_step(c, texts, s, device, dtype)
            for _ in range(budget.warmup):
                step()
        for r, chunk in enumerate(chunks):
            part = [texts[i] for i in chunk]
            for c in contenders:
                log.info("paper protocol: %s, part %d/%d (%d sentences)", c.label, r + 1, len(chunks), len(part))
                step = batch1_step(c, part, s, device, dtype)
                for _ in part:
                    model_s, tok_s = step()
                    totals[c.label]["model_seconds"] += model_s
                    totals[c.label]["tokenize_seconds"] += tok_s
                    totals[c.label]["rows"] += 1
    for record in totals.values():
        record["total_seconds"] = record["model_seconds"] + record["tokenize_seconds"]
    return totals


# ---------------------------------------------------------------- the whole run


def token_stats(encoded: Encoded) -> dict[str, Any]:
    """Rows, mean/median/max tokens and truncated rows of the timed sentences (the report's `data`)."""
    lengths = encoded.lengths
    return {"rows": int(len(lengths)), "mean_tokens": float(lengths.mean()), "p50_tokens": float(np.median(lengths)),
            "max_tokens": int(lengths.max()), "truncated": encoded.n_truncated}


def timed_encoding(tokenizer: Any, texts: Sequence[Any], s: BenchSettings) -> tuple[Encoded, dict[str, Any]]:
    """The timed sentences as model rows, and the report's `data`: rows of text cut at --max-length, or (tagged
    data) every sentence's windows of word pieces, a row per window, with the sentences and words they hold, or
    (questions on passages) every question's windows, a row per window, with the questions they hold."""
    if s.questions is not None:
        return question_encoding(tokenizer, texts, s.questions)
    if s.words is None:
        encoded = encode_for(tokenizer, TextDataset(list(texts)), Reading(s.max_length)).encoded
        return encoded, token_stats(encoded)
    windows = align_words(tokenizer, texts, s.words)
    lengths = windows.lengths
    encoded = Encoded(windows.ids, None, lengths, lengths, s.words.max_length)
    # a window is a row; no word is cut (a longer sentence gets more windows), so none is truncated
    return encoded, {**token_stats(encoded), "task": "tags", "sentences": len(texts), "words": windows.n_words}


def question_encoding(tokenizer: Any, questions: Sequence[Any], reading: QAReading) -> tuple[Encoded, dict[str, Any]]:
    """The questions' windows as model rows (`qa_windows`: question first, only the passage cut, windows sharing the
    doc stride), and the report's `data`: the questions, their windows and how they were read."""
    windows = qa_windows(tokenizer, questions, reading)
    # a window is a row; no passage is cut (a longer one gets more windows), so none is truncated
    return windows.encoded, {**token_stats(windows.encoded), "task": "spans", "questions": windows.n_questions,
                             "windows": windows.n_windows, "questions_cut": windows.n_questions_cut,
                             "max_length": reading.max_length, "doc_stride": reading.doc_stride}


def add_question_rates(records: Sequence[dict[str, Any]], data: dict[str, Any]) -> None:
    """Each throughput record's questions/s beside its rows (windows)/s: every batch reads windows of the timed
    questions, `data["windows"]` of them for `data["questions"]` questions, so a question is read per that many
    windows."""
    for record in records:
        for row in record.get("throughput", []):
            row["windows_per_s"] = row["rows_per_s"]
            row["questions_per_s"] = row["rows_per_s"] * data["questions"] / data["windows"]


def run_bench(
    contenders: Sequence[Contender], texts: Sequence[str], settings: BenchSettings, device: Any, dtype: Any,
    workdir: Path | None = None, keep_folders: bool = False,
) -> dict[str, Any]:
    """Every measurement for every model; returns the report (no files written except temp model folders).

    With `keep_folders`, each model record keeps `folder` (its saved safetensors copy inside `workdir`).
    """
    if not texts:
        raise UserError("No sentences to benchmark on: --data has no rows. Pass --data with a text file.")
    for c in contenders:  # before any measurement: an over-long --max-length would crash mid-run
        loading.check_max_length(settings.max_length, c.tokenizer, c.model.config, c.source)
    for c in contenders:
        c.model.to(device)
    tokenizer = contenders[0].tokenizer
    encoded, data = timed_encoding(tokenizer, texts, settings)
    pad_id = infer.pad_id_of(tokenizer)
    report: dict[str, Any] = {"protocol": settings.protocol, "data": data, "notes": [],
                              "loadavg_start": list(os.getloadavg())}
    records = {c.label: {"label": c.label, "source": c.source, "random_init": c.random_init,
                         "model_type": getattr(c.model.config, "model_type", "?")} for c in contenders}
    with _workdir(workdir) as folder:
        log.info("size on disk and load time")
        for label, sizes in measure_sizes(contenders, folder, settings.budget).items():
            records[label].update(sizes)
        twins = int8_twins(contenders) if settings.int8 else []
        timed = [*contenders, *(twin for twin, _ in twins)]
        for twin, base in twins:
            records[twin.label] = records[base]["int8"] = {"label": twin.label}
        if settings.protocol == "paper":
            log.info("paper protocol: batch size 1, one full pass over %d sentences per model", len(texts))
            for label, result in measure_paper_protocol(timed, texts, settings, device, dtype).items():
                records[label]["paper_protocol"] = result
        else:
            _measure_standard(contenders, timed, texts, encoded, pad_id, settings, device, dtype, records)
        for twin, _ in twins:
            records.pop(twin.label)
        report["models"] = list(records.values())
    if settings.questions is not None:
        add_question_rates([*report["models"], *(m["int8"] for m in report["models"] if "int8" in m)], data)
    for record in report["models"]:
        if not keep_folders:
            record.pop("folder", None)
    report["claims"] = compute_claims(report["models"])
    return report


def int8_twins(contenders: Sequence[Contender]) -> list[tuple[Contender, str]]:
    """(a dynamic-int8 copy of each model, labelled `<label> · int8`; the model's label). Copies: the models
    themselves stay fp32, as they are saved (sizes, quality) and trained (the training step)."""
    return [(Contender(f"{c.label} · int8", c.source, c.random_init, quantize.quantized_int8(c.model), c.tokenizer,
                       c.build_seconds, c.tagger, c.answerer), c.label) for c in contenders]


def _measure_standard(contenders, timed, texts, encoded, pad_id, settings, device, dtype, records) -> None:
    """Latency and throughput of every `timed` model (the contenders, and their int8 twins with --precision
    int8); the training step of the contenders only (int8 is an inference precision)."""
    log.info("batch-1 latency over %d inputs (rows of text, sentences or questions)", len(texts))
    for label, result in measure_latency(timed, texts, settings, device, dtype).items():
        records[label]["latency"] = result
    for label, result in measure_throughput(timed, encoded, pad_id, settings, device, dtype).items():
        records[label]["throughput"] = result
    if settings.train_batch_size > 0:
        log.info("training step at batch size %d", settings.train_batch_size)
        for label, result in measure_train_step(contenders, encoded, pad_id, settings, device, dtype).items():
            records[label]["train_step"] = result


@contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="bertkit-bench-") as tmp:
        yield Path(tmp)


def environment(device: Any, dtype: Any, int8: bool = False) -> dict[str, Any]:
    """Machine, versions, device, dtype, threads and load: the context every timing needs. With `int8` (--precision
    int8) the dtype reads `fp32 + int8`: each model was timed in fp32 and as its dynamic-int8 copy."""
    import torch

    name = loading.dtype_name(dtype) + (f" + {loading.INT8}" if int8 else "")
    return {"machine": trail.machine_info(), "versions": trail.package_versions(), "device": str(device),
            "dtype": name, "torch_threads": torch.get_num_threads(),
            "cpu_native_bf16": loading.cpu_supports_bf16(), "loadavg": list(os.getloadavg())}
