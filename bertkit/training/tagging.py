"""Fine-tuning a tagger (token classification: one tag per word, named entities or POS): `TagTask`, the task with
which the fine-tuning run (`finetune.finetune`: AdamW, linear schedule, clipping, length-grouped batches, checkpoints
and exact resume, early stopping, trackers) trains a tagger - only the data, the model and the objective differ:

* the data is a tagged corpus (`bertkit.data.tagged`: --data, --dev and a labelled --test checked, scheme detected
  or --tag-scheme, dev and test tags unseen in training refused), read into windows of word pieces with a label per
  piece (`bertkit.encoding.word_labels`, the reading of words: `Reading.of_words`, windows of --max-length sharing
  --stride pieces);
* the model is `AutoModelForTokenClassification` (`models.loading.load_classifier(tokens=True)`, id2label = the
  tags) run by `bertkit.models.tagger.TokenClassifier` (bertkit's own layers in training on a CPU, the model's own
  forward elsewhere; the CUDA-graph steps are for sentence heads, so its steps run eagerly, which the run's summary
  records);
* the objective is `bertkit.scoring.tags.TagObjective`: the loss over labelled pieces, dev scores per word by strict
  seqeval with the recorded scheme (entity F1 picks best/) or word accuracy for plain tags; a labelled --test is
  scored the same way (its own objective, `TagObjective.for_split`) at each new best and at the end, as sentence
  runs score theirs (`training.cards.test_scored`: metrics.json's best_test and final_test, the cards).

best/ and final/ record the task `tags`, the tag scheme and the reading of words (bertkit_model.json), so predict,
evaluate and a later finetune read the model as it was trained."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from bertkit import __version__
from bertkit.data.labels import TAGS_TASK, LabelMap
from bertkit.data.tagged_splits import TaggedTraining, corpus_fingerprint
from bertkit.encoding.reading import Reading
from bertkit.encoding.run_tokens import RunTokens, epoch_steps
from bertkit.encoding.word_labels import LabelledWindows, continuation_ids, label_windows
from bertkit.models import loading
from bertkit.models.card import CardFacts
from bertkit.models.tagger import TokenClassifier
from bertkit.scoring.tags import TagObjective, tag_class_weights, tag_metric_for_best
from bertkit.training.cards import HYPERPARAMETERS, RunCard, hyperparameters
from bertkit.training.finetune import Task
from bertkit.training.options import FinetuneOptions

log = logging.getLogger(__name__)

TAG_HYPERPARAMETERS = ("tag_scheme", "label_all_pieces", "stride", "unseen_tags")
"""The tagging options a card's hyper-parameter table shows besides the sentence runs' (`cards.HYPERPARAMETERS`)."""


class TagTask(Task):
    """A tagger's run: its tagged `data` (--data, --dev and --test as `data.tagged_splits.load_tagged_training` read
    and checked them, before torch was imported), a new token-classification head (one output per tag) on the
    pretrained encoder, the windows of each split and the per-word objective."""

    def __init__(self, data: TaggedTraining) -> None:
        self.data = data
        self.windows: tuple[LabelledWindows, LabelledWindows, LabelledWindows | None] | None = None
        """The training, dev and test (None: no --test) windows (`tokens`), which the objectives read."""
        self.reading: Reading | None = None
        """How the windows were read (`tokens`: the run's reading of words), which the cards state."""
        self.test_objective: TagObjective | None = None
        """The objective scoring the test windows (`objective`), which the cards' test scoring uses."""

    def training_data(self, cfg: FinetuneOptions, warn: bool) -> tuple[FinetuneOptions, TaggedTraining]:
        """The tagged data, and `cfg` with the --metric-for-best its tags score (entity F1, or word accuracy)."""
        metric = tag_metric_for_best(cfg.training.metric_for_best, self.data.scheme)
        return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, metric_for_best=metric)), self.data

    def label_map(self, cfg: FinetuneOptions, splits: Any) -> LabelMap:
        return self.data.label_map

    def build_model(self, cfg: FinetuneOptions, label_map: LabelMap) -> tuple[Any, Any]:
        model = loading.load_classifier(cfg.model, label_map.id2label, cfg.trust_remote_code, tokens=True)
        return model, loading.load_tokenizer(cfg.model, cfg.trust_remote_code)

    def tokens(self, cfg: FinetuneOptions, tokenizer: Any, splits: Any, reading: Reading,
               min_rows: int) -> RunTokens:
        """Each split's sentences as labelled windows of --max-length pieces (`reading`: the reading of words)."""
        data = self.data
        train, dev = (tag_windows(cfg, tokenizer, sentences, data.tags, reading)
                      for sentences in (data.train_sentences, data.dev_sentences))
        test = tag_windows(cfg, tokenizer, data.test_sentences, data.tags, reading) if data.test is not None else None
        self.windows, self.reading = (train, dev, test), reading
        steps = epoch_steps(train.encoded.lengths, cfg.training.batch_size, cfg.inputs.seed, min_rows, train.n_windows)
        return RunTokens(train.encoded, dev.encoded, test.encoded if test is not None else None, steps)

    def network(self, cfg: FinetuneOptions, model: Any, accelerator: Any, tokens: RunTokens) -> Any:
        """The tagger's forward (`models.tagger.TokenClassifier`: bertkit's own layers in training on a CPU where
        they apply and --fast-forward is on, else the model's own), its dev (and test) logits cut to the widest
        window they have."""
        scored = [tokens.dev.lengths] + ([tokens.test.lengths] if tokens.test is not None else [])
        widest = max((int(lengths.max()) for lengths in scored if len(lengths)), default=None)
        net = TokenClassifier(model, width=widest, fast=cfg.compute.fast_forward)
        if cfg.compute.fast_forward and net.unsupported is not None:
            log.info("--fast-forward does not apply (%s): using the model's own forward", net.unsupported)
        if cfg.compute.compile:  # the model's own forward and backward, dynamic shapes
            net.compile(dynamic=True)
        return net

    def objective(self, cfg: FinetuneOptions, splits: Any, out: Any, accelerator: Any) -> TagObjective:
        """Cross-entropy over the labelled pieces (balanced tag weights with --class-weight balanced); dev (and
        --test: `test_objective`) scored per word with the recorded scheme."""
        assert self.windows is not None, "tokens() makes the windows first"
        train, dev, test = self.windows
        data = self.data
        weights = tag_class_weights(train.tag_ids, len(data.tags)) if cfg.training.class_weight == "balanced" else None
        objective = TagObjective(train.labels, dev, words_of(data.dev_sentences), data.tags, data.scheme, weights,
                                 cfg.inputs.seed).to(accelerator.device)
        if test is not None:
            self.test_objective = objective.for_split(test, words_of(data.test_sentences))
        return objective

    def baseline(self, cfg: FinetuneOptions, objective: Any, label_map: LabelMap) -> None:
        return None  # a constant tag is no entity: entity F1 0, nothing to warn about

    def card(self, cfg: FinetuneOptions, splits: Any, tokens: RunTokens, reproduce: str) -> RunCard:
        """The cards' facts, and the --test words that are scored with them (`test_objective`)."""
        assert self.reading is not None, "tokens() reads the windows first"
        facts = tag_card_facts(cfg, self.data, self.command, reproduce, self.reading.window_stride)
        objective = self.test_objective
        if objective is None:
            return RunCard(facts)
        return RunCard(facts, self.data.test, tokens.test, objective.y_dev, test_objective=objective)

    def model_record(self) -> dict[str, Any]:
        return {"tag_scheme": self.data.scheme.to_json()}


def tag_windows(cfg: Any, tokenizer: Any, sentences: Any, tags: tuple[str, ...], reading: Reading) -> LabelledWindows:
    """One split's sentences as labelled windows (their tags as the model's ids)."""
    index = {tag: i for i, tag in enumerate(tags)}
    return label_windows(tokenizer, [s.words for s in sentences], [[index[t] for t in s.tags] for s in sentences],
                         reading, label_all_pieces=cfg.tagging.label_all_pieces, continuation=continuation_ids(tags))


def words_of(sentences: Any) -> list[str]:
    """The sentences' words, flat (as a split's objective reads them: `TagObjective.dev_words`)."""
    return [word for sentence in sentences for word in sentence.words]


def tag_card_facts(cfg: Any, data: TaggedTraining, command: str, reproduce: str, stride: int) -> CardFacts:
    """What every card of a tagging run says besides its scores: data (sentences per split), hyper-parameters
    (the tag scheme, --label-all-pieces and --stride too), the reproduce line, versions."""
    from bertkit.io.trail import package_versions

    splits = (("train", data.train, data.train_sentences), ("dev", data.dev, data.dev_sentences),
              ("test", data.test, data.test_sentences))
    rows = [{"split": name, "source": str(corpus.source), "fingerprint": corpus_fingerprint(corpus),
             "rows": len(sentences)} for name, corpus, sentences in splits if corpus is not None]
    hyper = hyperparameters(cfg, (*HYPERPARAMETERS, *TAG_HYPERPARAMETERS))
    hyper["tag_scheme"] = f"{data.scheme.source} (scored as {data.scheme.name})"
    hyper["stride"] = stride  # the overlap the windows were read with (--stride unset: a quarter of the window)
    versions = {k: v for k, v in package_versions().items() if k in ("torch", "transformers", "accelerate")}
    return CardFacts(command=command, model=cfg.model, task=TAGS_TASK, labels=list(data.tags), data=rows,
                     hyperparameters=hyper, command_line=reproduce, versions={"bertkit": __version__, **versions})
