"""Fine-tuning extractive question answering (an answer span of a passage per question, SQuAD): `SpanTask`, the task
with which the fine-tuning run (`finetune.finetune`: AdamW, linear schedule, clipping, length-grouped batches,
checkpoints and exact resume, early stopping, trackers, --lr auto) trains a question-answering model - only the data,
the model and the objective differ:

* the data is a SQuAD set (`bertkit.data.squad_splits`: --data, --dev and a --test checked whole before torch is
  imported), read as run_qa.py reads it into windows (`bertkit.encoding.qa_windows`: the question first, only the
  passage cut, windows of --max-length tokens sharing --doc-stride, each labelled with the answer's first and last
  token or [CLS]);
* the model is `AutoModelForQuestionAnswering` (`models.loading.load_classifier(questions=True)`) run by
  `bertkit.models.answerer.SpanLogits` (its own forward: its steps run eagerly, which the run's summary records);
* the objective is `bertkit.scoring.answer_objective.AnswerObjective`: BertForQuestionAnswering's loss, dev scored by
  the official SQuAD exact match and F1 of the dev set's version (best/ by F1; SQuAD v2.0: the best no-answer
  threshold too, recorded in best/ as its `threshold`); a labelled --test is scored the same way at each new best and
  at the end; the baseline is the passage sentence with the most question words (`overlap_baseline`).

best/ and final/ record the task `spans`, the family, the SQuAD version and the reading (bertkit_model.json:
`reading` holds the window and the doc stride), so predict, evaluate and a later finetune read the model as it was
trained; the folder loads in transformers' `pipeline("question-answering")`."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from bertkit import __version__
from bertkit.data.labels import SPANS_TASK, LabelMap
from bertkit.data.squad_splits import QATraining, qa_fingerprint
from bertkit.encoding.qa_windows import QAReading, QAWindows, qa_windows
from bertkit.encoding.reading import Reading
from bertkit.encoding.run_tokens import RunTokens, epoch_steps
from bertkit.models import loading
from bertkit.models.answerer import SpanLogits
from bertkit.models.card import CardFacts
from bertkit.scoring.answer_objective import AnswerObjective, overlap_baseline, span_metric_for_best
from bertkit.scoring.answers import AnswerSettings
from bertkit.scoring.baseline import Baseline
from bertkit.training.cards import HYPERPARAMETERS, RunCard, hyperparameters
from bertkit.training.finetune import Task
from bertkit.training.options import FinetuneOptions

log = logging.getLogger(__name__)

SPAN_HYPERPARAMETERS = ("doc_stride",)
"""The question-answering options a card's hyper-parameter table shows besides the sentence runs'."""


class SpanTask(Task):
    """A question-answering run: its SQuAD `data` (--data, --dev and --test as `data.squad_splits.load_qa_training`
    read and checked them, before torch was imported), a new question-answering head on the pretrained encoder, the
    windows of each split and the per-question objective."""

    def __init__(self, data: QATraining) -> None:
        self.data = data
        self.settings = AnswerSettings(allow_null=data.allow_null)
        """How dev (and test) answers are read from the logits: run_qa.py's defaults, null answers for v2.0 data."""
        self.windows: tuple[QAWindows, QAWindows, QAWindows | None] | None = None
        """The training, dev and test (None: no --test) windows (`tokens`), which the objectives read."""
        self.reading: QAReading | None = None
        """How the windows were read (`tokens`), which the cards and the model's record state."""
        self.test_objective: AnswerObjective | None = None

    def training_data(self, cfg: FinetuneOptions, warn: bool) -> tuple[FinetuneOptions, QATraining]:
        """The questions, and `cfg` with the --metric-for-best they score (f1 unless given)."""
        metric = span_metric_for_best(cfg.training.metric_for_best, self.data.dev.version)
        return dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, metric_for_best=metric)), self.data

    def label_map(self, cfg: FinetuneOptions, splits: Any) -> LabelMap:
        return self.data.label_map

    def build_model(self, cfg: FinetuneOptions, label_map: LabelMap) -> tuple[Any, Any]:
        model = loading.load_classifier(cfg.model, trust_remote_code=cfg.trust_remote_code, questions=True)
        return model, loading.load_tokenizer(cfg.model, cfg.trust_remote_code)

    def tokens(self, cfg: FinetuneOptions, tokenizer: Any, splits: Any, reading: Reading,
               min_rows: int) -> RunTokens:
        """Each split's questions as windows (`reading`: the run's window and doc stride)."""
        data, qa = self.data, QAReading.of(reading)
        train, dev = (qa_windows(tokenizer, questions, qa) for questions in (data.train_questions, data.dev_questions))
        test = qa_windows(tokenizer, data.test_questions, qa) if data.test is not None else None
        for name, windows in (("training", train), ("dev", dev), ("test", test)):
            if windows is not None and windows.n_questions_cut:
                log.warning("%d %s question(s) are longer than %d tokens: read by their first %d", windows.n_questions_cut,
                            name, qa.question_budget, qa.question_budget)
        self.windows, self.reading = (train, dev, test), qa
        steps = epoch_steps(train.lengths, cfg.training.batch_size, cfg.inputs.seed, min_rows, train.n_windows)
        return RunTokens(train.encoded, dev.encoded, test.encoded if test is not None else None, steps)

    def network(self, cfg: FinetuneOptions, model: Any, accelerator: Any, tokens: RunTokens) -> Any:
        """The model's start and end scores as one tensor (`models.answerer.SpanLogits`), its dev (and test) logits
        padded to the widest window they have."""
        scored = [tokens.dev.lengths] + ([tokens.test.lengths] if tokens.test is not None else [])
        widest = max((int(lengths.max()) for lengths in scored if len(lengths)), default=None)
        net = SpanLogits(model, width=widest)
        if cfg.compute.compile:  # the model's own forward and backward, dynamic shapes
            net.compile(dynamic=True)
        return net

    def objective(self, cfg: FinetuneOptions, splits: Any, out: Any, accelerator: Any) -> AnswerObjective:
        """BertForQuestionAnswering's loss; dev (and --test: `test_objective`) scored per question by the official
        rules of its SQuAD version."""
        assert self.windows is not None, "tokens() makes the windows first"
        train, dev, test = self.windows
        data = self.data
        objective = AnswerObjective(train, dev, data.dev_questions, data.dev.version, self.settings, cfg.inputs.seed)
        if test is not None and data.test is not None:
            self.test_objective = objective.for_split(test, data.test_questions, data.test.version)
        return objective

    def baseline(self, cfg: FinetuneOptions, objective: Any, label_map: LabelMap) -> Baseline | None:
        """The overlap baseline's dev score (the passage sentence with the most question words)."""
        return overlap_baseline(objective, cfg.training.metric_for_best or "f1")

    def card(self, cfg: FinetuneOptions, splits: Any, tokens: RunTokens, reproduce: str) -> RunCard:
        """The cards' facts, and the --test questions that are scored with them (`test_objective`)."""
        assert self.reading is not None, "tokens() reads the windows first"
        facts = span_card_facts(cfg, self.data, self.command, reproduce, self.reading)
        objective = self.test_objective
        if objective is None:
            return RunCard(facts)
        return RunCard(facts, self.data.test, tokens.test, np.arange(len(objective.questions)),
                       test_objective=objective)

    def model_record(self) -> dict[str, Any]:
        """The family, the SQuAD version of the training set (v2.0: the model may leave a question unanswered), the
        question budget and how answers are read."""
        reading = self.reading or QAReading()
        return {"family": SPANS_TASK, "spans": {"version": self.data.train.version,
                                                "max_question_length": reading.max_question_length,
                                                **{k: v for k, v in self.settings.to_json().items()
                                                   if k in ("n_best", "max_answer_length")}}}


def span_card_facts(cfg: Any, data: QATraining, command: str, reproduce: str, reading: QAReading) -> CardFacts:
    """What every card of a question-answering run says besides its scores: data (questions per split),
    hyper-parameters (the doc stride too), the reproduce line, versions."""
    from bertkit.io.trail import package_versions

    splits = (("train", data.train, data.train_questions), ("dev", data.dev, data.dev_questions),
              ("test", data.test, data.test_questions))
    rows = [{"split": name, "source": str(corpus.source), "fingerprint": qa_fingerprint(corpus),
             "rows": len(questions)} for name, corpus, questions in splits if corpus is not None]
    hyper = hyperparameters(cfg, (*HYPERPARAMETERS, *SPAN_HYPERPARAMETERS))
    hyper["max_length"], hyper["doc_stride"] = reading.max_length, reading.doc_stride
    hyper["squad_version"] = data.train.version
    versions = {k: v for k, v in package_versions().items() if k in ("torch", "transformers", "accelerate")}
    return CardFacts(command=command, model=cfg.model, task=SPANS_TASK, data=rows, hyperparameters=hyper,
                     command_line=reproduce, versions={"bertkit": __version__, **versions})
