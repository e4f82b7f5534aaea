"""Full fine-tuning with a plain Accelerate loop: setup -> restore -> train one epoch at a time -> evaluate -> save.

The McCormick recipe (BertForSequenceClassification, AdamW without decay on bias/LayerNorm, linear warmup
schedule, gradient clipping, MCC) as a loop that runs on a CPU, one GPU, or many processes
(`torchrun`/`accelerate launch`), and survives being killed:

* Global batches are built once per (seed, epoch) with length grouping (little padding), then split into
  `processes x grad_accum` micro-batches. The optimizer therefore sees the same batches whether they are
  computed in one process, across processes, or accumulated - and a resumed run can skip exactly the global
  batches it already consumed.
* Loss scaling: each micro-batch's loss is its mean over its rows; it is multiplied by
  rows / global-batch rows x processes before `backward`, so after DDP averages the gradients over processes the
  summed gradient is the mean over the whole global batch. Micro-batches before the last of a global batch run
  under `accelerator.no_sync` (no gradient all-reduce until the last one), as Accelerate documents.
* Checkpoints (`checkpoints.py`: model, optimizer, scheduler, RNG, trainer state, checksums) are written atomically
  every `--save-every` steps and at every epoch's end, and verified before a resume trusts them.
* A loss that becomes NaN/inf stops the run with the step, the cause and the last good checkpoint.
* The best model by `--metric-for-best` and the final model are saved with `save_pretrained` (safetensors,
  id2label/label2id, tokenizer) so `from_pretrained` and `transformers.pipeline` load them.

What is optimised and scored is the objective's business (`objectives.py`); this loop only moves batches.
Library code: returns values and logs; `cli.py` prints.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.config.commands import FinetuneConfig, config_dict
from bertkit.data import dataset as data
from bertkit.errors import UserError
from bertkit.io import atomic, disk, faults, ownership, rundir, trail
from bertkit.models import infer
from bertkit.models import loading as modeling
from bertkit.models.fastforward import SequenceClassifier
from bertkit.predict.run import load_for_inference, predict_proba, write_predictions_csv
from bertkit.scoring import metrics
from bertkit.scoring import shapes as objectives
from bertkit.scoring.shapes import MultiLabel, Regression, SingleLabel, softmax
from bertkit.training import checkpoints

__all__ = ["FAIL_HOOK_ENV", "FAIL_MODE_ENV", "SimulatedFailure", "finetune", "global_batches", "latest_checkpoint",
           "load_for_inference", "micro_batches", "predict_proba", "softmax", "write_predictions_csv"]

log = logging.getLogger(__name__)

FAIL_HOOK_ENV = faults.FAIL_AFTER_STEPS_ENV
"""Test hook: fail right after this many optimizer steps (the fault point "finetune.step", see faults.py)."""
FAIL_MODE_ENV = faults.FAIL_MODE_ENV
SimulatedFailure = faults.SimulatedFailure
latest_checkpoint = checkpoints.latest_checkpoint
NOT_IN_RESUME_KEY = {"quiet", "overwrite", "out", "save_every"}
"""Options that do not change what is computed; a re-run may change them and still resume."""


@dataclass
class FinetuneResult:
    """What a run produced; `cli.py` turns it into a table/JSON."""

    out: Path
    metrics: dict[str, Any]
    """metrics.json content: best/final dev metrics, history, throughput, outputs."""
    epoch_table: list[dict[str, Any]] = field(default_factory=list)
    restored: dict[str, Any] | None = None
    """What a resumed run restored (checkpoint, epoch, step, position in epoch, learning rate)."""
    already_finished: bool = False
    is_main_process: bool = True
    notes: list[str] = field(default_factory=list)


@dataclass
class TrainState:
    """Where a run is; saved with every checkpoint (trainer_state.json) and restored on resume."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    evals_since_best: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    epoch_table: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0
    train_rows: int = 0
    stopped_early: bool = False
    best_dev: dict[str, Any] | None = None
    running_loss: tuple[float, int] = (0.0, 0)
    """Loss sum and rows since the last evaluation: restored mid-epoch, so the reported mean stays exact."""
    model_info: dict[str, Any] = field(default_factory=dict)
    """What using the model of the last evaluation needs besides its weights (multi-label: the tuned threshold)."""

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> TrainState:
        known = {f.name for f in dataclasses.fields(cls)}
        state = cls(**{k: v for k, v in saved.items() if k in known})
        state.running_loss = (float(state.running_loss[0]), int(state.running_loss[1]))
        return state

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Session:
    """Everything one run needs, built by `setup`: the loop functions below read it, never rebuild it."""

    cfg: FinetuneConfig
    accelerator: Any
    run: rundir.RunDir
    out: Path
    """Where this run writes: --out, or its staging folder while it replaces another run (--overwrite)."""
    tokenizer: Any
    net: Any
    optimizer: Any
    scheduler: Any
    objective: Any
    """What is optimised and scored (objectives.py): `loss(logits, rows)`, `score(logits)`, `label_names`."""
    train_enc: data.Encoded
    dev_enc: data.Encoded
    dev: data.TextDataset
    label_map: data.LabelMap
    steps_per_epoch: int
    notes: list[str]
    checkpoint_bytes: int
    """Disk a checkpoint needs (weights + AdamW moments + margin): checked before every save."""

    @property
    def pad_id(self) -> int:
        return infer.pad_id_of(self.tokenizer)

    @property
    def min_rows(self) -> int:
        return self.accelerator.num_processes * self.cfg.grad_accum

    @property
    def model_bytes(self) -> int:
        return self.checkpoint_bytes // 3


class Task:
    """Where a run's model and objective come from: fine-tuning's (this class), or distillation's (distill.py),
    which reuses everything else - the loop, checkpoints, exact resume, processes - unchanged."""

    command = "finetune"

    def label_map(self, cfg: FinetuneConfig, splits: data.Splits) -> data.LabelMap:
        """The label <-> id mapping the model's outputs follow: the training labels' (distillation: the teacher's)."""
        return splits.label_map

    def build_model(self, cfg: FinetuneConfig, label_map: data.LabelMap) -> tuple[Any, Any]:
        """(model, tokenizer), after the seed is set: the pretrained encoder with a new head, one output per class
        or tag (one for a regression); its config's problem_type says which, as transformers reads it (set whatever
        the starting folder's was: a single-label head started from a regression best/ is saved as single-label)."""
        model = modeling.load_classifier(cfg.model, label_map.id2label, cfg.trust_remote_code,
                                         problem_type=label_map.problem_type)
        return model, modeling.load_tokenizer(cfg.model, cfg.trust_remote_code)

    def objective(self, cfg: FinetuneConfig, splits: data.Splits, out: Path, accelerator: Any) -> Any:
        """The loss and dev scores, built once the run directory is claimed (`out` may hold caches)."""
        label_map = splits.label_map
        y_train = label_map.encode(splits.train.labels or [], f"The training data {splits.train.source}")
        y_dev = label_map.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}")
        names = [str(x) for x in label_map.labels]
        if label_map.task == "regression":
            return Regression(y_train, y_dev, names)
        if label_map.task == "multi_label":
            return MultiLabel(y_train, y_dev, names, cfg.threshold)
        return SingleLabel(y_train, y_dev, names, cfg.class_weight).to(accelerator.device)

    def model_revision(self, cfg: FinetuneConfig) -> str:
        return modeling.model_revision(cfg.model)


# ---------------------------------------------------------------- batching


def global_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, min_rows: int) -> list[np.ndarray]:
    """The epoch's optimizer-step batches (length-grouped, shuffled, deterministic for (seed, epoch)).

    A last batch with fewer rows than `min_rows` (= processes x grad_accum, one row per micro-batch) is dropped.
    """
    batches = data.grouped_batches(lengths, batch_size, seed, epoch)
    return [b for b in batches if len(b) >= min_rows]


def micro_batches(batch: np.ndarray, n_processes: int, grad_accum: int, process_index: int) -> list[np.ndarray]:
    """This process's `grad_accum` slices of a global batch (contiguous, so similar lengths share a slice)."""
    pieces = np.array_split(batch, n_processes * grad_accum)
    return pieces[process_index * grad_accum : (process_index + 1) * grad_accum]


# ---------------------------------------------------------------- the run


def finetune(cfg: FinetuneConfig, *, progress: bool = True, task: Task | None = None) -> FinetuneResult:
    """Fine-tune `cfg.model` on the data in `cfg`, writing everything into `cfg.out` (see module docstring).

    `task` supplies the model and the objective (default: fine-tuning's; distill.py passes its own)."""
    task = task or Task()
    metrics.load_metrics(tuple(cfg.external_metrics))  # a --metric that cannot be loaded stops the run before work
    accelerator = _accelerator(cfg)
    splits = data.load_splits(cfg, need_labels=True, need_dev=True)
    assert splits.label_map is not None and splits.dev is not None
    splits.label_map = task.label_map(cfg, splits)
    cfg = _for_the_shape(cfg, splits, accelerator.is_main_process)
    key = resume_key(cfg, {"train": splits.train.fingerprint, "dev": splits.dev.fingerprint})
    if _on_main(accelerator, lambda: _finished_already(cfg, key, task.command)):  # read-only; refusals end here
        return _finished_result(Path(cfg.out or "").expanduser(), accelerator)
    session = setup(cfg, accelerator, splits, key, task)
    if session is None:  # an --overwrite run killed after its last save: its swap was finished just now
        return _finished_result(Path(cfg.out or "").expanduser(), accelerator)
    with disk.reported(session.out, session.checkpoint_bytes):  # metrics, reports, best_dev_proba: a full disk
        state, restored = restore(session)                       # there too is one message, and a re-run resumes
        bar = _progress(session, state, progress)
        while state.epoch < cfg.epochs and not state.stopped_early:
            train_epoch(session, state, bar)
        bar.close()
        return finish(session, state, restored, splits.notes)


def _for_the_shape(cfg: FinetuneConfig, splits: data.Splits, warn: bool = True) -> FinetuneConfig:
    """`cfg` fitted to the data's problem shape, before any training: the --metric-for-best the shape scores (none
    given: accuracy / pearson / micro_f1, recorded as such in the run's config); a metric the shape lacks, a --metric
    module that fails on a synthetic input of the shape, or --class-weight for numbers or tags, is refused; options
    the shape ignores (a built-in --metric it lacks, --threshold) are warned about (`warn`: this process logs).
    Regression targets too large to train on are refused, and a constant dev target (its correlations are
    undefined) picks by dev mse."""
    assert splits.label_map is not None
    task, n_labels = splits.label_map.task, len(splits.label_map.labels)
    if cfg.class_weight != "none" and task != "single_label":
        raise UserError(f"--class-weight {cfg.class_weight} weighs classes of single-label data; this is "
                        f"{task} data. Drop --class-weight.")
    for note in objectives.inapplicable_options(task, n_labels, cfg.metric_list, cfg.threshold) if warn else ():
        log.warning("%s", note)
    scores = metrics.check_external(metrics.load_metrics(tuple(cfg.external_metrics)), task, n_labels)
    metric = objectives.best_metric(task, cfg.metric_for_best, n_labels)
    _check_best_is_scored(metric, scores, task, n_labels, splits.dev)
    note = f"the best checkpoint is picked by dev {metric} (pass --metric-for-best to choose another)."
    if task == "regression":
        for split in (splits.train, splits.dev):
            _check_target_scale(split)
        dev_targets = set((splits.dev.labels if splits.dev is not None else None) or [])
        if metric in objectives.Regression.correlations and len(dev_targets) == 1:
            metric = "mse"
            note = (f"the dev targets are all {dev_targets.pop():g}, so Pearson and Spearman are undefined on dev "
                    f"(reported as null): the best checkpoint is picked by dev mse. Pass --dev with varied targets "
                    f"for correlations.")
    if metric == cfg.metric_for_best:
        return cfg
    if task != "single_label":
        splits.notes.append(f"{task} data: {note}")
    return dataclasses.replace(cfg, metric_for_best=metric)


def _check_best_is_scored(metric: str, scores: dict[str, float], task: str, n_labels: int,
                          dev: data.TextDataset | None) -> None:
    """Before training: --metric-for-best names a score the dev evaluation will have: roc_auc needs both classes in
    the dev data; a module's score must be one the module returned on the synthetic input (`scores`)."""
    valid = " / ".join(objectives.shape_metrics(task, n_labels))
    if metric == "roc_auc" and dev is not None and len({str(y) for y in dev.labels or []}) < 2:
        raise UserError(f"--metric-for-best roc_auc needs both classes in the dev data; {dev.source} has only "
                        f"{', '.join(sorted({str(y) for y in dev.labels or []})) or 'no labels'}. Pass --metric-for-best "
                        f"{valid.replace(' / roc_auc', '')}, or dev data with both classes (--dev).")
    if metric in objectives.BUILT_IN or metric == "loss" or metrics.best_value({"external": scores}, metric) is not None:
        return
    raise UserError(f"--metric-for-best {metric} is not a score the --metric modules return: on a synthetic input of "
                    f"this data's shape they return {', '.join(scores) or 'no scores'}. Pass --metric-for-best with one "
                    f"of those, or a built-in metric ({valid}).")


def _check_target_scale(split: data.TextDataset | None) -> None:
    """Regression targets beyond +-MAX_TARGET overflow the squared-error loss (or swamp it) whatever the --lr:
    refused before training, naming the file, column and row."""
    if split is None or not split.labels:
        return
    targets = np.abs(np.asarray(split.labels, dtype=np.float64))
    row = int(np.argmax(targets))
    if targets[row] <= data.MAX_TARGET:
        return
    where = f"line {split.line_numbers[row]}" if split.line_numbers else f"row {row}"
    divisor = 10.0 ** math.ceil(math.log10(targets[row] / 1000.0))
    raise UserError(
        f"Regression targets in column {(split.label_columns or ('label',))[0]!r} of {split.source} reach "
        f"{split.labels[row]:g} ({where}); targets beyond +-{data.MAX_TARGET:g} make the squared-error loss "
        f"overflow or swamp training, whatever the --lr. Scale the targets in the file to within about +-1000 "
        f"(e.g. divide them by {divisor:g}, or take their log) and re-run."
    )


def setup(cfg: FinetuneConfig, accelerator: Any, splits: data.Splits, key: dict[str, Any],
          task: Task) -> Session | None:
    """Tokens, model, optimizer, schedule and the claimed run directory (claimed only after everything that can
    be refused was checked, so a refused start leaves --out as it was). None: the run turned out finished."""
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    label_map = splits.label_map
    set_seed(cfg.seed)  # before the head is initialised
    model, tokenizer = task.build_model(cfg, label_map)
    modeling.check_max_length(cfg.max_length, tokenizer, model.config, getattr(cfg, "model", "the model"),
                              pair=cfg.text_pair_column is not None)
    train_enc = data.encode_dataset(tokenizer, splits.train, cfg.max_length, truncation=cfg.truncation)
    dev_enc = data.encode_dataset(tokenizer, splits.dev, cfg.max_length, truncation=cfg.truncation)
    if cfg.freeze_encoder:
        _freeze_encoder(model)
    optimizer = _adamw(model, cfg.lr, cfg.weight_decay)
    net = SequenceClassifier(model, fast=cfg.fast_forward)  # trains `model`'s parameters; logits only
    if cfg.fast_forward and not net.fast:
        log.info("--fast-forward does not apply (%s): using the model's own forward", net.unsupported)
    min_rows = accelerator.num_processes * cfg.grad_accum
    steps_per_epoch = len(global_batches(train_enc.lengths, cfg.batch_size * min_rows, cfg.seed, 0, min_rows))
    if steps_per_epoch == 0:
        raise UserError(f"Training data has {len(splits.train)} rows: too few for one batch of "
                        f"{min_rows} micro-batches. Add data or lower --grad-accum.")
    run, status = _on_main(accelerator, lambda: _claim_out(cfg, key, accelerator, task))
    if status == "finished":
        return None
    objective = task.objective(cfg, splits, run.path, accelerator)
    if hasattr(objective, "init_head"):  # before any checkpoint is restored over it
        objective.init_head(model)
    total_steps = steps_per_epoch * cfg.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * total_steps), total_steps)
    net, optimizer, scheduler = accelerator.prepare(net, optimizer, scheduler)
    return Session(cfg, accelerator, run, run.path, tokenizer, net, optimizer, scheduler, objective, train_enc,
                   dev_enc, splits.dev, label_map, steps_per_epoch, [], _checkpoint_bytes(model))


def restore(session: Session) -> tuple[TrainState, dict[str, Any] | None]:
    """The state to continue from: the newest checkpoint's, verified (model, optimizer, scheduler and RNG restored
    too), or a fresh one."""
    accelerator, out = session.accelerator, session.out
    found = _on_main(accelerator, lambda: _choose_checkpoint(out)) if session.run.existing else None
    state, restored = TrainState(), None
    if found is not None:
        checkpoints.load(accelerator, found)
        state = TrainState.from_json(found.state)
        session.notes.extend(found.notes)
        for note in found.notes:
            log.warning("%s", note)
        restored = {"checkpoint": str(found.path), "epoch": state.epoch + 1, "step": state.global_step,
                    "batch_in_epoch": state.step_in_epoch, "steps_per_epoch": session.steps_per_epoch,
                    "lr": session.scheduler.get_last_lr()[0], "best_metric": state.best_metric,
                    "verified": (found.path / checkpoints.MANIFEST).is_file()}  # False: saved before checksums
        log.info("resumed from %s: epoch %d, step %d (batch %d/%d of the epoch), lr %.3e, best %s so far %s",
                 found.path, restored["epoch"], restored["step"], restored["batch_in_epoch"],
                 session.steps_per_epoch, restored["lr"], session.cfg.metric_for_best, state.best_metric)
    if accelerator.is_main_process:  # evaluations after the checkpoint will be redone: keep the log consistent
        atomic.write_text_atomic(out / "metrics.jsonl", "".join(atomic.to_json(r, indent=None) + "\n" for r in state.history))
    return state, restored


def _choose_checkpoint(out: Path) -> checkpoints.Restored | None:
    """The verified checkpoint to resume from (main process), after removing what interrupted saves left."""
    removed = checkpoints.remove_unfinished_saves(out)
    if removed:
        log.info("removed the unfinished checkpoint save(s) of the interrupted run: %s", ", ".join(removed))
    return checkpoints.choose_checkpoint(out)


def train_epoch(session: Session, state: TrainState, bar: Any) -> None:
    """Train from the state's position to the end of its epoch (or an early stop): evaluate and checkpoint on
    schedule. The state moves on to the next epoch at the end."""
    cfg, accelerator = session.cfg, session.accelerator
    epoch = state.epoch
    batches = global_batches(session.train_enc.lengths, cfg.batch_size * session.min_rows, cfg.seed, epoch,
                             session.min_rows)
    eval_every = None if cfg.eval_every == "epoch" else int(cfg.eval_every)
    session.net.train()
    started = time.perf_counter()
    for batch in batches[state.step_in_epoch :]:
        loss_sum, rows = train_step(session, batch, state)
        state.running_loss = (state.running_loss[0] + loss_sum, state.running_loss[1] + rows)
        state.global_step, state.step_in_epoch, state.train_rows = (state.global_step + 1, state.step_in_epoch + 1,
                                                                    state.train_rows + len(batch))
        bar.update(1)
        bar.set_postfix(loss=f"{state.running_loss[0] / max(state.running_loss[1], 1):.4f}",
                        lr=f"{session.scheduler.get_last_lr()[0]:.2e}")
        end_of_epoch = state.step_in_epoch == len(batches)
        evaluating = end_of_epoch or (eval_every and state.global_step % eval_every == 0)
        if evaluating or (cfg.save_every and state.global_step % cfg.save_every == 0):
            _stop_if_weights_not_finite(session, state)  # nothing diverged is evaluated or saved
        if evaluating:
            state.train_seconds += time.perf_counter() - started
            evaluate(session, state, end_of_epoch)
            started = time.perf_counter()
        if end_of_epoch or (cfg.save_every and state.global_step % cfg.save_every == 0) or state.stopped_early:
            state.train_seconds += time.perf_counter() - started
            checkpoints.save_checkpoint(accelerator, session.out, state.to_json(), session.checkpoint_bytes)
            started = time.perf_counter()
        faults.fail_point("finetune.step", state.global_step)
        if state.stopped_early:
            break


def train_step(session: Session, batch: np.ndarray, state: TrainState) -> tuple[float, int]:
    """One optimizer step on a global batch: this process's micro-batches, backward, clip, step. Returns this
    process's (loss x rows, rows); a non-finite loss stops the run before anything is updated or saved."""
    cfg, accelerator, net = session.cfg, session.accelerator, session.net
    pieces = micro_batches(batch, accelerator.num_processes, cfg.grad_accum, accelerator.process_index)
    accepted = infer.accepted_inputs(accelerator.unwrap_model(net).model)
    loss_sum = 0.0
    for i, rows in enumerate(pieces):
        inputs = infer.batch_inputs(session.train_enc, rows, session.pad_id, accepted, accelerator.device)
        last = i == len(pieces) - 1  # gradients are all-reduced with the last micro-batch only
        with accelerator.no_sync(net) if not last else _nothing():
            loss = session.objective.loss(net(**inputs), rows)
            accelerator.backward(loss * (len(rows) * accelerator.num_processes / len(batch)))
        loss_sum += loss.item() * len(rows)
    _stop_if_not_finite(session, state, loss_sum)
    if cfg.max_grad_norm > 0:
        accelerator.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
    session.optimizer.step()
    session.scheduler.step()
    session.optimizer.zero_grad(set_to_none=True)
    return loss_sum, sum(len(r) for r in pieces)


def evaluate(session: Session, state: TrainState, end_of_epoch: bool) -> None:
    """Dev metrics now; keep the best model by --metric-for-best; count evaluations for early stopping."""
    cfg, accelerator = session.cfg, session.accelerator
    started = time.perf_counter()
    train_loss = _mean_across(accelerator, *state.running_loss)
    state.running_loss = (0.0, 0)
    scored = dev_scores(session)
    state.model_info = _model_info(session, scored.metrics)
    _add_requested(session, state, scored)  # --metric: evaluate modules
    value = metrics.best_value(scored.metrics, cfg.metric_for_best)
    if value is None:  # checked before training; a module may still leave a score out on the real predictions
        raise UserError(_scoring_failed(session, state, scored, f"--metric-for-best {cfg.metric_for_best} has no "
                                        f"value in the dev scores ({', '.join(metrics.headline(scored.metrics))})"))
    record = {"epoch": state.epoch + 1, "step": state.global_step, "train_loss": train_loss,
              "samples_seen": state.train_rows, "eval_seconds": round(time.perf_counter() - started, 3),
              **{f"dev_{k}": v for k, v in metrics.headline(scored.metrics).items()}, "dev_loss": scored.metrics["loss"]}
    record["best"] = metrics.is_better(value, state.best_metric, cfg.metric_for_best)
    state.history.append(record)
    if record["best"]:
        _keep_best(session, state, scored, value)
    else:
        state.evals_since_best += 1
        patience = cfg.early_stopping_patience
        state.stopped_early = bool(patience and state.evals_since_best >= patience)
    if accelerator.is_main_process:
        atomic.append_jsonl(session.out / "metrics.jsonl", record)
    if end_of_epoch:
        state.epoch_table.append(_epoch_row(state, train_loss, session.objective.table_metrics))
        state.epoch, state.step_in_epoch = state.epoch + 1, 0


def _add_requested(session: Session, state: TrainState, scored: Any) -> None:
    """The --metric scores of the dev predictions. A module that fails on them (it passed the synthetic check before
    training) stops the run only after the model trained so far is saved (`_scoring_failed`)."""
    cfg = session.cfg
    try:
        metrics.add_requested(scored.metrics, cfg.metric_list, metrics.load_metrics(tuple(cfg.external_metrics)),
                              metrics.predicted(scored.outputs) if scored.decisions is None else scored.decisions,
                              session.objective.y_dev)
    except metrics.MetricFailed as exc:
        raise UserError(_scoring_failed(session, state, scored, f"--metric {exc.spec} failed on the dev "
                                        f"predictions: {exc.reason}", exc.spec)) from None


def _scoring_failed(session: Session, state: TrainState, scored: Any, problem: str, spec: str | None = None) -> str:
    """Save the model trained so far into final/ (with what using it needs), then the message: the problem, where
    the model is, and how to score it once the metric is fixed."""
    cfg, folder = session.cfg, session.out / "final"
    checkpoints.save_model_folder(session.accelerator, session.net, session.tokenizer, folder,
                                  {"step": state.global_step, **state.model_info}, session.model_bytes)
    shown = ", ".join(f"{k} {scored.metrics[k]:.4f}" for k in session.objective.table_metrics if k in scored.metrics)
    fix = (f"Fix the metric script, then score that model with `bertkit evaluate --model {folder} --data "
           f"{cfg.dev or 'DEV_DATA'} --metric {spec}`, or re-run this command (it resumes from the last checkpoint, "
           f"if any)." if spec else
           "Pass --metric-for-best with one of those and --overwrite (or a new --out) to train again.")
    return (f"{problem}, at step {state.global_step} (epoch {state.epoch + 1} of {cfg.epochs}). The model trained so "
            f"far is saved, not lost: {folder} (dev {shown}). {fix}")


def dev_scores(session: Session) -> Any:
    """The objective's scores of the dev logits, computed in any number of processes: each evaluates a share of
    the length-sorted batches, `gather_object` collects (rows, logits) from all, every row counted once.

    The forward runs on the *unwrapped* model: a DDP-wrapped forward is itself a collective (it broadcasts
    buffers from rank 0 before every call), so ranks with different numbers of dev batches - e.g. 20 dev rows in
    one batch over 2 processes: rank 0 has one, rank 1 none - would deadlock against the gather below. The
    weights are identical on all ranks. The one collective here (`gather_object`) is called exactly once by every
    rank, whatever its share; no padding rows are added, so nothing is counted twice."""
    from accelerate.utils import gather_object

    accelerator = session.accelerator
    local = accelerator.unwrap_model(session.net)
    local.eval()
    batches = data.sorted_batches(session.dev_enc.lengths, max(session.cfg.batch_size * 2, 32))
    mine = batches[accelerator.process_index :: accelerator.num_processes]
    dtype = modeling.DTYPE_NAMES[{"no": "fp32", "bf16": "bf16", "fp16": "fp16"}[accelerator.mixed_precision]]
    logits = infer.run_batches(lambda batch: local(**batch), session.dev_enc, mine, model=local.model,
                               pad_id=session.pad_id, device=accelerator.device, dtype=dtype)
    gathered = list(zip(mine, logits, strict=True))
    if accelerator.num_processes > 1:
        gathered = gather_object(gathered)
    local.train()
    all_logits = data.restore_order([b for b, _ in gathered], [lg for _, lg in gathered])
    if not np.isfinite(all_logits).all():
        raise UserError(_not_finite_message(session, "the dev logits", None, None))
    return session.objective.score(all_logits)


def finish(session: Session, state: TrainState, restored: dict[str, Any] | None, notes: list[str]) -> FinetuneResult:
    """final/ model, metrics.json, the epoch table, curves, confusion matrix and dev_errors.csv; then an
    --overwrite run's output replaces the previous one."""
    accelerator = session.accelerator
    checkpoints.save_model_folder(accelerator, session.net, session.tokenizer, session.out / "final",
                                  {"step": state.global_step, **state.model_info}, session.model_bytes)
    summary = _summary(session, state, restored)
    if accelerator.is_main_process:
        _write_reports(session, state)
        atomic.write_json_atomic(session.out / "metrics.json", summary)
        session.run.commit()  # an --overwrite run: the new output replaces the previous one only now
    accelerator.wait_for_everyone()
    return FinetuneResult(session.run.out, summary, state.epoch_table, restored, False, accelerator.is_main_process,
                          notes + session.notes)


# ---------------------------------------------------------------- run directory


def resume_key(cfg: FinetuneConfig, fingerprints: dict[str, str]) -> dict[str, Any]:
    """What must match for a re-run to continue an existing --out: the config (less cosmetics) and the data."""
    values = {k: v for k, v in config_dict(cfg).items() if k not in NOT_IN_RESUME_KEY}
    return {"config": values, "data": fingerprints}


def resume_differences(run_path: Path, key: dict[str, Any]) -> list[str]:
    """What differs between the run in `run_path` and a run with resume key `key` (empty: the same run)."""
    record = trail.read_run_config(run_path)
    if record is None:  # claimed, but stopped before its config was written: nothing to differ from
        return []
    return _changed_keys(record.get("resume_key") or {}, json.loads(atomic.to_json(key)))


def run_status(run: rundir.RunDir) -> str:
    """'new', 'resume' or 'finished' for the directory a run writes into."""
    if not run.existing or not (run.path / "config.json").is_file():
        return "new"
    try:
        finished = json.loads((run.path / "metrics.json").read_text(encoding="utf-8")).get("finished")
    except (OSError, ValueError, AttributeError):  # none yet (or not readable): the checkpoints decide
        finished = False
    return "finished" if finished else "resume"


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changed = []
    for section in ("config", "data"):
        a, b = old.get(section, {}), new.get(section, {})
        changed += [f"--{k.replace('_', '-')}: {a.get(k)!r} -> {b.get(k)!r}" if section == "config"
                    else f"{k} data: {a.get(k)} -> {b.get(k)}"
                    for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return changed


def _finished_already(cfg: FinetuneConfig, key: dict[str, Any], command: str) -> bool:
    """A read-only look at --out before any work (its refusals end the run here): does it hold this run, finished?"""
    plan = rundir.inspect_run_dir(cfg.out or "", command, overwrite=cfg.overwrite,
                                  compare=lambda path: resume_differences(path, key), inputs=ownership.input_paths(cfg))
    return not plan.replacing and not plan.pending_swap and run_status(plan) == "finished"


def _finished_result(out: Path, accelerator: Any) -> FinetuneResult:
    done = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return FinetuneResult(out, done, done.get("epoch_table", []), None, True, accelerator.is_main_process)


def _claim_out(cfg: FinetuneConfig, key: dict[str, Any], accelerator: Any, task: Task) -> tuple[rundir.RunDir, str]:
    """Claim --out (main process): the run directory to write into and its status; a new run's config.json."""
    run = rundir.claim_run_dir(cfg.out or "", task.command, overwrite=cfg.overwrite,
                               compare=lambda path: resume_differences(path, key))
    status = run_status(run)
    if status == "finished":
        run.commit()
    elif status == "new":
        trail.write_run_config(run.path, task.command, config_dict(cfg), resume_key=key, data_fingerprints=key["data"],
                               model_revision=task.model_revision(cfg), processes=accelerator.num_processes,
                               mixed_precision=accelerator.mixed_precision, device=str(accelerator.device))
    return dataclasses.replace(run, compare=None), status  # sent to every process: no closures


# ---------------------------------------------------------------- evaluation bookkeeping and reports


def _keep_best(session: Session, state: TrainState, scored: Any, value: float) -> None:
    """A new best: its metrics in the state, its model in best/, its dev probabilities for the reports."""
    state.best_metric, state.best_step, state.evals_since_best = value, state.global_step, 0
    state.best_dev = {k: v for k, v in scored.metrics.items() if k != "per_class"}
    checkpoints.save_model_folder(session.accelerator, session.net, session.tokenizer, session.out / "best",
                                  {"step": state.global_step, "metric": session.cfg.metric_for_best, "value": value,
                                   "labels": session.label_map.to_json()["labels"], **state.model_info},
                                  session.model_bytes)
    if session.accelerator.is_main_process:
        with atomic.atomic_path(session.out / "best_dev_proba.npy") as tmp, open(tmp, "wb") as handle:
            np.save(handle, scored.outputs)


def _model_info(session: Session, scored: dict[str, Any]) -> dict[str, Any]:
    """What a model saved now needs besides its weights (bertkit_model.json): for tags and numbers the task, and
    the multi-label decision threshold (`bertkit predict` applies it). Single-label models need nothing."""
    task = session.label_map.task
    if task == "single_label":
        return {}
    return {"task": task, **({"threshold": scored["threshold"]} if "threshold" in scored else {})}


def _epoch_row(state: TrainState, train_loss: float, names: tuple[str, ...]) -> dict[str, Any]:
    """One row of the training table: losses, the objective's table metrics (single-label: accuracy, F1, MCC)."""
    last = state.history[-1]
    return {"epoch": state.epoch + 1, "train_loss": train_loss, "dev_loss": last["dev_loss"],
            **{f"dev_{name}": last.get(f"dev_{name}") for name in names},
            "train_seconds": round(state.train_seconds, 1),
            "samples_per_second": round(state.train_rows / max(state.train_seconds, 1e-9), 1)}


def _summary(session: Session, state: TrainState, restored: dict[str, Any] | None) -> dict[str, Any]:
    cfg, accelerator = session.cfg, session.accelerator
    forward = "fast" if accelerator.unwrap_model(session.net).fast else "transformers"
    return {
        "finished": True, "task": session.label_map.task, "best_metric_name": cfg.metric_for_best,
        "best_metric": state.best_metric,
        "best_step": state.best_step, "best_dev": state.best_dev,
        "final_dev": state.history[-1] if state.history else None, "global_step": state.global_step,
        "steps_per_epoch": session.steps_per_epoch, "epochs_run": state.epoch, "stopped_early": state.stopped_early,
        "train_rows_seen": state.train_rows, "train_seconds": round(state.train_seconds, 2),
        "train_samples_per_second": round(state.train_rows / max(state.train_seconds, 1e-9), 2),
        "processes": accelerator.num_processes, "mixed_precision": accelerator.mixed_precision, "forward": forward,
        "history": state.history, "epoch_table": state.epoch_table, "resumed_from": restored,
        "outputs": {name: str(Path(cfg.out or session.out) / name) for name in
                    ("best", "final", "metrics.jsonl", "training_table.csv", "curves.png",
                     *REPORT_PLOTS[session.label_map.task], "dev_errors.csv")},
    }


REPORT_PLOTS = {"single_label": ("confusion_matrix.png",), "regression": ("dev_scatter.png",), "multi_label": ()}
"""The plot of the best model's dev predictions, per problem shape (multi-label: the per-tag table is in
metrics.json)."""


def _write_reports(session: Session, state: TrainState) -> None:
    """training_table.csv, dev_errors.csv, curves.png and the best model's dev confusion matrix (main process)."""
    import pandas as pd

    from bertkit import plots

    out, names, task = session.out, session.objective.label_names, session.label_map.task
    proba = np.load(out / "best_dev_proba.npy")
    with atomic.atomic_path(out / "training_table.csv") as tmp:
        pd.DataFrame(state.epoch_table).to_csv(tmp, index=False)
    write_predictions_csv(out / "dev_errors.csv", session.dev, proba, names, y_true=session.objective.y_dev,
                          only_errors=True, task=task, threshold=(state.best_dev or {}).get("threshold", 0.5))
    plots.training_curves(state.history, session.cfg.metric_for_best, out / "curves.png",
                          f"{session.run.command} {getattr(session.cfg, 'model', '')}")
    if task == "regression":
        plots.regression_scatter(session.objective.y_dev, proba[:, 0], out / "dev_scatter.png",
                                 f"dev: true vs predicted {names[0]} (best, step {state.best_step})")
    matrix = (state.best_dev or {}).get("confusion_matrix")
    if matrix is not None:
        plots.confusion_matrix(matrix, names, out / "confusion_matrix.png",
                               f"dev confusion matrix (best, step {state.best_step})")


# ---------------------------------------------------------------- small pieces


def _accelerator(cfg: FinetuneConfig) -> Any:
    """Accelerate for this run: its mixed precision from --precision (auto: bf16 only where native)."""
    from accelerate import Accelerator

    device = torch.device("cpu") if _force_cpu() else modeling.choose_device()
    dtype = modeling.choose_dtype(cfg.precision, device)
    precision = {torch.float32: "no", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    _release_single_process_state(precision)
    return Accelerator(mixed_precision=precision, step_scheduler_with_optimizer=False, cpu=_force_cpu())


def _release_single_process_state(precision: str) -> None:
    """Let a second run in the same single process use another precision.

    Accelerate keeps one process-wide `AcceleratorState` and refuses a new `mixed_precision` once it exists
    (library users, notebooks and the test suite call `finetune` several times per process). With one process
    there is nothing to keep - no process group - so the state is reset; launched multi-process runs are left alone.
    """
    from accelerate.state import AcceleratorState

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or not AcceleratorState._shared_state:
        return
    if AcceleratorState().mixed_precision != precision:
        AcceleratorState._reset_state(reset_partial_state=True)


def _force_cpu() -> bool:
    """cpu=True for Accelerate when there is no GPU: under torchrun it then starts MULTI_CPU (gloo); without it,
    every process would run alone. BERTKIT_DEVICE=cpu forces the CPU on a GPU machine."""
    return os.environ.get("BERTKIT_DEVICE", "") == "cpu" or modeling.choose_device().type == "cpu"


def _progress(session: Session, state: TrainState, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    total = session.steps_per_epoch * session.cfg.epochs
    return tqdm(total=total, initial=state.global_step, desc="finetune", unit="step",
                disable=not (enabled and session.accelerator.is_main_process), dynamic_ncols=True)


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _stop_if_not_finite(session: Session, state: TrainState, loss_sum: float) -> None:
    """A NaN/inf loss (on any process) stops the run before the optimizer step: nothing diverged is saved."""
    bad = torch.tensor([0.0 if math.isfinite(loss_sum) else 1.0], device=session.accelerator.device)
    if session.accelerator.num_processes > 1:
        bad = session.accelerator.reduce(bad, reduction="sum")
    if bad.item() > 0:
        raise UserError(_not_finite_message(session, "the training loss", state.global_step + 1, state.epoch))


def _stop_if_weights_not_finite(session: Session, state: TrainState) -> None:
    """A step whose loss was still finite can leave NaN/inf weights (an update that overflows, e.g. --lr 3e38):
    checked before every evaluation and checkpoint, so the checkpoint named "last good" holds finite weights.
    The weights are the same on every process, so every process stops together."""
    params = [p.detach() for p in session.accelerator.unwrap_model(session.net).parameters()]
    if not torch.stack([torch.isfinite(p).all() for p in params]).all().item():
        raise UserError(_not_finite_message(session, "the model weights", state.global_step, state.epoch))


def _not_finite_message(session: Session, what: str, step: int | None, epoch: int | None) -> str:
    """`step`: the optimizer step (1-based) after which `what` was found NaN/inf; `epoch`: 0-based."""
    cfg = session.cfg
    where = f" at step {step} (epoch {(epoch or 0) + 1})" if step is not None else ""
    last = checkpoints.latest_checkpoint(session.out)
    kept = f"The last good checkpoint, {last}, is kept." if last else "No checkpoint was saved before it."
    causes = " or fp16 overflow (use --precision bf16 or fp32)" if cfg.precision == "fp16" else ""
    if session.label_map.task == "regression":  # huge targets are refused before training; say what these span
        y = np.asarray(getattr(getattr(session.objective, "hard", session.objective), "y_train", []), np.float64)
        causes += f" (the regression targets span {y.min():g} to {y.max():g}: if that is wide, scale them)" if y.size else ""
    return (f"{what[0].upper() + what[1:]} became NaN/inf{where}: the run diverged, most likely because --lr {cfg.lr:g} "
            f"is too high{causes}. {kept} Re-run with a smaller --lr (the BERT paper uses 2e-5 to 5e-5) and "
            f"--overwrite, or a new --out.")


def _on_main(accelerator: Any, fn: Any) -> Any:
    return checkpoints._on_main(accelerator, fn)


def _mean_across(accelerator: Any, loss_sum: float, rows: int) -> float:
    """Mean training loss since the last evaluation, over all processes."""
    totals = torch.tensor([loss_sum, float(rows)], dtype=torch.float64, device=accelerator.device)
    totals = accelerator.reduce(totals, reduction="sum") if accelerator.num_processes > 1 else totals
    return float(totals[0] / max(totals[1].item(), 1.0))


def _checkpoint_bytes(model: Any) -> int:
    """Disk one checkpoint needs: fp32 weights + AdamW's two moments, plus 5% and 16 MB of margin."""
    return disk.with_margin(3 * sum(p.numel() * 4 for p in model.parameters()))


def _freeze_encoder(model: Any) -> None:
    """Train only the classification head: everything under the base model (`model.bert`, ...) is frozen."""
    prefix = model.base_model_prefix
    for name, param in model.named_parameters():
        param.requires_grad = not name.startswith(prefix + ".")


def _adamw(model: Any, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW with weight decay on weight matrices only (not on biases and LayerNorm), fused where supported."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr, foreach=True)
