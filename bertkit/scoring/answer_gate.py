"""The export gate of a question-answering model (`bertkit export` on a model fine-tuned on SQuAD data): the export
(`models.onnx`, kind `answerer`) against the PyTorch fp32 model on the gate questions (--data, or the dev set of the
run the model was saved in), both read through predict's one path - the questions' windows
(`encoding.qa_windows`), each window's start and end logits (`models.answerer.answer_logits`), run_qa.py's
post-processing (`scoring.answers`) - and scored by the official SQuAD rules of the set's version
(`scoring.squad`).

What it reports: the share of questions whose answer text is the fp32 model's (`agreement`, gated by
--min-agreement), the mean SQuAD F1 of the export's answers against the fp32 model's as if those were gold
(`answer_f1_agreement`: a changed answer that still overlaps counts in part), the largest absolute difference of
their logits over the windows' tokens, and both models' official F1 on the gold answers (`metric_fp32`,
`metric_export`, as shares: 0.518 is F1 51.8) and the drop between them, gated by --max-drop (0.01: one point of F1),
as a tagger's entity F1 is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bertkit.data.squad import Question
from bertkit.data.squad_splits import GateQuestions
from bertkit.encoding.qa_windows import QAReading, qa_windows
from bertkit.models.answerer import SavedAnswerer, answer_logits
from bertkit.models.compute import Compute
from bertkit.models.export_gate import GateReport
from bertkit.models.onnx import OnnxModel, export_compute
from bertkit.models.onnx_answerer import saved_answerer
from bertkit.scoring.answer_objective import scored_answers
from bertkit.scoring.answers import AnswerSettings, PredictedAnswer, predicted_answers
from bertkit.scoring.squad import f1_v1

FP32 = Compute("cpu", "fp32")
"""Where and how the PyTorch model the export is compared with runs: the CPU in fp32, as the export was traced."""
CHUNK_QUESTIONS = 256
"""Questions read, answered and compared at a time: their windows' logits are the most the gate holds."""


def export_answer_gate(model_dir: str, model: Any, exported: OnnxModel, tokenizer: Any, reading: QAReading,
                       data: GateQuestions, settings: AnswerSettings, *, batch_size: int, min_agreement: float,
                       max_drop: float) -> GateReport:
    """`answer_gate` of the export's session `exported` against the PyTorch fp32 model `model` saved in `model_dir`,
    both reading questions as `reading` says, `batch_size` windows per batch, answers read as `settings` say."""
    source = saved_answerer(model_dir, model, tokenizer, reading, FP32)
    onnx = saved_answerer(exported.folder, exported, tokenizer, reading, export_compute(exported.folder))
    return answer_gate(source, onnx, data, settings, batch_size, min_agreement, max_drop)


def answer_gate(source: SavedAnswerer, exported: SavedAnswerer, data: GateQuestions, settings: AnswerSettings,
                batch_size: int, min_agreement: float, max_drop: float) -> GateReport:
    """The export against the PyTorch fp32 model on the gate questions (see the module docstring); `passed` when
    the answer agreement is at least `min_agreement` and the F1 drop at most `max_drop`."""
    reference: list[PredictedAnswer] = []
    answers: list[PredictedAnswer] = []
    largest = 0.0
    for start in range(0, len(data), CHUNK_QUESTIONS):
        chunk = data.questions[start:start + CHUNK_QUESTIONS]
        ours, theirs, difference = compared_chunk(source, exported, chunk, settings, batch_size)
        reference += ours
        answers += theirs
        largest = max(largest, difference)
    same = np.array([a.answer == b.answer for a, b in zip(reference, answers, strict=True)], dtype=bool)
    agreement = float(same.mean()) if len(same) else 1.0
    soft = [f1_v1(b.answer, a.answer) if a.answer or b.answer else 1.0 for a, b in zip(reference, answers,
                                                                                       strict=True)]
    rules = data.corpus.version
    before = scored_answers(data.questions, reference, rules, settings, 0, 0).f1 / 100
    after = scored_answers(data.questions, answers, rules, settings, 0, 0).f1 / 100
    drop = before - after
    return GateReport.of(statistic="agreement", threshold=min_agreement, rows=len(data), task="spans", rules=rules,
                         agreement=agreement, disagreeing_rows=int((~same).sum()),
                         answer_f1_agreement=float(np.mean(soft)) if soft else 1.0, max_abs_logit_diff=largest,
                         metric="f1", metric_fp32=before, metric_export=after, metric_drop=drop, max_drop=max_drop,
                         passed=bool(agreement >= min_agreement and drop <= max_drop))


def compared_chunk(source: SavedAnswerer, exported: SavedAnswerer, questions: Sequence[Question],
                   settings: AnswerSettings, batch_size: int) -> tuple[list[PredictedAnswer], list[PredictedAnswer],
                                                                      float]:
    """(the fp32 model's answers to `questions`, the export's, the largest absolute difference of their start and
    end logits over the windows' tokens): one set of windows, read by both."""
    windows = qa_windows(source.tokenizer, questions, source.reading)
    ours = answer_logits(source, windows, batch_size)
    theirs = answer_logits(exported, windows, batch_size)
    difference = max((float(np.abs(a - b).max()) for side in (0, 1) for a, b in zip(ours[side], theirs[side],
                                                                                    strict=True) if len(a)),
                     default=0.0)
    return (predicted_answers(questions, windows, *ours, settings),
            predicted_answers(questions, windows, *theirs, settings), difference)
