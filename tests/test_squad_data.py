"""SQuAD sets in: SQuAD JSON v1.1/v2.0 and the flat Hugging Face layout (JSON, JSON lines, CSV, parquet) read as the
same typed questions, the version told from the set, every bad input one UserError naming the file, the question id
and the fix (with the right answer_start where the text is in the context), and the recogniser by content."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.data.squad import Answer, DataSource, QACorpus, Question, looks_like_squad, read_squad
from bertkit.errors import UserError

CONTEXT = "Denver Broncos won Super Bowl 50 in 2016. The game was played at Levi's Stadium."


def nested(qas: list[dict], version: str | None = None, context: str = CONTEXT) -> dict:
    document = {"data": [{"title": "Super_Bowl_50", "paragraphs": [{"context": context, "qas": qas}]}]}
    return document if version is None else {"version": version, **document}


def qa(qid: str, question: str = "Who won Super Bowl 50?", answers: list[tuple[str, int]] | None = None,
       **extra) -> dict:
    answers = [("Denver Broncos", 0)] if answers is None else answers
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers], **extra}


def write_json(tmp_path: Path, document, name: str = "set.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def flat_rows() -> list[dict]:
    return [{"id": "q1", "title": "SB", "context": CONTEXT, "question": "Who won?",
             "answers": {"text": ["Denver Broncos", "Broncos"], "answer_start": [0, 7]}},
            {"id": "q2", "title": "SB", "context": CONTEXT, "question": "Where was it played?",
             "answers": {"text": ["Levi's Stadium"], "answer_start": [65]}}]


def test_squad_json_v11_keeps_every_gold_answer_and_shares_the_context(tmp_path):
    path = write_json(tmp_path, nested([qa("a", answers=[("Denver Broncos", 0), ("Denver Broncos", 0), ("2016", 36)]),
                                        qa("b", "When?", [("2016", 36)])], version="1.1"))
    corpus = read_squad(path)
    assert isinstance(corpus, QACorpus) and corpus.version == "1.1"
    first, second = corpus.questions
    assert first.answers == (Answer("Denver Broncos", 0), Answer("Denver Broncos", 0), Answer("2016", 36))
    assert first.title == "Super_Bowl_50" and not first.is_impossible
    assert first.context is second.context  # one string per paragraph, not one per question
    assert (corpus.n_questions, corpus.n_answers, corpus.n_impossible) == (2, 4, 0)
    assert Answer("2016", 36).end == 40 and CONTEXT[36:40] == "2016"


def test_squad_json_v20_reads_is_impossible_and_ignores_plausible_answers(tmp_path):
    unanswerable = qa("u", "Who lost Super Bowl 51?", [], is_impossible=True,
                      plausible_answers=[{"text": "Broncos", "answer_start": 999}])
    corpus = read_squad(write_json(tmp_path, nested([qa("a", is_impossible=False), unanswerable], "v2.0")))
    assert corpus.version == "2.0" and corpus.n_impossible == 1
    assert corpus.by_id()["u"].answers == () and corpus.by_id()["u"].is_impossible
    assert not corpus.by_id()["a"].is_impossible


def test_a_set_with_an_impossible_question_is_v20_without_a_version_key(tmp_path):
    corpus = read_squad(write_json(tmp_path, nested([qa("a"), qa("u", answers=[], is_impossible=True)])))
    assert corpus.version == "2.0" and corpus.n_impossible == 1


def test_an_empty_answer_list_in_a_v11_set_names_the_question_and_the_fix(tmp_path):
    path = write_json(tmp_path, nested([qa("a"), qa("no-answer", answers=[])], version="1.1"))
    with pytest.raises(UserError) as error:
        read_squad(path)
    message = str(error.value)
    assert str(path) in message and "'no-answer'" in message and "1 question(s) have no answer" in message
    assert "is_impossible: true" in message


def write_flat(tmp_path: Path, kind: str, rows: list[dict]) -> Path:
    """The same rows as .json (a list), .json holding JSON lines, .jsonl, .csv (answers as JSON text) or .parquet."""
    if kind == "json":
        return write_json(tmp_path, rows)
    if kind in ("json-lines", "jsonl"):
        path = tmp_path / ("set.json" if kind == "json-lines" else "set.jsonl")
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path
    if kind == "csv":
        path = tmp_path / "set.csv"
        with open(path, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, ["id", "title", "context", "question", "answers"])
            writer.writeheader()
            writer.writerows({**r, "answers": json.dumps(r["answers"])} for r in rows)
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "set.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("kind", ["json", "json-lines", "jsonl", "csv", "parquet"])
def test_the_flat_layout_reads_the_same_questions_in_every_format(tmp_path, kind):
    corpus = read_squad(write_flat(tmp_path, kind, flat_rows()))
    assert corpus.version == "1.1"
    assert [q.to_json() for q in corpus.questions] == [
        {**row, "is_impossible": False} for row in flat_rows()]
    assert corpus.questions[0].context is corpus.questions[1].context  # equal contexts kept once
    assert looks_like_squad(corpus.source.name)


def test_flat_rows_without_answers_are_unanswerable_v20_unless_v11_is_asked_for(tmp_path):
    rows = flat_rows() + [{"id": "q3", "title": "", "context": CONTEXT, "question": "Who lost Super Bowl 60?",
                           "answers": {"text": [], "answer_start": []}}]
    path = write_flat(tmp_path, "jsonl", rows)
    corpus = read_squad(path)
    assert corpus.version == "2.0" and corpus.by_id()["q3"].is_impossible and not corpus.by_id()["q1"].is_impossible
    with pytest.raises(UserError, match=r"1 question\(s\) have no answer; the first is 'q3' \(line 3\)"):
        read_squad(path, version="1.1")
    with pytest.raises(UserError, match="SQuAD version '3'"):
        read_squad(path, version="3")


def test_a_csv_answers_cell_written_as_a_python_literal_is_read(tmp_path):
    path = tmp_path / "set.csv"
    path.write_text('id,context,question,answers\n7,"Paris is big.",Where?,'
                    '"{\'text\': [\'Paris\'], \'answer_start\': [0]}"\n', encoding="utf-8")
    question = read_squad(path).questions[0]
    assert (question.id, question.answers, question.title) == ("7", (Answer("Paris", 0),), "")


def test_a_question_round_trips_through_its_json():
    question = Question("x", "t", CONTEXT, "Who?", (Answer("Denver Broncos", 0), Answer("Broncos", 7)), False)
    assert Question.from_json(json.loads(json.dumps(question.to_json()))) == question


@pytest.mark.parametrize("start, expected", [
    (3, "the text starts at 0 (off by -3): answer_start 0 is right"),
    (-1, "the text starts at 0 (off by +1): answer_start 0 is right"),
])
def test_an_answer_start_off_by_n_says_the_right_start(tmp_path, start, expected):
    path = write_json(tmp_path, nested([qa("good"), qa("bad", answers=[("Denver Broncos", start)])]))
    with pytest.raises(UserError) as error:
        read_squad(path)
    message = str(error.value)
    assert "1 question(s) have an answer_start that does not slice the context" in message
    assert "'bad'" in message and expected in message and str(path) in message


def test_misaligned_answers_are_counted_and_the_first_named_with_whitespace_and_case_hints(tmp_path):
    context = "The  Broncos\nbeat the Panthers in Santa Clara."
    path = write_json(tmp_path, nested([
        qa("ws", answers=[("The Broncos", 0)]),            # the context has two spaces and a newline
        qa("case", answers=[("santa clara", 3)]),          # the context says Santa Clara, at 34
        qa("absent", answers=[("Seahawks", 5)]),           # nowhere in the context
    ], context=context))
    with pytest.raises(UserError) as error:
        read_squad(path)
    message = str(error.value)
    assert "3 question(s) have an answer_start" in message and "the first is 'ws'" in message
    assert "occurs with other whitespace at 0 as 'The  Broncos'" in message
    from bertkit.data.squad import misaligned_detail

    assert "occurs in another case at 34 as 'Santa Clara'" in misaligned_detail(context, "santa clara", 3)
    assert "does not occur in the context" in misaligned_detail(context, "Seahawks", 5)


def test_every_problem_of_a_set_is_raised_at_once(tmp_path):
    path = write_json(tmp_path, nested([qa("a"), qa("a"), qa("blank", question="  "),
                                        qa("imp", is_impossible=True)], version="v2.0"))
    with pytest.raises(UserError) as error:
        read_squad(path)
    message = str(error.value)
    assert "1 question(s) have an id used before; the first is 'a'" in message
    assert "1 question(s) have an empty question; the first is 'blank'" in message
    assert "are marked is_impossible but have answers; the first is 'imp'" in message


def test_an_empty_context_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"1 question\(s\) have an empty context; the first is 'a'"):
        read_squad(write_json(tmp_path, nested([qa("a", answers=[])], version="v2.0", context=" ")))


@pytest.mark.parametrize("document, expected", [
    ({"data": [{"title": "x"}]}, "article 1: no 'paragraphs' list"),
    (nested([{"id": "a", "question": "Q?", "answers": [{"text": "Denver", "answer_start": "0"}]}]),
     "needs a text and an integer answer_start"),
    (nested([{"question": "Q?", "answers": []}]), "the question has no id"),
    ([{"id": "a", "question": "Q?"}], "not a question row"),
])
def test_structure_that_cannot_be_read_names_where_and_the_fix(tmp_path, document, expected):
    with pytest.raises(UserError, match=expected):
        read_squad(write_json(tmp_path, document))


def test_missing_files_other_extensions_and_empty_sets_are_refused(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_squad(tmp_path / "nope.json")
    (tmp_path / "set.txt").write_text("x", encoding="utf-8")
    with pytest.raises(UserError, match="not .txt"):
        read_squad(tmp_path / "set.txt")
    with pytest.raises(UserError, match="holds no question"):
        read_squad(write_json(tmp_path, {"data": []}))
    (tmp_path / "bad.json").write_text('{"data": [', encoding="utf-8")
    with pytest.raises(UserError, match="is not valid JSON"):
        read_squad(tmp_path / "bad.json")


def test_a_csv_without_the_answers_column_names_it(tmp_path):
    path = tmp_path / "set.csv"
    path.write_text("id,context,question\n1,Paris is big.,Where?\n", encoding="utf-8")
    with pytest.raises(UserError, match="no column answers"):
        read_squad(path)


def test_looks_like_squad_reads_the_content_not_the_name(tmp_path):
    assert looks_like_squad(write_json(tmp_path, nested([qa("a")]), "anything.json"))
    tagged = tmp_path / "squad.jsonl"
    tagged.write_text(json.dumps({"tokens": ["a"], "tags": ["O"]}) + "\n", encoding="utf-8")
    assert not looks_like_squad(tagged)
    qnli = tmp_path / "squad.csv"
    qnli.write_text("question,sentence,label\nWho?,He did.,entailment\n", encoding="utf-8")
    assert not looks_like_squad(qnli)
    boolq = write_json(tmp_path, [{"question": "is it?", "passage": "yes", "answer": True}], "boolq.json")
    assert not looks_like_squad(boolq)
    assert not looks_like_squad(tmp_path / "missing.json") and not looks_like_squad(tmp_path)


def test_a_hub_split_offline_is_a_clear_error():
    with pytest.raises(UserError, match=r"'squad' \(config None, split 'validation'\).*offline.*Pass a SQuAD JSON"):
        read_squad(DataSource("squad", "validation"))


def test_the_data_identity_is_the_file_digest(tmp_path):
    corpus = read_squad(write_json(tmp_path, nested([qa("a")])))
    identity = corpus.data_identity()
    assert identity["data_size"] == Path(corpus.source.name).stat().st_size and len(identity["data_sha256"]) == 64


def test_reading_squad_imports_neither_torch_nor_transformers():
    code = ("import sys, bertkit.data.squad; "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tydiqa_goldp_reads_as_squad_v11(shared_data):
    folder = shared_data / "tydiqa_goldp_en"
    train, dev = read_squad(folder / "train.json"), read_squad(folder / "dev.json")
    assert (train.version, train.n_questions, dev.version, dev.n_questions) == ("1.1", 3691, "1.1", 440)
    assert sum(len(q.answers) == 2 for q in dev.questions) == 246  # the README's count: every gold answer kept
    assert looks_like_squad(folder / "dev.json")


def test_a_hub_split_is_read_through_datasets_and_its_name_declares_the_version(tmp_path):
    """`datasets.load_dataset` on a local folder stands in for the hub (offline): the split's rows are the flat
    layout, `squad_v2` declares v2.0 and `squad` v1.1 (where a question without an answer is refused)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = flat_rows() + [{"id": "q3", "title": "SB", "context": CONTEXT, "question": "Who lost Super Bowl 60?",
                           "answers": {"text": [], "answer_start": []}}]
    for name in ("squad_v2", "squad"):
        (tmp_path / name).mkdir()
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / name / "validation.parquet")
    corpus = read_squad(DataSource(str(tmp_path / "squad_v2"), "validation"))
    assert (corpus.version, corpus.n_questions, corpus.n_impossible) == ("2.0", 3, 1)
    assert corpus.data_identity()["data_fingerprint"] and corpus.data_identity()["data_hub"].endswith("[validation]")
    with pytest.raises(UserError, match=r"have no answer; the first is 'q3' \(row 3\)"):
        read_squad(DataSource(str(tmp_path / "squad"), "validation"))
