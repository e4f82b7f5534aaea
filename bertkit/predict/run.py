"""`bertkit predict` and `bertkit evaluate`: labels, probabilities and metrics from a fine-tuned model or a
saved probe. Returns values; `cli.py` prints them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.config.commands import EvaluateConfig, PredictConfig, config_dict
from bertkit.config.recipes import recipe_path
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap, check_tag_columns
from bertkit.data.splits import load_dataset_split
from bertkit.encoding import batches
from bertkit.encoding.longtext import LongText
from bertkit.io import atomic, ownership, predictions_out, rundir, trail
from bertkit.models import infer, onnx
from bertkit.models import loading as modeling
from bertkit.models.metadata import saved_threshold
from bertkit.scoring import metrics, predictions
from bertkit.scoring.shapes import inapplicable_options, predicted_labels

log = logging.getLogger(__name__)


@dataclass
class Outputs:
    """A model's outputs for rows (a window of them, or every row; input order) and how to read them: class
    probabilities (single-label), tag probabilities with the decision threshold saved at training (multi-label), or
    the predicted numbers (regression: one column)."""

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


def run_predict(cfg: PredictConfig, *, recipe: str | None = None, progress: bool = False, keep: int | None = None,
                on_window: Callable[[TextDataset, Outputs, list[Any]], None] | None = None) -> dict[str, Any]:
    """Labels + probabilities (tags + probabilities, or scores) for --text or --data (input order); the CSV at --out
    when given.

    The rows are read `SORT_WINDOW` at a time (length-sorted batches within a window) and each window's rows are
    appended to the CSV as they come (renamed over --out at the end), so no pass holds all rows or all outputs:
    the result keeps the first `keep` rows' labels and outputs (None: all of them), `on_window(part, outputs,
    labels)` sees every window in order (`--json` prints them as they come).
    `recipe` (the --recipe given) is one of the inputs --out must never overwrite.
    """
    if cfg.out:  # before any work: never over an input, never over a file bertkit did not write
        predictions_out.check_predictions_out(cfg.out, {"--data": cfg.data, "--model": cfg.model, "--probe": cfg.probe,
                                                        "--recipe": str(recipe_path(recipe)) if recipe else None})
    check_model_inputs(cfg)  # a model or probe that is not as saved stops here, before the data is read
    if cfg.text:
        dataset = TextDataset(list(cfg.text), source="--text")
    else:
        dataset = load_dataset_split(cfg, cfg.data or "", need_labels=False)
    reader = output_reader(cfg, dataset, progress)
    labels: list[Any] = []
    values: list[np.ndarray] = []
    with _csv_out(cfg.out, dataset, reader) as append:
        for start, part in dataset.chunks(batches.SORT_WINDOW):
            outputs = reader.outputs(part)
            append(start, part, outputs.values)
            predicted = outputs.predicted()
            room = len(part) if keep is None else max(0, keep - len(labels))
            labels.extend(predicted[:room])
            values.append(outputs.values[:room])
            if on_window is not None:
                on_window(part, outputs, predicted)
    head = np.concatenate(values) if values else np.zeros((0, reader.width), np.float32)
    return {"dataset": dataset, "labels": labels, "proba": head, "label_names": reader.label_names,
            "task": reader.label_map.task, "threshold": reader.threshold, "out": cfg.out,
            "dtype": reader.precision}


def check_model_inputs(cfg: Any) -> None:
    """--model (or --probe and the encoder it was trained on) verified against its record, with its tokenizer files:
    `loading.check_model_folder` (cheap to repeat: a verified file is not read again)."""
    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe.saved import load_probe

        modeling.check_model_folder(str(load_probe(cfg.probe).meta["model"]))
    elif cfg.model:
        modeling.check_model_folder(cfg.model)


def _csv_out(out: str | None, dataset: TextDataset, reader: OutputReader) -> Any:
    """The predictions CSV at --out, appended window by window (no --out: a sink that writes nothing)."""
    if not out:
        return contextlib.nullcontext(lambda *_: None)
    return predictions.open_predictions_csv(Path(out), dataset, reader.label_names, task=reader.label_map.task,
                                            threshold=reader.threshold)


@dataclass
class OutputReader:
    """A loaded fine-tuned model or saved probe: `outputs(part)` runs it on a window of rows."""

    label_map: LabelMap
    read: Callable[[TextDataset], np.ndarray]
    threshold: float | list[float] = 0.5
    precision: str = "fp32"
    """The precision the model runs in (`auto` resolved; int8 for dynamically quantized linear layers)."""

    @property
    def label_names(self) -> list[str]:
        return [str(x) for x in self.label_map.labels]

    @property
    def width(self) -> int:
        """Outputs per row."""
        return 1 if self.label_map.task == "regression" else len(self.label_map.labels)

    def outputs(self, part: TextDataset) -> Outputs:
        return Outputs(self.label_map, self.read(part), self.threshold)

    def all_outputs(self, dataset: TextDataset) -> Outputs:
        """The outputs of every row (input order), the model run window by window as predict runs it."""
        parts = [self.read(part) for _, part in dataset.chunks(batches.SORT_WINDOW)]
        values = np.concatenate(parts) if parts else np.zeros((0, self.width), np.float32)
        return Outputs(self.label_map, values, self.threshold)


def output_reader(cfg: Any, dataset: TextDataset, progress: bool) -> OutputReader:
    """A fine-tuned folder (--model) or a saved probe (--probe), loaded once, to run on `dataset`'s windows."""
    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe.saved import load_probe, probe_reader

        saved = load_probe(cfg.probe)
        read = probe_reader(saved, pair=dataset.pairs is not None, batch_size=cfg.batch_size,
                            precision=cfg.precision, max_length=cfg.max_length, progress=progress)
        names = tuple(str(x) for x in saved.label_map.labels)
        precision = modeling.resolved_precision(cfg.precision, modeling.choose_device("cpu"))  # its encoder's device
        if saved.task != "single_label":  # numbers or tags: shown as a fine-tuned model of that shape shows them
            return OutputReader(LabelMap(names, saved.task), lambda part: read(part)[1], saved.threshold, precision)
        return OutputReader(LabelMap(names), lambda part: read(part)[1], precision=precision)
    model, tokenizer, label_map = infer.load_for_inference(cfg.model, cfg.precision)
    modeling.check_max_length(cfg.max_length, tokenizer, model.config, cfg.model, pair=dataset.pairs is not None)
    return OutputReader(label_map, _classifier_read(model, tokenizer, cfg, progress), saved_threshold(cfg.model),
                        _precision_of(model, cfg.precision))


def _precision_of(model: Any, requested: str) -> str:
    """The precision a classifier runs in, as recorded: fp32, bf16, fp16 or int8 (`auto` resolved); an ONNX export's
    backend (onnx, onnx-int8)."""
    if isinstance(model, onnx.OnnxModel):
        return model.backend
    return modeling.precision_name(model, modeling.choose_dtype(requested, next(model.parameters()).device))


def _classifier_read(model: Any, tokenizer: Any, cfg: Any, progress: bool) -> Callable[[TextDataset], np.ndarray]:
    return lambda part: predictions.predict_proba(model, tokenizer, part, progress=progress, **reading(cfg))


def run_evaluate(cfg: EvaluateConfig, *, progress: bool = False) -> dict[str, Any]:
    """Metrics of a fine-tuned model on labelled --data (read in the model's problem shape); metrics.json,
    predictions.csv and the shape's plot (confusion matrix, true-vs-predicted scatter, per-tag F1) in --out when
    given."""
    plan = rundir.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    external = [metrics.load_metric(spec) for spec in cfg.external_metrics]  # before any work: a missing one stops here
    model, tokenizer, label_map = infer.load_for_inference(cfg.model or "", cfg.precision)
    modeling.check_max_length(cfg.max_length, tokenizer, model.config, cfg.model or "",
                              pair=cfg.text_pair_column is not None)
    for note in inapplicable_options(label_map.task, len(label_map.labels), cfg.metric_list):
        log.warning("%s", note)
    metrics.check_external(external, label_map.task, len(label_map.labels))  # a module that fails on the shape
    dataset = load_dataset_split(cfg, cfg.data or "", need_labels=True, task=label_map.task)
    check_tag_columns(label_map, dataset, f"model {cfg.model}")
    y = label_map.encode(dataset.labels or [], f"The data {dataset.source}")
    reader = OutputReader(label_map, _classifier_read(model, tokenizer, cfg, progress), saved_threshold(cfg.model or ""))
    outputs = reader.all_outputs(dataset)  # a few numbers per row; the texts are read a window at a time
    result = shape_metrics(outputs, y)
    metrics.add_requested(result, cfg.metric_list, external, outputs.decisions(), y)
    # the settings beside the metrics: none may take a metric's name (the compute precision is `dtype`, as embed and
    # bench record it; `precision` is the macro precision metric)
    result.update(model=cfg.model, data=dataset.source, data_fingerprint=dataset.fingerprint,
                  long_text=cfg.long_text, truncation=cfg.truncation, dtype=_precision_of(model, cfg.precision))
    if plan is not None:
        run = plan.claim()
        trail.write_run_config(run.path, "evaluate", config_dict(cfg), data_fingerprint=dataset.fingerprint)
        atomic.write_json_atomic(run.path / "metrics.json", result)
        predictions.write_predictions_csv(run.path / "predictions.csv", dataset, outputs.values, outputs.label_names,
                                          y_true=y, task=outputs.task, threshold=outputs.threshold)
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
