"""The spans family's part of `bertkit predict` and `bertkit evaluate`. predict: a question-answering model answers
--question on --context (or --context-file), or --data's questions, `scoring.answers.CHUNK_QUESTIONS` at a time (their windows read
as the model records, its n-best spans post-processed as run_qa.py does), each chunk written to --out (.jsonl rows or
the official .json mapping) and handed to the command's `on_chunk` (an `AnsweredChunk`). evaluate: the official SQuAD
exact match and F1 of the model's answers on --data (or of another system's --predictions file, no model run), with
intervals, the v2.0 breakdowns and best threshold, the kinds of errors and F1 by question word; with --out the
answers and the errors CSV (most confident first)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.data.answer_files import read_answer_predictions, read_context_file, read_null_odds
from bertkit.data.squad import DataSource, QACorpus, Question, read_squad
from bertkit.data.squad_splits import qa_fingerprint
from bertkit.data.tagged import is_file_value
from bertkit.encoding.qa_windows import QAReading
from bertkit.encoding.reading import Reading
from bertkit.errors import raise_if_problems
from bertkit.families.results import Evaluation, Predictions, written_chunks
from bertkit.models.metadata import (
    is_question_answerer,
    read_as_saved,
    saved_question_answering,
    saved_reading,
)
from bertkit.scoring.scores import Scores

if TYPE_CHECKING:
    from bertkit.models.answerer import SavedAnswerer
    from bertkit.scoring.answers import AnswerSettings, PredictedAnswer

log = logging.getLogger(__name__)

BOOTSTRAP_RESAMPLES = 1000
QUESTION_ID = "q1"
"""The id of the one question --question asks."""


@dataclass(frozen=True)
class AnsweredChunk:
    """One chunk of questions as predict hands it on: their answers, in question order."""

    answers: list[PredictedAnswer]


# ---------------------------------------------------------------- the model, read as saved


def question_reading(max_length: int | None, doc_stride: int | None, model: str | None) -> QAReading:
    """How a run that reads questions with `model` windows them, the one resolution `bertkit finetune`, `distill`,
    `bench` and the span probe share: `max_length` (the command's, resolved against the model's record), and --doc-stride `doc_stride`, else the
    stride the model records when it is a question-answering model, else `DOC_STRIDE`."""
    stride = doc_stride
    if stride is None and model is not None and is_question_answerer(model):
        recorded = saved_reading(model)
        stride = recorded.stride if recorded is not None else None
    return QAReading.of(Reading(max_length, stride=stride))


def answer_reading(cfg: Any) -> QAReading:
    """How the model reads questions and passages: its window (`cfg`, read as the model records it), the doc stride
    (--doc-stride, else the model's record, else run_qa.py's 128) and its question budget; refused (before torch)
    where a window has no room for a question token and new context."""
    recorded = saved_reading(cfg.model or "")
    given = cfg.answers.doc_stride
    if given is not None and recorded is not None and recorded.stride is not None and given != recorded.stride:
        log.warning("--doc-stride %d: the model %s records %d (read with %d, as asked)", given, cfg.model,
                    recorded.stride, given)
    stride = given if given is not None else recorded.stride if recorded is not None else None
    reading = QAReading.of(Reading(cfg.reading.max_length, stride=stride), saved_question_answering(cfg.model or "")[1])
    raise_if_problems(reading.problems())
    return reading


def loaded_answerer(cfg: Any) -> tuple[Any, SavedAnswerer, AnswerSettings]:
    """(`cfg` read as the model records, the model (a PyTorch folder, or its ONNX export in the precision baked into
    it) loaded in the run's one resolution of --precision, how its answers are read: run_qa.py's post-processing with
    --n-best and --max-answer-length; unanswerable questions where the model was trained on SQuAD v2.0 or
    --null-threshold is given, at --null-threshold or the threshold its dev set chose). The folder and the reading
    are checked before torch is imported."""
    from bertkit.models import loading

    loading.check_model_folder(cfg.model or "")  # its files as recorded, before anything reads them
    cfg = read_as_saved(cfg)
    reading = answer_reading(cfg)
    version, _, threshold = saved_question_answering(cfg.model or "")
    settings = cfg.answers.settings(version == "2.0" or cfg.answers.null_threshold is not None, threshold)
    raise_if_problems(settings.problems())
    from bertkit.models import infer  # torch
    from bertkit.models.onnx_answerer import load_any_answerer

    compute = infer.compute_of_model(cfg.model or "", cfg.precision)  # an export: its own, on the CPU
    return cfg, load_any_answerer(cfg.model or "", compute, reading), settings


# ---------------------------------------------------------------- predict


def span_predictions(cfg: Any, keep: int | None, progress: bool, on_chunk: Callable[[Any], None] | None) -> Predictions:
    """The answers of --question (on --context or --context-file) or of --data's questions; the first `keep` kept in
    the record, every chunk written to --out and handed to `on_chunk`."""
    from bertkit.models import infer
    from bertkit.scoring.answers import answered

    cfg, answerer, settings = loaded_answerer(cfg)
    questions = questions_to_answer(cfg)
    with infer.closing(infer.progress_bar(len(questions), "predict", progress, unit="questions")) as bar:
        kept, total = written_answers(cfg.out, answered(answerer, questions, settings, cfg.batch_size, bar), keep,
                                      on_chunk)
    reading = answerer.reading
    return Predictions("spans", [], settings.null_threshold, cfg.out,
                       infer.precision_of(answerer.model, answerer.compute), reading.max_length, family="spans",
                       answers=kept, n_questions=total, doc_stride=reading.doc_stride,
                       allow_null=settings.allow_null)


def questions_to_answer(cfg: Any) -> list[Question]:
    """--question on its passage, or --data's questions (read as SQuAD v2.0: a question without gold answers is
    fine here; the first --limit of them)."""
    if cfg.question is not None:
        context = cfg.context if cfg.context is not None else read_context_file(cfg.context_file)
        return [Question(QUESTION_ID, "", context, cfg.question, ())]
    corpus = read_squad(data_source(cfg.inputs), version="2.0")
    return list(corpus.questions[:cfg.inputs.limit] if cfg.inputs.limit else corpus.questions)


def data_source(inputs: Any) -> DataSource:
    """--data as a SQuAD source: a file, or the hub dataset's --train-split."""
    data = str(inputs.data)
    return DataSource(data) if is_file_value(data) else DataSource(data, inputs.train_split, inputs.data_config)


def written_answers(out: str | None, chunks: Any, keep: int | None,
                    on_chunk: Callable[[Any], None] | None) -> tuple[list[PredictedAnswer], int]:
    """Every chunk of answers to --out (answers.jsonl, or the official predictions.json; none: nowhere) and
    `on_chunk` (an `AnsweredChunk`); (the first `keep`, the count)."""
    from bertkit.scoring.answer_outputs import open_answer_predictions

    return written_chunks(out, open_answer_predictions, chunks, keep, on_chunk, AnsweredChunk)


# ---------------------------------------------------------------- evaluate


def span_evaluation(cfg: Any, claim: Callable[[], Path] | None, progress: bool) -> Evaluation:
    """The official scores of a question-answering model's answers (or of --predictions) on SQuAD --data, under the
    rules of its version (`scoring.squad.score_squad`): exact match and F1 (in %) with intervals over questions,
    v2.0's HasAns/NoAns and best threshold, the kinds of errors and F1 by question word; with `claim` (the evaluate
    run's folder, claimed once everything was checked) errors.csv and (a model) predictions.json, answers.jsonl and
    null_odds.json."""
    if cfg.predictions is not None:
        return predictions_evaluation(cfg, claim)
    from bertkit.models import infer
    from bertkit.scoring.answer_objective import answer_scores_record, scored_answers
    from bertkit.scoring.answers import answered

    cfg, answerer, settings = loaded_answerer(cfg)
    corpus, questions = gold_questions(cfg)
    with infer.closing(infer.progress_bar(len(questions), "evaluate", progress, unit="questions")) as bar:
        answers = [a for chunk in answered(answerer, questions, settings, cfg.batch_size, bar) for a in chunk]
    scores = scored_answers(questions, answers, corpus.version, settings, BOOTSTRAP_RESAMPLES, cfg.inputs.seed)
    if claim is not None:
        write_model_answers(claim(), answers, scores, settings)
    record = answer_scores_record(scores)
    if settings.allow_null and corpus.version == "2.0":
        record["threshold"] = settings.null_threshold
    reading = answerer.reading
    return Evaluation(cfg.model or "", str(corpus.source), qa_fingerprint(corpus), reading.max_length, "chunk",
                      None, infer.precision_of(answerer.model, answerer.compute), Scores.from_json(record),
                      doc_stride=reading.doc_stride)


def gold_questions(cfg: Any) -> tuple[QACorpus, list[Question]]:
    """--data read and checked whole under its own version, and the questions scored (the first --limit)."""
    corpus = read_squad(data_source(cfg.inputs))
    return corpus, list(corpus.questions[:cfg.inputs.limit] if cfg.inputs.limit else corpus.questions)


def predictions_evaluation(cfg: Any, claim: Callable[[], Path] | None) -> Evaluation:
    """--predictions ({id: answer}, from any system) scored against --data exactly as the official script of its
    version scores them: a question without a prediction scores 0 and is counted (`missing`); with --null-odds
    (v2.0) the best thresholds. No model runs."""
    from bertkit.scoring.answer_objective import answer_scores_record
    from bertkit.scoring.answer_outputs import write_answer_errors
    from bertkit.scoring.squad import error_rows, score_squad

    predictions = read_answer_predictions(str(cfg.predictions))
    odds = read_null_odds(str(cfg.null_odds)) if cfg.null_odds is not None else None
    corpus, questions = gold_questions(cfg)
    scores = score_squad(questions, predictions, rules=corpus.version, null_odds=odds if corpus.version == "2.0"
                         else None, n_boot=BOOTSTRAP_RESAMPLES, seed=cfg.inputs.seed)
    unknown = len(set(predictions) - {q.id for q in questions})
    if unknown:
        log.warning("%d prediction(s) in %s are for questions --data does not hold (or --limit leaves out): not "
                    "scored, as the official scripts do", unknown, cfg.predictions)
    if claim is not None:
        write_answer_errors(claim() / "errors.csv", error_rows(scores))
    return Evaluation(str(cfg.predictions), str(corpus.source), qa_fingerprint(corpus), None, None, None, None,
                      Scores.from_json(answer_scores_record(scores)))


def write_model_answers(folder: Path, answers: Sequence[PredictedAnswer], scores: Any,
                        settings: AnswerSettings) -> None:
    """evaluate's files of a model: predictions.json (the official {id: answer}), answers.jsonl (predict's rows),
    null_odds.json (a model that may leave questions unanswered) and errors.csv (the wrong answers, most confident
    first)."""
    from bertkit.io import atomic
    from bertkit.scoring.answer_outputs import open_answer_predictions, write_answer_errors
    from bertkit.scoring.answers import null_odds, official_predictions
    from bertkit.scoring.squad import error_rows

    atomic.write_json_atomic(folder / "predictions.json", official_predictions(answers))
    with open_answer_predictions(folder / "answers.jsonl") as append:
        append(answers)
    if settings.allow_null:
        atomic.write_json_atomic(folder / "null_odds.json", null_odds(answers))
    write_answer_errors(folder / "errors.csv", error_rows(scores, {a.id: a.probability for a in answers}))
