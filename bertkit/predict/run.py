"""`bertkit predict` and `bertkit evaluate`: labels, probabilities and metrics from a fine-tuned model or a
saved probe. Returns values; `cli.py` prints them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.config.commands import EvaluateConfig, PredictConfig, config_dict
from bertkit.config.recipes import recipe_path
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap, check_tag_columns
from bertkit.data.splits import load_dataset_split
from bertkit.encoding.longtext import LongText
from bertkit.io import atomic, ownership, predictions_out, rundir, trail
from bertkit.models import infer
from bertkit.models import loading as modeling
from bertkit.models.metadata import saved_threshold
from bertkit.scoring import metrics, predictions
from bertkit.scoring.shapes import inapplicable_options, predicted_labels

log = logging.getLogger(__name__)


@dataclass
class Outputs:
    """A model's outputs for every row (input order) and how to read them: class probabilities (single-label), tag
    probabilities with the decision threshold saved at training (multi-label), or the predicted numbers
    (regression: one column)."""

    label_map: LabelMap
    values: np.ndarray
    threshold: float | list[float] = 0.5

    @property
    def task(self) -> str:
        return self.label_map.task

    @property
    def label_names(self) -> list[str]:
        return [str(x) for x in self.label_map.labels]

    def predicted(self) -> list[Any]:
        """Per row: the class name, the tuple of tags, or the number."""
        return predicted_labels(self.task, self.label_names, self.values, self.threshold)

    def decisions(self) -> np.ndarray:
        """What an evaluate module (--metric) compares with the references: class ids (single-label), the 0/1 tag
        matrix at the saved threshold (multi-label), or the numbers (regression)."""
        if self.task == "multi_label":
            return (self.values >= np.asarray(self.threshold)).astype(int)
        return metrics.predicted(self.values)


def run_predict(cfg: PredictConfig, *, recipe: str | None = None, progress: bool = False) -> dict[str, Any]:
    """Labels + probabilities (tags + probabilities, or scores) for --text or --data (input order); the CSV at --out
    when given.

    `recipe` (the --recipe given) is one of the inputs --out must never overwrite.
    """
    if cfg.out:  # before any work: never over an input, never over a file bertkit did not write
        predictions_out.check_predictions_out(cfg.out, {"--data": cfg.data, "--model": cfg.model, "--probe": cfg.probe,
                                                        "--recipe": str(recipe_path(recipe)) if recipe else None})
    if cfg.text:
        dataset = TextDataset(list(cfg.text), source="--text")
    else:
        dataset = load_dataset_split(cfg, cfg.data or "", need_labels=False)
    outputs = probabilities(cfg, dataset, progress)
    if cfg.out:
        predictions.write_predictions_csv(Path(cfg.out), dataset, outputs.values, outputs.label_names, task=outputs.task,
                              threshold=outputs.threshold)
    return {"dataset": dataset, "labels": outputs.predicted(), "proba": outputs.values,
            "label_names": outputs.label_names, "task": outputs.task, "threshold": outputs.threshold, "out": cfg.out}


def probabilities(cfg: Any, dataset: TextDataset, progress: bool) -> Outputs:
    """The outputs for `dataset` (input order) of a fine-tuned folder (--model) or a saved probe (--probe)."""
    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe.saved import load_probe, predict_with_probe

        saved = load_probe(cfg.probe)
        _, proba = predict_with_probe(saved, dataset, batch_size=cfg.batch_size, precision=cfg.precision,
                                      max_length=cfg.max_length, progress=progress)
        if saved.task != "single_label":  # numbers or tags: shown as a fine-tuned model of that shape shows them
            return Outputs(LabelMap(tuple(str(x) for x in saved.label_map.labels), saved.task), proba,
                           saved.threshold)
        return Outputs(LabelMap(tuple(str(x) for x in saved.label_map.labels)), proba)
    model, tokenizer, label_map = infer.load_for_inference(cfg.model)
    modeling.check_max_length(cfg.max_length, tokenizer, model.config, cfg.model, pair=dataset.pairs is not None)
    proba = predictions.predict_proba(model, tokenizer, dataset, progress=progress, **reading(cfg))
    return Outputs(label_map, proba, saved_threshold(cfg.model))


def run_evaluate(cfg: EvaluateConfig, *, progress: bool = False) -> dict[str, Any]:
    """Metrics of a fine-tuned model on labelled --data (read in the model's problem shape); metrics.json,
    predictions.csv and the shape's plot (confusion matrix, true-vs-predicted scatter, per-tag F1) in --out when
    given."""
    plan = rundir.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    external = [metrics.load_metric(spec) for spec in cfg.external_metrics]  # before any work: a missing one stops here
    model, tokenizer, label_map = infer.load_for_inference(cfg.model or "")
    modeling.check_max_length(cfg.max_length, tokenizer, model.config, cfg.model or "",
                              pair=cfg.text_pair_column is not None)
    for note in inapplicable_options(label_map.task, len(label_map.labels), cfg.metric_list):
        log.warning("%s", note)
    metrics.check_external(external, label_map.task, len(label_map.labels))  # a module that fails on the shape
    dataset = load_dataset_split(cfg, cfg.data or "", need_labels=True, task=label_map.task)
    check_tag_columns(label_map, dataset, f"model {cfg.model}")
    y = label_map.encode(dataset.labels or [], f"The data {dataset.source}")
    proba = predictions.predict_proba(model, tokenizer, dataset, progress=progress, **reading(cfg))
    outputs = Outputs(label_map, proba, saved_threshold(cfg.model or ""))
    result = shape_metrics(outputs, y)
    metrics.add_requested(result, cfg.metric_list, external, outputs.decisions(), y)
    result.update(model=cfg.model, data=dataset.source, data_fingerprint=dataset.fingerprint,
                  long_text=cfg.long_text, truncation=cfg.truncation)
    if plan is not None:
        run = plan.claim()
        trail.write_run_config(run.path, "evaluate", config_dict(cfg), data_fingerprint=dataset.fingerprint)
        atomic.write_json_atomic(run.path / "metrics.json", result)
        predictions.write_predictions_csv(run.path / "predictions.csv", dataset, proba, outputs.label_names, y_true=y,
                              task=outputs.task, threshold=outputs.threshold)
        _plot(outputs, y, result, run.path, f"{cfg.model} on {dataset.source}")
        run.commit()
    return result


def shape_metrics(outputs: Outputs, y: np.ndarray) -> dict[str, Any]:
    """The metrics of the outputs' problem shape against targets `y` (label ids, a 0/1 tag matrix or numbers)."""
    if outputs.task == "regression":
        result = metrics.regression_metrics(y, outputs.values[:, 0])
    elif outputs.task == "multi_label":
        result = metrics.multilabel_metrics(y, outputs.values >= np.asarray(outputs.threshold), outputs.label_names)
        result["threshold"] = outputs.threshold
    else:
        result = metrics.classification_metrics(y, outputs.values.argmax(axis=1), outputs.values, outputs.label_names)
    result["task"] = outputs.task
    return result


def _plot(outputs: Outputs, y: np.ndarray, result: dict[str, Any], folder: Path, title: str) -> None:
    from bertkit import plots

    if outputs.task == "regression":
        plots.regression_scatter(y, outputs.values[:, 0], folder / "scatter.png", title)
    elif outputs.task == "multi_label":
        plots.per_label_f1(result["per_label"], folder / "per_label_f1.png", title)
    else:
        plots.confusion_matrix(result["confusion_matrix"], outputs.label_names, folder / "confusion_matrix.png", title)



def reading(cfg: Any) -> dict[str, Any]:
    """How predict/evaluate run the model over the texts: window, batch, precision, and long texts (cut or chunk)."""
    return {"max_length": cfg.max_length, "batch_size": cfg.batch_size, "precision": cfg.precision,
            "long_text": LongText.from_config(cfg)}
