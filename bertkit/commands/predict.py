"""`bertkit predict`: labels and probabilities (tags, or numbers) for sentences or a file, from a fine-tuned model
or a saved probe, window by window into a CSV. The outputs are read through `bertkit.scoring.outputs`, as evaluate
reads them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.data.options import DataOptions, blank_text_problems, config_problems
from bertkit.data.tagged import TaggedColumns
from bertkit.data.word_lines import file_sentences, text_sentence, words_problems, words_sentence
from bertkit.encoding.reading import LongTextOptions, Reading
from bertkit.errors import raise_if_problems
from bertkit.features.settings import Pooling
from bertkit.models.compute import Compute, precision_option
from bertkit.models.metadata import is_tagger, read_as_saved, read_model_info
from bertkit.models.preflight import check_inputs, check_model_limits
from bertkit.options import DATA, MODEL, OUTPUT, Config, group, option
from bertkit.recipes import recipe_path
from bertkit.scoring.word_outputs import word_out_problems
from bertkit.scoring.word_tags import AGGREGATIONS

if TYPE_CHECKING:
    import numpy as np

    from bertkit.data.dataset import TextDataset
    from bertkit.scoring.outputs import OutputReader, Outputs
    from bertkit.scoring.spans import TaggedWords

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictConfig(Config):
    """`bertkit predict`: labels and probabilities from a fine-tuned model (or a saved probe)."""

    # reads one --data file (or --text) and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")
    NO_PRESET = ("label_column",)  # data to label need not have labels (GLUE's test files have none)
    ADVANCED_OPTIONS = ("stride",)
    HELP_OVERRIDES = {"data": "The data to label (instead of --text): a .csv/.tsv/.txt/.json/.jsonl/.parquet file, or a "
                              "hub dataset name.",
                      "limit": "Label only the first N rows of --data (quick runs).",
                      "label_column": "The file's column of known labels, if it has one (a name or 0-based index): it is "
                                      "checked and never read as text, but predict neither writes nor scores it; to "
                                      "score a model on labelled data, use `bertkit evaluate`."}

    model: str | None = option(None, "Fine-tuned model folder (e.g. runs/sst2/best).", panel=MODEL)
    probe: str | None = option(None, "A probe saved by `bertkit probe` (instead of --model).", panel=MODEL)
    inputs: DataOptions = group(DataOptions)
    reading: LongTextOptions = group(LongTextOptions)
    text: tuple[str, ...] = option((), "A sentence to classify (repeatable), instead of --data. With a word probe or "
                                   "a tagging model: tagged word by word (split on whitespace; spans point into it as "
                                   "given).",
                                   panel=DATA)
    words: str | None = option(None, "With a word probe or a tagging model: one sentence as a JSON list of words, "
                               "e.g. '[\"New\", \"York\"]' (instead of --text or --data).", panel=DATA)
    out: str | None = option(None, "CSV file for the predictions (written atomically; never one of the inputs).",
                             panel=OUTPUT)
    batch_size: int = option(64, "Rows per inference batch (sorted by length; output keeps the input order).",
                             above=0)
    aggregate: str = option("first", "A tagging model: how a word's tag is read from its word pieces, as the transformers "
                            "token-classification pipeline aggregates them: first (the piece taggers are trained on; "
                            "simple is the same), max (the piece with the highest score) or average (the mean of the "
                            "pieces' probabilities).", choices=AGGREGATIONS)
    precision: str = precision_option(more_help=" With --probe, auto extracts features in the precision the probe "
                                                "records, where this machine runs it natively.")

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", tuple(self.text or ()))
        problems = config_problems(self)
        if (self.model is None) == (self.probe is None):
            problems.append("Give exactly one of --model (a fine-tuned folder) or --probe (a saved probe).")
        if bool(self.text) + (self.inputs.data is not None) + (self.words is not None) != 1:
            problems.append("Give exactly one of --text (repeatable), --words (a JSON list of words, word probes) or "
                            "--data (a file to label).")
        problems += words_problems(self.words) if self.words is not None else []
        problems += blank_text_problems(self.text)
        problems += self.reading.long_text_problems()
        if self.probe is not None and (self.reading.long_text or Reading.long_text,
                                       self.reading.truncation or Reading.truncation) != (
                Reading.long_text, Reading.truncation):
            problems.append("--long-text chunk and --truncation tail/head+tail work with --model; a saved --probe "
                            "reads texts as its features were extracted (the settings saved with it). Drop them, or "
                            "use a fine-tuned --model.")
        raise_if_problems(problems)


Prediction = str | tuple[str, ...] | float
"""One row's prediction: a class name (single-label), its tags (multi-label), or a number (regression)."""


@dataclass
class PredictResult:
    """The predictions: the problem shape and its names, and the first rows' labels and outputs (all rows are in
    --out, and reach `on_window` as they come)."""

    task: str
    label_names: list[str]
    threshold: float | list[float]
    out: str | None
    dtype: str
    """The precision the model ran in (fp32, bf16, fp16, int8; onnx/onnx-int8 for an export)."""
    max_length: int | None = None
    """The tokens a row was read with (as the model or probe records, unless --max-length said otherwise)."""
    truncation: str | None = None
    """Which tokens an over-long row kept (head, tail, head+tail)."""
    pooling: str | None = None
    """With --probe: the features the probe reads (pool, layers), as its record says."""
    rows_cut: int | None = None
    """Rows longer than max_length, cut as `truncation` says (None: read whole in windows)."""
    temperature: float | None = None
    """The temperature the model's logits were divided by (`finetune --calibrate temperature`); None: none recorded."""
    dataset: TextDataset | None = field(default=None, metadata={"json": False})
    labels: list[Prediction] = field(default_factory=list)
    """The kept rows' predictions: a class name, the tuple of tags, or the number."""
    proba: np.ndarray | None = field(default=None, metadata={"json": False})
    """The kept rows' outputs: class or tag probabilities, or the numbers (one column)."""
    sentences: list[TaggedWords] = field(default_factory=list, metadata={"json": False})
    """With a word probe (task `tags`): the kept sentences' words, tags and spans."""
    n_sentences: int | None = None
    """With a word probe: the sentences tagged (all of them are in --out, and reach `on_sentences`)."""
    aggregate: str | None = None
    """With a tagging model: how each word's tag was read from its pieces (--aggregate)."""


def run(cfg: PredictConfig, *, recipe: str | None = None, progress: bool = False, keep: int | None = None,
        on_window: Callable[[TextDataset, Outputs, list[Any]], None] | None = None,
        on_sentences: Callable[[list[TaggedWords]], None] | None = None) -> PredictResult:
    """Labels + probabilities (tags + probabilities, or scores) for --text or --data (input order); the CSV at --out
    when given.

    The rows are read `SORT_WINDOW` at a time (length-sorted batches within a window) and each window's rows are
    appended to the CSV as they come (renamed over --out at the end), so no pass holds all rows or all outputs:
    the result keeps the first `keep` rows' labels and outputs (None: all of them), `on_window(part, outputs,
    labels)` sees every window in order (`--json` prints them as they come).
    `recipe` (the --recipe given) is one of the inputs --out must never overwrite.
    A word probe (`probe.word_saved`) tags words instead: `run_word_probe`, `on_sentences` seeing every chunk.
    """
    from bertkit.io import predictions_out
    from bertkit.probe.word_saved import is_word_probe

    if cfg.out:  # before any work: never over an input, never over a file bertkit did not write
        predictions_out.check_predictions_out(cfg.out, {"--data": cfg.inputs.data, "--model": cfg.model,
                                                        "--probe": cfg.probe,
                                                        "--recipe": str(recipe_path(recipe)) if recipe else None})
    tagger = cfg.model is not None and is_tagger(cfg.model)
    word_probe = cfg.probe is not None and is_word_probe(cfg.probe)
    raise_if_problems(word_option_problems(cfg, tagger, word_probe))
    if tagger or word_probe:
        return (run_tagger if tagger else run_word_probe)(cfg, keep=keep, on_sentences=on_sentences)
    check_inputs(cfg, need_labels=False, models=(cfg.model,), data_fields=("data",))  # before torch is imported
    check_model_limits(cfg.model, max_length=cfg.reading.max_length)  # before the data is read or cached
    import numpy as np

    from bertkit.data.dataset import TextDataset
    from bertkit.encoding import batches
    from bertkit.probe.saved import read_as_fitted

    check_model_inputs(cfg)  # a model or probe that is not as saved stops here, before the data is read
    cfg = read_as_fitted(cfg) if cfg.probe is not None else read_as_saved(cfg)
    if cfg.text:
        dataset = TextDataset(list(cfg.text), source="--text")
    else:  # the file reader (pandas, pyarrow) only where a file is read
        from bertkit.data.splits import load_dataset_split

        dataset = load_dataset_split(cfg.inputs, cfg.inputs.data or "", need_labels=False)
    reader = output_reader(cfg, dataset, progress)
    labels: list[Prediction] = []
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
    return PredictResult(reader.label_map.task, reader.label_names, reader.threshold, cfg.out, reader.precision,
                         cfg.reading.max_length, cfg.reading.truncation or Reading.truncation, reader.features,
                         None if cfg.reading.long_text == "chunk" else reader.counted.cut, reader.temperature, dataset,
                         labels, head)


def run_word_probe(cfg: PredictConfig, keep: int | None = None,
                   on_sentences: Callable[[list[TaggedWords]], None] | None = None) -> PredictResult:
    """Tags and spans of --text, --words or --data's sentences from a saved word probe, chunk by chunk (flat in
    memory): every chunk to --out (.jsonl or .csv) and `on_sentences`; the first `keep` kept in the result."""
    from bertkit.models import loading
    from bertkit.probe.word_predict import word_tagger
    from bertkit.probe.word_saved import load_word_probe

    raise_if_problems(word_out_problems(cfg.out) + word_probe_option_problems(cfg))
    probe = load_word_probe(cfg.probe or "")  # every file verified before the encoder is loaded
    loading.check_model_folder(probe.source.model)
    # the one resolution of --precision: auto reads words in the precision the probe's were read in, where the CPU
    # runs it natively (a probe saved before it recorded one: as auto resolves here)
    compute, notes = Compute.over_record("cpu", cfg.precision, probe.source.compute, f"The word probe {probe.path}")
    for note in notes:
        log.warning("%s", note)
    tagger = word_tagger(probe, cfg.batch_size, compute)
    kept, total = _write_word_predictions(cfg.out, tagger.tag(word_sentences(cfg)), keep, on_sentences)
    reading = probe.source.reading
    return PredictResult("tags", list(probe.tags), 0.5, cfg.out, compute.precision, reading.max_length, None,
                         f"word {reading.word_pool}, {probe.fit.pooling.label}", sentences=kept, n_sentences=total)


def run_tagger(cfg: PredictConfig, keep: int | None = None,
               on_sentences: Callable[[list[TaggedWords]], None] | None = None) -> PredictResult:
    """Tags and spans of --text, --words or --data's sentences from a tagging model (`bertkit finetune` on tagged
    data), read in windows of the max length it was trained with (--max-length, --stride given: as asked), chunk by
    chunk: every chunk to --out (.jsonl or .csv) and `on_sentences`; the first `keep` kept in the result."""
    from bertkit.models import infer
    from bertkit.scoring.tag_outputs import tag_reader

    raise_if_problems(word_out_problems(cfg.out) + tagger_option_problems(cfg))
    check_model_inputs(cfg)  # its files as recorded, before anything reads them
    cfg = read_as_saved(cfg)
    compute, notes = infer.export_compute_of(cfg.model or "", cfg.precision), []  # an export: its own, on the CPU
    if compute is None:
        compute, notes = Compute.over_record(None, cfg.precision, Compute.recorded_in(read_model_info(
            Path(cfg.model or "").expanduser())), f"The model {cfg.model}")
    for note in notes:
        log.warning("%s", note)
    reading = Reading.of_words("first", cfg.reading.max_length, cfg.reading.stride)
    reader = tag_reader(cfg.model or "", compute, reading, cfg.batch_size, cfg.aggregate)
    kept, total = _write_word_predictions(cfg.out, reader.tag(word_sentences(cfg)), keep, on_sentences)
    return PredictResult("tags", list(reader.tagger.tags), 0.5, cfg.out, infer.precision_of(reader.tagger.model, compute),
                         reading.max_length, None, None, sentences=kept, n_sentences=total, aggregate=cfg.aggregate)


def word_option_problems(cfg: PredictConfig, tagger: bool, word_probe: bool) -> list[str]:
    """--aggregate reads a tagging model's word pieces; --words gives one sentence as words to a word probe or a
    tagging model: both refused for what reads whole sentences (and --aggregate for a word probe too)."""
    problems = []
    if cfg.aggregate != "first" and not tagger:
        problems.append(f"--aggregate {cfg.aggregate} reads a word's tag from a tagging model's word pieces; "
                        f"{cfg.probe or cfg.model} is not a tagging model (a word probe is fitted on pooled word "
                        f"vectors). Drop --aggregate.")
    if cfg.words is not None and not (tagger or word_probe):
        problems.append(f"--words gives one sentence as words, for a word probe or a tagging model; "
                        f"{cfg.probe or cfg.model} labels whole sentences. Valid: --text or --data here. Pass the "
                        f"sentence as --text.")
    return problems


def tagger_option_problems(cfg: PredictConfig) -> list[str]:
    """Options a tagging model does not read: it reads words in windows, nothing is cut."""
    given = [flag for flag, value, unset in (("--long-text", cfg.reading.long_text, "chunk"),
                                             ("--truncation", cfg.reading.truncation, Reading.truncation))
             if value not in (None, unset)]
    return [f"{flag} does not apply to a tagging model: it reads every word, a long sentence in windows of its "
            f"max length. Drop {flag}." for flag in given]


def _write_word_predictions(out: str | None, chunks: Any, keep: int | None,
                            on_sentences: Callable[[list[TaggedWords]], None] | None) -> tuple[list[TaggedWords], int]:
    """Every chunk of tagged sentences to --out (none: nowhere) and `on_sentences`; (the first `keep`, the count)."""
    from bertkit.io import predictions_out
    from bertkit.scoring.word_outputs import open_word_predictions

    kept: list[TaggedWords] = []
    total = 0
    sink = (open_word_predictions(Path(out), predictions_out.vouch(Path(out))) if out
            else contextlib.nullcontext(lambda _: None))
    with sink as append:
        for chunk in chunks:
            append(chunk)
            kept.extend(chunk[:len(chunk) if keep is None else max(0, keep - len(kept))])
            total += len(chunk)
            if on_sentences is not None:
                on_sentences(chunk)
    return kept, total


def word_sentences(cfg: PredictConfig) -> Any:
    """The sentences to tag: --text (split on whitespace), --words, or --data streamed."""
    if cfg.words is not None:
        return iter([words_sentence(cfg.words)])
    if cfg.text:
        return (text_sentence(t) for t in cfg.text)
    return file_sentences(cfg.inputs.data or "", TaggedColumns(cfg.inputs.text_column, cfg.inputs.label_column),
                          cfg.inputs.limit)


def word_probe_option_problems(cfg: PredictConfig) -> list[str]:
    """Options a word probe does not read (it reads words as its record says)."""
    reading = cfg.reading
    given = [flag for flag, value in (("--max-length", reading.max_length), ("--stride", reading.stride)) if value]
    int8 = ["--precision int8 does not apply to a word probe: word vectors are read in float. Pass --precision auto, "
            "fp32 or bf16."] if cfg.precision == "int8" else []
    return [f"{flag} does not apply to a word probe: it reads words as it was fitted (its probe.json). Drop {flag}."
            for flag in given] + int8


def check_model_inputs(cfg: Any) -> None:
    """--model (or --probe and the encoder it was trained on) verified against its record, with its tokenizer files:
    `loading.check_model_folder` (cheap to repeat: a verified file is not read again)."""
    from bertkit.models import loading

    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe.saved import load_probe

        loading.check_model_folder(str(load_probe(cfg.probe).meta["model"]))
    elif cfg.model:
        loading.check_model_folder(cfg.model)


def _csv_out(out: str | None, dataset: TextDataset, reader: OutputReader) -> Any:
    """The predictions CSV at --out, appended window by window (no --out: a sink that writes nothing)."""
    from bertkit.scoring import predictions

    if not out:
        return contextlib.nullcontext(lambda *_: None)
    from bertkit.io import predictions_out

    return predictions.open_predictions_csv(Path(out), dataset, reader.label_names, task=reader.label_map.task,
                                            threshold=reader.threshold, vouch=predictions_out.vouch(Path(out)))


def output_reader(cfg: Any, dataset: TextDataset, progress: bool) -> OutputReader:
    """A fine-tuned folder (--model) or a saved probe (--probe), loaded once, to run on `dataset`'s windows."""
    from bertkit.data.labels import LabelMap
    from bertkit.encoding.encode import RowsCut
    from bertkit.models import infer, loading
    from bertkit.models.metadata import read_model_info, saved_temperature, saved_threshold, warn_if_foreign
    from bertkit.scoring.outputs import OutputReader, classifier_read

    counted = RowsCut()  # rows read and cut at the max length, as the reader tokenizes them
    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe.saved import load_probe, probe_compute, probe_reader

        saved = load_probe(cfg.probe)
        compute, notes = probe_compute(saved, cfg.precision)  # as the probe's features were made, unless asked
        for note in notes:
            log.warning("%s", note)
        read = probe_reader(saved, compute, pair=dataset.pairs is not None, batch_size=cfg.batch_size,
                            max_length=cfg.reading.max_length, progress=progress, counted=counted)
        names = tuple(str(x) for x in saved.label_map.labels)
        pooling = Pooling.from_json(saved.meta)
        features = f"{pooling.pool}, layers {pooling.layers_option}"
        if saved.task != "single_label":  # numbers or tags: shown as a fine-tuned model of that shape shows them
            return OutputReader(LabelMap(names, saved.task), lambda part: read(part)[1], saved.threshold,
                                compute.precision, counted, features)
        return OutputReader(LabelMap(names), lambda part: read(part)[1], precision=compute.precision, counted=counted,
                            features=features)
    # the one resolution of --precision for this run (an ONNX export: its own): auto reads in the precision the
    # model records where this device runs it natively, and says so where it cannot
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
