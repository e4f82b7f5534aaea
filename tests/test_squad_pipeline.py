"""The spans layers compose: a SQuAD file read, its questions as windows, a tiny random question-answering model's
logits per batch back per window, answers from them and the official scores; and a training batch's labels take
a loss. (The family wiring over these is not here: the commands come later.)"""

from __future__ import annotations

import json

import numpy as np

from bertkit.data.squad import read_squad
from bertkit.encoding.qa_windows import QAReading, batch_tensors, inference_batches, qa_windows, window_rows
from bertkit.scoring.answers import AnswerSettings, official_predictions, predicted_answers
from bertkit.scoring.squad import score_squad

PASSAGE = ("Super Bowl 50 was an American football game to determine the champion of the National Football League "
           "for the 2015 season. The American Football Conference champion Denver Broncos defeated the National "
           "Football Conference champion Carolina Panthers 24 to 10 to earn their third Super Bowl title. The game "
           "was played on February 7, 2016, at Levi's Stadium in the San Francisco Bay Area at Santa Clara.")


def squad_file(tmp_path):
    qas = [("Who won Super Bowl 50?", "Denver Broncos"), ("Where was the game played?", "Levi's Stadium"),
           ("When was the game played?", "February 7, 2016"), ("Who lost?", "Carolina Panthers")]
    document = {"version": "1.1", "data": [{"title": "Super_Bowl_50", "paragraphs": [{"context": PASSAGE, "qas": [
        {"id": f"q{i}", "question": question, "answers": [{"text": answer, "answer_start": PASSAGE.index(answer)}]}
        for i, (question, answer) in enumerate(qas)]}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_file_to_official_scores_through_a_tiny_model(tiny_bert_dir, tmp_path):
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    corpus = read_squad(squad_file(tmp_path))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(str(tiny_bert_dir)).eval()
    windows = qa_windows(tokenizer, corpus.questions, QAReading(max_length=48, doc_stride=16))
    batches = inference_batches(windows, batch_size=3)
    starts, ends = [], []
    with torch.no_grad():
        for batch in batches:
            out = model(**batch_tensors(windows, batch, tokenizer.pad_token_id))
            starts.append(out.start_logits.numpy())
            ends.append(out.end_logits.numpy())
    start_rows, end_rows = (window_rows(batches, part, windows.lengths) for part in (starts, ends))
    answers = predicted_answers(corpus.questions, windows, start_rows, end_rows, AnswerSettings(max_answer_length=8))
    assert windows.n_windows > corpus.n_questions
    for answer in answers:  # a random model answers something, and only ever a span of the passage
        assert answer.answer and PASSAGE[answer.start:answer.end] == answer.answer
        assert len(tokenizer(answer.answer, add_special_tokens=False)["input_ids"]) <= 8
    scores = score_squad(corpus.questions, official_predictions(answers), rules=corpus.version)
    assert scores.total == 4 and scores.n_missing == 0 and 0.0 <= scores.f1 <= 100.0


def test_a_training_batch_s_labels_take_a_loss(tiny_bert_dir, tmp_path):
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    corpus = read_squad(squad_file(tmp_path))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    model = AutoModelForQuestionAnswering.from_pretrained(str(tiny_bert_dir))
    windows = qa_windows(tokenizer, corpus.questions, QAReading(max_length=48, doc_stride=16))
    batch = batch_tensors(windows, np.arange(windows.n_windows), tokenizer.pad_token_id, labels=True)
    loss = model(**batch).loss
    assert torch.isfinite(loss) and loss.item() > 0
    assert (batch["start_positions"] > 0).sum() >= corpus.n_questions  # every answer held whole by some window
