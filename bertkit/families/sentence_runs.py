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
from bertkit.families.results import Prediction, Predictions
from bertkit.features.settings import Pooling
from bertkit.models.compute import Compute
from bertkit.models.metadata import read_as_saved, read_model_info
from bertkit.models.preflight import check_inputs, check_model_limits

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
    """A fine-tuned classifier (or its export) in the run's one resolution of --precision (an ONNX export: its
    own): auto reads in the precision the model records where this device runs it natively, and says so where it
    cannot."""
    from bertkit.models import infer, loading
    from bertkit.models.metadata import saved_temperature, saved_threshold, warn_if_foreign
    from bertkit.scoring.outputs import OutputReader, classifier_read

    compute = infer.export_compute_of(cfg.model, cfg.precision)
    if compute is None:
        recorded = Compute.recorded_in(read_model_info(Path(cfg.model).expanduser()))
        compute, notes = Compute.over_record(None, cfg.precision, recorded, f"The model {cfg.model}")
        for note in notes:
            log.warning("%s", note)
    model, tokenizer, label_map = infer.load_for_inference(cfg.model, compute)
    warn_if_foreign(cfg.model)  # a plain transformers folder: read as its config says, said once
    reading = Reading.from_options(cfg.reading)  # `cfg` is read as the model records already
    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model, pair=dataset.pairs is not None)
    temperature = saved_temperature(cfg.model)  # --calibrate temperature at training: honest probabilities
    return OutputReader(label_map, classifier_read(model, tokenizer, reading, cfg.batch_size, compute, progress, counted,
                                                   temperature),
                        saved_threshold(cfg.model), infer.precision_of(model, compute), counted, temperature=temperature)
