"""Distillation's teacher-vs-student report: parameters, disk size, batch-1 latency, best-batch throughput and dev
quality of both, measured as `bertkit bench` measures (`measure.measure`), and the DistilBERT paper's three claims
(40% fewer parameters, 60% faster, 97% of the quality) checked against them; the rows the CLI shows and the markdown
distill writes. `bertkit distill` runs it after training and writes its files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.labels import SPANS_TASK, TAGS_TASK
from bertkit.io.atomic import JsonRecord
from bertkit.measure.report import rate_unit
from bertkit.models.compute import Compute
from bertkit.scoring.table import LOWER_IS_BETTER

CLAIMS = {"parameter_reduction_pct": 40.0, "speedup_x": 1.6, "quality_retained_pct": 97.0}
"""The DistilBERT paper's claims (Sanh et al. 2019): 40% fewer parameters, 60% faster, 97% of the quality."""


@dataclass(frozen=True)
class DistillReport(JsonRecord):
    """A teacher-vs-student report (distill_report.json) and the files it was written to (none: read back from a
    finished run). Its rows and markdown are built here from `record`, the object as measured and written."""

    metric: str
    """The dev metric teacher and student are compared by."""
    outputs: tuple[str, ...]
    record: Mapping[str, object]

    @classmethod
    def from_json(cls, record: Mapping[str, object], outputs: tuple[str, ...] = ()) -> DistillReport:
        return cls(str(record.get("metric") or ""), outputs, dict(record))

    def to_json(self) -> dict[str, object]:
        """The report as written, with the files it was written to (when this run wrote them)."""
        return {**self.record, "outputs": list(self.outputs)} if self.outputs else dict(self.record)

    def model_columns(self) -> list[str]:
        """The columns of `model_rows`."""
        return model_columns(dict(self.record))

    def model_rows(self) -> list[list[Any]]:
        """`model_columns` rows: teacher, then student."""
        return model_rows(dict(self.record))

    def claim_rows(self) -> list[list[Any]]:
        """CLAIM_COLUMNS rows: each DistilBERT claim, measured, with its verdict."""
        return claim_rows(dict(self.record))

    def claims_context(self) -> str:
        return claims_context(dict(self.record))


def measure_teacher_student(cfg: Any, task: Any, result: Any, compute: Compute) -> dict[str, Any]:
    """Parameters, disk size, batch-1 latency, best-batch throughput and dev quality of teacher and student (`cfg`:
    the DistillConfig, `task`: its DistillTask or DistillTagTask, `result`: the student's `TrainingRun`), run as
    `compute` says. Taggers are timed by their own forward (per-piece logits) and compared by dev entity F1 (word
    accuracy for plain tags)."""
    from bertkit.io import trail
    from bertkit.measure import measure as bench_measure
    from bertkit.measure.contenders import Contender
    from bertkit.models import infer, loading

    kind = task.teacher_labels.task
    student_dir = result.out / "best"
    student = loading.load_classifier(str(student_dir), require_head=True, tokens=kind == TAGS_TASK,
                                      questions=kind == SPANS_TASK).eval()
    texts, encoded, quality, metric = DEV_OF_KIND.get(kind, _sentence_dev)(cfg, task, result, compute)
    device, dtype = compute.torch_device, compute.dtype
    contenders = [Contender("teacher", cfg.distillation.teacher or "", False, task.teacher.to(device).eval(),
                            task.teacher_tokenizer, 0.0),
                  Contender("student", str(student_dir), False, student.to(device),
                            loading.load_tokenizer(str(student_dir)), 0.0)]
    settings = bench_measure.BenchSettings(batch_sizes=(1, 32), max_length=task.reading.max_length, train_batch_size=0,
                                           seed=cfg.inputs.seed,
                                           budget=report_budget(cfg.report_seconds))
    latency = bench_measure.measure_latency(contenders, texts, settings, device, dtype)
    throughput = bench_measure.measure_throughput(contenders, encoded, infer.pad_id_of(task.teacher_tokenizer),
                                                  settings, device, dtype)
    models = {c.label: _model_record(c, latency[c.label], throughput[c.label], quality[c.label]) for c in contenders}
    return {"teacher": cfg.distillation.teacher, "student": str(student_dir), "student_layers": task.kept_layers,
            "teacher_layers": int(task.teacher.config.num_hidden_layers), "task": task.teacher_labels.task,
            "metric": metric, "dev_rows": len(texts), "device": str(device),
            "dtype": loading.dtype_name(dtype), "machine": trail.machine_info(),
            "timing": timing_record(settings.budget), "models": models,
            "claims": claims(models, metric)}


def report_budget(seconds: float) -> Any:
    """How long the report times each model per measurement: 2 warm-up iterations, then at least 10 timed ones and
    `seconds` (--report-seconds) of timed work, in 2 interleaved rounds."""
    from bertkit.measure import timing

    return timing.Budget(warmup=2, min_iters=10, min_seconds=float(seconds), rounds=2)


def timing_record(budget: Any) -> dict[str, Any]:
    """The budget the report's timings were measured with, as the report records it."""
    return {"warmup": budget.warmup, "min_iters": budget.min_iters, "min_seconds": budget.min_seconds,
            "rounds": budget.rounds}


def _sentence_dev(cfg: Any, task: Any, result: Any, compute: Compute) -> tuple[list[str], Any, dict[str, Any], str]:
    """(dev texts, their token ids as the teacher reads them, dev quality of teacher and student, the metric they are
    compared by) of a sentence classifier's distillation."""
    from bertkit.data.splits import load_splits
    from bertkit.encoding.encode import encode_for

    splits = load_splits(cfg.inputs, need_labels=True, need_dev=True)
    encoded = encode_for(task.teacher_tokenizer, splits.dev, task.reading, cache_dir=cfg.inputs.cache_dir).encoded
    metric = result.summary.best_metric_name or cfg.training.metric_for_best  # the shape's (regression: pearson)
    return list(splits.dev.texts), encoded, _dev_quality(cfg, task, result, splits), metric


def _tag_dev(cfg: Any, task: Any, result: Any, compute: Compute) -> tuple[list[str], Any, dict[str, Any], str]:
    """(the dev sentences as text, in the teacher's windows of word pieces, dev quality of teacher and student, the
    metric they are compared by: entity F1, word accuracy for plain tags) of a tagger's distillation. Both models
    are scored now, the same way (`scoring.tag_outputs.score_tagger`: each word at its first piece, strict seqeval
    with the teacher's scheme), as `bertkit evaluate` scores a tagger."""
    from bertkit.encoding.encode import Encoded
    from bertkit.encoding.words import align_words
    from bertkit.scoring.tag_outputs import score_tagger, tag_reader
    from bertkit.scoring.tags import tag_metrics, tag_scores_record

    sentences = [list(s.words) for s in task.data.dev_sentences]
    windows = align_words(task.teacher_tokenizer, sentences, task.reading)
    encoded = Encoded(windows.ids, None, windows.lengths, windows.lengths, task.reading.max_length)
    quality = {label: tag_scores_record(score_tagger(tag_reader(str(folder), compute, task.reading), task.data.dev,
                                                     limit=len(sentences), seed=cfg.inputs.seed).scores)
               for label, folder in (("teacher", cfg.distillation.teacher), ("student", result.out / "best"))}
    return [" ".join(words) for words in sentences], encoded, quality, tag_metrics(task.data.scheme)[0]


def _span_dev(cfg: Any, task: Any, result: Any, compute: Compute) -> tuple[list[str], Any, dict[str, Any], str]:
    """(each dev question with its passage as one text - batch-1 latency reads it cut at the window -, the dev
    questions in the teacher's windows, dev quality of teacher and student, F1) of a question-answering
    distillation. Both models answer now, the same way (`scoring.answers.answered`: run_qa.py's post-processing),
    scored by the official rules of the dev set's SQuAD version, as `bertkit evaluate` scores them."""
    from bertkit.encoding.qa_windows import QAReading, qa_windows
    from bertkit.models.answerer import load_answerer
    from bertkit.scoring.answer_objective import answer_scores_record, scored_answers
    from bertkit.scoring.answers import answered

    questions, reading = list(task.data.dev_questions), QAReading.of(task.teacher_reading)
    quality = {}
    for label, folder in (("teacher", cfg.distillation.teacher), ("student", result.out / "best")):
        answerer = load_answerer(str(folder), compute, reading)
        answers = [a for chunk in answered(answerer, questions, task.settings, cfg.training.batch_size) for a in chunk]
        scores = scored_answers(questions, answers, task.data.dev.version, task.settings, 0, cfg.inputs.seed)
        quality[label] = answer_scores_record(scores)
    encoded = qa_windows(task.teacher_tokenizer, questions, reading).encoded
    return [f"{q.question} {q.context}" for q in questions], encoded, quality, "f1"


DEV_OF_KIND = {TAGS_TASK: _tag_dev, SPANS_TASK: _span_dev}
"""How a distillation's dev set is read and scored for the report, by the teacher's task (others: rows of text)."""


def _dev_quality(cfg: Any, task: Any, result: Any, splits: Any) -> dict[str, Any]:
    """Dev metrics of the teacher (computed now, on the same dev rows, read as it records: `task.reading`) and of
    the student's best checkpoint."""
    from bertkit.models import infer
    from bertkit.scoring.shapes import MultiLabel, Regression, SingleLabel
    labels = task.teacher_labels
    y_dev = labels.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}")
    logits = infer.classifier_logits(task.teacher, task.teacher_tokenizer, splits.dev, reading=task.reading,
                                     batch_size=64, precision=cfg.compute.precision)
    names = [str(x) for x in labels.labels]
    hard = (Regression(y_dev, y_dev, names) if labels.task == "regression" else
            MultiLabel(y_dev, y_dev, names, cfg.inputs.threshold) if labels.task == "multi_label" else
            SingleLabel(y_dev, y_dev, names))
    teacher = hard.score(logits).metrics
    return {"teacher": teacher, "student": result.summary.best_dev.to_json()}


def _model_record(c: Any, latency: dict[str, Any], throughput: list[dict[str, Any]], dev: dict[str, Any]) -> dict[str, Any]:
    from bertkit.models import loading

    weights = sum(p.numel() * p.element_size() for p in c.model.parameters())
    best = max((r for r in throughput if r["padding"] == "dynamic"), key=lambda r: r["rows_per_s"])
    return {"source": c.source, "parameters": loading.parameter_count(c.model), "size_mb": _folder_mb(c.source, weights),
            "latency_b1_ms": latency["model_ms"]["p50"], "latency_b1_p90_ms": latency["model_ms"]["p90"],
            "best_rows_per_s": best["rows_per_s"], "best_batch": best["batch_size"],
            "dev": {k: v for k, v in dev.items() if isinstance(v, (int, float))}}


def _folder_mb(source: str, fallback_bytes: int) -> float:
    from bertkit.models import loading

    folder = Path(loading.resolve_model_name(source))
    files = list(folder.glob("*.safetensors")) if folder.is_dir() else []
    return (sum(f.stat().st_size for f in files) if files else fallback_bytes) / 1e6


def claims(models: dict[str, dict[str, Any]], metric: str) -> dict[str, Any]:
    """The DistilBERT paper's three claims, measured: % fewer parameters, speed-up (batch-1 latency and best-batch
    throughput), % of the teacher's dev quality - each with the paper's figure and pass/fail."""
    t, s = models["teacher"], models["student"]
    reduction = 100.0 * (1 - s["parameters"] / t["parameters"])
    speedup = t["latency_b1_ms"] / s["latency_b1_ms"]
    throughput = s["best_rows_per_s"] / t["best_rows_per_s"]
    t_q, s_q = t["dev"].get(metric), s["dev"].get(metric)
    if metric in LOWER_IS_BETTER:  # an error or loss: the teacher's as a share of the student's
        t_q, s_q = s_q, t_q
    retained = 100.0 * s_q / t_q if t_q and s_q is not None else None
    return {
        "parameter_reduction_pct": {"measured": reduction, "paper": CLAIMS["parameter_reduction_pct"],
                                    "pass": reduction >= CLAIMS["parameter_reduction_pct"]},
        "speedup_batch1_x": {"measured": speedup, "paper": CLAIMS["speedup_x"], "pass": speedup >= CLAIMS["speedup_x"]},
        "speedup_best_batch_x": {"measured": throughput, "paper": CLAIMS["speedup_x"],
                                 "pass": throughput >= CLAIMS["speedup_x"]},
        "quality_retained_pct": {"measured": retained, "paper": CLAIMS["quality_retained_pct"], "metric": metric,
                                 "pass": retained is not None and retained >= CLAIMS["quality_retained_pct"]},
    }


def claim_rows(report: dict[str, Any]) -> list[list[Any]]:
    """(claim, measured, paper, pass) rows for the terminal and the markdown report."""
    names = {"parameter_reduction_pct": "fewer parameters (%)", "speedup_batch1_x": "speed-up, batch 1 (x)",
             "speedup_best_batch_x": "speed-up, best batch (x)",
             "quality_retained_pct": f"{report['metric']} retained (%)"}
    return [[names[k], c["measured"], c["paper"], "meets the paper" if c["pass"] else "short of the paper"]
            for k, c in report["claims"].items()]


def claims_context(report: dict[str, Any]) -> str:
    """What the claim check compares, so a figure short of the paper's reads as a measurement, not a failure: the
    paper's figures are DistilBERT's (6 of BERT-base's 12 layers), this student's shape is its own."""
    kept = report.get("student_layers") or []
    teacher_layers = report.get("teacher_layers")
    shape = (f"{len(kept)} of the teacher's {teacher_layers} layers" if teacher_layers else f"{len(kept)} layers")
    return (f"The paper's figures are for DistilBERT: 6 of BERT-base's 12 layers, embeddings 21% of its parameters. "
            f"This student keeps {shape}, so its figures follow from its own shape: fewer layers kept, or "
            f"embeddings that are a larger share of the model (MiniLM: about half), change them.")


def model_rows(report: dict[str, Any]) -> list[list[Any]]:
    metric = report["metric"]
    return [[name, m["parameters"] / 1e6, m["size_mb"], m["latency_b1_ms"], m["best_rows_per_s"], m["dev"].get(metric)]
            for name, m in report["models"].items()]


def throughput_unit(report: dict[str, Any]) -> str:
    """What the throughput counts: the teacher's windows for question answering, rows otherwise."""
    return rate_unit(report.get("task") == SPANS_TASK)


def model_columns(report: dict[str, Any]) -> list[str]:
    return ["model", "params (M)", "disk MB", "batch-1 ms", f"best {throughput_unit(report)}", "dev metric"]


CLAIM_COLUMNS = ["claim (DistilBERT paper)", "measured", "paper", "verdict"]


def report_markdown(report: dict[str, Any]) -> str:
    def row(cells: list[Any]) -> str:
        return "| " + " | ".join(f"{c:,.3f}" if isinstance(c, float) else str(c) for c in cells) + " |"

    lines = ["# bertkit distill", "",
             f"- teacher: `{report['teacher']}`; student: `{report['student']}` (teacher layers copied: "
             f"{report['student_layers']})",
             f"- dev rows: {report['dev_rows']}; device: {report['device']}, {report.get('dtype', report.get('precision'))}; CPU: "
             f"{report['machine'].get('cpu')}", "",
             "| " + " | ".join(model_columns(report)) + " |", "|" + "---|" * len(model_columns(report))]
    lines += [row(r) for r in model_rows(report)]
    lines += ["", "| " + " | ".join(CLAIM_COLUMNS) + " |", "|" + "---|" * len(CLAIM_COLUMNS)]
    lines += [row(r) for r in claim_rows(report)]
    lines += ["", claims_context(report)]
    return "\n".join(lines) + "\n"

