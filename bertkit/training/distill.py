"""Distillation's pieces: the student, the teacher's cached outputs and the training task (`DistillTask`) with which
the fine-tuning loop trains the student (`bertkit distill`, `bertkit.commands.distill`, runs them and reports).

The student is built the DistilBERT way - the teacher's width, embeddings and head, and `--student-layers`
evenly spaced layers copied from it - or is any smaller pretrained encoder (`--student`). It is trained by the
fine-tuning loop itself (`finetune.finetune` with `DistillTask`: same batches, checkpoints, exact resume and
multi-process support) on `objectives.Distillation`: temperature-scaled KL to the teacher's logits mixed with the
hard-label loss. The teacher's logits are computed once, before training (inference mode, length-sorted batches),
and cached in the run directory (`teacher_logits.npy`), so the teacher costs one forward pass per row - not one
per epoch, and none on resume.

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

from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap, check_tag_columns
from bertkit.data.splits import Splits
from bertkit.encoding.batches import restore_order, sorted_batches
from bertkit.encoding.encode import encode_for
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.io import atomic
from bertkit.models import infer, loading
from bertkit.models.compute import Compute
from bertkit.scoring.shapes import Distillation
from bertkit.training.cards import RunCard
from bertkit.training.finetune import Task
from bertkit.training.options import DistillOptions

log = logging.getLogger(__name__)

COPYABLE = ("BertForSequenceClassification", "DistilBertForSequenceClassification", "BertForTokenClassification",
            "DistilBertForTokenClassification", "BertForQuestionAnswering", "DistilBertForQuestionAnswering")
"""Teachers whose layers the student copies (same layer layout and names): sentence classifiers, taggers and
question-answering models."""
LAYER_KEY = re.compile(r"^(.*\.layer\.)(\d+)(\..*)$")
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


def check_student_fits(cfg: DistillOptions, teacher: Any, teacher_tokenizer: Any) -> None:
    """--max-length and --student-layers against the teacher, once it is loaded and before any data is read or
    cached (a refusal leaves nothing behind); the length first, as `build_model` checks it."""
    if cfg.reading.max_length is not None:
        loading.check_max_length(cfg.reading.max_length, teacher_tokenizer, teacher.config,
                                 cfg.distillation.teacher or "",
                                  pair=cfg.inputs.text_pair_column is not None)
    if not cfg.distillation.student:
        copied_layers(int(teacher.config.num_hidden_layers), cfg.distillation.student_layers)


def student_lineage(cfg: DistillOptions, kept_layers: list[int] | None) -> dict[str, Any]:
    """What a student's cards say of where it came from: the teacher and how the student was made (the layers
    copied from it, or the --student encoder)."""
    student = (f"{cfg.distillation.student} (its own pretrained encoder)" if cfg.distillation.student else
               f"{len(kept_layers or [])} layers copied from the teacher: {kept_layers}")
    return {"teacher": cfg.distillation.teacher, "student": student, "temperature": cfg.distillation.temperature,
            "alpha": cfg.distillation.alpha}


# ---------------------------------------------------------------- the task fine-tuning runs


class Student:
    """What a distillation task of any family says of its student (mixed in before the family's task): the revision
    its card names (--student, else the teacher's) and its lineage (the teacher, the layers kept), on the card the
    family's run makes."""

    kept_layers: list[int] | None = None

    def model_revision(self, cfg: DistillOptions) -> str:
        return loading.model_revision(cfg.distillation.student or cfg.distillation.teacher or "")

    def card_lineage(self, cfg: DistillOptions) -> dict[str, Any]:
        return student_lineage(cfg, self.kept_layers)

    def card(self, cfg: DistillOptions, splits: Any, tokens: Any, reproduce: str) -> RunCard:
        """The family's card facts, with the teacher and how the student was made."""
        card = super().card(cfg, splits, tokens, reproduce)  # type: ignore[misc]
        card.facts = dataclasses.replace(card.facts, lineage=self.card_lineage(cfg))
        return card


class DistillTask(Student, Task):
    """Fine-tuning's loop with a student built from the teacher and the distillation objective."""

    command = "distill"

    def __init__(self, cfg: DistillOptions, reading: Reading):
        """`reading`: the command's one `Reading`, resolved against the teacher's record: the teacher's soft targets
        and report numbers are read as it was trained (and the student learns to read the same way)."""
        self.cfg, self.reading = cfg, reading
        self.teacher = loading.load_classifier(
            cfg.distillation.teacher or "", require_head=True,
            head_fix=f"A teacher is a fine-tuned model: fine-tune it first with `bertkit finetune --model "
                     f"{cfg.distillation.teacher} ...`, then pass that run's best/ folder as --teacher.")
        self.teacher_tokenizer = loading.load_tokenizer(cfg.distillation.teacher or "")
        check_student_fits(cfg, self.teacher, self.teacher_tokenizer)
        self.teacher_labels = LabelMap.from_id2label(self.teacher.config.id2label,
                                                          getattr(self.teacher.config, "problem_type", None))
        self.kept_layers: list[int] | None = None
        self.cls_of: Any = None

    def label_map(self, cfg: DistillOptions, splits: Splits) -> LabelMap:
        """The teacher's mapping: the student predicts the teacher's labels; the data may not bring new ones."""
        for name, split in (("training", splits.train), ("dev", splits.dev)):
            check_tag_columns(self.teacher_labels, split, f"the teacher {cfg.distillation.teacher}")
            if self.teacher_labels.task == "regression":
                continue  # numbers: nothing the teacher could not know
            seen = {str(t) for row in split.labels or [] for t in row} if self.teacher_labels.task == "multi_label" \
                else {str(x) for x in split.labels or []}
            unknown = sorted(seen - {str(x) for x in self.teacher_labels.labels})
            if unknown:
                raise UserError(
                    f"The {name} data {split.source} has labels the teacher {cfg.distillation.teacher} was not trained "
                    f"on: {', '.join(unknown[:10])}. The teacher knows: "
                    f"{', '.join(map(str, self.teacher_labels.labels))}. Distil on data with the teacher's labels (or "
                    f"fine-tune a teacher on this data first)."
                )
        return self.teacher_labels

    def build_model(self, cfg: DistillOptions, label_map: LabelMap) -> tuple[Any, Any]:
        loading.check_max_length(self.reading.max_length, self.teacher_tokenizer, self.teacher.config,
                                 cfg.distillation.teacher or "",
                                  pair=cfg.inputs.text_pair_column is not None)  # the teacher reads the training rows too
        if cfg.distillation.student:
            student = loading.load_classifier(cfg.distillation.student, label_map.id2label, cfg.trust_remote_code,
                                               problem_type=label_map.problem_type)
            tokenizer = loading.load_tokenizer(cfg.distillation.student, cfg.trust_remote_code)
        else:
            student, self.kept_layers = student_from_teacher(self.teacher, cfg.distillation.student_layers)
            tokenizer = self.teacher_tokenizer
        if cfg.distillation.cos_weight > 0:
            if student.config.hidden_size != self.teacher.config.hidden_size:
                raise UserError(f"--cos-weight compares [CLS] vectors, but the student's width "
                                f"({student.config.hidden_size}) is not the teacher's ({self.teacher.config.hidden_size}). "
                                f"Pass --cos-weight 0, or a student of the teacher's width.")
            self.cls_of = cls_vectors(student)
        return student, tokenizer

    def objective(self, cfg: DistillOptions, splits: Splits, out: Path, accelerator: Any) -> Any:
        hard = super().objective(cfg, splits, out, accelerator)
        logits, cls = teacher_outputs(self, splits.train, out, accelerator, with_cls=cfg.distillation.cos_weight > 0)
        return Distillation(hard, logits, cfg.distillation.temperature, cfg.distillation.alpha,
                            cfg.distillation.cos_weight, cls, self.cls_of).to(accelerator.device)


def teacher_window_outputs(task: Any, encoded: Any, wrap: Any, compute: Compute) -> np.ndarray | None:
    """The teacher's outputs for every window of `encoded` (input order, padded to the widest window), where and in
    the precision the run trains: `wrap(teacher, width)` is the forward that gives them (a tagger's logits per piece,
    an answerer's start and end scores), run on length-sorted batches; None without windows. Shared by the tagging
    and question-answering distillations (a sentence teacher's rows: `teacher_outputs`)."""
    log.info("teacher logits for %d training windows (computed once, cached in the run directory)",
             len(encoded.lengths))
    teacher = task.teacher.to(compute.torch_device).eval()
    lengths = encoded.lengths
    net = wrap(teacher, int(lengths.max()) if len(lengths) else None).eval()
    batches = sorted_batches(lengths, max(task.cfg.training.batch_size * 2, 32))
    outputs = infer.run_batches(lambda batch: net(**batch), encoded, batches, model=teacher,
                                pad_id=infer.pad_id_of(task.teacher_tokenizer), device=compute.torch_device,
                                dtype=compute.dtype)
    return restore_order(batches, outputs) if outputs else None


def teacher_outputs(task: DistillTask, train: TextDataset, out: Path, accelerator: Any,
                    with_cls: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The teacher's logits (and [CLS] vectors) for every training row, from the run's cache
    (`cached_teacher_outputs`)."""
    cfg = task.cfg
    key = {"teacher": loading.model_revision(cfg.distillation.teacher or ""), "data": train.fingerprint,
           "rows": len(train),
           "max_length": task.reading.max_length, "truncation": task.reading.truncation, "precision": cfg.compute.precision,
           "with_cls": with_cls}
    cached = cached_teacher_outputs(
        out, key, int(task.teacher.config.num_labels), accelerator,
        lambda: _compute_teacher_outputs(task, train, with_cls, Compute.of_accelerator(accelerator)))
    return cached["logits"], (cached["cls"] if with_cls else None)


def cached_teacher_outputs(out: Path, key: dict[str, Any], width: int, accelerator: Any,
                           compute: Any) -> dict[str, np.ndarray]:
    """The teacher's outputs {logits: (key["rows"], width)[, cls]}: read from the run's cache when it was made for
    `key` (the same teacher, data and settings) and is intact, else computed once (`compute()` -> (logits, cls or
    None), main process) and cached atomically, its sha256 in the cache's manifest (teacher_logits.json). Shared by
    sentence and tagging distillation (a tagger's rows: the labelled pieces of its training windows)."""
    if accelerator.is_main_process and not _cache_usable(out, key, width):
        logits, cls = compute()
        with atomic.atomic_path(out / CACHE) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, logits=logits, **({"cls": cls} if cls is not None else {}))
        atomic.write_json_atomic(out / CACHE_KEY, {**key, "sha256": _sha256(out / CACHE)})
    accelerator.wait_for_everyone()
    with np.load(out / CACHE) as cached:
        return {name: cached[name] for name in cached.files}


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
    problem = _cache_problem(out / CACHE, saved.get("sha256"), (key["rows"], width), bool(key.get("with_cls")))
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


def _compute_teacher_outputs(task: DistillTask, train: TextDataset, with_cls: bool,
                             compute: Compute) -> tuple[np.ndarray, np.ndarray | None]:
    """The teacher's logits (and [CLS] vectors) on `train`, where and in the precision the run trains (`compute`)."""
    log.info("teacher logits for %d training rows (computed once, cached in the run directory)", len(train))
    cfg, teacher = task.cfg, task.teacher.to(compute.torch_device)
    grab = cls_vectors(teacher) if with_cls else None
    captured: list[np.ndarray] = []
    from bertkit.models.fastforward import SequenceClassifier

    net = SequenceClassifier(teacher, fast=False)  # the own forward, so the [CLS] hook sees every batch

    def forward(batch: dict[str, Any]) -> Any:
        logits = net(**batch)
        if grab is not None:
            captured.append(grab().float().cpu().numpy())
        return logits

    encoded = encode_for(task.teacher_tokenizer, train, task.reading, cache_dir=cfg.inputs.cache_dir).encoded
    batches = sorted_batches(encoded.lengths, max(cfg.training.batch_size * 2, 32))
    device = next(teacher.parameters()).device
    teacher.eval()
    outputs = infer.run_batches(forward, encoded, batches, model=teacher, pad_id=infer.pad_id_of(task.teacher_tokenizer),
                                device=device, dtype=compute.dtype, unmasked=True)
    logits = infer.in_input_order(batches, outputs, (teacher.config.num_labels,))
    cls = restore_order(batches, captured) if grab is not None else None
    return logits, cls
