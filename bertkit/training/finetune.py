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
* Checkpoints (`checkpoints.py`, `io/checkpoint_folders.py`: model, optimizer, scheduler, RNG, trainer state,
  checksums) are written atomically every `--save-every` steps, at every epoch's end and once `--save-every-minutes`
  have passed since the last one, and verified before a resume trusts them. A run stopped by Ctrl-C or SIGTERM says
  what a re-run resumes from (the interrupt's note, which `bertkit.cli` prints).
* A loss that becomes NaN/inf stops the run with the step, the cause and the last good checkpoint.
* The best model by `--metric-for-best` and the final model are saved with `save_pretrained` (safetensors,
  id2label/label2id, tokenizer) so `from_pretrained` and `transformers.pipeline` load them.

What is optimised and scored is the objective's business (`bertkit.scoring.shapes`); this loop only moves batches.
Library code: returns values and logs; `bertkit.cli` prints.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.dataset import TextDataset
from bertkit.data.label_reader import MAX_TARGET
from bertkit.data.labels import LabelMap
from bertkit.data.splits import Splits, load_splits
from bertkit.encoding.reading import Reading
from bertkit.encoding.run_tokens import RunTokens, encode_run
from bertkit.errors import UserError
from bertkit.io import disk, rundir
from bertkit.models import infer, loading, metadata
from bertkit.models.compute import Compute
from bertkit.models.fastforward import SequenceClassifier
from bertkit.options import command_line
from bertkit.scoring import metrics
from bertkit.scoring.baseline import majority_baseline
from bertkit.scoring.calibration import TemperatureFit, fit_temperature
from bertkit.scoring.evaluation import choose_best_metric
from bertkit.scoring.shapes import MultiLabel, Regression, SingleLabel
from bertkit.training import cards, checkpoints, reports, tracking
from bertkit.training.launch import start_graphs
from bertkit.training.learning_rate import AUTO, LrChoice, resolve_lr
from bertkit.training.loop import (
    Session,
    TrainState,
    dev_scores,
    on_main,
    restore,
    train_epoch,
)
from bertkit.training.options import NOT_REPRODUCED, FinetuneOptions
from bertkit.training.outcome import EpochRow, Restored, RunSummary, TrainingRun
from bertkit.training.resume import finished_run, resume_key, run_record

log = logging.getLogger(__name__)


class Task:
    """Where a run's model and objective come from: fine-tuning's (this class), or distillation's (distill.py),
    which reuses everything else - the loop, checkpoints, exact resume, processes - unchanged."""

    command = "finetune"

    def label_map(self, cfg: FinetuneOptions, splits: Splits) -> LabelMap:
        """The label <-> id mapping the model's outputs follow: the training labels' (distillation: the teacher's)."""
        return splits.label_map

    def build_model(self, cfg: FinetuneOptions, label_map: LabelMap) -> tuple[Any, Any]:
        """(model, tokenizer), after the seed is set: the pretrained encoder with a new head, one output per class
        or tag (one for a regression); its config's problem_type says which, as transformers reads it (set whatever
        the starting folder's was: a single-label head started from a regression best/ is saved as single-label)."""
        model = loading.load_classifier(cfg.model, label_map.id2label, cfg.trust_remote_code,
                                         problem_type=label_map.problem_type)
        return model, loading.load_tokenizer(cfg.model, cfg.trust_remote_code)

    def objective(self, cfg: FinetuneOptions, splits: Splits, out: Path, accelerator: Any) -> Any:
        """The loss and dev scores, built once the run directory is claimed (`out` may hold caches)."""
        label_map = splits.label_map
        y_train = label_map.encode(splits.train.labels or [], f"The training data {splits.train.source}")
        y_dev = label_map.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}")
        names = [str(x) for x in label_map.labels]
        if label_map.task == "regression":
            return Regression(y_train, y_dev, names)
        if label_map.task == "multi_label":
            return MultiLabel(y_train, y_dev, names, cfg.inputs.threshold)
        return SingleLabel(y_train, y_dev, names, cfg.training.class_weight).to(accelerator.device)

    def model_revision(self, cfg: FinetuneOptions) -> str:
        return loading.model_revision(cfg.model)

    def card_lineage(self, cfg: FinetuneOptions) -> dict[str, Any]:
        """What the model cards say of where the model came from beyond --model (distillation: the teacher)."""
        return {}

    def training_data(self, cfg: FinetuneOptions, warn: bool) -> tuple[FinetuneOptions, Any]:
        """The run's data, read and checked, with the label mapping the model outputs (`label_map`), and `cfg`
        fitted to its problem shape (`_for_the_shape`; `warn`: this process logs). The data answers `label_map`,
        `dev`, `notes` and `fingerprints()` (`data.splits.Splits`; a tagger's `data.tagged_splits.TaggedTraining`)."""
        splits = load_splits(cfg.inputs, need_labels=True, need_dev=True)
        assert splits.label_map is not None and splits.dev is not None
        splits.label_map = self.label_map(cfg, splits)
        return _for_the_shape(cfg, splits, warn), splits

    def tokens(self, cfg: FinetuneOptions, tokenizer: Any, splits: Splits, reading: Reading,
               min_rows: int) -> RunTokens:
        """The run's token ids and the steps of an epoch, before --out is claimed (too little data: refused)."""
        return encode_run(tokenizer, splits, reading, cache_dir=cfg.inputs.cache_dir,
                          batch_size=cfg.training.batch_size,
                          seed=cfg.inputs.seed, min_rows=min_rows)

    def network(self, cfg: FinetuneOptions, model: Any, accelerator: Any, tokens: RunTokens) -> Any:
        """What the loop trains and evaluates: `model` behind the [CLS]-only fast forward where it applies
        (`models.fastforward.SequenceClassifier`: trains `model`'s parameters, logits only), compiled with --compile."""
        net = SequenceClassifier(model, fast=cfg.compute.fast_forward)
        if cfg.compute.fast_forward and not net.fast:
            log.info("--fast-forward does not apply (%s): using the model's own forward", net.unsupported)
        # On a GPU the layers are compiled inside the CUDA-graph steps; elsewhere the whole module, in place
        # (parameters and state_dict keys stay those of `model`: checkpoints, saves)
        if cfg.compute.compile and not (accelerator.device.type == "cuda" and cfg.compute.cuda_graphs != "off"
                                and net.compile_layers()):
            net.compile(dynamic=True)
        return net

    def baseline(self, cfg: FinetuneOptions, objective: Any, label_map: LabelMap) -> Any:
        """The dev split's constant baseline for --metric-for-best (`scoring.baseline`; None where none applies)."""
        return majority_baseline(objective, label_map.task, cfg.training.metric_for_best or "")

    def card(self, cfg: FinetuneOptions, splits: Splits, tokens: RunTokens, reproduce: str) -> cards.RunCard:
        """The facts every model card of the run states (data, hyper-parameters, `reproduce`: the command line)."""
        return cards.run_card(cfg, splits, self.command, self.card_lineage(cfg), tokens.test, reproduce)

    def model_record(self) -> dict[str, Any]:
        """What best/ and final/ record of the task beyond the reading and compute (a tagger: its tag scheme)."""
        return {}


# ---------------------------------------------------------------- the run

def finetune(cfg: FinetuneOptions, *, compute: Compute, reading: Reading, progress: bool = True,
             task: Task | None = None, on_evaluate: Any = None,
             clock: Callable[[], float] = time.monotonic) -> TrainingRun:
    """Fine-tune `cfg.model` on the data in `cfg`, writing everything into `cfg.out` (see module docstring).

    `compute`: the run's device and precision as the command resolved them (`Compute.resolve(training_device(),
    cfg.precision)`; a sweep resolves each trial's, --precision being possibly one of its dimensions). `reading`:
    how texts become token ids, as the command resolved it against the --model's record (`cfg`'s reading options
    hold the same values, for the run's config.json and cards).
    `task` supplies the model and the objective (default: fine-tuning's; distill.py passes its own).
    `on_evaluate(history, metric_for_best) -> reason | None` is called after every dev evaluation; a reason stops
    the run there (`Session.on_evaluate`: a sweep's pruning). `clock`: what --save-every-minutes is measured by.
    Ctrl-C or SIGTERM (a KeyboardInterrupt) once the run is restored goes on up with a note: what a re-run resumes
    from."""
    task = task or Task()
    metrics.load_metrics(tuple(cfg.metrics.external_metrics))  # a --metric that cannot be loaded stops the run before work
    tracking.check_trackers(cfg)  # so does a --report-to tracker that is not installed
    accelerator = _accelerator(compute)
    cfg, splits = task.training_data(cfg, accelerator.is_main_process)
    notes = list(splits.notes)
    cfg, lr_choice = resolve_lr(cfg, lambda: loading.load_config(cfg.model, cfg.trust_remote_code))
    if lr_choice.source == AUTO:
        notes.append(lr_choice.line)
        if accelerator.is_main_process:
            log.info("%s", lr_choice.line)
    key = resume_key(cfg, splits.fingerprints())
    done = on_main(accelerator, lambda: finished_run(cfg, key, task.command))  # read-only; refusals end here
    if done is not None:  # where the finished run is (a sweep's trial: in the staging folder while it replaces)
        return _finished_result(done, accelerator)
    session = setup(cfg, accelerator, splits, key, task, reading, lr_choice)
    if session is None:  # an --overwrite run killed after its last save: its swap was finished just now
        return _finished_result(Path(cfg.output.out or "").expanduser(), accelerator)
    session.on_evaluate = on_evaluate
    session.checkpointing = checkpoints.Checkpointing(cfg.output.save_every_minutes, clock)
    recorded = tracking.recorded_runs(session)  # the tracker runs this run directory follows (a resumed run's)
    with disk.reported(session.out, session.checkpoint_bytes):  # metrics, reports, best_dev_proba: a full disk
        state, restored = restore(session)                       # there too is one message, and a re-run resumes
        session.graphs = start_graphs(session, state)
        if session.graphs is not None:  # the captures are part of what training costs
            state.train_seconds += session.graphs.capture_seconds
        session.tracker = tracking.started_trackers(session, state, key["data"], recorded)
        try:
            with _progress(session, state, progress) as bar:  # closed on a failure too
                while state.epoch < cfg.training.epochs and not state.stopped_early:
                    train_epoch(session, state, bar)
            if session.tracker is not None:  # closed before finish() may move the run directory (--overwrite)
                session.tracker.finish(ok=True)
            return finish(session, state, restored, notes)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as the CLI raises it: say what a re-run resumes from
            exc.add_note(session.checkpointing.resume_note(session.steps_per_epoch))
            raise
        finally:
            if session.tracker is not None:  # a failed run: its tracker runs end as failed (no-op once finished)
                session.tracker.finish(ok=False)


def _for_the_shape(cfg: FinetuneOptions, splits: Splits, warn: bool = True) -> FinetuneOptions:
    """`cfg` fitted to the data's problem shape, before any training: the --metric-for-best the shape scores (none
    given: accuracy / pearson / micro_f1, recorded as such in the run's config); a metric the shape lacks, a --metric
    module that fails on a synthetic input of the shape, or --class-weight for numbers or tags, is refused; options
    the shape ignores (a built-in --metric it lacks, --threshold) are warned about (`warn`: this process logs).
    Regression targets too large to train on are refused, and a constant dev target (its correlations are
    undefined) picks by dev mse."""
    assert splits.label_map is not None
    task, n_labels = splits.label_map.task, len(splits.label_map.labels)
    if cfg.training.class_weight != "none" and task != "single_label":
        raise UserError(f"--class-weight {cfg.training.class_weight} weighs classes of single-label data; this is "
                        f"{task} data. Drop --class-weight.")
    if cfg.training.calibrate != "none" and task != "single_label":
        raise UserError(f"--calibrate {cfg.training.calibrate} scales a single-label classifier's softmax; this is "
                        f"{task} data. Drop --calibrate.")
    choice = choose_best_metric(task, n_labels, cfg.training.metric_for_best, cfg.metrics.metric_list,
                                cfg.inputs.threshold,
                                cfg.metrics.external_metrics, splits.dev)
    for note in choice.warnings if warn else ():
        log.warning("%s", note)
    if task == "regression":
        for split in (splits.train, splits.dev):
            _check_target_scale(split)
    metric, note = choice.metric, choice.note
    if metric == cfg.training.metric_for_best:
        return cfg
    if task != "single_label":
        splits.notes.append(f"{task} data: {note}")
    return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, metric_for_best=metric))


def _check_target_scale(split: TextDataset | None) -> None:
    """Regression targets beyond +-MAX_TARGET overflow the squared-error loss (or swamp it) whatever the --lr:
    refused before training, naming the file, column and row."""
    if split is None or not split.labels:
        return
    targets = np.abs(np.asarray(split.labels, dtype=np.float64))
    row = int(np.argmax(targets))
    if targets[row] <= MAX_TARGET:
        return
    where = f"line {split.line_numbers[row]}" if split.line_numbers else f"row {row}"
    divisor = 10.0 ** math.ceil(math.log10(targets[row] / 1000.0))
    raise UserError(
        f"Regression targets in column {(split.label_columns or ('label',))[0]!r} of {split.source} reach "
        f"{split.labels[row]:g} ({where}); targets beyond +-{MAX_TARGET:g} make the squared-error loss "
        f"overflow or swamp training, whatever the --lr. Scale the targets in the file to within about +-1000 "
        f"(e.g. divide them by {divisor:g}, or take their log) and re-run."
    )


def setup(cfg: FinetuneOptions, accelerator: Any, splits: Splits, key: dict[str, Any],
          task: Task, reading: Reading, lr_choice: LrChoice | None = None) -> Session | None:
    """Model, optimizer, tokens, schedule and the claimed run directory (claimed only after everything that can
    be refused was checked, so a refused start leaves --out as it was). None: the run turned out finished."""
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    label_map = splits.label_map
    set_seed(cfg.inputs.seed)  # before the head is initialised
    model, tokenizer = task.build_model(cfg, label_map)
    loading.check_max_length(reading.max_length, tokenizer, model.config, getattr(cfg, "model", "the model"),
                              pair=cfg.inputs.text_pair_column is not None)
    if cfg.training.freeze_encoder:
        _freeze_encoder(model)
    optimizer = adamw_optimizer(model, float(cfg.training.lr), cfg.training.weight_decay)
    checkpoint_bytes = _checkpoint_bytes(model)
    lr_record = (lr_choice or LrChoice(float(cfg.training.lr), "given")).to_json()
    record = run_record(cfg, accelerator, task, lr_record)  # what a new run's config.json says, claimed with --out
    tokens = task.tokens(cfg, tokenizer, splits, reading, accelerator.num_processes * cfg.training.grad_accum)
    net = task.network(cfg, model, accelerator, tokens)
    run, status = on_main(accelerator, lambda: rundir.claim_resumable(cfg.output.out or "", task.command, key,
                                                                      overwrite=cfg.output.overwrite, **record))
    if status == "finished":
        return None
    reproduce = command_line(task.command, cfg, skip=NOT_REPRODUCED)  # the cards' line: this config, as claimed
    objective = task.objective(cfg, splits, run.path, accelerator)
    if hasattr(objective, "init_head"):  # before any checkpoint is restored over it
        objective.init_head(model)
    baseline = task.baseline(cfg, objective, label_map)
    total_steps = tokens.steps_per_epoch * cfg.training.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.training.warmup_ratio * total_steps),
                                                total_steps)
    net, optimizer, scheduler = accelerator.prepare(net, optimizer, scheduler)
    return Session(cfg, accelerator, run, run.path, tokenizer, net, optimizer, scheduler, objective, tokens.train,
                   tokens.dev, splits.dev, label_map, tokens.steps_per_epoch, [], checkpoint_bytes, reading=reading,
                   card=task.card(cfg, splits, tokens, reproduce), learning_rate=lr_record, baseline=baseline,
                   task_record=task.model_record(), config_record=record["config"])


def finish(session: Session, state: TrainState, restored: dict[str, Any] | None, notes: list[str]) -> TrainingRun:
    """final/ model and card (the final weights' dev and --test scores; its weights linked to best/'s when the last
    evaluation was the best), then the finished run, typed, and what it leaves on disk (`reports.write_finished_run`:
    metrics.json, the epoch table, curves, confusion matrix and dev_errors.csv; checkpoints/ removed unless
    --keep-checkpoints; an --overwrite run's output in place of the previous one)."""
    accelerator = session.accelerator
    dev, test = cards.final_scores(session, state.global_step, dev_scores) if session.card is not None else (None, None)
    card = cards.card_for(session, state, "final", dev, test) if dev is not None else None
    calibration, same_as_best = _save_final_model(session, state, card)
    notes = notes + session.notes + _baseline_notes(state)
    summary = reports.summary(session, state, restored, notes=notes, same_as_best=same_as_best,
                              calibration=calibration, test=test)
    run = TrainingRun(session.run.out, summary, tuple(map(EpochRow, state.epoch_table)),
                      Restored.from_json(restored), False, accelerator.is_main_process, tuple(notes))
    if accelerator.is_main_process:
        reports.write_finished_run(session, state, run)
    accelerator.wait_for_everyone()
    return run


def _save_final_model(session: Session, state: TrainState, card: Any) -> tuple[TemperatureFit | None, bool]:
    """final/ with its `card`, after --calibrate temperature fitted the best model's temperature (recorded in final/
    too when it holds the best weights); (the calibration's fit, whether final/ holds the best weights)."""
    accelerator, cfg = session.accelerator, session.cfg
    same_as_best = state.best_step == state.global_step and (session.out / "best").is_dir()
    calibration = on_main(accelerator,
                          lambda: calibrate_best(session)) if cfg.training.calibrate == "temperature" else None
    calibrated = {"calibration": calibration.to_json()} if calibration is not None and same_as_best else {}
    info = {"step": state.global_step, **state.model_info, **session.settings_record, **calibrated}
    checkpoints.save_model_folder(accelerator, session.net, session.tokenizer, session.out / "final", info,
                                  session.model_bytes, card, same_weights_as=session.out / "best" if same_as_best else None)
    return calibration, same_as_best


def calibrate_best(session: Session) -> TemperatureFit | None:
    """--calibrate temperature: the temperature fitted on the best model's dev outputs (`best_dev_proba.npy`),
    recorded in best/'s bertkit_model.json for predict and evaluate (its record is metrics.json's `calibration`
    too). None when no evaluation saved a best model."""
    proba_file = session.out / "best_dev_proba.npy"
    if not proba_file.is_file() or not (session.out / "best").is_dir():
        return None
    fit = fit_temperature(np.load(proba_file), np.asarray(session.objective.y_dev))
    log.info("calibrated: temperature %.3f fitted on %d dev rows (dev ECE %.4f -> %.4f, NLL %.4f -> %.4f)",
             fit.temperature, fit.rows, fit.ece_before, fit.ece_after, fit.nll_before, fit.nll_after)
    metadata.add_model_info(session.out / "best", {"calibration": fit.to_json()})
    return fit


def _baseline_notes(state: TrainState) -> list[str]:
    """The constant-baseline warning when no evaluation's dev metric got above it (so neither did the best model's:
    it is no better than always predicting the majority class), for the result's notes and metrics.json. Each
    evaluation's record says whether it was above (`judge_evaluation`'s judgement, kept in the history)."""
    if not state.baseline_note or any(record.get("above_baseline") for record in state.history):
        return []
    return [state.baseline_note]


def _finished_result(out: Path, accelerator: Any) -> TrainingRun:
    """A run finished already, as its metrics.json says it ended."""
    done = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return TrainingRun(out, RunSummary.from_json(done), tuple(map(EpochRow, done.get("epoch_table", []))), None,
                       True, accelerator.is_main_process, tuple(done.get("notes") or []))


# ---------------------------------------------------------------- small pieces

def _accelerator(compute: Compute) -> Any:
    """Accelerate for this run: its mixed precision from the resolved --precision (auto: bf16 only where native)."""
    from accelerate import Accelerator

    precision = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[compute.precision]
    _release_single_process_state(precision)
    return Accelerator(mixed_precision=precision, step_scheduler_with_optimizer=False, cpu=force_cpu())


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


def training_device() -> str | None:
    """The --device a training run's `Compute` is resolved for: the CPU where Accelerate runs there (`force_cpu`),
    else None (the best device here; a launcher then gives each process its own)."""
    return "cpu" if force_cpu() else None


def force_cpu() -> bool:
    """cpu=True for Accelerate when there is no GPU: under torchrun it then starts MULTI_CPU (gloo); without it,
    every process would run alone. BERTKIT_DEVICE=cpu forces the CPU on a GPU machine."""
    return os.environ.get("BERTKIT_DEVICE", "") == "cpu" or loading.choose_device().type == "cpu"


def _progress(session: Session, state: TrainState, enabled: bool) -> Any:
    """The run's bar in steps (the one progress bar, `infer.progress_bar`), from where it resumed; closed however the
    run ends. None inside on other processes than the main one, or with `enabled` off (--quiet)."""
    total = session.steps_per_epoch * session.cfg.training.epochs
    bar = infer.progress_bar(total, "finetune", enabled and session.accelerator.is_main_process, "step",
                             initial=state.global_step)
    return infer.closing(bar)


def _checkpoint_bytes(model: Any) -> int:
    """Disk one checkpoint needs: fp32 weights + AdamW's two moments, plus 5% and 16 MB of margin."""
    return disk.with_margin(3 * sum(p.numel() * 4 for p in model.parameters()))


def _freeze_encoder(model: Any) -> None:
    """Train only the classification head: everything under the base model (`model.bert`, ...) is frozen."""
    prefix = model.base_model_prefix
    for name, param in model.named_parameters():
        param.requires_grad = not name.startswith(prefix + ".")


def adamw_optimizer(model: Any, lr: float, weight_decay: float) -> torch.optim.Optimizer:
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
