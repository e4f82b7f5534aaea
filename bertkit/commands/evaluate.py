"""`bertkit evaluate`: the metrics of a fine-tuned model on labelled data, in the model's problem shape, with the
predictions and the shape's plot in --out."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bertkit.data.options import LabelOptions, config_problems
from bertkit.data.tagged import TaggedColumns, read_tagged
from bertkit.data.tagged_splits import corpus_fingerprint
from bertkit.encoding.reading import LongTextOptions, Reading, max_length_help
from bertkit.errors import raise_if_problems
from bertkit.models.compute import Compute, precision_option
from bertkit.models.metadata import (
    is_tagger,
    read_as_saved,
    read_model_info,
    saved_temperature,
    saved_threshold,
    warn_if_foreign,
)
from bertkit.models.preflight import check_inputs
from bertkit.options import MODEL, OUTPUT, Config, config_dict, group, option, overwrite_option
from bertkit.scoring.options import MetricOptions
from bertkit.scoring.scores import Scores

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from bertkit.scoring.outputs import Outputs
    from bertkit.scoring.tag_report import TagMistakes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluateConfig(Config):
    """`bertkit evaluate`: metrics of a fine-tuned model on labelled data."""

    # reads one --data file and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")
    REQUIRED_OPTIONS = ("model", "data")
    ADVANCED_OPTIONS = ("stride",)
    HELP_OVERRIDES = {"data": "The labelled data to score the model on: a .csv/.tsv/.txt/.json/.jsonl/.parquet file, or "
                              "a hub dataset name.",
                      "limit": "Score only the first N rows of --data (quick runs).",
                      "max_length": max_length_help("the model")}  # a fine-tuned model: no probe to record it

    model: str | None = option(None, "Fine-tuned model folder (e.g. runs/sst2/best).", panel=MODEL)
    inputs: LabelOptions = group(LabelOptions)
    reading: LongTextOptions = group(LongTextOptions)
    metrics: MetricOptions = group(MetricOptions)
    out: str | None = option(None, "Run directory for metrics.json, predictions.csv and the confusion-matrix PNG.",
                             panel=OUTPUT)
    overwrite: bool = overwrite_option("an evaluate run")
    batch_size: int = option(64, "Rows per inference batch (sorted by length).", above=0)
    precision: str = precision_option()

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if self.model is None:
            problems.append("--model is required: a fine-tuned model folder (e.g. runs/sst2/best).")
        if self.inputs.data is None:
            problems.append("--data is required: a labelled file (pass --label-column if it is not `label`).")
        problems += self.reading.long_text_problems()
        raise_if_problems(problems)


@dataclass(frozen=True)
class EvaluateResult:
    """The metrics of a model on labelled data (`metrics`: its problem shape's, with the per-tag table or confusion
    matrix and `n` rows), and what they were computed on and how - apart, so no setting takes a metric's name."""

    model: str
    data: str
    data_fingerprint: str
    max_length: int
    long_text: str
    truncation: str
    dtype: str
    """The compute precision the model ran in (`precision` is the macro precision metric in `metrics`)."""
    metrics: Scores
    rows_cut: int | None = None
    """Rows longer than max_length, cut as `truncation` says (None: read whole in windows)."""
    temperature: float | None = None
    """The temperature the model's logits were divided by (`finetune --calibrate temperature`); None: none recorded."""
    mistakes: TagMistakes | None = None
    """A tagging model's mistakes: the confusion of entity types (with `none`) and the entity error counts, or for
    plain tags (POS) the confusion of tags and per-tag scores; None for other shapes."""

    @property
    def task(self) -> str:
        return str(self.metrics.value("task"))

    @property
    def rows(self) -> int:
        return int(self.metrics.n or 0)

    @property
    def note(self) -> str | None:
        """Why a metric is undefined or limited on these rows (e.g. one class only), if it is."""
        note = self.metrics.value("note")
        return str(note) if note else None

    @property
    def threshold(self) -> object:
        """A tag model's decision threshold (tags: one for all, or one per tag)."""
        return self.metrics.threshold

    @property
    def per_tag(self) -> dict[str, dict[str, float]]:
        """A tag model's scores per tag (F1, precision, recall, support); empty for other shapes."""
        return dict(self.metrics.value("per_label") or {})  # type: ignore[call-overload]

    @property
    def per_type(self) -> dict[str, dict[str, float]]:
        """A tagging model's strict entity scores per type (precision, recall, f1, support, predicted); else empty."""
        return dict(self.metrics.value("per_type") or {})  # type: ignore[call-overload]

    @property
    def confusion(self) -> tuple[list[str], list[list[int]]]:
        """A single-label model's label names and confusion matrix (rows = true); empty for other shapes."""
        return (list(self.metrics.value("labels") or []),  # type: ignore[call-overload]
                list(self.metrics.value("confusion_matrix") or []))  # type: ignore[call-overload]


def run(cfg: EvaluateConfig, *, progress: bool = False) -> EvaluateResult:
    """Metrics of a fine-tuned model on labelled --data in the model's problem shape (a tagger: `run_tagger`); with
    --out metrics.json, predictions.csv and the shape's plot (confusion matrix, true-vs-predicted scatter, per-tag F1)."""
    from bertkit.io import atomic, ownership, rundir, trail

    plan = rundir.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    if cfg.model and is_tagger(cfg.model):
        return run_tagger(cfg, plan)
    check_inputs(cfg, need_labels=True, models=(cfg.model,), data_fields=("data",))  # then the inputs, before torch
    from bertkit.data.labels import check_tag_columns
    from bertkit.data.splits import load_dataset_split
    from bertkit.encoding.encode import RowsCut
    from bertkit.models import infer, loading
    from bertkit.scoring import metrics, predictions
    from bertkit.scoring.outputs import OutputReader, classifier_read, score_outputs
    from bertkit.scoring.shapes import inapplicable_options

    # before any work: a missing one stops here
    external = [metrics.load_metric(spec) for spec in cfg.metrics.external_metrics]
    # the one resolution of --precision for this run (an ONNX export: its own): auto reads in the precision the
    # model records where this device runs it natively, and says so where it cannot
    compute = infer.export_compute_of(cfg.model or "", cfg.precision)
    if compute is None:
        recorded = Compute.recorded_in(read_model_info(os.path.expanduser(cfg.model or "")))
        compute, notes = Compute.over_record(None, cfg.precision, recorded, f"The model {cfg.model}")
        for note in notes:
            log.warning("%s", note)
    model, tokenizer, label_map = infer.load_for_inference(cfg.model or "", compute)
    warn_if_foreign(cfg.model or "")  # a plain transformers folder: read as its config says, said once
    given, cfg = cfg, read_as_saved(cfg)  # the model verified by its record first; the trail keeps the options given
    reading = Reading.from_options(cfg.reading)
    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model or "",
                              pair=cfg.inputs.text_pair_column is not None)
    for note in inapplicable_options(label_map.task, len(label_map.labels), cfg.metrics.metric_list):
        log.warning("%s", note)
    metrics.check_external(external, label_map.task, len(label_map.labels))  # a module that fails on the shape
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
    result = EvaluateResult(cfg.model or "", dataset.source, dataset.fingerprint, reading.max_length,
                            reading.long_text, reading.truncation, infer.precision_of(model, compute),
                            Scores.from_json(scores), None if reading.chunked else counted.cut, temperature)
    if plan is not None:
        run_dir = plan.claim()
        trail.write_run_config(run_dir.path, "evaluate", config_dict(given), data_fingerprint=dataset.fingerprint)
        atomic.write_json_atomic(run_dir.path / "metrics.json", result)
        predictions.write_predictions_csv(run_dir.path / "predictions.csv", dataset, outputs.values,
                                          outputs.label_names, y_true=y, task=outputs.task,
                                          threshold=outputs.threshold)
        _plot(outputs, y, scores, run_dir.path, f"{cfg.model} on {dataset.source}")
        run_dir.commit()
    return result


def run_tagger(cfg: EvaluateConfig, plan: Any) -> EvaluateResult:
    """A tagging model on tagged --data (IOB1 read as IOB2): strict entity P/R/F1 with the model's scheme (micro,
    macro, per type, the F1's interval over sentences) and word accuracy, or word accuracy and macro-F1 for plain tags;
    and its mistakes (`scoring.tag_report.TagMistakes`); with --out: config.json, metrics.json and predictions.jsonl
    (predict's shape: words, tags, spans per sentence)."""
    from bertkit.io import atomic, trail
    from bertkit.scoring.tag_outputs import check_gold_scheme, score_tagger, tag_reader
    from bertkit.scoring.tags import tag_scores_record
    from bertkit.scoring.word_outputs import open_word_predictions

    given = [f for f, v in (("--text-pair-column", cfg.inputs.text_pair_column), ("--label-sep", cfg.inputs.label_sep),
                            ("--metric", cfg.metrics.metric), ("--task-preset", cfg.inputs.task_preset)) if v]
    given += [f for f, v, unset in (("--long-text", cfg.reading.long_text, "chunk"), ("--truncation",
                                                                                      cfg.reading.truncation, "head"))
              if v not in (None, unset)]
    raise_if_problems([f"{f} does not apply to a tagging model (tagged --data, words read in windows). Drop {f}."
                       for f in given])
    check_inputs(cfg, need_labels=True, models=(cfg.model,), data_fields=())  # the model as saved, before torch
    inputs = cfg.inputs  # and the gold data
    corpus = read_tagged(inputs.data or "", TaggedColumns(inputs.text_column, inputs.label_column))
    given_cfg, cfg = cfg, read_as_saved(cfg)
    compute, notes = Compute.over_record(None, cfg.precision, Compute.recorded_in(read_model_info(
        os.path.expanduser(cfg.model or ""))), f"The model {cfg.model}")
    reading = Reading.of_words("first", cfg.reading.max_length, cfg.reading.stride)
    reader = tag_reader(cfg.model or "", compute, reading, cfg.batch_size)
    notes += check_gold_scheme(reader, corpus)
    for note in notes:
        log.warning("%s", note)
    run_dir = plan.claim() if plan is not None else None
    out = run_dir.path / "predictions.jsonl" if run_dir is not None else None
    with open_word_predictions(out) if out is not None else _no_file() as append:
        report = score_tagger(reader, corpus, limit=cfg.inputs.limit, seed=cfg.inputs.seed, on_chunk=append)
    record = {"task": "tags", **tag_scores_record(report.scores), **({"notes": notes} if notes else {})}
    result = EvaluateResult(cfg.model or "", str(corpus.source), corpus_fingerprint(corpus), reading.max_length,
                            reading.long_text, reading.truncation, compute.precision, Scores.from_json(record),
                            mistakes=report.mistakes)
    if run_dir is not None:
        trail.write_run_config(run_dir.path, "evaluate", config_dict(given_cfg), data_fingerprint=result.data_fingerprint)
        atomic.write_json_atomic(run_dir.path / "metrics.json", result)
        run_dir.commit()
    return result


def _no_file() -> Any:
    import contextlib

    return contextlib.nullcontext(lambda _: None)


def _plot(outputs: Outputs, y: np.ndarray, result: dict[str, Any], folder: Path, title: str) -> None:
    from bertkit import plots

    if outputs.task == "regression":
        plots.save_figure(plots.regression_scatter(y, outputs.values[:, 0], title), folder / "scatter.png")
    elif outputs.task == "multi_label":
        plots.per_label_f1(result["per_label"], folder / "per_label_f1.png", title)
    else:
        plots.save_figure(plots.confusion_matrix(result["confusion_matrix"], outputs.label_names, title),
                          folder / "confusion_matrix.png")
        if result.get("reliability"):
            plots.save_figure(plots.reliability_diagram(result["reliability"], result["ece"], title),
                              folder / "reliability.png")



