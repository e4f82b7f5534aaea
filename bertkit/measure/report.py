"""The `bertkit bench` report: the DistilBERT paper's claims next to the measured numbers, and the tables (terminal
and bench.md) built from a report dict.

The candidate is the model with the fewest parameters, the baseline the one with the most. Every claim holds the
measured value (None where it was not measured, never a guess) next to the paper's figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bertkit.io.atomic import JsonRecord

QUALITY_KINDS = ("probe", "finetune")
"""The quality columns a report can have, in this order."""

# The paper (Sanh et al. 2019, "DistilBERT, a distilled version of BERT"): "40% smaller, 60% faster, retains 97%
# of its language understanding". Table 3: 66M vs 110M parameters; inference time of one full pass over the
# STS-B dev set on CPU, batch size 1: 410 s (DistilBERT) vs 668 s (BERT-base). 668 / 410 = 1.63x.
PAPER = {
    "parameter_reduction_pct": 40.0,
    "speedup_x": round(668 / 410, 2),
    "inference_seconds": {"distilbert": 410.0, "bert": 668.0},
    "quality_retained_pct": 97.0,
    "source": "Sanh et al. 2019, arXiv:1910.01108, Table 3 (CPU, batch size 1, full pass over STS-B dev)",
}
SPEEDUP_NOTE = (
    "Paper's '60% faster' = BERT time / DistilBERT time = 668 s / 410 s = 1.63x (DistilBERT needs 61% of BERT's "
    "time). Speed-ups here are the same ratio: baseline time / candidate time (or candidate rows/s / baseline rows/s)."
)


# ---------------------------------------------------------------- claims


CENTRE = "p50"
"""The statistic of a timing that the tables print and the claims divide: the median."""


BENCH_KEYS = ("protocol", "data", "models", "claims", "environment", "data_source", "notes", "loadavg_start",
              "outputs")
"""bench.json's top-level keys, in the order it and `bench --json` write them."""


@dataclass(frozen=True)
class BenchReport(JsonRecord):
    """What `bertkit bench` measured (bench.json): per model size, load time, latency, throughput, memory, training
    step and quality; the DistilBERT paper's claims; the data's token statistics; the machine. Its rows and lines
    are built here from `record`, the object as measured."""

    protocol: str
    notes: tuple[str, ...]
    outputs: Mapping[str, str]
    """File name -> path of what the run wrote (bench.json, bench.md, bench.png)."""
    record: Mapping[str, Any]

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> BenchReport:
        return cls(str(record["protocol"]), tuple(record.get("notes") or ()), dict(record.get("outputs") or {}),
                   dict(record))

    def to_json(self) -> dict[str, Any]:
        defaults: dict[str, Any] = {"notes": [], "loadavg_start": [], "outputs": {}}
        return {k: self.record.get(k, defaults.get(k)) for k in BENCH_KEYS}

    @property
    def machine(self) -> str:
        """Where it was measured, for a title: CPU, device, precision and threads."""
        env = self.record["environment"]
        return f"{env['machine']['cpu']}, {env['device']}, {env['dtype']}, {env['torch_threads']} threads"

    def summary_rows(self) -> tuple[list[str], list[list[Any]]]:
        return summary_rows(self.to_json())

    def throughput_rows(self) -> tuple[list[str], list[list[Any]]]:
        return throughput_rows(self.to_json())

    def claim_lines(self) -> list[str]:
        return claim_lines(self.record["claims"])


def compute_claims(models: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Candidate (fewest parameters) vs baseline (most): reduction %, speed-ups x, quality retained %.

    Each measured value sits next to the paper's figure. Missing measurements give None, never a guess.
    """
    if len(models) < 2:
        return {"note": "claims need two models (a candidate and a baseline)"}
    ordered = sorted(models, key=lambda m: m["parameters"])
    candidate, baseline = ordered[0], ordered[-1]
    claims: dict[str, Any] = {"candidate": candidate["label"], "baseline": baseline["label"],
                              "interpretation": SPEEDUP_NOTE}
    claims["parameter_reduction_pct"] = _claim(
        100.0 * (1.0 - candidate["parameters"] / baseline["parameters"]), PAPER["parameter_reduction_pct"])
    # every speed-up is a ratio of medians of the figures the tables print (a mean is pulled by a few slow calls
    # on a busy machine: a 3.63x "speed-up" stood next to a table whose medians gave 2.15x)
    claims["speedup_batch1_x"] = _claim(_ratio(_get(baseline, "latency", "model_ms", CENTRE),
                                               _get(candidate, "latency", "model_ms", CENTRE)), PAPER["speedup_x"])
    claims["speedup_batch1_end_to_end_x"] = _claim(
        _ratio(_get(baseline, "latency", "end_to_end_ms", CENTRE), _get(candidate, "latency", "end_to_end_ms", CENTRE)),
        PAPER["speedup_x"])
    claims["speedup_best_batch_x"] = _best_batch_claim(candidate, baseline)
    paper_c, paper_b = _get(candidate, "paper_protocol", "total_seconds"), _get(baseline, "paper_protocol", "total_seconds")
    claims["speedup_paper_protocol_x"] = _claim(_ratio(paper_b, paper_c), PAPER["speedup_x"])
    if paper_c is not None:
        claims["speedup_paper_protocol_x"].update(candidate_seconds=paper_c, baseline_seconds=paper_b,
                                                  paper_seconds=PAPER["inference_seconds"])
    claims["quality_retained_pct"] = _quality_claims(candidate, baseline)
    return claims


def _claim(measured: float | None, paper: float) -> dict[str, Any]:
    return {"measured": measured, "paper": paper}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _get(record: dict[str, Any], *keys: str) -> Any:
    node: Any = record
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def best_throughput(model: dict[str, Any]) -> dict[str, Any] | None:
    """The throughput record with the most rows/s (any batch size and padding)."""
    records = model.get("throughput") or []
    return max(records, key=lambda r: r["rows_per_s"]) if records else None


def _best_batch_claim(candidate: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    best_c, best_b = best_throughput(candidate), best_throughput(baseline)
    if best_c is None or best_b is None:
        return _claim(None, PAPER["speedup_x"])
    claim = _claim(_ratio(best_c["rows_per_s"], best_b["rows_per_s"]), PAPER["speedup_x"])
    claim.update(candidate_at=f"batch {best_c['batch_size']}, {best_c['padding']}",
                 baseline_at=f"batch {best_b['batch_size']}, {best_b['padding']}")
    same = {(r["batch_size"], r["padding"]): r["rows_per_s"] for r in baseline.get("throughput", [])}
    claim["per_batch_size"] = {
        f"{r['batch_size']}/{r['padding']}": _ratio(r["rows_per_s"], same.get((r["batch_size"], r["padding"])))
        for r in candidate.get("throughput", [])
    }
    return claim


def _quality_claims(candidate: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    claims: dict[str, Any] = {}
    for kind in QUALITY_KINDS:
        c, b = _get(candidate, "quality", kind, "score"), _get(baseline, "quality", kind, "score")
        claims[kind] = _claim(None if c is None or not b else 100.0 * c / b, PAPER["quality_retained_pct"])
        if c is not None and b is not None:  # the dev metric both scores are (a tagger's: entity F1, best_dev.f1)
            claims[kind].update(metric=_get(candidate, "quality", kind, "metric"), candidate_score=c, baseline_score=b)
    return claims


# ---------------------------------------------------------------- report tables


def speed_records(models: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each model's record, followed by its int8 twin's (--precision int8: label `<model> · int8`, timed beside
    it) with the model's parameter count; the twin has no size or load time (it is never saved), no training step
    and no quality (int8 is inference-only)."""
    rows = []
    for m in models:
        rows.append(m)
        if m.get("int8"):
            rows.append({**{k: m.get(k) for k in ("source", "random_init", "parameters")}, "load_seconds": None,
                         "size_mb_fp32": None, "size_mb_fp16": None, **m["int8"]})
    return rows


def summary_rows(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The headline table (one row per model) shared by the terminal and bench.md."""
    paper = report.get("protocol") == "paper"
    # One time unit per protocol: the paper's full passes in seconds, the standard per-call timings in ms.
    columns = ["model", "params (M)", "fp32 MB", "fp16 MB", "load s" if paper else "load ms"]
    questions = any("questions_per_s" in r for m in report["models"] for r in m.get("throughput", []))
    if paper:
        columns += ["pass model s", "pass tokenize s", "pass total s"]
    else:
        columns += ["b1 model ms (p50)", "b1 p90 ms", "b1 tokenize ms (p50)", f"best {rate_unit(questions)}",
                    "train step ms", "peak +MB"]
    columns += ["best questions/s"] if questions and not paper else []
    columns += [f"{k} score" for k in QUALITY_KINDS if any(_get(m, "quality", k) for m in report["models"])]
    rows = []
    for m in speed_records(report["models"]):
        load = m["load_seconds"] if paper or m["load_seconds"] is None else m["load_seconds"] * 1000.0
        row: list[Any] = [m["label"], m["parameters"] / 1e6, m["size_mb_fp32"], m["size_mb_fp16"], load]
        if paper:
            p = m.get("paper_protocol", {})
            row += [p.get("model_seconds"), p.get("tokenize_seconds"), p.get("total_seconds")]
        else:
            best = best_throughput(m)
            row += [_get(m, "latency", "model_ms", CENTRE), _get(m, "latency", "model_ms", "p90"),
                    _get(m, "latency", "tokenize_ms", CENTRE),
                    None if best is None else f"{best['rows_per_s']:.1f} (b{best['batch_size']} {best['padding']})",
                    _get(m, "train_step", "step_ms", "mean"), peak_memory_mb(m)]
            row += [None if best is None else best["questions_per_s"]] if questions else []
        for kind in columns[len(row):]:
            q = _get(m, "quality", kind.split()[0]) or {}
            row.append(q.get("score") if q.get("status") == "ok" else q.get("status"))
        rows.append(row)
    return columns, rows


def peak_memory_mb(model: dict[str, Any]) -> float | None:
    """The largest peak-above-start (activations, gradients, optimizer state) over all measurements."""
    peaks = [_get(model, "latency", "memory", "delta_mb"), _get(model, "train_step", "memory", "delta_mb")]
    peaks += [_get(r, "memory", "delta_mb") for r in model.get("throughput", [])]
    values = [p for p in peaks if p is not None]
    return max(values) if values else None


def rate_unit(questions: bool) -> str:
    """What a throughput counts: windows for questions on passages (a long context is several), rows otherwise."""
    return "windows/s" if questions else "rows/s"


def throughput_rows(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """One row per model, batch size and padding: rows/s, tokens/s, the share of padding tokens, the median batch time;
    on questions on passages the rows are windows, and questions/s stands beside them."""
    records = [(m, r) for m in speed_records(report["models"]) for r in m.get("throughput", [])]
    questions = any("questions_per_s" in r for _, r in records)
    columns = ["model", "batch", "padding", rate_unit(questions), "tokens/s", "pad %", "p50 ms",
               "iters"] + (["questions/s"] if questions else [])
    rows = [[m["label"], r["batch_size"], r["padding"], r["rows_per_s"], r["tokens_per_s"],
             f"{r['padding_share']:.0%}", r["batch_ms"].get("p50"), r["iterations"]]
            + ([r.get("questions_per_s")] if questions else []) for m, r in records]
    return columns, rows


def memory_rows(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Memory per model: weights, peak growth during inference and training, AdamW state, process peak."""
    kind = next((_get(m, "latency", "memory") or {} for m in report["models"]), {})
    unit = "GPU allocated" if "reserved_mb" in kind else "RSS"
    columns = ["model", "weights MB", f"inference peak +MB ({unit})", f"training peak +MB ({unit})", "AdamW state MB",
               "process peak MB"]
    rows = []
    for m in report["models"]:
        inference = [_get(r, "memory", "delta_mb") for r in m.get("throughput", [])]
        inference.append(_get(m, "latency", "memory", "delta_mb"))
        peaks = [_get(m, "latency", "memory", "peak_mb"), _get(m, "train_step", "memory", "peak_mb")]
        peaks += [_get(r, "memory", "peak_mb") for r in m.get("throughput", [])]
        rows.append([m["label"], m["parameters"] * 4 / 1e6, max([v for v in inference if v is not None], default=None),
                     _get(m, "train_step", "memory", "delta_mb"), _get(m, "train_step", "adamw_state_mb"),
                     max([v for v in peaks if v is not None], default=None)])
    return columns, rows


def claim_lines(claims: dict[str, Any]) -> list[str]:
    """Human sentences for the claims section."""
    if "candidate" not in claims:
        return [claims.get("note", "no claims")]
    lines = [f"candidate: {claims['candidate']}  vs  baseline: {claims['baseline']}"]

    def fmt(value: float | None, unit: str) -> str:
        return "not measured" if value is None else f"{value:.1f}{unit}" if unit == "%" else f"{value:.2f}{unit}"

    p = claims["parameter_reduction_pct"]
    lines.append(f"parameter reduction: {fmt(p['measured'], '%')}  (paper: {p['paper']:.0f}% smaller)")
    for key, what in (("speedup_batch1_x", "speed-up at batch 1, model only"),
                      ("speedup_batch1_end_to_end_x", "speed-up at batch 1, with tokenization"),
                      ("speedup_best_batch_x", "speed-up at each model's best batch size (rows/s)"),
                      ("speedup_paper_protocol_x", "speed-up, paper protocol (full pass, batch 1)")):
        claim = claims.get(key, {})
        if claim.get("measured") is None:
            continue
        where = f" [{claim['candidate_at']} vs {claim['baseline_at']}]" if "candidate_at" in claim else ""
        lines.append(f"{what}: {fmt(claim['measured'], 'x')}{where}  (paper: {claim['paper']:.2f}x = '60% faster')")
    quality = {k: c for k, c in claims.get("quality_retained_pct", {}).items() if c["measured"] is not None}
    for kind, claim in quality.items():
        scores = (f" = {claim['candidate_score']:.4f} / {claim['baseline_score']:.4f} {claim['metric']}"
                  if "metric" in claim else "")
        lines.append(f"quality retained ({kind}): {fmt(claim['measured'], '%')}{scores}  "
                     f"(paper: {claim['paper']:.0f}% of BERT's GLUE score)")
    if not quality:
        lines.append(f"quality retained: not measured (paper: {PAPER['quality_retained_pct']:.0f}%); pass --quality "
                     "probe or finetune with labelled --data/--dev and pretrained --models")
    lines.append(claims["interpretation"])
    return lines


def report_markdown(report: dict[str, Any], png_name: str | None = "bench.png") -> str:
    """bench.md: environment, the headline table, throughput details, claims."""
    env = report.get("environment", {})
    machine = env.get("machine", {})
    lines = ["# bertkit bench", ""]
    lines.append(f"- protocol: {report['protocol']}; device: {env.get('device')}; dtype: {env.get('dtype')}; "
                 f"threads: {env.get('torch_threads')}; CPU: {machine.get('cpu')} ({machine.get('cores')} cores); "
                 f"load average: {', '.join(f'{x:.2f}' for x in env.get('loadavg', []))}")
    versions = env.get("versions", {})
    lines.append(f"- torch {versions.get('torch')}, transformers {versions.get('transformers')}")
    if report.get("command"):
        lines.append(f"- command: `{report['command']}`")
    lines.append(f"- data: {report.get('data_source', {}).get('source', '?')} — {data_line(report['data'])}")
    for note in report.get("notes", []):
        lines.append(f"- {note}")
    lines += ["", _md_table(*summary_rows(report)), ""]
    if any(m.get("throughput") for m in report["models"]):
        lines += ["## Throughput", "", _md_table(*throughput_rows(report)), ""]
        lines += ["## Memory", "", _md_table(*memory_rows(report)), "",
                  "`+MB` = growth of the process's peak memory above its level when the measurement started (both "
                  "models stay loaded, so the process peak includes the other model). AdamW's moments are allocated "
                  "in the warm-up step, so they are listed separately.", ""]
    lines += ["## Claims vs the paper", ""] + [f"- {line}" for line in claim_lines(report["claims"])]
    if png_name:
        lines += ["", f"![benchmark bars]({png_name})"]
    return "\n".join(lines) + "\n"


def data_line(data: dict[str, Any]) -> str:
    """What was timed, in words: rows of text, or (tagged data) sentences read in windows of word pieces."""
    tokens = f"mean {data['mean_tokens']:.1f} tokens, max {data['max_tokens']}"
    if data.get("task") == "spans":
        return (f"{data['questions']} questions on passages read as a question-answering model reads them, in "
                f"{data['rows']} windows of at most {data['max_length']} tokens sharing {data['doc_stride']}: {tokens} "
                f"([CLS] question [SEP] passage [SEP])")
    if data.get("task") == "tags":
        return (f"{data['sentences']} tagged sentences ({data['words']} words) read as a tagger reads them, in "
                f"{data['rows']} windows: {tokens} (word pieces with [CLS]/[SEP])")
    return f"{data['rows']} rows, {tokens}"


def _md_table(columns: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] + ["---:"] * (len(columns) - 1)) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)
