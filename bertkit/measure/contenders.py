"""The models under test ("contenders") of `bertkit bench`: a preset's exact shapes with random weights, or
--models loaded from the hub or folders; and what the report must say about where they came from. On tagged data
each contender is a tagger (token classification: the encoder and one output per tag, a new head as fine-tuning
starts from), timed as a tagger runs; on questions on passages a question-answering model (a start and an end score
per token: `AutoModelForQuestionAnswering`, a new head on an encoder, a saved one's own head)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bertkit.errors import UserError
from bertkit.measure.timing import Clock
from bertkit.models import infer, loading

RANDOM_INIT_NOTE = (
    "Random-init models: exact architecture shapes with fresh random weights. Speed, size and memory are those of "
    "the real checkpoints; quality is meaningless and is skipped unless --quality is given."
)
PRESETS: dict[str, tuple[tuple[str, str], ...]] = {
    # label -> transformers config class; both use the bert-base-uncased vocabulary (30522 tokens).
    "distilbert-vs-bert": (("distilbert-base-uncased", "DistilBertConfig"), ("bert-base-uncased", "BertConfig")),
}
PRESET_TOKENIZER = loading.OFFLINE_NAME  # the packaged MiniLM folder ships the bert-base-uncased vocab


@dataclass
class Contender:
    """One model under test, with its tokenizer and how it was obtained."""

    label: str
    source: str
    random_init: bool
    model: Any
    tokenizer: Any
    build_seconds: float
    """Time to build (random init) or load (pretrained) the model the first time."""
    tagger: bool = False
    """A token classifier (one output per tag per piece: tagged data) rather than a bare encoder."""
    answerer: bool = False
    """A question-answering model (a start and an end score per token: questions on passages)."""
    forwards: dict[Any, Any] = field(default_factory=dict)
    """The inference forward per (device, dtype) (`steps.inference_forward`), built once."""

    @property
    def input_names(self) -> frozenset[str]:
        """The inputs the model's forward takes (DistilBERT: no token_type_ids), asked the way inference asks."""
        return infer.accepted_inputs(self.model)


def preset_configs(name: str) -> list[tuple[str, Any]]:
    """(label, config) pairs of a preset: default transformers configs, i.e. the exact published shapes."""
    import transformers

    if name not in PRESETS:
        raise UserError(f"Unknown --preset {name!r}; known presets: {', '.join(PRESETS)}. Or pass --models.")
    return [(label, getattr(transformers, cls)()) for label, cls in PRESETS[name]]


def load_contenders(
    models: Sequence[str], preset: str | None, random_init: bool, trust_remote_code: bool = False,
    clock: Clock = time.perf_counter, tags: Sequence[str] | None = None, questions: bool = False,
) -> list[Contender]:
    """Build the preset's models (random init, offline) or load each of `models` (hub id or folder); with `tags`
    (tagged data), each as a tagger with one output per tag; with `questions` (questions on passages), each as a
    question-answering model."""
    found: list[Contender] = []
    tagger = tags is not None
    if preset:
        tokenizer = loading.load_tokenizer(PRESET_TOKENIZER)
        for label, config in preset_configs(preset):
            start = clock()
            model = model_from_config(config, tags, questions)
            found.append(Contender(f"{label} (random init)", f"{type(config).__name__}()", True, model, tokenizer,
                                   clock() - start, tagger, questions))
        return found
    for name in models:
        try:
            tokenizer = loading.load_tokenizer(name, trust_remote_code)
            start = clock()
            model = load_model(name, random_init, trust_remote_code, tags, questions)
        except UserError as exc:
            raise UserError(f"{exc} Offline, `--preset distilbert-vs-bert` compares the exact BERT/DistilBERT "
                            "shapes with random weights (speed, size, memory).") from None
        label = f"{name} (random init)" if random_init else name
        found.append(Contender(label, name, random_init, model, tokenizer, clock() - start, tagger, questions))
    return found


def load_model(name: str, random_init: bool, trust_remote_code: bool, tags: Sequence[str] | None,
               questions: bool = False) -> Any:
    """`name`'s encoder, or with `tags` its tagger (the pretrained encoder with a new head of one output per tag, as
    `bertkit finetune` starts a tagger; a saved tagger with the same tags keeps its own head), or with `questions`
    its question-answering model (a new head on an encoder, as `bertkit finetune` starts one; a saved
    question-answering model keeps its own)."""
    if questions:
        return (answerer_from_config(loading.load_config(name, trust_remote_code)) if random_init else
                loading.load_classifier(name, None, trust_remote_code, questions=True).eval())
    if tags is None:
        return loading.load_encoder(name, trust_remote_code, random_init=random_init)
    if random_init:
        return tagger_from_config(loading.load_config(name, trust_remote_code), tags)
    return loading.load_classifier(name, dict(enumerate(tags)), trust_remote_code, tokens=True).eval()


def model_from_config(config: Any, tags: Sequence[str] | None, questions: bool) -> Any:
    """A model with fresh random weights from a transformers config (no weights read, no network): a
    question-answering model (`questions`), a tagger (`tags`), else the bare encoder."""
    if questions:
        return answerer_from_config(config)
    return loading.build_encoder(config) if tags is None else tagger_from_config(config, tags)


def answerer_from_config(config: Any) -> Any:
    """A question-answering model (`AutoModelForQuestionAnswering`: the encoder and a start and an end score per
    token) with fresh random weights from a transformers config: the exact shapes, for speed and size only."""
    import transformers

    return transformers.AutoModelForQuestionAnswering.from_config(config).eval()


def tagger_from_config(config: Any, tags: Sequence[str]) -> Any:
    """A token classifier with fresh random weights from a transformers config, one output per tag (no weights
    read, no network): the exact shapes of the published taggers' encoders, for speed and size only."""
    import transformers

    config.num_labels = len(tags)
    config.id2label = dict(enumerate(tags))
    config.label2id = {tag: i for i, tag in enumerate(tags)}
    return transformers.AutoModelForTokenClassification.from_config(config).eval()


def contender_notes(cfg: Any, contenders: Sequence[Contender]) -> list[str]:
    """What the report must say about where the models came from (random weights, the preset's shapes)."""
    notes = []
    if any(c.random_init for c in contenders):
        notes.append(RANDOM_INIT_NOTE)
    if cfg.preset:
        notes.append(f"--preset {cfg.preset}: transformers' default configs (the published base shapes), "
                     f"tokenizer = bert-base-uncased vocabulary from the packaged `{PRESET_TOKENIZER}` folder.")
    taggers = [c for c in contenders if c.tagger]
    if taggers:
        notes.append(f"Tagged data: each model timed as a tagger (token classification, "
                     f"{taggers[0].model.config.num_labels} tags) on the sentences' windows of at most --max-length "
                     f"word pieces, as a tagger reads words; rows = windows, tokens = real word pieces with "
                     f"[CLS]/[SEP], never padding.")
    if any(c.answerer for c in contenders):
        notes.append("Questions on passages: each model timed as a question-answering model (a start and an end score "
                     "per token) on the questions' windows ([CLS] question [SEP] passage [SEP], only the passage cut, "
                     "a long one in overlapping windows sharing the doc stride), as `bertkit finetune` and `predict` "
                     "read them; rows = windows, batch 1 = one question with all its windows, questions/s = the "
                     "questions whose windows were read per second.")
    if cfg.quality_kinds and any(c.random_init for c in contenders):
        notes.append("Quality of random-init models was measured because --quality was given; it is meaningless.")
    return notes

