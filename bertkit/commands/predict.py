"""`bertkit predict`: labels and probabilities (tags, or numbers) for sentences or a file, from a fine-tuned model
or a saved probe, window by window into a CSV. The outputs are read through `bertkit.scoring.outputs`, as evaluate
reads them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bertkit.data.options import DataOptions, blank_text_problems, config_problems
from bertkit.data.word_lines import words_problems
from bertkit.encoding.reading import LongTextOptions, Reading
from bertkit.errors import raise_if_problems
from bertkit.families.base import Family
from bertkit.families.registry import cached_family
from bertkit.families.results import Prediction, Predictions
from bertkit.models.compute import precision_option
from bertkit.options import DATA, MODEL, OUTPUT, Config, group, option
from bertkit.recipes import recipe_path
from bertkit.scoring.answers import AnswerOptions
from bertkit.scoring.word_tags import AGGREGATIONS

__all__ = ["Prediction", "PredictConfig", "PredictResult", "run"]


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
                               "e.g. '[\"New\", \"York\"]' (instead of --text or --data).", panel=DATA,
                               families=("words",))
    question: str | None = option(None, "With a question-answering model: a question, answered from --context or "
                                  "--context-file (instead of --data, a SQuAD file).", panel=DATA, families=("spans",))
    context: str | None = option(None, "With --question: the passage its answer is cut from (character offsets point "
                                 "into it).", panel=DATA, families=("spans",))
    context_file: str | None = option(None, "With --question: a UTF-8 text file holding the passage (instead of "
                                      "--context).", panel=DATA, families=("spans",))
    answers: AnswerOptions = group(AnswerOptions)
    out: str | None = option(None, "File for the predictions, written atomically, never one of the inputs: a CSV (a "
                             "tagging model: .jsonl or .csv; a question-answering model: answers.jsonl, or a .json "
                             "name for the official {id: answer} mapping).", panel=OUTPUT)
    batch_size: int = option(64, "Rows per inference batch (sorted by length; output keeps the input order).",
                             above=0)
    aggregate: str = option("first", "A tagging model: how a word's tag is read from its word pieces, as the transformers "
                            "token-classification pipeline's aggregation_strategy of the same name reads them: first "
                            "(the piece taggers are trained on), max (the piece with the highest score) or average "
                            "(the mean of the pieces' probabilities). simple reads the first piece too; unlike the "
                            "pipeline's simple, which tags each piece alone and can split a word, every word gets one "
                            "tag.", choices=AGGREGATIONS,
                            families=("words",))
    precision: str = precision_option(more_help=" With --probe, auto extracts features in the precision the probe "
                                                "records, where this machine runs it natively.")

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", tuple(self.text or ()))
        problems = config_problems(self)
        sources = [name for name, given in (("--model", self.model), ("--probe", self.probe)) if given is not None]
        if len(sources) != 1:
            problems.append("Give exactly one of --model (a fine-tuned folder) or --probe (a saved probe).")
        inputs = [name for name, given in (("--text", self.text), ("--words", self.words),
                                           ("--question", self.question), ("--data", self.inputs.data)) if given]
        if len(inputs) != 1:
            problems.append("Give exactly one of --text (repeatable), --words (a JSON list of words, word probes), "
                            "--question (with --context, question-answering models) or --data (a file to label).")
        problems += words_problems(self.words)
        problems += blank_text_problems(self.text)
        if self.probe is not None and (self.reading.long_text or Reading.long_text,
                                       self.reading.truncation or Reading.truncation) != (
                Reading.long_text, Reading.truncation):
            problems.append("--long-text chunk and --truncation tail/head+tail work with --model; a saved --probe "
                            "reads texts as its features were extracted (the settings saved with it). Drop them, or "
                            "use a fine-tuned --model.")
        if len(sources) == 1 and not problems:  # what it reads decides its family
            problems += self.family.refused_options(self, "predict", self.probe or self.model)
        raise_if_problems(problems)

    @property
    def family(self) -> Family:
        """The problem family of the --model or --probe (`bertkit.families`), asked once."""
        return cached_family(self, model=self.model, probe=self.probe)


@dataclass
class PredictResult(Predictions):
    """The predictions: the family that made them, the problem shape and its names, and the first rows' labels and
    outputs (all rows are in --out, and reach `on_chunk` as they come); a tagging model's or word probe's: the
    sentences' words, tags and spans (`sentences`, `n_sentences`)."""


def run(cfg: PredictConfig, *, recipe: str | None = None, progress: bool = False, keep: int | None = None,
        on_chunk: Callable[[Any], None] | None = None) -> PredictResult:
    """Labels and probabilities (tags and spans, or scores) of --text, --words or --data (input order), by the
    problem family of the --model or --probe (`bertkit.families`); the predictions file at --out when given.

    The rows are read a window (or chunk of sentences) at a time and each is appended to --out as it comes (renamed
    over --out at the end), so no pass holds all rows or all outputs: the result keeps the first `keep` rows (None:
    all of them), `on_chunk` sees every window or chunk in order (`--json` prints them as they come).
    `recipe` (the --recipe given) is one of the inputs --out must never overwrite."""
    from bertkit.io import predictions_out

    if cfg.out:  # before any work: never over an input, never over a file bertkit did not write
        predictions_out.check_predictions_out(cfg.out, {"--data": cfg.inputs.data, "--model": cfg.model,
                                                        "--probe": cfg.probe,
                                                        "--recipe": str(recipe_path(recipe)) if recipe else None})
    return PredictResult.of(cfg.family.predict(cfg, keep=keep, progress=progress, on_chunk=on_chunk))
