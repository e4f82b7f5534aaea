"""Questions on long passages as windows: run_qa.py's prepare_train_features / prepare_validation_features
(transcribed below as the reference) give the same windows, labels and offsets; a window without the whole answer
points at [CLS]; long questions are cut, not a tokenizer panic; settings that leave no context are refused; windows
batch as bertkit batches rows."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.data.squad import Answer, Question, read_squad
from bertkit.encoding.qa_windows import (
    NOT_CONTEXT,
    QAReading,
    batch_tensors,
    inference_batches,
    qa_windows,
    training_batches,
    window_rows,
)
from bertkit.errors import UserError

PASSAGE = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region in "
           "France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway who, under "
           "their leader Rollo, agreed to swear fealty to King Charles III of West Francia. Through generations of "
           "assimilation and mixing with the native Frankish and Roman-Gaulish populations, their descendants would "
           "gradually merge with the Carolingian-based cultures of West Francia.")


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm_dir))


def question(qid: str, text: str, answer: str | None, context: str = PASSAGE, nth: int = 0) -> Question:
    if answer is None:
        return Question(qid, "", context, text, (), True)
    start = -1
    for _ in range(nth + 1):
        start = context.index(answer, start + 1)
    return Question(qid, "", context, text, (Answer(answer, start),))


def run_qa_features(tokenizer, questions, max_length, stride):
    """run_qa.py's prepare_train_features and prepare_validation_features, transcribed (question first, no
    padding): per window its question index, (start, end) labels and validation offset mapping."""
    enc = tokenizer([q.question.lstrip() for q in questions], [q.context for q in questions], truncation="only_second",
                    max_length=max_length, stride=stride, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding=False)
    out = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        input_ids, sequence_ids = enc["input_ids"][i], enc.sequence_ids(i)
        cls_index = input_ids.index(tokenizer.cls_token_id)
        q = questions[enc["overflow_to_sample_mapping"][i]]
        label = (cls_index, cls_index)
        if q.answers:
            start_char = q.answers[0].start
            end_char = start_char + len(q.answers[0].text)
            token_start_index = 0
            while sequence_ids[token_start_index] != 1:
                token_start_index += 1
            token_end_index = len(input_ids) - 1
            while sequence_ids[token_end_index] != 1:
                token_end_index -= 1
            if offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char:
                while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char:
                    token_start_index += 1
                while offsets[token_end_index][1] >= end_char:
                    token_end_index -= 1
                label = (token_start_index - 1, token_end_index + 1)
        validation = [o if sequence_ids[k] == 1 else None for k, o in enumerate(offsets)]
        out.append((enc["overflow_to_sample_mapping"][i], label, validation, input_ids))
    return out


QUESTIONS = [
    question("start", "Who gave their name to Normandy?", "The Normans"),
    question("middle", "Who was their leader?", "Rollo"),
    question("late", "What cultures did they merge with?", "Carolingian-based cultures of West Francia"),
    question("none", "What is the capital of Norway?", None),
    question("short", "Where is Normandy?", "France", context="Normandy is in France, in Europe."),
]


def test_windows_labels_and_offsets_are_run_qa_s(tokenizer):
    reading = QAReading(max_length=48, doc_stride=12)
    windows = qa_windows(tokenizer, QUESTIONS, reading)
    reference = run_qa_features(tokenizer, QUESTIONS, 48, 12)
    assert windows.n_windows == len(reference) > len(QUESTIONS)  # the long passage takes several windows
    assert windows.window_question.tolist() == [r[0] for r in reference]
    assert [row.tolist() for row in windows.encoded.input_ids] == [r[3] for r in reference]
    assert list(zip(windows.start_positions.tolist(), windows.end_positions.tolist(), strict=True)) == [
        r[1] for r in reference]
    assert [windows.offsets(k) for k in range(windows.n_windows)] == [r[2] for r in reference]
    assert windows.encoded.token_type_ids is not None and windows.n_questions_cut == 0


def test_a_window_without_the_whole_answer_points_at_cls_and_one_with_it_decodes_to_it(tokenizer):
    windows = qa_windows(tokenizer, QUESTIONS, QAReading(max_length=48, doc_stride=12))
    for k in range(windows.n_windows):
        q = QUESTIONS[windows.window_question[k]]
        start, end = int(windows.start_positions[k]), int(windows.end_positions[k])
        starts, ends = windows.char_starts[k], windows.char_ends[k]
        context = starts[starts != NOT_CONTEXT]
        holds = bool(q.answers) and context.min() <= q.answers[0].start and ends.max() >= q.answers[0].end
        if not holds:
            assert start == end == 0
        else:
            assert q.context[starts[start]:ends[end]] == q.answers[0].text
    bounds = windows.question_bounds()
    assert bounds.tolist()[0] == 0 and bounds[-1] == windows.n_windows
    none = QUESTIONS.index(next(q for q in QUESTIONS if q.id == "none"))
    assert (windows.start_positions[bounds[none]:bounds[none + 1]] == 0).all()


def test_neighbouring_windows_share_doc_stride_context_tokens(tokenizer):
    windows = qa_windows(tokenizer, QUESTIONS[:1], QAReading(max_length=48, doc_stride=12))
    spans = [windows.char_starts[k][windows.char_starts[k] != NOT_CONTEXT] for k in range(windows.n_windows)]
    for before, after in zip(spans, spans[1:], strict=False):
        assert np.intersect1d(before, after).size == 12


def test_an_answer_in_a_window_s_last_context_token_is_labelled_there(tokenizer):
    """run_qa.py walks past the last context token onto [SEP] (offsets (0, 0)) and labels start after end; here the
    start stays on the answer's token."""
    reading = QAReading(max_length=24, doc_stride=4)
    probe = qa_windows(tokenizer, [question("p", "Who?", "Rollo")], reading)
    starts, ends = probe.char_starts[0], probe.char_ends[0]
    last = int(np.flatnonzero(starts != NOT_CONTEXT)[-1])
    word = PASSAGE[starts[last]:ends[last]]  # the first window's last context token, a whole word here
    q = Question("edge", "", PASSAGE, "Who?", (Answer(word, int(starts[last])),))
    ours = qa_windows(tokenizer, [q], reading)
    reference = run_qa_features(tokenizer, [q], 24, 4)
    assert (ours.start_positions[0], ours.end_positions[0]) == (last, last)
    assert reference[0][1][0] > reference[0][1][1]  # run_qa.py's label: start after end
    assert [(int(s), int(e)) for s, e in zip(ours.start_positions[1:], ours.end_positions[1:], strict=True)] == [
        r[1] for r in reference[1:]]


def test_a_question_longer_than_the_budget_is_cut_to_max_question_length(tokenizer):
    long = question("long", "  " + "Which of the many peoples of the north " * 20 + "gave Normandy its name?",
                    "The Normans")
    reading = QAReading(max_length=48, doc_stride=8, max_question_length=16)
    windows = qa_windows(tokenizer, [long, QUESTIONS[1]], reading)
    assert windows.n_questions_cut == 1
    first = windows.encoded.token_type_ids[0]
    assert int((first == 0).sum()) == 16 + 2  # [CLS], 16 question tokens, [SEP]
    assert (windows.char_starts[0] != NOT_CONTEXT).sum() > 8  # context still read, past the shared tokens
    assert int(windows.lengths.max()) <= 48


def test_settings_that_leave_a_window_no_new_context_are_refused(tokenizer):
    with pytest.raises(UserError, match=r"--doc-stride 44 leaves no room in a window.*leaves 1, .*at most 43"):
        qa_windows(tokenizer, QUESTIONS, QAReading(max_length=48, doc_stride=44))
    assert QAReading(max_length=0).problems() and not QAReading().problems()
    assert QAReading().question_budget == 64  # run_squad.py's max_query_length where the window has room
    assert QAReading(max_length=48, doc_stride=12).question_budget == 16  # (48 - 3 - 12) // 2: new context each window
    reading = QAReading(max_length=256, doc_stride=64, max_question_length=32)
    assert QAReading.from_json(reading.to_json()) == reading
    assert QAReading().to_json() == {"max_length": 384, "doc_stride": 128, "max_question_length": 64}


def test_a_slow_tokenizer_is_refused():
    class Slow:
        is_fast = False

    with pytest.raises(UserError, match="needs a fast tokenizer"):
        qa_windows(Slow(), QUESTIONS)


def test_windows_batch_pad_and_come_back_in_order(tokenizer):
    windows = qa_windows(tokenizer, QUESTIONS, QAReading(max_length=48, doc_stride=12))
    batches = training_batches(windows, batch_size=3, seed=1, epoch=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(windows.n_windows))
    assert [b.tolist() for b in batches] == [b.tolist() for b in training_batches(windows, 3, 1, 0)]
    ordered = inference_batches(windows, batch_size=2)
    lengths = windows.lengths[np.concatenate(ordered)]
    assert (np.diff(lengths) <= 0).all()
    batch = batch_tensors(windows, ordered[-1], tokenizer.pad_token_id, labels=True)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions"}
    assert batch["start_positions"].tolist() == windows.start_positions[ordered[-1]].tolist()
    assert batch["input_ids"].shape[1] == int(windows.lengths[ordered[-1]].max())
    outputs = [np.pad(np.asarray(b, dtype=np.float32)[:, None] + np.arange(48), ((0, 0), (0, 0))) for b in ordered]
    rows = window_rows(ordered, outputs, windows.lengths)
    assert [len(r) for r in rows] == windows.lengths.tolist()
    assert [float(r[0]) for r in rows] == list(range(windows.n_windows))  # each window's own row
    with pytest.raises(ValueError, match="have no output"):
        window_rows(ordered[:1], outputs[:1], windows.lengths)


def test_tydiqa_dev_windows_match_run_qa(tokenizer, shared_data):
    dev = read_squad(shared_data / "tydiqa_goldp_en" / "dev.json")
    windows = qa_windows(tokenizer, dev.questions, QAReading(max_length=128, doc_stride=32))
    reference = run_qa_features(tokenizer, dev.questions, 128, 32)
    assert windows.n_windows == len(reference) > dev.n_questions  # long passages are read in windows
    ours = list(zip(windows.start_positions.tolist(), windows.end_positions.tolist(), strict=True))
    differ = [k for k, r in enumerate(reference) if ours[k] != r[1]]
    assert all(reference[k][1][0] > reference[k][1][1] for k in differ)  # only run_qa.py's start-after-end labels
    for k in range(windows.n_windows):
        q = dev.questions[windows.window_question[k]]
        if windows.start_positions[k]:
            text = q.context[windows.char_starts[k][windows.start_positions[k]]:
                             windows.char_ends[k][windows.end_positions[k]]]
            assert q.answers[0].text in text
