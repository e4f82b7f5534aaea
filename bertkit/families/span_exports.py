"""The spans family's export: a question-answering model to an ONNX graph ending in its start and end logits per token
(`models.onnx`, kind `answerer`), read in the windows the model records (its window, doc stride and question budget),
and gated on SQuAD questions - --data, or the dev set of the `bertkit finetune` run the model was saved in - by the
answer agreement with the PyTorch fp32 model and the drop of the official F1 (`scoring.answer_gate`). predict and
evaluate read the export folder as they read the PyTorch one (`models.onnx_answerer.load_any_answerer`)."""

from __future__ import annotations

from typing import Any

from bertkit.data.squad_splits import GateQuestions, read_gate_questions, run_dev_questions
from bertkit.encoding.qa_windows import QAReading
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.families.exports import Exporter, run_dev_set
from bertkit.features.settings import Pooling
from bertkit.models.export_gate import GateReport
from bertkit.models.metadata import saved_question_answering, saved_reading
from bertkit.scoring.answers import AnswerSettings


class AnswererExport(Exporter):
    """A question-answering model: the graph ends in its start and end logits per token, (batch, tokens, 2); gated by
    the answers of the gate questions against the PyTorch fp32 model's and the drop of the official F1."""

    kind = "answerer"
    ignores = (*Pooling.KEYS, "min_cosine")
    what = "a question-answering model (its graph ends in start and end logits per token)"

    def checked_data(self, cfg: Any) -> GateQuestions:
        """The gate questions (the first --limit): --data (a SQuAD set, checked whole under its version as evaluate
        reads it), or the dev set of the question-answering run the model folder was saved in; read and checked
        before torch is imported."""
        inputs = cfg.inputs
        questions = read_gate_questions(inputs.data, inputs.limit, inputs.data_config, inputs.train_split) \
            if inputs.data else run_dev_set(cfg, lambda config, _: run_dev_questions(config, inputs.limit),
                                            "questions", "dev.json")
        if len(questions) == 0:
            raise UserError(f"The gate data {questions.source} has no questions. Pass --data with SQuAD questions to "
                            f"compare the models on.")
        return questions

    def reading(self, cfg: Any) -> Reading:
        """The model's windows as it records them (--max-length, read as saved; its doc stride), which the export
        records too."""
        return export_reading(cfg).as_reading()

    def gate(self, cfg: Any, model: Any, exported: Any, tokenizer: Any, dataset: Any, spec: Any,
             reading: Reading) -> GateReport:
        from bertkit.scoring import answer_gate

        return answer_gate.export_answer_gate(cfg.model or "", model, exported, tokenizer, export_reading(cfg), dataset,
                                              saved_answer_settings(cfg.model or ""), batch_size=cfg.batch_size,
                                              min_agreement=cfg.gate.min_agreement, max_drop=cfg.gate.max_drop)


def export_reading(cfg: Any) -> QAReading:
    """How the model in --model reads questions and passages: --max-length (as `cfg` resolved it against the model's
    record), the doc stride and the question budget it records; refused where a window has no room."""
    model = cfg.model or ""
    recorded = saved_reading(model)
    stride = recorded.stride if recorded is not None else None
    reading = QAReading.of(Reading(cfg.reading.max_length, stride=stride), saved_question_answering(model)[1])
    raise_if_problems(reading.problems())
    return reading


def saved_answer_settings(model: str) -> AnswerSettings:
    """How the model's answers are read, as predict reads them by default: run_qa.py's n-best and longest answer;
    a SQuAD v2.0 model may leave a question unanswered, at the no-answer threshold it records."""
    version, _, threshold = saved_question_answering(model)
    return AnswerSettings(allow_null=version == "2.0", null_threshold=float(threshold or 0.0))
