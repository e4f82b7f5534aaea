"""The facts a fine-tuning (or distillation) run puts in the model cards of its best/ and final/ folders, and the
test scores that go with them: `run_card` (built once in `finetune.setup`), `best_card` (at each new best: that
evaluation's dev metrics, the test metrics of the same weights), `final_card` (at the end). The card itself is
`bertkit.models.card`'s."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit import __version__
from bertkit.data.dataset import TextDataset
from bertkit.data.tagged import TaggedCorpus
from bertkit.encoding.encode import Encoded
from bertkit.models.card import CardFacts
from bertkit.options import flat_values
from bertkit.scoring.evaluation import split_result
from bertkit.scoring.shapes import MultiLabel

HYPERPARAMETERS = ("epochs", "lr", "batch_size", "grad_accum", "warmup_ratio", "weight_decay", "max_grad_norm",
                   "max_length", "truncation", "precision", "seed", "eval_every", "metric_for_best", "class_weight",
                   "calibrate", "freeze_encoder", "early_stopping_patience", "temperature", "alpha", "cos_weight",
                   "student_layers")
"""The options a card's hyper-parameter table shows (those the config has; a tagger's adds its tagging options,
`training.tagging.TAG_HYPERPARAMETERS`); the reproduce line holds every option away from its default."""

_DATA = "the card's data table (each split's source, fingerprint and rows)"
_RUN = "where or how the run is written, launched or logged (`io.trail.RERUN_MAY_CHANGE`), not what it trains"
NOT_HYPERPARAMETERS = {
    "model": "the card's base model", "teacher": "the card's lineage", "student": "the card's lineage",
    **dict.fromkeys(("data", "dev", "test", "data_config", "train_split", "text_column", "text_pair_column",
                     "label_column", "encoding", "header", "dev_fraction", "limit", "task_preset", "label_sep"), _DATA),
    "cache_dir": "where parsed data is cached, not what it holds", "task": "the card's task",
    "threshold": "multi-label data: the decision threshold bertkit_model.json records",
    "metric": "the extra scores the card's results show",
    "fast_forward": "how the same steps are computed (the same logits and gradients)",
    "compile": "how the same steps are computed (the same logits and gradients)",
    "trust_remote_code": "whether a model's own code may run", "report": "distill's teacher-vs-student report",
    "report_seconds": "how long distill's report times each model (the report records it)",
    **dict.fromkeys(("cuda_graphs", "report_to", "tracking_uri", "project", "log_every", "out", "save_every",
                     "save_every_minutes", "keep_checkpoints", "overwrite"), _RUN),
}
"""Every other option of a training run, with where the card (or nothing) shows it instead: an option is in one of
the two (`tests/test_run_records.py`), so a new one is placed when it is added."""


@dataclass
class RunCard:
    """`Session.card`: the run's card facts, and the labelled --test data scored at each new best and at the end."""

    facts: CardFacts
    test: TextDataset | TaggedCorpus | None = None
    """The labelled --test data (its `source` names it in the cards); a tagger's is a tagged corpus."""
    test_enc: Encoded | None = None
    y_test: np.ndarray | None = None
    """The test rows' label ids (a tagger's: its words' tag ids, as `test_objective` reads them)."""
    test_objective: Any = None
    """What scores the test logits where the run's objective cannot by swapping its labels for `y_test` (a tagger's:
    the objective of the test windows, `scoring.tags.TagObjective.for_split`); None: the run's objective."""
    scored_at: tuple[int, Any, Any] | None = None
    """(step, dev scores, --test scores or None) of the last evaluation: the final card reuses them when no step
    came after it (the last step is always evaluated), instead of scoring the same weights again."""


def remember(session: Any, step: int, dev: Any, test: Any = None) -> None:
    """Keep the scores of the weights at optimizer step `step` (every process: they are the same everywhere)."""
    if session.card is not None:
        session.card.scored_at = (step, dev, test)


def final_scores(session: Any, step: int, dev_scores: Any) -> tuple[Any, Any]:
    """(dev scores, --test scores or None) of the final weights: those the last evaluation kept when it was at this
    step, else scored now (a run resumed from its last checkpoint has none in memory)."""
    kept = session.card.scored_at
    dev = kept[1] if kept is not None and kept[0] == step else dev_scores(session)
    test = kept[2] if kept is not None and kept[0] == step and kept[2] is not None else None
    return dev, test if test is not None else test_scored(session, dev, dev_scores)


def hyperparameters(cfg: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The options `names` of a run's config (those it has), for a card's hyper-parameter table."""
    values = flat_values(cfg)
    return {name: values[name] for name in names if name in values}


def run_card(cfg: Any, splits: Any, command: str, lineage: dict[str, Any], test_enc: Encoded | None,
             reproduce: str) -> RunCard:
    """The facts every card of this run shares (data, hyper-parameters, the command line that runs it again:
    `reproduce`, versions, lineage)."""
    from bertkit.io.trail import package_versions

    label_map = splits.label_map
    data = [{"split": name, "source": str(split.source), "fingerprint": split.fingerprint, "rows": len(split)}
            for name, split in (("train", splits.train), ("dev", splits.dev), ("test", splits.test)) if split is not None]
    versions = {k: v for k, v in package_versions().items() if k in ("torch", "transformers", "accelerate")}
    facts = CardFacts(command=command, model=cfg.model, task=label_map.task, labels=[str(x) for x in label_map.labels],
                      data=data, hyperparameters=hyperparameters(cfg, HYPERPARAMETERS),
                      command_line=reproduce, versions={"bertkit": __version__, **versions},
                      lineage=lineage)
    y_test = None
    if splits.test is not None and splits.test.labels is not None:
        y_test = np.asarray(label_map.encode(splits.test.labels, f"The test data {splits.test.source}"))
    return RunCard(facts, splits.test if y_test is not None else None, test_enc if y_test is not None else None, y_test)


def test_scored(session: Any, dev_scored: Any, dev_scores: Any) -> Any:
    """The current weights' scores on the labelled --test data, by `dev_scores` (the loop's: every process takes
    part) on the test rows, at the dev-tuned threshold for multi-label tags (a tagger's test words: by the card's
    `test_objective`); None without test data."""
    card = session.card
    if card is None or card.test_enc is None:
        return None
    scorer = card.test_objective
    if scorer is None:
        scorer = copy.copy(getattr(session.objective, "hard", session.objective))
        scorer.y_dev = card.y_test
        if isinstance(scorer, MultiLabel):
            scorer.threshold = dev_scored.metrics.get("threshold", 0.5)
    return dev_scores(dataclasses.replace(session, dev_enc=card.test_enc, objective=scorer))


def card_for(session: Any, state: Any, role: str, dev_scored: Any, test: Any) -> CardFacts | None:
    """The card facts of a model folder saved now (`role` best or final) from its dev (and test) scores."""
    card = session.card
    if card is None or not session.accelerator.is_main_process:  # the main process writes the folders
        return None
    shape = {"task": session.label_map.task, "n_labels": len(session.label_map.labels), "seed": session.cfg.inputs.seed}
    results = {"dev": split_result(dev_scored, session.objective.y_dev, str(session.dev.source), **shape)}
    if test is not None:
        results["test"] = split_result(test, card.y_test, str(card.test.source), **shape)
    speed = {"train_samples_per_second": round(state.train_rows / max(state.train_seconds, 1e-9), 1),
             "processes": session.accelerator.num_processes,
             "mixed_precision": session.accelerator.mixed_precision}
    return card.facts.with_results(role, state.global_step, results, speed)


def test_summary(test: Any) -> dict[str, Any] | None:
    """What metrics.json records of a test scoring (scalars and the confusion matrix; no per-class tables)."""
    if test is None:
        return None
    return {k: v for k, v in test.metrics.items() if k not in ("per_class", "per_label")}
