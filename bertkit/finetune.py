"""Full fine-tuning with a plain Accelerate loop: setup -> train epochs -> evaluate -> save.

The McCormick recipe (BertForSequenceClassification, AdamW without decay on bias/LayerNorm, linear warmup
schedule, gradient clipping, MCC) as a loop that runs on a CPU, one GPU, or many processes
(`torchrun`/`accelerate launch`), and survives being killed:

* Global batches are built once per (seed, epoch) with length grouping (little padding), then split into
  `processes x grad_accum` micro-batches. The optimizer therefore sees the same batches whether they are
  computed in one process, across processes, or accumulated - and a resumed run can skip exactly the global
  batches it already consumed.
* Checkpoints (`accelerator.save_state`: model, optimizer, scheduler, RNG) are written to a temp folder and
  renamed into `checkpoints/step-N` together with `trainer_state.json`, so a kill at any moment leaves
  either the previous complete checkpoint or the new complete one.
* The best model by `--metric-for-best` and the final model are saved with `save_pretrained`
  (safetensors, id2label/label2id, tokenizer) so `from_pretrained` and `transformers.pipeline` load them.

Library code: returns values and logs; `cli.py` prints.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import data, metrics, modeling, runs
from bertkit.config import FinetuneConfig, config_dict
from bertkit.errors import UserError
from bertkit.fastforward import SequenceClassifier

log = logging.getLogger(__name__)

FAIL_HOOK_ENV = "BERTKIT_FAIL_AFTER_STEPS"
"""Test hook: raise after this many optimizer steps (simulates a crash; the run must resume cleanly)."""
FAIL_MODE_ENV = "BERTKIT_FAIL_MODE"
"""`kill`: the hook sends SIGKILL to the process instead of raising (no cleanup at all, like kill -9)."""
STATE_FILE = "trainer_state.json"
KEEP_CHECKPOINTS = 2
LOWER_IS_BETTER = {"loss"}
# Options that do not change what is computed; a re-run may change them and still resume.
NOT_IN_RESUME_KEY = {"quiet", "overwrite", "out", "save_every"}


class SimulatedFailure(RuntimeError):
    """Raised by the BERTKIT_FAIL_AFTER_STEPS test hook."""


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


def model_inputs(encoded: data.Encoded, indices: np.ndarray, pad_id: int, use_types: bool) -> dict[str, Any]:
    batch = data.pad_batch(encoded, indices, pad_id)
    if not use_types:
        batch.pop("token_type_ids", None)
    return batch


def accepts_token_types(model: Any) -> bool:
    """BERT takes token_type_ids (segment A/B for pairs); DistilBERT and friends do not."""
    return "token_type_ids" in inspect.signature(model.forward).parameters


# ---------------------------------------------------------------- inference (shared by evaluate / predict)


@torch.inference_mode()
def forward_logits(
    classifier: SequenceClassifier, encoded: data.Encoded, batches: list[np.ndarray], pad_id: int,
    device: torch.device, autocast: Any = None, progress: bool = False,
) -> list[np.ndarray]:
    """Logits (float32 numpy) for each batch of row indices, in batch order."""
    from tqdm.auto import tqdm

    use_types = accepts_token_types(classifier.model)
    outputs = []
    for idx in tqdm(batches, desc="predict", unit="batch", disable=not progress, leave=False):
        batch = {k: v.to(device) for k, v in model_inputs(encoded, idx, pad_id, use_types).items()}
        with autocast() if autocast is not None else _null():
            logits = classifier(**batch)
        outputs.append(logits.float().cpu().numpy())
    return outputs


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def predict_proba(
    model: Any, tokenizer: Any, dataset: data.TextDataset, *, max_length: int = 128, batch_size: int = 64,
    precision: str = "fp32", progress: bool = False,
) -> np.ndarray:
    """Class probabilities for every row of `dataset`, batched longest-first, returned in the original order."""
    device = next(model.parameters()).device
    dtype = modeling.choose_dtype(precision, device)
    model.eval()
    encoded = data.encode_dataset(tokenizer, dataset, max_length)
    batches = data.sorted_batches(encoded.lengths, batch_size)
    logits = forward_logits(SequenceClassifier(model), encoded, batches, tokenizer.pad_token_id or 0, device,
                            lambda: modeling.autocast(device, dtype), progress)
    return softmax(data.restore_order(batches, logits))


def load_for_inference(model_dir: str) -> tuple[Any, Any, data.LabelMap]:
    """A fine-tuned folder: classifier (eval mode, on the best device), tokenizer, and its label mapping."""
    model = modeling.load_classifier(model_dir)
    tokenizer = modeling.load_tokenizer(model_dir)
    id2label = getattr(model.config, "id2label", None) or {i: str(i) for i in range(model.config.num_labels)}
    model.to(modeling.choose_device()).eval()
    return model, tokenizer, data.LabelMap.from_id2label(id2label)


# ---------------------------------------------------------------- run directory, checkpoints, resume


def resume_key(cfg: FinetuneConfig, fingerprints: dict[str, str]) -> dict[str, Any]:
    """What must match for a re-run to continue an existing --out: the config (less cosmetics) and the data."""
    values = {k: v for k, v in config_dict(cfg).items() if k not in NOT_IN_RESUME_KEY}
    return {"config": values, "data": fingerprints}


def resume_differences(run_path: Path, key: dict[str, Any]) -> list[str]:
    """What differs between the run in `run_path` and a run with resume key `key` (empty: the same run)."""
    record = runs.read_run_config(run_path)
    if record is None:  # claimed, but stopped before its config was written: nothing to differ from
        return []
    return _changed_keys(record.get("resume_key") or {}, json.loads(runs.to_json(key)))


def run_status(run: runs.RunDir) -> str:
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


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint (temp folders of an interrupted save are ignored)."""
    folder = out / "checkpoints"
    if not folder.is_dir():
        return None
    done = [p for p in folder.glob("step-*") if (p / STATE_FILE).exists()]
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def save_checkpoint(accelerator: Any, out: Path, state: dict[str, Any]) -> Path:
    """save_state into a temp folder, add the trainer state, rename into place; keep the newest two."""
    folder = out / "checkpoints"
    final = folder / f"step-{state['global_step']}"
    tmp = folder / f".tmp-step-{state['global_step']}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp), safe_serialization=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        runs.write_json_atomic(tmp / STATE_FILE, state)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        old = sorted((p for p in folder.glob("step-*") if p != final), key=lambda p: int(p.name.split("-")[1]))
        for stale in old[: max(0, len(old) - (KEEP_CHECKPOINTS - 1))]:
            shutil.rmtree(stale, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def save_model_folder(accelerator: Any, net: Any, tokenizer: Any, path: Path, extra: dict[str, Any]) -> None:
    """save_pretrained (safetensors) of the wrapped `transformers` model + tokenizer into a temp folder, then swap
    it in for `path`."""
    from transformers.utils import logging as hf_logging

    accelerator.wait_for_everyone()
    state_dict = {k.removeprefix("model."): v for k, v in accelerator.get_state_dict(net).items()}
    if accelerator.is_main_process:
        tmp = path.with_name(f".tmp-{path.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        hf_logging.disable_progress_bar()  # loading turns transformers' bars back on; a one-file save needs none
        accelerator.unwrap_model(net).model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        runs.write_json_atomic(tmp / "bertkit_model.json", extra)
        old = path.with_name(f".old-{path.name}")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


# ---------------------------------------------------------------- evaluation


def evaluate_dev(
    accelerator: Any, net: Any, encoded: data.Encoded, y: np.ndarray, label_names: list[str], pad_id: int,
    batch_size: int,
) -> tuple[dict[str, Any], np.ndarray]:
    """Exact dev metrics in any number of processes: each evaluates a share of the length-sorted batches,
    `gather_object` collects (rows, logits) from all, every row counted once.

    The forward runs on the *unwrapped* model: a DDP-wrapped forward is itself a collective (it broadcasts
    buffers from rank 0 before every call), so ranks with different numbers of dev batches - e.g. 20 dev rows in
    one batch over 2 processes: rank 0 has one, rank 1 none - would deadlock against the gather below. The
    weights are identical on all ranks, so no sync is needed. The one collective here (`gather_object`) is called
    exactly once by every rank, whatever its share; no padding rows are added, so nothing is counted twice."""
    from accelerate.utils import gather_object

    net.eval()
    batches = data.sorted_batches(encoded.lengths, batch_size)
    mine = batches[accelerator.process_index :: accelerator.num_processes]
    local = accelerator.unwrap_model(net)
    logits = forward_logits(local, encoded, mine, pad_id, accelerator.device, accelerator.autocast)
    gathered = list(zip(mine, logits, strict=True))
    if accelerator.num_processes > 1:
        gathered = gather_object(gathered)
    net.train()
    all_logits = data.restore_order([b for b, _ in gathered], [lg for _, lg in gathered])
    proba = softmax(all_logits)
    result = metrics.classification_metrics(y, proba.argmax(axis=1), proba, label_names)
    result["loss"] = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-12, None))))
    return result, proba


def is_better(value: float, best: float | None, metric: str) -> bool:
    if best is None:
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best


# ---------------------------------------------------------------- the run


def finetune(cfg: FinetuneConfig, *, progress: bool = True) -> FinetuneResult:
    """Fine-tune `cfg.model` on the data in `cfg`, writing everything into `cfg.out` (see module docstring)."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    # -- setup: processes, data, run directory, model, optimizer, schedule
    precision = _mixed_precision(cfg.precision)
    _release_single_process_state(precision)
    accelerator = Accelerator(mixed_precision=precision, step_scheduler_with_optimizer=False,
                              gradient_accumulation_steps=cfg.grad_accum, cpu=_force_cpu())
    out = Path(cfg.out or "").expanduser()
    splits = data.load_splits(cfg, need_labels=True, need_dev=True)
    assert splits.label_map is not None and splits.dev is not None
    label_map, label_names = splits.label_map, [str(x) for x in splits.label_map.labels]
    fingerprints = {"train": splits.train.fingerprint, "dev": splits.dev.fingerprint}
    key = resume_key(cfg, fingerprints)
    if _on_main(accelerator, lambda: _finished_already(cfg, key)):  # read-only: a refused --out also ends here
        return _finished_result(out, accelerator)

    tokenizer = modeling.load_tokenizer(cfg.model, cfg.trust_remote_code)
    modeling.check_max_length(cfg.max_length, tokenizer, modeling.load_config(cfg.model, cfg.trust_remote_code), cfg.model)
    train_enc = data.encode_dataset(tokenizer, splits.train, cfg.max_length)
    dev_enc = data.encode_dataset(tokenizer, splits.dev, cfg.max_length)
    y_train = label_map.encode(splits.train.labels or [], f"The training data {splits.train.source}")
    y_dev = label_map.encode(splits.dev.labels or [], f"The dev data {splits.dev.source}")
    pad_id = tokenizer.pad_token_id or 0

    set_seed(cfg.seed)  # before the head is initialised
    model = modeling.load_classifier(cfg.model, label_map.id2label, cfg.trust_remote_code)
    if cfg.freeze_encoder:
        _freeze_encoder(model)
    use_types = accepts_token_types(model) and train_enc.token_type_ids is not None
    optimizer = _adamw(model, cfg.lr, cfg.weight_decay, accelerator.device)
    net = SequenceClassifier(model, fast=cfg.fast_forward)  # trains `model`'s parameters; logits only
    if cfg.fast_forward and not net.fast:
        log.info("--fast-forward does not apply (%s): using the model's own forward", net.unsupported)
    min_rows = accelerator.num_processes * cfg.grad_accum
    steps_per_epoch = len(global_batches(train_enc.lengths, cfg.batch_size * min_rows, cfg.seed, 0, min_rows))
    if steps_per_epoch == 0:
        raise UserError(f"Training data has {len(y_train)} rows: too few for one batch of "
                        f"{min_rows} micro-batches. Add data or lower --grad-accum.")
    # -- run directory: claimed only now, so a start refused above leaves --out as it was
    run, status = _on_main(accelerator, lambda: _claim_out(cfg, key, fingerprints, precision, accelerator))
    if status == "finished":  # an --overwrite run killed after its last save: its swap was finished just now
        return _finished_result(out, accelerator)
    out = run.path  # --out itself, or its staging folder when this run replaces another
    total_steps = steps_per_epoch * cfg.epochs
    warmup = math.ceil(cfg.warmup_ratio * total_steps)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total_steps)
    net, optimizer, scheduler = accelerator.prepare(net, optimizer, scheduler)
    class_weight = _class_weights(y_train, len(label_map), accelerator.device) if cfg.class_weight == "balanced" else None
    eval_every = None if cfg.eval_every == "epoch" else int(cfg.eval_every)
    eval_bs = max(cfg.batch_size * 2, 32)

    # -- resume: restore model/optimizer/scheduler/RNG and the position inside the epoch
    state: dict[str, Any] = {"epoch": 0, "step_in_epoch": 0, "global_step": 0, "best_metric": None,
                             "best_step": None, "evals_since_best": 0, "history": [], "epoch_table": [],
                             "train_seconds": 0.0, "train_rows": 0, "stopped_early": False}
    restored = None
    checkpoint = latest_checkpoint(out) if status == "resume" else None
    if checkpoint is not None:
        try:
            accelerator.load_state(str(checkpoint))
        except Exception as exc:  # truncated/damaged files: safetensors, torch and pickle errors of many types
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise UserError(
                f"Checkpoint {checkpoint} is damaged and cannot be loaded ({type(exc).__name__}: {reason}). Delete that "
                f"folder to resume from the previous checkpoint, or pass --overwrite to start the run over."
            ) from None
        state = json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))
        restored = {"checkpoint": str(checkpoint), "epoch": state["epoch"] + 1, "step": state["global_step"],
                    "batch_in_epoch": state["step_in_epoch"], "steps_per_epoch": steps_per_epoch,
                    "lr": scheduler.get_last_lr()[0], "best_metric": state["best_metric"]}
        log.info("resumed from %s: epoch %d, step %d (batch %d/%d of the epoch), lr %.3e, best %s so far %s",
                 checkpoint, restored["epoch"], restored["step"], restored["batch_in_epoch"], steps_per_epoch,
                 restored["lr"], cfg.metric_for_best, state["best_metric"])
    if accelerator.is_main_process:  # evaluations after the checkpoint will be redone: keep the log consistent
        runs.write_text_atomic(out / "metrics.jsonl", "".join(runs.to_json(r, indent=None) + "\n" for r in state["history"]))
    fail_after = int(os.environ.get(FAIL_HOOK_ENV, "0") or 0)

    # -- train epochs
    net.train()
    bar = tqdm(total=total_steps, initial=state["global_step"], desc="finetune", unit="step",
               disable=not (progress and accelerator.is_main_process), dynamic_ncols=True)
    while state["epoch"] < cfg.epochs and not state["stopped_early"]:
        epoch = state["epoch"]
        batches = global_batches(train_enc.lengths, cfg.batch_size * min_rows, cfg.seed, epoch, min_rows)
        loss_sum, loss_rows = state.pop("running_loss", (0.0, 0))  # restored mid-epoch, so the mean stays exact
        started = time.perf_counter()
        for batch in batches[state["step_in_epoch"]:]:
            accelerator.step = 0  # each global batch is exactly one accumulation group
            for idx in micro_batches(batch, accelerator.num_processes, cfg.grad_accum, accelerator.process_index):
                inputs = {k: v.to(accelerator.device) for k, v in model_inputs(train_enc, idx, pad_id, use_types).items()}
                labels = torch.as_tensor(y_train[idx], device=accelerator.device)
                with accelerator.accumulate(net):
                    logits = net(**inputs)
                    loss = torch.nn.functional.cross_entropy(logits.float(), labels, weight=class_weight)
                    # scale so the summed gradient is the mean over the whole global batch
                    accelerator.backward(loss * (len(idx) * min_rows / len(batch)))
                    if accelerator.sync_gradients:
                        if cfg.max_grad_norm > 0:
                            accelerator.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad(set_to_none=True)
                loss_sum += loss.item() * len(idx)
                loss_rows += len(idx)
            state["global_step"] += 1
            state["step_in_epoch"] += 1
            state["train_rows"] += len(batch)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum / max(loss_rows, 1):.4f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
            end_of_epoch = state["step_in_epoch"] == len(batches)
            if end_of_epoch or (eval_every and state["global_step"] % eval_every == 0):
                # -- evaluate: dev metrics, best model, early stopping
                state["train_seconds"] += time.perf_counter() - started
                train_loss = _mean_across(accelerator, loss_sum, loss_rows)
                loss_sum, loss_rows = 0.0, 0
                _evaluate_and_keep_best(accelerator, net, tokenizer, cfg, state, dev_enc, y_dev, label_names,
                                        pad_id, eval_bs, train_loss, out, label_map)
                started = time.perf_counter()
                if end_of_epoch:
                    state["epoch_table"].append(_epoch_row(state, epoch, train_loss))
                    state["epoch"], state["step_in_epoch"] = epoch + 1, 0
            if end_of_epoch or (cfg.save_every and state["global_step"] % cfg.save_every == 0) or state["stopped_early"]:
                state["train_seconds"] += time.perf_counter() - started
                save_checkpoint(accelerator, out, {**state, "running_loss": (loss_sum, loss_rows)})
                started = time.perf_counter()
            if fail_after and state["global_step"] >= fail_after:
                if os.environ.get(FAIL_MODE_ENV) == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise SimulatedFailure(f"{FAIL_HOOK_ENV}={fail_after}: stopping after step {state['global_step']}")
            if state["stopped_early"]:
                break
    bar.close()

    # -- save: final model, metrics, table, plots, dev errors
    save_model_folder(accelerator, net, tokenizer, out / "final", {"step": state["global_step"]})
    summary = _finish(accelerator, cfg, state, out, splits.dev, y_dev, label_names, steps_per_epoch, restored,
                      forward="fast" if accelerator.unwrap_model(net).fast else "transformers")
    if accelerator.is_main_process:
        run.commit()  # an --overwrite run: the new output replaces the previous one only now
    accelerator.wait_for_everyone()
    return FinetuneResult(run.out, summary, state["epoch_table"], restored, False, accelerator.is_main_process,
                          splits.notes)


def _finished_already(cfg: FinetuneConfig, key: dict[str, Any]) -> bool:
    """A read-only look at --out before any work (its refusals end the run here): does it hold this run, finished?"""
    plan = runs.inspect_run_dir(cfg.out or "", "finetune", overwrite=cfg.overwrite,
                                compare=lambda path: resume_differences(path, key))
    return not plan.replacing and not plan.pending_swap and run_status(plan) == "finished"


def _finished_result(out: Path, accelerator: Any) -> FinetuneResult:
    done = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return FinetuneResult(out, done, done.get("epoch_table", []), None, True, accelerator.is_main_process)


def _claim_out(cfg: FinetuneConfig, key: dict[str, Any], fingerprints: dict[str, str], precision: str,
               accelerator: Any) -> tuple[runs.RunDir, str]:
    """Claim --out (main process): the run directory to write into and its status; a new run's config.json."""
    run = runs.claim_run_dir(cfg.out or "", "finetune", overwrite=cfg.overwrite,
                             compare=lambda path: resume_differences(path, key))
    status = run_status(run)
    if status == "finished":
        run.commit()
    elif status == "new":
        runs.write_run_config(run.path, "finetune", config_dict(cfg), resume_key=key, data_fingerprints=fingerprints,
                              model_revision=modeling.model_revision(cfg.model), processes=accelerator.num_processes,
                              mixed_precision=precision, device=str(accelerator.device))
    return dataclasses.replace(run, compare=None), status  # sent to every process: no closures


def _evaluate_and_keep_best(
    accelerator: Any, net: Any, tokenizer: Any, cfg: FinetuneConfig, state: dict[str, Any], dev_enc: data.Encoded,
    y_dev: np.ndarray, label_names: list[str], pad_id: int, eval_bs: int, train_loss: float, out: Path,
    label_map: data.LabelMap,
) -> None:
    started = time.perf_counter()
    result, proba = evaluate_dev(accelerator, net, dev_enc, y_dev, label_names, pad_id, eval_bs)
    value = result.get(cfg.metric_for_best)
    if value is None:
        raise UserError(f"--metric-for-best {cfg.metric_for_best} is not available for this data "
                        f"(roc_auc needs two classes). Use accuracy, f1 or mcc.")
    record = {"epoch": state["epoch"] + 1, "step": state["global_step"], "train_loss": train_loss,
              "samples_seen": state["train_rows"], "eval_seconds": round(time.perf_counter() - started, 3),
              **{f"dev_{k}": v for k, v in metrics.headline(result).items()}, "dev_loss": result["loss"]}
    improved = is_better(value, state["best_metric"], cfg.metric_for_best)
    record["best"] = improved
    state["history"].append(record)
    if improved:
        state["best_metric"], state["best_step"], state["evals_since_best"] = value, state["global_step"], 0
        state["best_dev"] = {k: v for k, v in result.items() if k != "per_class"}
        save_model_folder(accelerator, net, tokenizer, out / "best",
                          {"step": state["global_step"], "metric": cfg.metric_for_best, "value": value,
                           "labels": label_map.to_json()["labels"]})
        if accelerator.is_main_process:
            with runs.atomic_path(out / "best_dev_proba.npy") as tmp, open(tmp, "wb") as handle:
                np.save(handle, proba)
    else:
        state["evals_since_best"] += 1
        patience = cfg.early_stopping_patience
        state["stopped_early"] = bool(patience and state["evals_since_best"] >= patience)
    if accelerator.is_main_process:
        runs.append_jsonl(out / "metrics.jsonl", record)


def _epoch_row(state: dict[str, Any], epoch: int, train_loss: float) -> dict[str, Any]:
    last = state["history"][-1]
    return {"epoch": epoch + 1, "train_loss": train_loss, "dev_loss": last["dev_loss"],
            "dev_accuracy": last.get("dev_accuracy"), "dev_f1": last.get("dev_f1"), "dev_mcc": last.get("dev_mcc"),
            "train_seconds": round(state["train_seconds"], 1),
            "samples_per_second": round(state["train_rows"] / max(state["train_seconds"], 1e-9), 1)}


def _finish(
    accelerator: Any, cfg: FinetuneConfig, state: dict[str, Any], out: Path, dev: data.TextDataset,
    y_dev: np.ndarray, label_names: list[str], steps_per_epoch: int, restored: dict[str, Any] | None, forward: str,
) -> dict[str, Any]:
    """metrics.json, the epoch table, curves, confusion matrix and dev_errors.csv (main process)."""
    summary = {
        "finished": True, "best_metric_name": cfg.metric_for_best, "best_metric": state["best_metric"],
        "best_step": state["best_step"], "best_dev": state.get("best_dev"),
        "final_dev": state["history"][-1] if state["history"] else None, "global_step": state["global_step"],
        "steps_per_epoch": steps_per_epoch, "epochs_run": state["epoch"], "stopped_early": state["stopped_early"],
        "train_rows_seen": state["train_rows"], "train_seconds": round(state["train_seconds"], 2),
        "train_samples_per_second": round(state["train_rows"] / max(state["train_seconds"], 1e-9), 2),
        "processes": accelerator.num_processes, "mixed_precision": accelerator.mixed_precision, "forward": forward,
        "history": state["history"], "epoch_table": state["epoch_table"], "resumed_from": restored,
        "outputs": {name: str(Path(cfg.out or out) / name) for name in
                    ("best", "final", "metrics.jsonl", "training_table.csv", "curves.png", "confusion_matrix.png",
                     "dev_errors.csv")},
    }
    if accelerator.is_main_process:
        from bertkit import plots

        proba = np.load(out / "best_dev_proba.npy")
        _write_table(out / "training_table.csv", state["epoch_table"])
        write_predictions_csv(out / "dev_errors.csv", dev, proba, label_names, y_true=y_dev, only_errors=True)
        plots.training_curves(state["history"], cfg.metric_for_best, out / "curves.png", f"finetune {cfg.model}")
        matrix = (state.get("best_dev") or {}).get("confusion_matrix")
        if matrix is not None:
            plots.confusion_matrix(matrix, label_names, out / "confusion_matrix.png",
                                   f"dev confusion matrix (best, step {state['best_step']})")
        runs.write_json_atomic(out / "metrics.json", summary)
    accelerator.wait_for_everyone()
    return summary


def _write_table(path: Path, rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    with runs.atomic_path(path) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False)


def write_predictions_csv(
    path: Path, dataset: data.TextDataset, proba: np.ndarray, label_names: list[str], *,
    y_true: np.ndarray | None = None, only_errors: bool = False,
) -> int:
    """Rows with predicted label and per-class probabilities (original order; errors most confident first)."""
    import pandas as pd

    predicted = proba.argmax(axis=1)
    frame = pd.DataFrame({"row": np.arange(len(dataset))})
    if dataset.line_numbers is not None:
        frame["line"] = dataset.line_numbers
    frame["text"] = dataset.texts
    if dataset.pairs is not None:
        frame["text_pair"] = dataset.pairs
    if y_true is not None:
        frame["label"] = [label_names[i] for i in y_true]
    frame["predicted"] = [label_names[i] for i in predicted]
    frame["confidence"] = proba.max(axis=1)
    for j, name in enumerate(label_names):
        frame[f"p_{name}"] = proba[:, j]
    if only_errors and y_true is not None:
        frame = frame[predicted != y_true].sort_values("confidence", ascending=False)
    with runs.atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return len(frame)


# ---------------------------------------------------------------- small pieces


def _mixed_precision(requested: str) -> str:
    """Accelerate's mixed_precision for --precision (auto: bf16 only where the hardware runs it fast)."""
    device = torch.device("cpu") if _force_cpu() else modeling.choose_device()
    dtype = modeling.choose_dtype(requested, device)
    return {torch.float32: "no", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


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


def _on_main(accelerator: Any, fn: Any) -> Any:
    """fn() on the main process; its (picklable) result, or its UserError, on every process - never a hang."""
    result: tuple[bool, Any] = (True, None)
    if accelerator.is_main_process:
        try:
            result = (True, fn())
        except UserError as exc:
            result = (False, str(exc))
    ok, value = _broadcast(accelerator, result)
    if not ok:
        raise UserError(value)
    return value


def _broadcast(accelerator: Any, value: Any) -> Any:
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    holder = [value]
    broadcast_object_list(holder, from_process=0)
    return holder[0]


def _mean_across(accelerator: Any, loss_sum: float, rows: int) -> float:
    """Mean training loss since the last evaluation, over all processes."""
    totals = torch.tensor([loss_sum, float(rows)], dtype=torch.float64, device=accelerator.device)
    totals = accelerator.reduce(totals, reduction="sum") if accelerator.num_processes > 1 else totals
    return float(totals[0] / max(totals[1].item(), 1.0))


def _freeze_encoder(model: Any) -> None:
    """Train only the classification head: everything under the base model (`model.bert`, ...) is frozen."""
    prefix = model.base_model_prefix
    for name, param in model.named_parameters():
        param.requires_grad = not name.startswith(prefix + ".")


def _adamw(model: Any, lr: float, weight_decay: float, device: torch.device) -> torch.optim.Optimizer:
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


def _class_weights(y: np.ndarray, n_classes: int, device: torch.device) -> torch.Tensor:
    """sklearn's 'balanced': n / (k * count_c), so rare classes weigh more in the loss."""
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    weights = len(y) / (n_classes * np.maximum(counts, 1))
    return torch.tensor(weights, dtype=torch.float32, device=device)
