"""The spans family: extractive question answering, an answer span of a passage per question - SQuAD sets (SQuAD JSON
v1.1/v2.0, the flat Hugging Face layout as JSON, JSON lines, CSV or parquet, the hub's squad and squad_v2),
question-answering models fine-tuned on them (or any transformers folder with a question-answering head), their
answers and official scores. What differs from the other families lives here; the work itself is the layers'
(`data.squad`, `encoding.qa_windows`, `training.spans`, `scoring.answers`, `scoring.squad`, `models.answerer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from bertkit.data.labels import SPANS_TASK
from bertkit.data.options import reads_questions
from bertkit.data.squad import looks_like_squad, read_squad
from bertkit.data.squad_splits import (
    QATraining,
    load_qa_training,
    qa_fingerprint,
    qa_source,
    read_gate_questions,
)
from bertkit.encoding.qa_windows import QAReading
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.families.base import Family
from bertkit.families.results import Evaluation, Predictions, TimedData
from bertkit.families.span_exports import AnswererExport
from bertkit.families.span_probe import PROBE_NOT_READ, span_probe
from bertkit.families.span_runs import question_reading, span_evaluation, span_predictions
from bertkit.models.metadata import is_question_answerer
from bertkit.options import flag, is_given
from bertkit.probe.records import ProbeReport
from bertkit.scoring.answer_outputs import answer_out_problems
from bertkit.training.plans import Training

DATA_NOT_READ = ("text_column", "label_column", "header", "encoding", "cache_dir")
"""Data options a SQuAD set does not read: its columns are SQuAD's, its files UTF-8 JSON, CSV or parquet, read
whole (no cache)."""
TRAINING_NOT_READ = (*DATA_NOT_READ, "dev_fraction", "metric", "class_weight")
"""What question-answering fine-tuning does not read besides: no dev split is held out, --metric scores labels, and
its loss is not weighted by class."""


class Spans(Family):
    name = "spans"
    rows = "questions on passages (SQuAD)"
    chosen_by = "a SQuAD file (SQuAD JSON, or rows with context, question and answers), a hub squad dataset, or --task spans"
    model_noun = "a question-answering model (an answer span of a passage per question)"
    owner_phrase: ClassVar[dict[str, str]] = {"predict": "a question-answering model",
                                              "evaluate": "a question-answering model (or --predictions)",
                                              "distill": "a question-answering teacher"}
    doing: ClassVar[dict[str, str]] = {
        "finetune": "fine-tuning on questions on passages (SQuAD)",
        "distill": "distilling a question-answering model (SQuAD --data and --dev, read in the teacher's windows)",
        "predict": "a question-answering model (it reads --question with --context, or SQuAD --data)",
        "evaluate": "a question-answering model (or --predictions) on SQuAD --data",
        "export": "a question-answering model: its gate reads SQuAD questions, each passage in the windows the model "
                  "records",
        "bench": "questions on passages (SQuAD): bench times them as a question-answering model reads them",
        "probe": "span probes (questions on passages, SQuAD: a linear start and end head per layer)"}
    not_read: ClassVar[dict[str, tuple[str, ...]]] = {
        "finetune": TRAINING_NOT_READ,
        "distill": (*TRAINING_NOT_READ, "test"),
        "predict": DATA_NOT_READ,
        "evaluate": (*DATA_NOT_READ, "metric"),
        "probe": PROBE_NOT_READ,
        "export": (*DATA_NOT_READ, "text_pair_column", "label_sep", "task_preset", "truncation", "long_text", "stride"),
        "bench": (*DATA_NOT_READ, "test"),
    }

    def reads(self, inputs: Any, task: str) -> bool:
        return reads_questions(task, inputs.data, inputs.data_config, inputs.train_split)

    def made(self, folder: str) -> bool:
        return is_question_answerer(folder)

    def option_problems(self, cfg: Any, command: str) -> list[str]:
        """Fine-tuning: a --dev set (no hold-out is made), files that look like SQuAD, windows with room for a question
        and new context; predict: one question with its passage (or --data), answers to .jsonl or .json; evaluate:
        one of --model and --predictions."""
        if command == "predict":
            return predict_problems(cfg)
        if command == "evaluate":
            return evaluate_problems(cfg)
        if command == "bench":
            return bench_problems(cfg)
        if command == "probe":
            return span_probe_problems(cfg)
        if command == "export" and cfg.kind not in ("auto", AnswererExport.kind):
            return [f"--kind {cfg.kind} does not apply to {cfg.model}: it is a question-answering model, exported with "
                    f"its start and end logits per token. Drop --kind (auto), or pass --kind answerer."]
        if command not in ("finetune", "sweep", "distill"):
            return []
        doing = "Distilling a question-answering model" if command == "distill" else "Fine-tuning on questions"
        return dev_problems(cfg.inputs.dev, doing) + not_squad_problems((cfg.inputs.data, cfg.inputs.dev, cfg.inputs.test))

    def predict(self, cfg: Any, *, keep: int | None, progress: bool, on_chunk: Any) -> Predictions:
        """A question-answering model's answers of --question or --data's questions (`span_runs.span_predictions`)."""
        return span_predictions(cfg, keep, progress, on_chunk)

    def evaluate(self, cfg: Any, claim: Any, progress: bool) -> Evaluation:
        """The official SQuAD scores of a model's (or a --predictions file's) answers on --data
        (`span_runs.span_evaluation`)."""
        return span_evaluation(cfg, claim, progress)

    def probe(self, cfg: Any, progress: bool) -> ProbeReport:
        """Which layer answers: a linear start and end head per layer (`span_probe.span_probe`)."""
        return span_probe(cfg, progress)

    def exporter(self, cfg: Any) -> AnswererExport:
        """A question-answering model's start and end logits (`span_exports.AnswererExport`)."""
        return AnswererExport()

    def bench_data(self, cfg: Any) -> TimedData:
        """The questions bench times, with their passages and the windows they are read in (`questions_to_time`)."""
        return questions_to_time(cfg)

    def quality_options(self, cfg: Any) -> dict[str, Any]:
        """The quality runs fine-tune question-answering models on the same SQuAD sets, reading them in the windows
        bench times (--doc-stride as bench resolved it; --max-length comes with bench's data settings)."""
        return {"task": SPANS_TASK, "doc_stride": bench_reading(cfg).doc_stride}

    # ---------------------------------------------------------------- fine-tuning (finetune, sweep)

    table_fields: ClassVar[tuple[str, ...]] = ()
    """SQuAD sets are checked by their own reader, not as tables."""

    def training(self, cfg: Any) -> SpanTraining:
        """A question-answering model's runs: their windows checked against --max-length, then the SQuAD --data,
        --dev and --test read and checked whole (before torch is imported)."""
        training = SpanTraining(None, lambda trial: self.refused_options(trial, "sweep"))
        raise_if_problems(QAReading.of(training.reading(cfg)).problems())
        training.data = load_qa_training(cfg.inputs)
        return training


    def distillation(self, cfg: Any) -> tuple[Any, Any]:
        """A question-answering student (`training.distill_spans.DistillSpanTask`): --data and --dev read and checked
        as SQuAD sets (before torch is imported), in the teacher's windows (its recorded --max-length and doc
        stride, unless --doc-stride is given)."""
        cfg = cfg.in_the_teachers_shape(SPANS_TASK)
        reading = question_reading(cfg.reading.max_length, cfg.reading.doc_stride,
                                   str(cfg.distillation.teacher)).as_reading()
        raise_if_problems(QAReading.of(reading).problems())
        data = load_qa_training(cfg.inputs)
        from bertkit.training.distill_spans import DistillSpanTask

        return cfg, DistillSpanTask(cfg, data, reading)


class SpanTraining(Training):
    """A question-answering model's fine-tuning runs (`training.spans.SpanTask`): windows of --max-length tokens
    sharing --doc-stride, its SQuAD sets read once for every run."""

    def __init__(self, data: QATraining | None, option_problems: Any) -> None:
        super().__init__(option_problems)
        self.data = data

    def reading(self, cfg: Any) -> Reading:
        """The window (as the command resolved it) and the doc stride (`question_reading`)."""
        return question_reading(cfg.reading.max_length, cfg.reading.doc_stride, cfg.model).as_reading()

    def task(self) -> Any:
        from bertkit.training.spans import SpanTask

        return SpanTask(self.data)

    def check_sweep(self, cfg: Any) -> None:
        """--metric-for-best is one its questions score (no value of the space changes the questions)."""
        from bertkit.scoring.answer_objective import span_metric_for_best

        span_metric_for_best(cfg.training.metric_for_best, self.data.dev.version)

    def check_trial(self, checker: Any, trial: Any) -> None:
        """A trial's options, and its windows: --doc-stride against its --max-length."""
        raise_if_problems(self.option_problems(trial) + QAReading.of(self.reading(trial)).problems())


def dev_problems(dev: str | None, doing: str = "Fine-tuning on questions") -> list[str]:
    """No hold-out is made of questions (a passage's questions would straddle the split): a --dev set is needed."""
    return [] if dev is not None else [
        f"{doing} needs --dev (SQuAD dev questions: a file, or a split of the hub dataset --data); no dev split is "
        f"held out of the training questions. Pass --dev dev.json (hub: --dev validation)."]


def not_squad_problems(paths: tuple[str | None, ...]) -> list[str]:
    """Each of `paths` that is an existing file that does not look like a SQuAD set (a missing one: its reader says
    so)."""
    return [f"--task spans reads questions on passages, but {path} does not look like a SQuAD set. Valid: SQuAD JSON "
            f"({{\"data\": [{{\"paragraphs\": [{{\"context\", \"qas\"}}]}}]}}), or rows with id, context, question and "
            f"answers (.json, .jsonl, .csv, .parquet). Pass such data, or drop --task spans."
            for path in dict.fromkeys(paths) if path is not None and Path(path).expanduser().is_file()
            and not looks_like_squad(Path(path).expanduser())]


def span_probe_problems(cfg: Any) -> list[str]:
    """probe: --data and --dev (no dev split is held out of questions), both files SQuAD sets."""
    inputs = cfg.inputs
    problems = [] if inputs.data is not None and inputs.dev is not None else [
        "Probing questions on passages needs --data (SQuAD training questions) and --dev (SQuAD dev questions: a file, "
        "or a split of the hub dataset --data); no dev split is held out of the training questions. Pass --data "
        "train.json --dev dev.json (hub: --dev validation)."]
    return problems + not_squad_problems((inputs.data, inputs.dev))


def predict_problems(cfg: Any) -> list[str]:
    """predict with a question-answering model: --question with exactly one of --context and --context-file (or
    --data), no --text, answers to .jsonl or .json."""
    problems = []
    if cfg.text:
        problems.append("--text does not apply to a question-answering model: it reads a question on a passage. Pass "
                        "--question Q --context C (or --context-file), or SQuAD --data.")
    passages = [name for name, given in (("--context", cfg.context), ("--context-file", cfg.context_file)) if given]
    if cfg.question is not None and len(passages) != 1:
        problems.append("--question needs its passage: exactly one of --context (the text) or --context-file (a text "
                        "file). Pass one of them.")
    if cfg.question is None and passages:
        problems.append(f"{passages[0]} is the passage of a --question. Pass --question too, or drop {passages[0]}.")
    if cfg.question is not None and not cfg.question.strip():
        problems.append("--question is empty. Pass the question's text.")
    if cfg.context is not None and not cfg.context.strip():
        problems.append("--context is empty. Pass the passage's text, or --context-file.")
    return problems + answer_out_problems(cfg.out)


def evaluate_problems(cfg: Any) -> list[str]:
    """evaluate on questions: --model or --predictions (not both); --null-odds goes with --predictions; the answers'
    options with --model."""
    if cfg.model is not None and cfg.predictions is not None:
        return ["Give one of --model (a question-answering model, whose answers are scored) or --predictions (a "
                "file of answers, scored as it is), not both. Drop one."]
    if cfg.predictions is None and cfg.null_odds is not None:
        return ["--null-odds goes with --predictions (another system's null odds); a --model's are computed. Drop "
                "--null-odds, or pass --predictions."]
    given = [flag(name) for name in ("n_best", "max_answer_length", "null_threshold", "doc_stride", "max_length")
             if is_given(cfg, name)]
    if cfg.predictions is not None and given:
        flags = ", ".join(given)
        return [f"{flags} read a model's answers; --predictions are scored as they are. Drop {flags}."]
    return []


# ---------------------------------------------------------------- bench


def bench_reading(cfg: Any) -> QAReading:
    """The windows bench times questions in: --max-length (as bench resolved it: the first of --models that records
    a reading, else the family's 384, `Reading.from_options`) sharing the doc stride `question_reading` resolves
    against the first question-answering model of --models (a base encoder records none)."""
    answerers = [m for m in cfg.model_list if is_question_answerer(m)]
    return question_reading(Reading.from_options(cfg).max_length, cfg.doc_stride, next(iter(answerers), None))


def questions_to_time(cfg: Any) -> TimedData:
    """The timed questions: --dev's if given, else --data's (a SQuAD file, or the --train-split of a hub squad
    dataset), read and checked whole as `bertkit evaluate` reads a set, its first --limit kept; their windows'
    settings checked (all before torch is imported)."""
    reading = bench_reading(cfg)
    raise_if_problems(reading.problems())
    inputs = cfg.inputs
    if inputs.dev is None:
        timed = read_gate_questions(str(inputs.data), None, inputs.data_config, inputs.train_split).corpus
    else:
        timed = read_squad(qa_source(str(inputs.dev), "--dev", str(inputs.data), inputs.data_config))
    questions = list(timed.questions[:inputs.limit] if inputs.limit else timed.questions)
    if not questions:  # read_squad refuses an empty set; a --limit of 0 is refused by the data options
        raise UserError(f"No questions to benchmark on: {timed.source} holds none. Pass a SQuAD set with questions.")
    return TimedData(questions, {"source": str(timed.source), "fingerprint": qa_fingerprint(timed)},
                     questions=reading)


def bench_problems(cfg: Any) -> list[str]:
    """Timing question-answering models: --data given, the files SQuAD sets; --quality finetune needs --dev (no
    hold-out is made of questions); --quality probe is not bench's on questions (the span probe's table is its own
    command)."""
    problems = [] if cfg.inputs.data else [
        "--task spans needs --data (SQuAD questions on passages: a file such as dev.json, or the hub dataset squad). "
        "Pass --data."]
    problems += not_squad_problems((cfg.inputs.data, cfg.inputs.dev))
    if "probe" in cfg.quality_kinds:
        problems.append("--quality probe does not time questions on passages: bench scores them by fine-tuning. Pass "
                        "--quality finetune (each model fine-tuned on --data, scored by F1 on --dev), or drop "
                        "--quality; `bertkit probe --data train.json --dev dev.json` gives each layer's F1.")
    if "finetune" in cfg.quality_kinds and cfg.inputs.dev is None:
        problems.append("--quality finetune on questions needs --dev (SQuAD dev questions, where each fine-tuned model "
                        "is scored by F1); no dev split is held out of the training questions. Pass --dev dev.json "
                        "(hub: --dev validation).")
    return problems


SPANS = Spans()
