"""Fine-tuning a tagger (token classification: one tag per word, named entities or POS): `TagTask`, the task with
which the fine-tuning run (`finetune.finetune`: AdamW, linear schedule, clipping, length-grouped batches, checkpoints
and exact resume, early stopping, trackers) trains a tagger - only the data, the model and the objective differ:

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
from typing import Any

from bertkit import __version__
from bertkit.data.labels import TAGS_TASK, LabelMap
from bertkit.data.tagged_splits import TaggedTraining, corpus_fingerprint
from bertkit.encoding.reading import Reading
from bertkit.encoding.run_tokens import RunTokens, epoch_steps
from bertkit.encoding.word_labels import LabelledWindows, continuation_ids, label_windows
from bertkit.models import loading
from bertkit.models.card import CardFacts
from bertkit.models.tagger import NOT_FAST, TokenClassifier
from bertkit.scoring.tags import TagObjective, tag_class_weights, tag_metric_for_best
from bertkit.training.cards import HYPERPARAMETERS, RunCard
from bertkit.training.finetune import Task
from bertkit.training.options import FinetuneOptions

log = logging.getLogger(__name__)

TAG_HYPERPARAMETERS = ("tag_scheme", "label_all_pieces")
"""The tagging options a card's hyper-parameter table shows besides the sentence runs' (`cards.HYPERPARAMETERS`)."""


class TagTask(Task):
    """A tagger's run: its tagged `data` (--data and --dev as `data.tagged_splits.load_tagged_training` read and
    checked them, before torch was imported), a new token-classification head (one output per tag) on the
    pretrained encoder, the windows of both splits and the per-word objective."""

    def __init__(self, data: TaggedTraining) -> None:
        self.data = data
        self.windows: tuple[LabelledWindows, LabelledWindows] | None = None
        """The training and dev windows (`tokens`), which the objective reads."""

    def training_data(self, cfg: FinetuneOptions, warn: bool) -> tuple[FinetuneOptions, TaggedTraining]:
        """The tagged data, and `cfg` with the --metric-for-best its tags score (entity F1, or word accuracy)."""
        return dataclasses.replace(cfg, metric_for_best=tag_metric_for_best(cfg.metric_for_best,
                                                                            self.data.scheme)), self.data

    def label_map(self, cfg: FinetuneOptions, splits: Any) -> LabelMap:
        return self.data.label_map

    def build_model(self, cfg: FinetuneOptions, label_map: LabelMap) -> tuple[Any, Any]:
        model = loading.load_classifier(cfg.model, label_map.id2label, cfg.trust_remote_code, tokens=True)
        return model, loading.load_tokenizer(cfg.model, cfg.trust_remote_code)

    def tokens(self, cfg: FinetuneOptions, tokenizer: Any, splits: Any, reading: Reading,
               min_rows: int) -> RunTokens:
        """Both splits' sentences as labelled windows of --max-length pieces (`reading`: the reading of words)."""
        train, dev = (tag_windows(cfg, tokenizer, sentences, self.data.tags, reading)
                      for sentences in (self.data.train_sentences, self.data.dev_sentences))
        self.windows = train, dev
        steps = epoch_steps(train.encoded.lengths, cfg.batch_size, cfg.seed, min_rows, train.n_windows)
        return RunTokens(train.encoded, dev.encoded, None, steps)

    def network(self, cfg: FinetuneOptions, model: Any, accelerator: Any, tokens: RunTokens) -> Any:
        """The model's own forward, its dev logits cut to the widest dev window (`models.tagger.TokenClassifier`);
        the [CLS]-only fast path is a sentence head's, so --fast-forward does not apply (and steps run eagerly)."""
        net = TokenClassifier(model, width=int(tokens.dev.lengths.max()) if len(tokens.dev.lengths) else None)
        if cfg.fast_forward:
            log.info("--fast-forward does not apply (%s): using the model's own forward", NOT_FAST)
        if cfg.compile:  # the model's own forward and backward, dynamic shapes
            net.compile(dynamic=True)
        return net

    def objective(self, cfg: FinetuneOptions, splits: Any, out: Any, accelerator: Any) -> TagObjective:
        """Cross-entropy over the labelled pieces (balanced tag weights with --class-weight balanced); dev scored
        per word with the recorded scheme."""
        assert self.windows is not None, "tokens() makes the windows first"
        train, dev = self.windows
        data = self.data
        weights = tag_class_weights(train.tag_ids, len(data.tags)) if cfg.class_weight == "balanced" else None
        dev_words = [word for sentence in data.dev_sentences for word in sentence.words]
        return TagObjective(train.labels, dev, dev_words, data.tags, data.scheme, weights,
                            cfg.seed).to(accelerator.device)

    def baseline(self, cfg: FinetuneOptions, objective: Any, label_map: LabelMap) -> None:
        return None  # a constant tag is no entity: entity F1 0, nothing to warn about

    def card(self, cfg: FinetuneOptions, splits: Any, tokens: RunTokens, reproduce: str) -> RunCard:
        return RunCard(tag_card_facts(cfg, self.data, self.command, reproduce))

    def model_record(self) -> dict[str, Any]:
        return {"tag_scheme": self.data.scheme.to_json()}


def tag_windows(cfg: Any, tokenizer: Any, sentences: Any, tags: tuple[str, ...], reading: Reading) -> LabelledWindows:
    """One split's sentences as labelled windows (their tags as the model's ids)."""
    index = {tag: i for i, tag in enumerate(tags)}
    return label_windows(tokenizer, [s.words for s in sentences], [[index[t] for t in s.tags] for s in sentences],
                         reading, label_all_pieces=cfg.label_all_pieces, continuation=continuation_ids(tags))


def tag_card_facts(cfg: Any, data: TaggedTraining, command: str, reproduce: str) -> CardFacts:
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
                     hyperparameters=hyper, command_line=reproduce, versions={"bertkit": __version__, **versions})
