"""`bertkit evaluate`: the metrics of a fine-tuned model on labelled data, in the model's problem shape, with the
predictions and the shape's plot in --out."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.options import LabelOptions, config_problems
from bertkit.encoding.reading import LongTextOptions, max_length_help
from bertkit.errors import raise_if_problems
from bertkit.families.base import Family
from bertkit.families.registry import cached_family
from bertkit.families.results import Evaluation
from bertkit.models.compute import precision_option
from bertkit.options import DATA, MODEL, OUTPUT, Config, config_dict, group, option, overwrite_option
from bertkit.scoring.answers import AnswerOptions
from bertkit.scoring.options import MetricOptions


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
    answers: AnswerOptions = group(AnswerOptions)
    predictions: str | None = option(None, "Questions on passages: a predictions file in the official SQuAD format "
                                     "({id: answer}, from any system), scored against --data as the official scripts "
                                     "score it, instead of a --model's answers.", panel=DATA, families=("spans",))
    null_odds: str | None = option(None, "With --predictions on SQuAD v2.0 data: each question's no-answer odds "
                                   "({id: number}, the official script's --na-prob-file), for the best no-answer "
                                   "threshold.", panel=DATA, families=("spans",))
    out: str | None = option(None, "Run directory for metrics.json, predictions.csv and the confusion-matrix PNG (a "
                             "question-answering model: predictions.json, answers.jsonl, errors.csv).", panel=OUTPUT)
    overwrite: bool = overwrite_option("an evaluate run")
    batch_size: int = option(64, "Rows per inference batch (sorted by length).", above=0)
    precision: str = precision_option()

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if self.model is None and self.predictions is None:
            problems.append("--model is required: a fine-tuned model folder (e.g. runs/sst2/best); or, on questions "
                            "on passages, --predictions (a file of answers to score).")
        if self.inputs.data is None:
            problems.append("--data is required: a labelled file (pass --label-column if it is not `label`).")
        if not problems:  # the model decides the family (without one: the data)
            problems += self.family.refused_options(self, "evaluate", self.model or self.inputs.data)
        raise_if_problems(problems)

    @property
    def family(self) -> Family:
        """The problem family of the --model, or without one (--predictions) of the --data (`bertkit.families`),
        asked once."""
        return cached_family(self, model=self.model, data=self.inputs)


@dataclass(frozen=True)
class EvaluateResult(Evaluation):
    """The metrics of a model on labelled data (`metrics`: its problem shape's, with the per-tag table or confusion
    matrix and `n` rows), and what they were computed on and how - apart, so no setting takes a metric's name; a
    tagging model's mistakes (`mistakes`)."""


def run(cfg: EvaluateConfig, *, progress: bool = False) -> EvaluateResult:
    """Metrics of a fine-tuned model on labelled --data in the model's problem shape, by its problem family
    (`bertkit.families`); with --out config.json, metrics.json and the family's files (predictions, the shape's
    plot)."""
    from bertkit.io import atomic, ownership, rundir, trail

    plan = rundir.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    claim = (lambda: plan.claim().path) if plan is not None else None
    result = EvaluateResult.of(cfg.family.evaluate(cfg, claim, progress))
    if plan is not None:
        run_dir = plan.claim()
        trail.write_run_config(run_dir.path, "evaluate", config_dict(cfg), cfg.family.name,
                               data_fingerprint=result.data_fingerprint)
        atomic.write_json_atomic(run_dir.path / "metrics.json", result)
        run_dir.commit()
    return result
