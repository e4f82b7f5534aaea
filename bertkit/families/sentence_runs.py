"""The sentences family's part of `bertkit predict`: a fine-tuned classifier (or its ONNX export) or a saved probe
labels --text or --data's rows, `SORT_WINDOW` rows at a time (length-sorted batches within a window), each window
appended to the CSV at --out as it comes and handed to the command's `on_chunk` (a `PredictedWindow`), so no pass
holds all rows or all outputs. The outputs are read through `bertkit.scoring.outputs`, as evaluate reads them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.encoding.reading import Reading
from bertkit.families.results import Evaluation, Prediction, Predictions, TimedData
from bertkit.features.settings import Pooling
from bertkit.models.compute import Compute
from bertkit.models.metadata import (
    read_as_saved,
    read_model_info,
    saved_temperature,
    saved_threshold,
    warn_if_foreign,
)
from bertkit.models.preflight import check_inputs, check_model_limits
from bertkit.scoring.scores import Scores

if TYPE_CHECKING:
    from bertkit.data.dataset import TextDataset
    from bertkit.scoring.outputs import OutputReader, Outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictedWindow:
    """One window of rows as predict hands it on: the rows, their outputs and their predictions."""

    part: TextDataset
    outputs: Outputs
    labels: list[Prediction]


def row_predictions(cfg: Any, keep: int | None, progress: bool, on_chunk: Callable[[Any], None] | None) -> Predictions:
    """Labels and probabilities (tags and probabilities, or scores) of --text or --data's rows (input order), the
    CSV at --out when given; the first `keep` rows' labels and outputs kept in the record (None: all)."""
    import numpy as np

    from bertkit.encoding import batches
    from bertkit.probe.saved import read_as_fitted

    check_inputs(cfg, need_labels=False, models=(cfg.model,), data_fields=("data",))  # before torch is imported
    check_model_limits(cfg.model, max_length=cfg.reading.max_length)  # before the data is read or cached
    check_model_inputs(cfg)  # a model or probe that is not as saved stops here, before the data is read
    cfg = read_as_fitted(cfg) if cfg.probe is not None else read_as_saved(cfg)
    dataset = rows_to_label(cfg)
    reader = output_reader(cfg, dataset, progress)
    labels: list[Prediction] = []
    values: list[np.ndarray] = []
    with csv_out(cfg.out, dataset, reader) as append:
        for start, part in dataset.chunks(batches.SORT_WINDOW):
            outputs = reader.outputs(part)
            append(start, part, outputs.values)
            predicted = outputs.predicted()
            room = len(part) if keep is None else max(0, keep - len(labels))
            labels.extend(predicted[:room])
            values.append(outputs.values[:room])
            if on_chunk is not None:
                on_chunk(PredictedWindow(part, outputs, predicted))
    head = np.concatenate(values) if values else np.zeros((0, reader.width), np.float32)
    return Predictions(reader.label_map.task, reader.label_names, reader.threshold, cfg.out, reader.precision,
                       cfg.reading.max_length, cfg.reading.truncation or Reading.truncation, reader.features,
                       None if cfg.reading.long_text == "chunk" else reader.counted.cut, reader.temperature, dataset,
                       labels, head)


def rows_to_label(cfg: Any) -> TextDataset:
    """--text's rows, or --data's (the file reader, pandas or pyarrow, only where a file is read)."""
    from bertkit.data.dataset import TextDataset

    if cfg.text:
        return TextDataset(list(cfg.text), source="--text")
    from bertkit.data.splits import load_dataset_split

    return load_dataset_split(cfg.inputs, cfg.inputs.data or "", need_labels=False)


def check_model_inputs(cfg: Any) -> None:
    """--model (or --probe and the encoder it was trained on) verified against its record, with its tokenizer files:
    `loading.check_model_folder` (cheap to repeat: a verified file is not read again)."""
    from bertkit.models import loading

    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe.saved import load_probe

        loading.check_model_folder(str(load_probe(cfg.probe).meta["model"]))
    elif cfg.model:
        loading.check_model_folder(cfg.model)


def csv_out(out: str | None, dataset: TextDataset, reader: OutputReader) -> Any:
    """The predictions CSV at --out, appended window by window (no --out: a sink that writes nothing)."""
    from bertkit.scoring import predictions

    if not out:
        return contextlib.nullcontext(lambda *_: None)
    from bertkit.io import predictions_out

    return predictions.open_predictions_csv(Path(out), dataset, reader.label_names, task=reader.label_map.task,
                                            threshold=reader.threshold, vouch=predictions_out.vouch(Path(out)))


def output_reader(cfg: Any, dataset: TextDataset, progress: bool) -> OutputReader:
    """A fine-tuned folder (--model) or a saved probe (--probe), loaded once, to run on `dataset`'s windows."""
    from bertkit.encoding.encode import RowsCut

    counted = RowsCut()  # rows read and cut at the max length, as the reader tokenizes them
    if getattr(cfg, "probe", None) is not None:
        return probe_reader(cfg, dataset, progress, counted)
    return model_reader(cfg, dataset, progress, counted)


def probe_reader(cfg: Any, dataset: TextDataset, progress: bool, counted: Any) -> OutputReader:
    """A saved sentence probe on the features it was fitted on, extracted as its record says."""
    from bertkit.data.labels import LabelMap
    from bertkit.probe.saved import load_probe, probe_compute
    from bertkit.probe.saved import probe_reader as features_reader
    from bertkit.scoring.outputs import OutputReader

    saved = load_probe(cfg.probe)
    compute, notes = probe_compute(saved, cfg.precision)  # as the probe's features were made, unless asked
    for note in notes:
        log.warning("%s", note)
    read = features_reader(saved, compute, pair=dataset.pairs is not None, batch_size=cfg.batch_size,
                           max_length=cfg.reading.max_length, progress=progress, counted=counted)
    names = tuple(str(x) for x in saved.label_map.labels)
    pooling = Pooling.from_json(saved.meta)
    features = f"{pooling.pool}, layers {pooling.layers_option}"
    if saved.task != "single_label":  # numbers or tags: shown as a fine-tuned model of that shape shows them
        return OutputReader(LabelMap(names, saved.task), lambda part: read(part)[1], saved.threshold,
                            compute.precision, counted, features)
    return OutputReader(LabelMap(names), lambda part: read(part)[1], precision=compute.precision, counted=counted,
                        features=features)


def model_reader(cfg: Any, dataset: TextDataset, progress: bool, counted: Any) -> OutputReader:
    """A fine-tuned classifier (or its export), loaded in the run's one resolution of --precision."""
    from bertkit.models import infer, loading
    from bertkit.scoring.outputs import OutputReader, classifier_read

    model, tokenizer, label_map, compute = loaded_classifier(cfg)
    reading = Reading.from_options(cfg.reading)  # `cfg` is read as the model records already
    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model, pair=dataset.pairs is not None)
    temperature = saved_temperature(cfg.model)  # --calibrate temperature at training: honest probabilities
    return OutputReader(label_map, classifier_read(model, tokenizer, reading, cfg.batch_size, compute, progress, counted,
                                                   temperature),
                        saved_threshold(cfg.model), infer.precision_of(model, compute), counted, temperature=temperature)


# ---------------------------------------------------------------- evaluate


def row_evaluation(cfg: Any, claim: Callable[[], Path] | None, progress: bool) -> Evaluation:
    """A fine-tuned classifier on labelled --data, in its problem shape: the shape's metrics, and with `claim` (the
    evaluate run's folder, claimed once everything was checked) predictions.csv and the shape's plot (confusion
    matrix, true-vs-predicted scatter, per-tag F1)."""
    check_inputs(cfg, need_labels=True, models=(cfg.model,), data_fields=("data",))  # before torch
    from bertkit.data.labels import check_tag_columns
    from bertkit.data.splits import load_dataset_split
    from bertkit.encoding.encode import RowsCut
    from bertkit.models import infer
    from bertkit.scoring import metrics
    from bertkit.scoring.outputs import OutputReader, classifier_read, score_outputs

    external = [metrics.load_metric(spec) for spec in cfg.metrics.external_metrics]  # a missing one stops here
    model, tokenizer, label_map, compute = loaded_classifier(cfg)
    cfg = read_as_saved(cfg)  # the model verified by its record first
    reading = Reading.from_options(cfg.reading)
    checked_for_shape(cfg, model, tokenizer, label_map, external, reading)
    dataset = load_dataset_split(cfg.inputs, cfg.inputs.data or "", need_labels=True, task=label_map.task)
    check_tag_columns(label_map, dataset, f"model {cfg.model}")
    y = label_map.encode(dataset.labels or [], f"The data {dataset.source}")
    counted = RowsCut()
    temperature = saved_temperature(cfg.model or "")  # --calibrate temperature at training
    read = classifier_read(model, tokenizer, reading, cfg.batch_size, compute, progress, counted, temperature)
    reader = OutputReader(label_map, read, saved_threshold(cfg.model or ""), counted=counted, temperature=temperature)
    outputs = reader.all_outputs(dataset)  # a few numbers per row; the texts are read a window at a time
    scores = score_outputs(outputs, y)
    metrics.add_requested(scores, cfg.metrics.metric_list, external, outputs.decisions(), y)
    if claim is not None:
        write_evaluation(claim(), dataset, outputs, y, scores, f"{cfg.model} on {dataset.source}")
    return Evaluation(cfg.model or "", dataset.source, dataset.fingerprint, reading.max_length, reading.long_text,
                      reading.truncation, infer.precision_of(model, compute), Scores.from_json(scores),
                      None if reading.chunked else counted.cut, temperature)


def loaded_classifier(cfg: Any) -> tuple[Any, Any, Any, Compute]:
    """(model, tokenizer, label map, compute) of --model in the run's one resolution of --precision (an ONNX
    export: its own): auto reads in the precision the model records where this device runs it natively."""
    from bertkit.models import infer

    compute = infer.export_compute_of(cfg.model or "", cfg.precision)
    if compute is None:
        recorded = Compute.recorded_in(read_model_info(Path(cfg.model or "").expanduser()))
        compute, notes = Compute.over_record(None, cfg.precision, recorded, f"The model {cfg.model}")
        for note in notes:
            log.warning("%s", note)
    model, tokenizer, label_map = infer.load_for_inference(cfg.model or "", compute)
    warn_if_foreign(cfg.model or "")  # a plain transformers folder: read as its config says, said once
    return model, tokenizer, label_map, compute


def checked_for_shape(cfg: Any, model: Any, tokenizer: Any, label_map: Any, external: list[Any],
                      reading: Reading) -> None:
    """--max-length against the model; options the model's problem shape ignores warned about; a --metric module
    that fails on the shape refused."""
    from bertkit.models import loading
    from bertkit.scoring import metrics
    from bertkit.scoring.shapes import inapplicable_options

    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model or "",
                              pair=cfg.inputs.text_pair_column is not None)
    for note in inapplicable_options(label_map.task, len(label_map.labels), cfg.metrics.metric_list):
        log.warning("%s", note)
    metrics.check_external(external, label_map.task, len(label_map.labels))  # a module that fails on the shape


def write_evaluation(folder: Path, dataset: TextDataset, outputs: Outputs, y: Any, scores: dict[str, Any],
                     title: str) -> None:
    """predictions.csv and the shape's plot into the evaluate run's folder."""
    from bertkit import plots
    from bertkit.scoring import predictions

    predictions.write_predictions_csv(folder / "predictions.csv", dataset, outputs.values, outputs.label_names,
                                      y_true=y, task=outputs.task, threshold=outputs.threshold)
    if outputs.task == "regression":
        plots.save_figure(plots.regression_scatter(y, outputs.values[:, 0], title), folder / "scatter.png")
    elif outputs.task == "multi_label":
        plots.per_label_f1(scores["per_label"], folder / "per_label_f1.png", title)
    else:
        plots.save_figure(plots.confusion_matrix(scores["confusion_matrix"], outputs.label_names, title),
                          folder / "confusion_matrix.png")
        if scores.get("reliability"):
            plots.save_figure(plots.reliability_diagram(scores["reliability"], scores["ece"], title),
                              folder / "reliability.png")


# ---------------------------------------------------------------- bench


def rows_to_time(cfg: Any) -> TimedData:
    """The sentences to time: --dev if given (a file or a split of the hub --data), else --data, else the demo dev."""
    from bertkit.data.splits import load_dataset_split, named_source

    if cfg.inputs.dev:
        source, split = named_source(cfg.inputs.data, cfg.inputs.dev)
        dataset = load_dataset_split(cfg.inputs, source, split=split, need_labels=False, task=cfg.task)
    elif cfg.inputs.data:
        dataset = load_dataset_split(cfg.inputs, cfg.inputs.data, need_labels=False, task=cfg.task)
    else:
        demo = Path(__file__).resolve().parent.parent / "resources" / "demo" / "dev.tsv"  # bertkit/resources
        dataset = load_dataset_split(cfg.inputs, str(demo), need_labels=False, task=cfg.task)
    # Sentence pairs: the first text of each row is timed (the benchmark measures the encoder, not the task).
    return TimedData(list(dataset.texts), {"source": dataset.source, "fingerprint": dataset.fingerprint})
