"""The fine-tuning loop, one epoch at a time: the run's state (`TrainState`, saved with every checkpoint) and
everything it needs (`Session`, built by `finetune.setup`), restoring the newest verified checkpoint, one optimizer
step on the micro-batches `launch.steps_of` prepared, dev evaluation (any number of processes), keeping the best
model, and the NaN/inf stops. How batches, loss scaling and checkpoints work: `bertkit.training.finetune`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap
from bertkit.encoding.batches import restore_order, sorted_batches
from bertkit.encoding.encode import Encoded
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.io import atomic, checkpoint_folders, faults, rundir
from bertkit.models import infer, loading
from bertkit.models.compute import Compute
from bertkit.scoring.baseline import Baseline
from bertkit.scoring.evaluation import judge_evaluation
from bertkit.training import advice, cards, checkpoints
from bertkit.training.launch import Step, plain_optimizer_settings, steps_of
from bertkit.training.options import FinetuneOptions

log = logging.getLogger(__name__)


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
    best_test: dict[str, Any] | None = None
    """The best model's scores on the labelled --test data (None without one)."""
    running_loss: tuple[float, int] = (0.0, 0)
    """Loss sum and rows since the last evaluation: restored mid-epoch, so the reported mean stays exact."""
    model_info: dict[str, Any] = field(default_factory=dict)
    """What using the model of the last evaluation needs besides its weights (multi-label: the tuned threshold)."""
    stop_reason: str | None = None
    """Why the run stopped before its last epoch: `early_stopping`, or what `Session.on_evaluate` said (`pruned`)."""
    log_loss: tuple[float, int] = (0.0, 0)
    """Loss sum and rows since the trackers' last log (--log-every): restored too, so the logged mean stays exact."""
    train_log: list[dict[str, float]] = field(default_factory=list)
    """Every --log-every optimizer steps: {step, train_loss (mean since the previous entry), lr}."""
    baseline_note: str | None = None
    """The warning of the last evaluation whose dev metric was not above the constant (majority-class) baseline."""

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> TrainState:
        known = {f.name for f in dataclasses.fields(cls)}
        state = cls(**{k: v for k, v in saved.items() if k in known})
        state.running_loss = (float(state.running_loss[0]), int(state.running_loss[1]))
        state.log_loss = (float(state.log_loss[0]), int(state.log_loss[1]))
        return state

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Session:
    """Everything one run needs, built by `setup`: the loop functions below read it, never rebuild it."""

    cfg: FinetuneOptions
    accelerator: Any
    run: rundir.RunDir
    out: Path
    """Where this run writes: --out, or its staging folder while it replaces another run (--overwrite)."""
    tokenizer: Any
    net: Any
    optimizer: Any
    scheduler: Any
    objective: Any
    """What is optimised and scored (`bertkit.scoring.shapes`): `loss(logits, rows)`, `score(logits)`, `label_names`."""
    train_enc: Encoded
    dev_enc: Encoded
    dev: TextDataset
    label_map: LabelMap
    steps_per_epoch: int
    notes: list[str]
    checkpoint_bytes: int
    """Disk a checkpoint needs (weights + AdamW moments + margin): checked before every save."""
    reading: Reading = Reading()  # how the run reads texts (the command's one): recorded in every model it saves
    on_evaluate: Any = None
    """Optional `fn(history, metric_for_best) -> reason | None`, called (on every process) after each dev evaluation
    with the run's evaluation records so far; a reason stops the run there like early stopping (a sweep's pruning)."""
    card: Any = None
    """The run's model-card facts and labelled --test data (`bertkit.training.cards.RunCard`)."""
    tracker: Any = None
    """The experiment trackers following the run (`tracking.RunTrackers`; None without --report-to)."""
    graphs: Any = None
    """The step runner replaying CUDA graphs (`bertkit.training.graphs.StepRunner`; None: eager steps)."""
    baseline: Baseline | None = None
    """The dev split's constant (majority-class) baseline for --metric-for-best (`bertkit.scoring.baseline`)."""
    learning_rate: dict[str, Any] = field(default_factory=dict)
    """How --lr was chosen (`learning_rate.LrChoice.to_json`): metrics.json and config.json record it."""
    task_record: dict[str, Any] = field(default_factory=dict)
    """What the saved models record of the task beyond reading and compute (`Task.model_record`: a tag scheme)."""
    config_record: dict[str, Any] = field(default_factory=dict)
    """The run's options as its config.json records them (`resume.recorded_config`, flat): the trackers log them."""
    checkpointing: checkpoints.Checkpointing = field(default_factory=checkpoints.Checkpointing)
    """Checkpoints by the clock (--save-every-minutes; the default: by steps only) and the last one made or restored."""
    dev_batches: list[np.ndarray] = field(init=False, repr=False)
    """`dev_enc`'s rows in length-sorted batches of twice --batch-size (32 at least): every evaluation runs these,
    planned once with the session (a session for other rows, `dataclasses.replace(session, dev_enc=...)`, plans
    its own)."""

    def __post_init__(self) -> None:
        self.dev_batches = sorted_batches(self.dev_enc.lengths, max(self.cfg.training.batch_size * 2, 32))

    @property
    def pad_id(self) -> int:
        return infer.pad_id_of(self.tokenizer)

    @property
    def min_rows(self) -> int:
        return self.accelerator.num_processes * self.cfg.training.grad_accum

    @property
    def model_bytes(self) -> int:
        return self.checkpoint_bytes // 3

    @property
    def settings_record(self) -> dict[str, Any]:
        """bertkit_model.json's `reading` (predict, evaluate and export read texts as the model was trained) and
        `compute` (where and in what precision it was trained: information)."""
        return {"reading": self.reading.to_json(), "compute": Compute.of_accelerator(self.accelerator).to_json(),
                **self.task_record}


# ---------------------------------------------------------------- restore, train, evaluate

def restore(session: Session) -> tuple[TrainState, dict[str, Any] | None]:
    """The state to continue from: the newest checkpoint's, verified (model, optimizer, scheduler and RNG restored
    too), or a fresh one."""
    accelerator, out = session.accelerator, session.out
    found = on_main(accelerator, lambda: _choose_checkpoint(out)) if session.run.existing else None
    state, restored = TrainState(), None
    if found is not None:
        checkpoints.load(accelerator, found)
        plain_optimizer_settings(session)
        state = TrainState.from_json(found.state)
        session.checkpointing.saved(found.state)
        session.notes.extend(found.notes)
        for note in found.notes:
            log.warning("%s", note)
        restored = {"checkpoint": str(found.path), "epoch": state.epoch + 1, "step": state.global_step,
                    "batch_in_epoch": state.step_in_epoch, "steps_per_epoch": session.steps_per_epoch,
                    "lr": session.scheduler.get_last_lr()[0], "best_metric": state.best_metric,
                    "verified": (found.path / checkpoint_folders.MANIFEST).is_file()}  # False: saved before checksums
        log.info("%s", checkpoints.resumed_line(restored, session.cfg.training.metric_for_best))
    if accelerator.is_main_process:  # evaluations after the checkpoint will be redone: keep the log consistent
        atomic.write_text_atomic(out / "metrics.jsonl", "".join(atomic.to_json(r, indent=None) + "\n" for r in state.history))
    return state, restored


def _choose_checkpoint(out: Path) -> checkpoint_folders.Restored | None:
    """The verified checkpoint to resume from (main process), after removing what interrupted saves left."""
    removed = checkpoint_folders.remove_unfinished_saves(out)
    if removed:
        log.info("removed the unfinished checkpoint save(s) of the interrupted run: %s", ", ".join(removed))
    return checkpoint_folders.choose_checkpoint(out)


def train_epoch(session: Session, state: TrainState, bar: Any) -> None:
    """Train from the state's position to the end of its epoch (or an early stop): evaluate and checkpoint on
    schedule. The state moves on to the next epoch at the end."""
    cfg, accelerator = session.cfg, session.accelerator
    epoch = state.epoch
    eval_every = None if cfg.training.eval_every == "epoch" else int(cfg.training.eval_every)
    session.net.train()
    started = time.perf_counter()
    for step in steps_of(session, epoch, state.step_in_epoch):
        if session.graphs is None:
            loss_sum, rows = train_step(session, step, state)
        else:  # queued on the GPU; its loss is read below only when a number is needed
            session.graphs.step(step.prepared, state.global_step)
            session.scheduler.step()  # fills the learning-rate tensors the next replay reads
            loss_sum, rows = None, 0
        state.global_step, state.step_in_epoch, state.train_rows = (state.global_step + 1, state.step_in_epoch + 1,
                                                                    state.train_rows + len(step.rows))
        end_of_epoch = step.last
        evaluating = end_of_epoch or (eval_every and state.global_step % eval_every == 0)
        saving = (end_of_epoch or (cfg.output.save_every and state.global_step % cfg.output.save_every == 0)
                  or session.checkpointing.due(accelerator))
        final_step = end_of_epoch and epoch + 1 == cfg.training.epochs  # logged too
        logging_now = state.global_step % cfg.tracking.log_every == 0 or final_step
        if loss_sum is None and (evaluating or saving or logging_now or state.global_step % READ_EVERY == 0):
            loss_sum, rows = _read_graphed(session, state)
        if loss_sum is not None:
            state.running_loss = (state.running_loss[0] + loss_sum, state.running_loss[1] + rows)
        state.log_loss = (state.log_loss[0] + (loss_sum or 0.0), state.log_loss[1] + rows)
        logged = _log_training(session, state) if logging_now else None  # every --log-every steps
        if session.tracker is not None:  # on log steps: train loss, lr, grad norm, samples/s
            session.tracker.step_done(session, state, logged, len(step.rows))
        _show_progress(bar, session, state, loss_sum is not None)
        if evaluating or saving:
            _stop_if_weights_not_finite(session, state)  # nothing diverged is evaluated or saved
        if evaluating:
            state.train_seconds += time.perf_counter() - started
            evaluate(session, state, end_of_epoch)
            started = time.perf_counter()
        if saving or state.stopped_early:
            state.train_seconds += time.perf_counter() - started
            checkpoints.save_run_checkpoint(session, state.to_json())
            started = time.perf_counter()
        faults.fail_point("finetune.step", state.global_step)
        if state.stopped_early:
            break


def _show_progress(bar: Any, session: Session, state: TrainState, loss_read: bool) -> None:
    """One step on the bar (None: --quiet, or not the main process), with the mean loss and lr when it was read."""
    if bar is None:
        return
    if loss_read:
        bar.set_postfix(loss=f"{state.running_loss[0] / max(state.running_loss[1], 1):.4f}",
                        lr=f"{float(session.scheduler.get_last_lr()[0]):.2e}")
    bar.update(1)


def _log_training(session: Session, state: TrainState) -> dict[str, float]:
    """The mean training loss since the last log step (all processes: a collective) and the learning rate, added to
    the state's `train_log` (metrics.json, curves.png; kept in checkpoints, so a resumed run's curve is whole)."""
    loss = mean_across(session.accelerator, *state.log_loss)
    state.log_loss = (0.0, 0)
    entry = {"step": state.global_step, "train_loss": loss, "lr": float(session.scheduler.get_last_lr()[0])}
    state.train_log.append(entry)
    return entry


READ_EVERY = 50
"""On a graphed run, the loss is read back (one host synchronisation) at least every this many steps: the progress
bar's numbers."""


def _read_graphed(session: Session, state: TrainState) -> tuple[float, int]:
    """The graphed steps' (loss x rows, rows) since the last read; a non-finite step (its update was skipped on the
    GPU) stops the run here, before anything after it is evaluated or saved."""
    runner = session.graphs
    loss_sum, rows, first_bad = runner.read()
    if first_bad:
        raise UserError(advice.not_finite_message(session, "the training loss or its gradients", first_bad,
                                            state.epoch))
    if session.tracker is not None and state.global_step % session.cfg.tracking.log_every == 0:
        session.tracker.grad_norm = runner.last_grad_norm()
    return loss_sum, rows


def train_step(session: Session, step: Step, state: TrainState) -> tuple[float, int]:
    """One optimizer step on a global batch: this process's micro-batches (padded by `steps_of`), backward, clip,
    step. Returns this process's (loss x rows, rows); a non-finite loss stops the run before anything is updated or
    saved. The gradient norm (before clipping) goes to the trackers on their log steps."""
    cfg, accelerator, net = session.cfg, session.accelerator, session.net
    loss_sum = 0.0
    for i, (rows, inputs) in enumerate(step.prepared):
        last = i == len(step.prepared) - 1  # gradients are all-reduced with the last micro-batch only
        with accelerator.no_sync(net) if not last else contextlib.nullcontext():
            loss = session.objective.loss(net(**inputs), rows)
            accelerator.backward(loss * (len(rows) * accelerator.num_processes / len(step.rows)))
        loss_sum += loss.item() * len(rows)
    _stop_if_not_finite(session, state, loss_sum)
    logging = session.tracker is not None and session.tracker.due(state.global_step + 1)
    if cfg.training.max_grad_norm > 0 or logging:  # max_norm inf: the norm only, the gradients stay as they are
        norm = accelerator.clip_grad_norm_(net.parameters(),
                                           cfg.training.max_grad_norm if cfg.training.max_grad_norm > 0 else math.inf)
        if logging:
            session.tracker.grad_norm = float(norm)
    session.optimizer.step()
    session.scheduler.step()
    session.optimizer.zero_grad(set_to_none=True)
    return loss_sum, sum(len(rows) for rows, _ in step.prepared)


def evaluate(session: Session, state: TrainState, end_of_epoch: bool) -> None:
    """Dev metrics now; keep the best model by --metric-for-best; count evaluations for early stopping."""
    cfg, accelerator = session.cfg, session.accelerator
    started = time.perf_counter()
    train_loss = mean_across(accelerator, *state.running_loss)
    state.running_loss = (0.0, 0)
    scored = dev_scores(session)
    cards.remember(session, state.global_step, scored)
    state.model_info = _model_info(session, scored.metrics)
    judged = judge_evaluation(scored, session.objective.y_dev, metric_list=cfg.metrics.metric_list,
                              external=cfg.metrics.external_metrics, metric_for_best=cfg.training.metric_for_best,
                              best_so_far=state.best_metric, baseline=session.baseline)
    if judged.problem is not None:  # a module may still fail, or leave a score out, on the real predictions
        raise UserError(_scoring_failed(session, state, scored, judged.problem, judged.failed_spec))
    value = judged.value
    record = {"epoch": state.epoch + 1, "step": state.global_step, "train_loss": train_loss,
              "samples_seen": state.train_rows, "eval_seconds": round(time.perf_counter() - started, 3),
              **{f"dev_{k}": v for k, v in judged.headline.items()}, "dev_loss": scored.metrics["loss"],
              "best": judged.best}
    if judged.above_baseline is not None:
        record["above_baseline"] = judged.above_baseline
        if not judged.above_baseline:
            state.baseline_note = advice.baseline_warning(session, state, value, train_loss)
            if accelerator.is_main_process:
                log.warning("%s", state.baseline_note)
    state.history.append(record)
    if record["best"]:
        _keep_best(session, state, scored, value)
    else:
        state.evals_since_best += 1
        patience = cfg.training.early_stopping_patience
        state.stopped_early = bool(patience and state.evals_since_best >= patience)
        state.stop_reason = "early_stopping" if state.stopped_early else None
    if session.on_evaluate is not None and not state.stopped_early:
        state.stop_reason = session.on_evaluate(state.history, cfg.training.metric_for_best)
        state.stopped_early = state.stop_reason is not None
    if accelerator.is_main_process:
        atomic.append_jsonl(session.out / "metrics.jsonl", record)
    if session.tracker is not None:
        session.tracker.evaluated(record)
    if end_of_epoch:
        state.epoch_table.append(_epoch_row(state, train_loss, session.objective.table_metrics))
        state.epoch, state.step_in_epoch = state.epoch + 1, 0


def _scoring_failed(session: Session, state: TrainState, scored: Any, problem: str, spec: str | None = None) -> str:
    """Save the model trained so far into final/ (with what using it needs), then the message: the problem, where
    the model is, and how to score it once the metric is fixed."""
    cfg, folder = session.cfg, session.out / "final"
    card = cards.card_for(session, state, "final", scored, None)
    checkpoints.save_model_folder(session.accelerator, session.net, session.tokenizer, folder,
                                  {"step": state.global_step, **state.model_info, **session.settings_record},
                                  session.model_bytes, card)
    shown = ", ".join(f"{k} {scored.metrics[k]:.4f}" for k in session.objective.table_metrics if k in scored.metrics)
    fix = (f"Fix the metric script, then score that model with `bertkit evaluate --model {folder} --data "
           f"{cfg.inputs.dev or 'DEV_DATA'} --metric {spec}`, or re-run this command (it resumes from the last "
           f"checkpoint, if any)." if spec else
           "Pass --metric-for-best with one of those and --overwrite (or a new --out) to train again.")
    return (f"{problem}, at step {state.global_step} (epoch {state.epoch + 1} of {cfg.training.epochs}). The model "
            f"trained so far is saved, not lost: {folder} (dev {shown}). {fix}")


def dev_scores(session: Session) -> Any:
    """The objective's scores of the dev logits, computed in any number of processes: each evaluates a share of
    the length-sorted batches (`Session.dev_batches`), `gather_object` collects (rows, logits) from all, every row
    counted once.

    The forward runs on the *unwrapped* model: a DDP-wrapped forward is itself a collective (it broadcasts
    buffers from rank 0 before every call), so ranks with different numbers of dev batches - e.g. 20 dev rows in
    one batch over 2 processes: rank 0 has one, rank 1 none - would deadlock against the gather below. The
    weights are identical on all ranks. The one collective here (`gather_object`) is called exactly once by every
    rank, whatever its share; no padding rows are added, so nothing is counted twice."""
    from accelerate.utils import gather_object

    accelerator = session.accelerator
    local = accelerator.unwrap_model(session.net)
    local.eval()
    mine = session.dev_batches[accelerator.process_index :: accelerator.num_processes]
    dtype = loading.DTYPE_NAMES[{"no": "fp32", "bf16": "bf16", "fp16": "fp16"}[accelerator.mixed_precision]]
    logits = infer.run_batches(lambda batch: local(**batch), session.dev_enc, mine, model=local.model,
                               pad_id=session.pad_id, device=accelerator.device, dtype=dtype, unmasked=True)
    gathered = list(zip(mine, logits, strict=True))
    if accelerator.num_processes > 1:
        gathered = gather_object(gathered)
    local.train()
    all_logits = restore_order([b for b, _ in gathered], [lg for _, lg in gathered])
    if not np.isfinite(all_logits).all():
        raise UserError(advice.not_finite_message(session, "the dev logits", None, None))
    return session.objective.score(all_logits)


def _keep_best(session: Session, state: TrainState, scored: Any, value: float) -> None:
    """A new best: its metrics in the state (and its --test scores: the weights in hand are the best ones), its
    model and card in best/, its dev probabilities for the reports."""
    state.best_metric, state.best_step, state.evals_since_best = value, state.global_step, 0
    state.best_dev = {k: v for k, v in scored.metrics.items() if k != "per_class"}
    test = cards.test_scored(session, scored, dev_scores)
    cards.remember(session, state.global_step, scored, test)
    state.best_test = cards.test_summary(test)
    card = cards.card_for(session, state, "best", scored, test)
    checkpoints.save_model_folder(session.accelerator, session.net, session.tokenizer, session.out / "best",
                                  {"step": state.global_step, "metric": session.cfg.training.metric_for_best,
                                   "value": value, "labels": session.label_map.to_json()["labels"], **state.model_info,
                                   **session.settings_record}, session.model_bytes, card)
    if session.accelerator.is_main_process:
        with atomic.atomic_path(session.out / "best_dev_proba.npy") as tmp, open(tmp, "wb") as handle:
            np.save(handle, scored.outputs)


def _model_info(session: Session, scored: dict[str, Any]) -> dict[str, Any]:
    """bertkit_model.json's task and multi-label threshold (`bertkit predict` applies it); single-label: nothing."""
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


# ---------------------------------------------------------------- stops and small pieces

def _stop_if_not_finite(session: Session, state: TrainState, loss_sum: float) -> None:
    """A NaN/inf loss (on any process) stops the run before the optimizer step: nothing diverged is saved."""
    bad = torch.tensor([0.0 if math.isfinite(loss_sum) else 1.0], device=session.accelerator.device)
    if session.accelerator.num_processes > 1:
        bad = session.accelerator.reduce(bad, reduction="sum")
    if bad.item() > 0:
        raise UserError(advice.not_finite_message(session, "the training loss", state.global_step + 1, state.epoch))


def _stop_if_weights_not_finite(session: Session, state: TrainState) -> None:
    """A step whose loss was still finite can leave NaN/inf weights (an update that overflows, e.g. --lr 3e38):
    checked before every evaluation and checkpoint, so the checkpoint named "last good" holds finite weights.
    The weights are the same on every process, so every process stops together."""
    params = [p.detach() for p in session.accelerator.unwrap_model(session.net).parameters()]
    if not torch.stack([torch.isfinite(p).all() for p in params]).all().item():
        raise UserError(advice.not_finite_message(session, "the model weights", state.global_step, state.epoch))


on_main = checkpoints._on_main  # fn() on the main process; its result, or its UserError, on every process


def mean_across(accelerator: Any, loss_sum: float, rows: int) -> float:
    """Mean training loss over all processes (since the last evaluation, or the trackers' last log)."""
    totals = torch.tensor([loss_sum, float(rows)], dtype=torch.float64, device=accelerator.device)
    totals = accelerator.reduce(totals, reduction="sum") if accelerator.num_processes > 1 else totals
    return float(totals[0] / max(totals[1].item(), 1.0))
