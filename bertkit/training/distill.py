"""`bertkit distill`: make a smaller model for your task from your fine-tuned one, and measure what it costs.

The student is built the DistilBERT way - the teacher's width, embeddings and head, and `--student-layers`
evenly spaced layers copied from it - or is any smaller pretrained encoder (`--student`). It is trained by the
fine-tuning loop itself (`finetune.finetune` with `DistillTask`: same batches, checkpoints, exact resume and
multi-process support) on `objectives.Distillation`: temperature-scaled KL to the teacher's logits mixed with the
hard-label loss. The teacher's logits are computed once, before training (inference mode, length-sorted batches),
and cached in the run directory (`teacher_logits.npy`), so the teacher costs one forward pass per row - not one
per epoch, and none on resume.

The report (`distill_report.json/.md/.png`) puts teacher and student side by side on the user's dev data:
parameters, disk size, batch-1 latency and best-batch throughput (measured by `bench`'s machinery, interleaved),
dev quality, and the DistilBERT paper's three claims as ratios with pass/fail.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.config.commands import DistillConfig
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap, check_tag_columns
from bertkit.data.splits import Splits, load_splits
from bertkit.encoding.batches import restore_order, sorted_batches
from bertkit.encoding.encode import encode_for
from bertkit.errors import UserError
from bertkit.io import atomic, trail
from bertkit.models import infer
from bertkit.models import loading as modeling
from bertkit.scoring.shapes import Distillation, MultiLabel, Regression, SingleLabel
from bertkit.scoring.table import LOWER_IS_BETTER
from bertkit.training.finetune import FinetuneResult, Task, finetune

log = logging.getLogger(__name__)

COPYABLE = ("BertForSequenceClassification", "DistilBertForSequenceClassification")
"""Teachers whose layers the student copies (same layer layout and names)."""
LAYER_KEY = re.compile(r"^(.*\.layer\.)(\d+)(\..*)$")
CLAIMS = {"parameter_reduction_pct": 40.0, "speedup_x": 1.6, "quality_retained_pct": 97.0}
"""The DistilBERT paper's claims (Sanh et al. 2019): 40% fewer parameters, 60% faster, 97% of the quality."""
CACHE, CACHE_KEY, REPORT = "teacher_logits.npy", "teacher_logits.json", "distill_report"


# ---------------------------------------------------------------- the student


def copied_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Which teacher layers the student starts from: evenly spaced from the first to the last, both kept.

    The last layer stays because the teacher's pooler and head were trained on its output (a 3-of-6 student that
    keeps it starts far closer to the teacher than one that stops at layer 4); the first, because it reads the
    embeddings. 12 -> 6 gives 0, 2, 4, 7, 9, 11: the layers transformers' DistilBERT extraction script copies.
    """
    if student_layers >= teacher_layers:
        what = "is more than" if student_layers > teacher_layers else "is as many as"
        valid = "1" if teacher_layers == 2 else f"1 to {teacher_layers - 1}"
        fix = (f"Pass --student-layers {valid}" if teacher_layers > 1 else
               "The teacher has a single layer, so no smaller student can be copied from it: pass --student MODEL "
               "(a smaller pretrained encoder)")
        raise UserError(f"--student-layers {student_layers} {what} the teacher's {teacher_layers} layers; a student "
                        f"has fewer layers than its teacher (as many is a copy, not a distillation). {fix}.")
    spaced = np.linspace(0, teacher_layers - 1, student_layers)
    return [int(np.floor(x + 0.5)) for x in spaced]  # halves round up (np.round would round 2.5 to 2)


def student_from_teacher(teacher: Any, n_layers: int) -> tuple[Any, list[int]]:
    """A copy of `teacher` with only `n_layers` of its layers (embeddings, pooler and head copied too)."""
    name = type(teacher).__name__
    if name not in COPYABLE:
        raise UserError(f"--student-layers copies layers of BERT or DistilBERT teachers; {name} is neither. Pass "
                        f"--student MODEL (a smaller pretrained encoder) instead.")
    keep = copied_layers(int(teacher.config.num_hidden_layers), n_layers)
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = n_layers  # DistilBertConfig maps it to n_layers
    student = type(teacher)(config)
    state = {}
    for key, value in teacher.state_dict().items():
        match = LAYER_KEY.match(key)
        if match is None:
            state[key] = value
        elif int(match.group(2)) in keep:
            state[f"{match.group(1)}{keep.index(int(match.group(2)))}{match.group(3)}"] = value
    student.load_state_dict(state, strict=True)
    return student, keep


def cls_vectors(model: Any) -> Any:
    """A callable returning the [CLS] vectors of the model's last forward: captured at the head's first module (BERT:
    the pooler's dense layer; DistilBERT: pre_classifier), which both the fast path and the model's own forward call."""
    head = model.bert.pooler.dense if hasattr(model, "bert") else getattr(model, "pre_classifier", None)
    if head is None:
        raise UserError(f"--cos-weight needs a BERT or DistilBERT student; {type(model).__name__} is neither. "
                        f"Pass --cos-weight 0.")
    seen: dict[str, Any] = {}
    head.register_forward_pre_hook(lambda module, args: seen.__setitem__("cls", args[0]))
    return lambda: seen["cls"]


# ---------------------------------------------------------------- the task fine-tuning runs


class DistillTask(Task):
    """Fine-tuning's loop with a student built from the teacher and the distillation objective."""

    command = "distill"

    def __init__(self, cfg: DistillConfig):
        self.cfg = cfg
        self.teacher = modeling.load_classifier(
            cfg.teacher or "", require_head=True,
            head_fix=f"A teacher is a fine-tuned model: fine-tune it first with `bertkit finetune --model {cfg.teacher} "
                     f"...`, then pass that run's best/ folder as --teacher.")
        self.teacher_tokenizer = modeling.load_tokenizer(cfg.teacher or "")
        self.teacher_labels = LabelMap.from_id2label(self.teacher.config.id2label,
                                                          getattr(self.teacher.config, "problem_type", None))
        self.kept_layers: list[int] | None = None
        self.cls_of: Any = None

    def label_map(self, cfg: DistillConfig, splits: Splits) -> LabelMap:
        """The teacher's mapping: the student predicts the teacher's labels; the data may not bring new ones."""
        for name, split in (("training", splits.train), ("dev", splits.dev)):
            check_tag_columns(self.teacher_labels, split, f"the teacher {cfg.teacher}")
            if self.teacher_labels.task == "regression":
                continue  # numbers: nothing the teacher could not know
            seen = {str(t) for row in split.labels or [] for t in row} if self.teacher_labels.task == "multi_label" \
                else {str(x) for x in split.labels or []}
            unknown = sorted(seen - {str(x) for x in self.teacher_labels.labels})
            if unknown:
                raise UserError(
                    f"The {name} data {split.source} has labels the teacher {cfg.teacher} was not trained on: "
                    f"{', '.join(unknown[:10])}. The teacher knows: {', '.join(map(str, self.teacher_labels.labels))}. "
                    f"Distil on data with the teacher's labels (or fine-tune a teacher on this data first)."
                )
        return self.teacher_labels

    def build_model(self, cfg: DistillConfig, label_map: LabelMap) -> tuple[Any, Any]:
        modeling.check_max_length(cfg.max_length, self.teacher_tokenizer, self.teacher.config, cfg.teacher or "",
                                  pair=cfg.text_pair_column is not None)  # the teacher reads the training rows too
        if cfg.student:
            student = modeling.load_classifier(cfg.student, label_map.id2label, cfg.trust_remote_code,
                                               problem_type=label_map.problem_type)
            tokenizer = modeling.load_tokenizer(cfg.student, cfg.trust_remote_code)
        else:
            student, self.kept_layers = student_from_teacher(self.teacher, cfg.student_layers)
            tokenizer = self.teacher_tokenizer
        if cfg.cos_weight > 0:
            if student.config.hidden_size != self.teacher.config.hidden_size:
                raise UserError(f"--cos-weight compares [CLS] vectors, but the student's width "
                                f"({student.config.hidden_size}) is not the teacher's ({self.teacher.config.hidden_size}). "
                                f"Pass --cos-weight 0, or a student of the teacher's width.")
            self.cls_of = cls_vectors(student)
        return student, tokenizer

    def objective(self, cfg: DistillConfig, splits: Splits, out: Path, accelerator: Any) -> Any:
        hard = super().objective(cfg, splits, out, accelerator)
        logits, cls = teacher_outputs(self, splits.train, out, accelerator, with_cls=cfg.cos_weight > 0)
        return Distillation(hard, logits, cfg.temperature, cfg.alpha, cfg.cos_weight, cls, self.cls_of).to(accelerator.device)

    def model_revision(self, cfg: DistillConfig) -> str:
        return modeling.model_revision(cfg.student or cfg.teacher or "")

    def card_lineage(self, cfg: DistillConfig) -> dict[str, Any]:
        """The teacher and how the student was made (the layers copied from it, or the --student encoder)."""
        student = (f"{cfg.student} (its own pretrained encoder)" if cfg.student else
                   f"{len(self.kept_layers or [])} layers copied from the teacher: {self.kept_layers}")
        return {"teacher": cfg.teacher, "student": student, "temperature": cfg.temperature, "alpha": cfg.alpha}


def teacher_outputs(task: DistillTask, train: TextDataset, out: Path, accelerator: Any,
                    with_cls: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The teacher's logits (and [CLS] vectors) for every training row: read from the run's cache when it was made
    for the same teacher, data and settings and is intact, else computed once (main process) and cached atomically,
    its sha256 in the cache's manifest (teacher_logits.json)."""
    cfg = task.cfg
    key = {"teacher": modeling.model_revision(cfg.teacher or ""), "data": train.fingerprint, "rows": len(train),
           "max_length": cfg.max_length, "precision": cfg.precision, "with_cls": with_cls}
    if accelerator.is_main_process and not _cache_usable(out, key, int(task.teacher.config.num_labels)):
        logits, cls = _compute_teacher_outputs(task, train, with_cls)
        with atomic.atomic_path(out / CACHE) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, logits=logits, **({"cls": cls} if cls is not None else {}))
        atomic.write_json_atomic(out / CACHE_KEY, {**key, "sha256": _sha256(out / CACHE)})
    accelerator.wait_for_everyone()
    with np.load(out / CACHE) as cached:
        return cached["logits"], (cached["cls"] if with_cls else None)


def _cache_usable(out: Path, key: dict[str, Any], width: int) -> bool:
    """Whether the run's teacher-logit cache was made for `key` and is intact. A damaged one (its checksum differs
    from the manifest's; a cache written before there were checksums: unreadable or of the wrong shape) is reported
    with a warning and recomputed."""
    try:
        saved = json.loads((out / CACHE_KEY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(saved, dict) or {k: v for k, v in saved.items() if k != "sha256"} != key:
        return False  # none yet, or made for another teacher, data or settings
    problem = _cache_problem(out / CACHE, saved.get("sha256"), (key["rows"], width), key["with_cls"])
    if problem is not None:
        log.warning("The teacher-logit cache %s is damaged (%s): recomputing the teacher's logits (one pass over the "
                    "training data); the run continues as if it had never been damaged.", out / CACHE, problem)
    return problem is None


def _cache_problem(path: Path, sha256: str | None, shape: tuple[int, int], with_cls: bool) -> str | None:
    """What is wrong with the cache file at `path` (None: nothing): missing, another checksum, unreadable, or logits
    of another shape."""
    if not path.is_file():
        return "the file is missing"
    if sha256 is not None and _sha256(path) != sha256:
        return f"its sha256 is not the one recorded in {CACHE_KEY}"
    try:
        with np.load(path) as cached:
            logits = np.asarray(cached["logits"])
            has_cls = not with_cls or "cls" in cached.files
    except Exception as exc:  # a damaged file fails in numpy's or zipfile's own ways
        return f"it cannot be read: {type(exc).__name__}"
    if logits.shape != shape or not has_cls:
        return f"it holds logits of shape {logits.shape}, not {shape}" if logits.shape != shape else "no [CLS] vectors"
    return None


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _compute_teacher_outputs(task: DistillTask, train: TextDataset,
                             with_cls: bool) -> tuple[np.ndarray, np.ndarray | None]:
    log.info("teacher logits for %d training rows (computed once, cached in the run directory)", len(train))
    cfg, teacher = task.cfg, task.teacher.to(modeling.choose_device())
    grab = cls_vectors(teacher) if with_cls else None
    captured: list[np.ndarray] = []
    from bertkit.models.fastforward import SequenceClassifier

    net = SequenceClassifier(teacher, fast=False)  # the own forward, so the [CLS] hook sees every batch

    def forward(batch: dict[str, Any]) -> Any:
        logits = net(**batch)
        if grab is not None:
            captured.append(grab().float().cpu().numpy())
        return logits

    encoded = encode_for(task.teacher_tokenizer, train, cfg.max_length, cache_dir=cfg.cache_dir).encoded
    batches = sorted_batches(encoded.lengths, max(cfg.batch_size * 2, 32))
    device = next(teacher.parameters()).device
    teacher.eval()
    outputs = infer.run_batches(forward, encoded, batches, model=teacher, pad_id=infer.pad_id_of(task.teacher_tokenizer),
                                device=device, dtype=modeling.choose_dtype(cfg.precision, device), unmasked=True)
    logits = infer.in_input_order(batches, outputs, (teacher.config.num_labels,))
    cls = restore_order(batches, captured) if grab is not None else None
    return logits, cls


# ---------------------------------------------------------------- the command


def distill(cfg: DistillConfig, *, progress: bool = True) -> dict[str, Any]:
    """Train the student (resumable, like finetune), then the teacher-vs-student report (main process)."""
    task = DistillTask(cfg)
    cfg = _in_the_teachers_shape(cfg, task.teacher_labels.task)
    default_layers = next(f.default for f in dataclasses.fields(cfg) if f.name == "student_layers")
    if cfg.student and cfg.student_layers != default_layers:
        log.warning("--student-layers %d copies layers of the teacher; with --student %s the student is that encoder, "
                    "so it is ignored. Drop --student-layers.", cfg.student_layers, cfg.student)
    result = finetune(cfg, progress=progress, task=task)
    out: dict[str, Any] = {"training": result, "report": None}
    if result.is_main_process and cfg.report:
        report_path = result.out / f"{REPORT}.json"
        if result.already_finished and report_path.is_file():
            out["report"] = json.loads(report_path.read_text(encoding="utf-8"))
        else:  # a new run, or a finished one killed before its report
            out["report"] = write_report(cfg, task, result)
    return out


def _in_the_teachers_shape(cfg: DistillConfig, shape: str) -> DistillConfig:
    """`cfg` reading the data in the teacher's problem shape (--task auto); another --task is refused."""
    if cfg.task == shape:
        return cfg
    if cfg.task != "auto":
        raise UserError(f"--task {cfg.task}: the teacher {cfg.teacher} is a {shape} model, and the student learns its "
                        f"outputs. Drop --task (the teacher's shape is used), or distil a {cfg.task} teacher.")
    return dataclasses.replace(cfg, task=shape)


# ---------------------------------------------------------------- the report


def write_report(cfg: DistillConfig, task: DistillTask, result: FinetuneResult) -> dict[str, Any]:
    """Measure teacher vs student and write distill_report.json, .md and .png into the run directory."""
    from bertkit import plots

    report = measure(cfg, task, result)
    out = result.out
    atomic.write_json_atomic(out / f"{REPORT}.json", report)
    atomic.write_text_atomic(out / f"{REPORT}.md", report_markdown(report))
    plots.distill_bars(report, out / f"{REPORT}.png")
    report["outputs"] = [str(out / f"{REPORT}.{ext}") for ext in ("json", "md", "png")]
    return report


def measure(cfg: DistillConfig, task: DistillTask, result: FinetuneResult) -> dict[str, Any]:
    """Parameters, disk size, batch-1 latency, best-batch throughput and dev quality of teacher and student."""
    import torch

    from bertkit.bench import measure as bench_measure
    from bertkit.bench import timing
    from bertkit.bench.contenders import Contender

    student_dir = result.out / "best"
    student = modeling.load_classifier(str(student_dir), require_head=True).eval()
    splits = load_splits(cfg, need_labels=True, need_dev=True)
    texts = list(splits.dev.texts)
    device = torch.device("cpu") if modeling.choose_device().type == "cpu" else modeling.choose_device()
    dtype = modeling.choose_dtype(cfg.precision, device)
    contenders = [Contender("teacher", cfg.teacher or "", False, task.teacher.to(device).eval(),
                            task.teacher_tokenizer, 0.0),
                  Contender("student", str(student_dir), False, student.to(device),
                            modeling.load_tokenizer(str(student_dir)), 0.0)]
    settings = bench_measure.BenchSettings(batch_sizes=(1, 32), max_length=cfg.max_length, train_batch_size=0,
                                           seed=cfg.seed,
                                           budget=timing.Budget(warmup=2, min_iters=10, min_seconds=2.0, rounds=2))
    latency = bench_measure.measure_latency(contenders, texts, settings, device, dtype)
    encoded = encode_for(task.teacher_tokenizer, splits.dev, cfg.max_length, cache_dir=cfg.cache_dir).encoded
    throughput = bench_measure.measure_throughput(contenders, encoded, infer.pad_id_of(task.teacher_tokenizer),
                                                  settings, device, dtype)
    quality = _dev_quality(cfg, task, result, splits)
    models = {c.label: _model_record(c, latency[c.label], throughput[c.label], quality[c.label]) for c in contenders}
    metric = result.metrics.get("best_metric_name") or cfg.metric_for_best  # the shape's (regression: pearson)
    return {"teacher": cfg.teacher, "student": str(student_dir), "student_layers": task.kept_layers,
            "metric": metric, "dev_rows": len(texts), "device": str(device),
            "precision": modeling.dtype_name(dtype), "machine": trail.machine_info(), "models": models,
            "claims": claims(models, metric)}


def _dev_quality(cfg: DistillConfig, task: DistillTask, result: FinetuneResult, splits: Splits) -> dict[str, Any]:
    """Dev metrics of the teacher (computed now, on the same dev rows) and of the student's best checkpoint."""
    labels = task.teacher_labels
    y_dev = labels.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}")
    logits = infer.classifier_logits(task.teacher, task.teacher_tokenizer, splits.dev, max_length=cfg.max_length,
                                     batch_size=64, precision=cfg.precision)
    names = [str(x) for x in labels.labels]
    hard = (Regression(y_dev, y_dev, names) if labels.task == "regression" else
            MultiLabel(y_dev, y_dev, names, cfg.threshold) if labels.task == "multi_label" else
            SingleLabel(y_dev, y_dev, names))
    teacher = hard.score(logits).metrics
    return {"teacher": teacher, "student": result.metrics.get("best_dev") or {}}


def _model_record(c: Any, latency: dict[str, Any], throughput: list[dict[str, Any]], dev: dict[str, Any]) -> dict[str, Any]:
    weights = sum(p.numel() * p.element_size() for p in c.model.parameters())
    best = max((r for r in throughput if r["padding"] == "dynamic"), key=lambda r: r["rows_per_s"])
    return {"source": c.source, "parameters": modeling.parameter_count(c.model), "size_mb": _folder_mb(c.source, weights),
            "latency_b1_ms": latency["model_ms"]["mean"], "latency_b1_p90_ms": latency["model_ms"]["p90"],
            "best_rows_per_s": best["rows_per_s"], "best_batch": best["batch_size"],
            "dev": {k: v for k, v in dev.items() if isinstance(v, (int, float))}}


def _folder_mb(source: str, fallback_bytes: int) -> float:
    folder = Path(modeling.resolve_model_name(source))
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
    return [[names[k], c["measured"], c["paper"], "pass" if c["pass"] else "FAIL"] for k, c in report["claims"].items()]


def model_rows(report: dict[str, Any]) -> list[list[Any]]:
    metric = report["metric"]
    return [[name, m["parameters"] / 1e6, m["size_mb"], m["latency_b1_ms"], m["best_rows_per_s"], m["dev"].get(metric)]
            for name, m in report["models"].items()]


MODEL_COLUMNS = ["model", "params (M)", "disk MB", "batch-1 ms", "best rows/s", "dev metric"]
CLAIM_COLUMNS = ["claim (DistilBERT paper)", "measured", "paper", "verdict"]


def report_markdown(report: dict[str, Any]) -> str:
    def row(cells: list[Any]) -> str:
        return "| " + " | ".join(f"{c:,.3f}" if isinstance(c, float) else str(c) for c in cells) + " |"

    lines = ["# bertkit distill", "",
             f"- teacher: `{report['teacher']}`; student: `{report['student']}` (teacher layers copied: "
             f"{report['student_layers']})",
             f"- dev rows: {report['dev_rows']}; device: {report['device']}, {report['precision']}; CPU: "
             f"{report['machine'].get('cpu')}", "",
             "| " + " | ".join(MODEL_COLUMNS) + " |", "|" + "---|" * len(MODEL_COLUMNS)]
    lines += [row(r) for r in model_rows(report)]
    lines += ["", "| " + " | ".join(CLAIM_COLUMNS) + " |", "|" + "---|" * len(CLAIM_COLUMNS)]
    lines += [row(r) for r in claim_rows(report)]
    return "\n".join(lines) + "\n"

