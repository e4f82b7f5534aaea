"""Fine-tuning a tagger (token classification: one tag per word, named entities or POS) with the loop sentence
models train with (`bertkit.training.loop`: AdamW, linear schedule, clipping, length-grouped batches, checkpoints and
exact resume, early stopping, trackers) - only the data, the model and the objective differ:

* the data is a tagged corpus (`bertkit.data.tagged`: --data and --dev checked, scheme detected or --tag-scheme,
  dev tags unseen in training refused), read into windows of word pieces with a label per piece
  (`bertkit.encoding.word_labels`, the reading of words: `Reading.of_words`, windows of --max-length);
* the model is `AutoModelForTokenClassification` (`models.loading.load_classifier(tokens=True)`, id2label = the
  tags) run by its own forward (`bertkit.models.tagger.TokenClassifier`: the [CLS]-only fast path and the CUDA-graph
  steps are for sentence heads, so its steps run eagerly, which the run's summary records);
* the objective is `bertkit.scoring.tags.TagObjective`: the loss over labelled pieces, dev scores per word by strict
  seqeval with the recorded scheme (entity F1 picks best/) or word accuracy for plain tags.

best/ and final/ record the task `tags`, the tag scheme and the reading of words (bertkit_model.json), so predict,
evaluate and a later finetune read the model as it was trained."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import __version__
from bertkit.data.labels import LabelMap
from bertkit.data.tagged_splits import TaggedTraining, corpus_fingerprint
from bertkit.data.tagscheme import TagScheme
from bertkit.encoding.batches import global_batches
from bertkit.encoding.reading import Reading
from bertkit.encoding.word_labels import LabelledWindows, continuation_ids, label_windows
from bertkit.io import disk
from bertkit.models import loading
from bertkit.models.card import CardFacts
from bertkit.models.compute import Compute
from bertkit.models.metadata import TAGS_TASK
from bertkit.models.tagger import NOT_FAST, TokenClassifier
from bertkit.options import command_line
from bertkit.scoring.tags import TagObjective, tag_class_weights, tag_metric_for_best
from bertkit.training import tracking
from bertkit.training.cards import HYPERPARAMETERS, RunCard
from bertkit.training.finetune import (
    Task,
    _accelerator,
    _checkpoint_bytes,
    _finished_result,
    _freeze_encoder,
    _progress,
    adamw_optimizer,
    finish,
    too_few_rows,
)
from bertkit.training.learning_rate import AUTO, LrChoice, resolve_lr
from bertkit.training.loop import Session, on_main, restore, train_epoch
from bertkit.training.options import NOT_REPRODUCED, FinetuneOptions
from bertkit.training.outcome import TrainingRun
from bertkit.training.resume import claim_out, finished_run, resume_key

log = logging.getLogger(__name__)

TAG_HYPERPARAMETERS = ("tag_scheme", "label_all_pieces")
"""The tagging options a card's hyper-parameter table shows besides the sentence runs' (`cards.HYPERPARAMETERS`)."""


class TagTask(Task):
    """A tagger's model: the pretrained encoder with a new token-classification head, one output per tag."""

    def build_model(self, cfg: FinetuneOptions, label_map: LabelMap) -> tuple[Any, Any]:
        model = loading.load_classifier(cfg.model, label_map.id2label, cfg.trust_remote_code, tokens=True)
        return model, loading.load_tokenizer(cfg.model, cfg.trust_remote_code)


@dataclass
class TagSession(Session):
    """A tagging run's session: the loop's, plus the tag scheme its model folders record."""

    scheme: TagScheme = dataclasses.field(default_factory=TagScheme)

    @property
    def settings_record(self) -> dict[str, Any]:
        """The sentence runs' record (reading, compute) and the tag scheme: bertkit_model.json of best/ and final/."""
        return {**super().settings_record, "tag_scheme": self.scheme.to_json()}


def finetune_tags(cfg: FinetuneOptions, data: TaggedTraining, *, compute: Compute, reading: Reading,
                  progress: bool = True, on_evaluate: Any = None) -> TrainingRun:
    """Fine-tune `cfg.model` as a tagger on `data` (--data and --dev as `data.tagged_splits.load_tagged_training`
    read and checked them) into `cfg.out` (see the module docstring); `reading`: the reading of words
    (`Reading.of_words`) the command resolved against the --model's record."""
    tracking.check_trackers(cfg)
    cfg = dataclasses.replace(cfg, metric_for_best=tag_metric_for_best(cfg.metric_for_best, data.scheme))
    accelerator = _accelerator(compute)
    cfg, lr_choice = resolve_lr(cfg, lambda: loading.load_config(cfg.model, cfg.trust_remote_code))
    scheme = data.scheme
    notes = ([f"{scheme.source} tags read as {scheme.name} (strict seqeval)"] if scheme.source != scheme.name else
             [] if scheme.has_entities else ["plain tags (no entity scheme): scored by word accuracy"])
    if lr_choice.source == AUTO:
        notes.append(lr_choice.line)
        if accelerator.is_main_process:
            log.info("%s", lr_choice.line)
    key = resume_key(cfg, data.fingerprints())
    task = TagTask()
    done = on_main(accelerator, lambda: finished_run(cfg, key, task.command))
    if done is not None:
        return _finished_result(done, accelerator)
    session = setup_tags(cfg, accelerator, data, key, task, reading, lr_choice)
    if session is None:  # an --overwrite run killed after its last save: its swap was finished just now
        return _finished_result(Path(cfg.out or "").expanduser(), accelerator)
    session.on_evaluate = on_evaluate
    with disk.reported(session.out, session.checkpoint_bytes):
        state, restored = restore(session)
        if accelerator.device.type == "cuda":
            log.info("steps run eagerly, not as CUDA graphs: %s", NOT_FAST)
        session.tracker = tracking.start_trackers(session, state, key["data"])
        try:
            bar = _progress(session, state, progress)
            while state.epoch < cfg.epochs and not state.stopped_early:
                train_epoch(session, state, bar)
            bar.close()
            if session.tracker is not None:
                session.tracker.finish(ok=True)
            return finish(session, state, restored, notes)
        finally:
            if session.tracker is not None:
                session.tracker.finish(ok=False)


def setup_tags(cfg: FinetuneOptions, accelerator: Any, data: TaggedTraining, key: dict[str, Any], task: TagTask,
               reading: Reading, lr_choice: LrChoice) -> TagSession | None:
    """The tagger, its optimizer, the windows of both splits, the schedule and the claimed run directory (claimed
    after everything that can be refused, so a refused start leaves --out as it was). None: the run was finished."""
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    label_map = LabelMap(data.tags, TAGS_TASK)
    set_seed(cfg.seed)  # before the head is initialised
    model, tokenizer = task.build_model(cfg, label_map)
    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model)
    if cfg.freeze_encoder:
        _freeze_encoder(model)
    optimizer = adamw_optimizer(model, float(cfg.lr), cfg.weight_decay)
    train, dev = (tag_windows(cfg, tokenizer, sentences, data.tags, reading)
                  for sentences in (data.train_sentences, data.dev_sentences))
    net = TokenClassifier(model, width=int(dev.encoded.lengths.max()) if dev.n_windows else None)
    if cfg.fast_forward:
        log.info("--fast-forward does not apply (%s): using the model's own forward", NOT_FAST)
    if cfg.compile:  # the model's own forward and backward, dynamic shapes
        net.compile(dynamic=True)
    min_rows = accelerator.num_processes * cfg.grad_accum
    steps_per_epoch = len(global_batches(train.encoded.lengths, cfg.batch_size * min_rows, cfg.seed, 0, min_rows))
    if steps_per_epoch == 0:
        raise too_few_rows(train.n_windows, min_rows)
    lr_record = lr_choice.to_json()
    run, status = on_main(accelerator, lambda: claim_out(cfg, key, accelerator, task, lr_record))
    if status == "finished":
        return None
    weights = tag_class_weights(train.tag_ids, len(data.tags)) if cfg.class_weight == "balanced" else None
    dev_words = [word for sentence in data.dev_sentences for word in sentence.words]
    objective = TagObjective(train.labels, dev, dev_words, data.tags, data.scheme, weights, cfg.seed)
    total_steps = steps_per_epoch * cfg.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * total_steps), total_steps)
    net, optimizer, scheduler = accelerator.prepare(net, optimizer, scheduler)
    return TagSession(cfg, accelerator, run, run.path, tokenizer, net, optimizer, scheduler,
                      objective.to(accelerator.device), train.encoded, dev.encoded, data.dev, label_map,
                      steps_per_epoch, [], _checkpoint_bytes(model), reading=reading,
                      card=RunCard(tag_card_facts(cfg, data, task.command)), learning_rate=lr_record, baseline=None,
                      scheme=data.scheme)


def tag_windows(cfg: Any, tokenizer: Any, sentences: list[Any], tags: tuple[str, ...],
                reading: Reading) -> LabelledWindows:
    """One split's sentences as labelled windows (their tags as the model's ids)."""
    index = {tag: i for i, tag in enumerate(tags)}
    return label_windows(tokenizer, [s.words for s in sentences], [[index[t] for t in s.tags] for s in sentences],
                         reading, label_all_pieces=cfg.label_all_pieces, continuation=continuation_ids(tags))


def tag_card_facts(cfg: Any, data: TaggedTraining, command: str) -> CardFacts:
    """What every card of a tagging run says besides its scores: data (sentences per split), hyper-parameters
    (the tag scheme and --label-all-pieces too), the reproduce line, versions."""
    from bertkit.io.trail import package_versions

    splits = (("train", data.train, data.train_sentences), ("dev", data.dev, data.dev_sentences))
    rows = [{"split": name, "source": str(corpus.source), "fingerprint": corpus_fingerprint(corpus),
             "rows": len(sentences)} for name, corpus, sentences in splits]
    hyper = {k: getattr(cfg, k) for k in (*HYPERPARAMETERS, *TAG_HYPERPARAMETERS) if hasattr(cfg, k)}
    hyper["tag_scheme"] = f"{data.scheme.source} (scored as {data.scheme.name})"
    versions = {k: v for k, v in package_versions().items() if k in ("torch", "transformers", "accelerate")}
    return CardFacts(command=command, model=cfg.model, task=TAGS_TASK, labels=list(data.tags), data=rows,
                     hyperparameters=hyper, command_line=command_line(command, cfg, skip=NOT_REPRODUCED),
                     versions={"bertkit": __version__, **versions})
