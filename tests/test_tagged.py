"""Tagged corpora: column files and JSON rows read as sentences, columns detected or chosen, schemes detected and
IOB1 read as IOB2, and every bad input a UserError that names the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.data.tagged import TaggedColumns, check_dev_tags, read_tagged
from bertkit.data.tagscheme import TagScheme, detect_scheme, to_iob2
from bertkit.errors import UserError

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(tmp_path: Path, rows: list[dict], name: str = "rows.jsonl") -> Path:
    return write(tmp_path, name, "".join(json.dumps(r) + "\n" for r in rows))


def test_column_file_skips_docstart_and_comments_but_keeps_the_word_hash(tmp_path):
    path = write(tmp_path, "pos.tsv", "-DOCSTART-\tX\n\n# sent_id = 1\nI\tPRON\nlike\tVERB\n#\tSYM\n#1\tNUM\n\n\n"
                                      "# text = ok\nok\tINTJ\n")
    corpus = read_tagged(path)
    sentences = list(corpus.sentences())
    assert [s.words for s in sentences] == [("I", "like", "#", "#1"), ("ok",)]
    assert sentences[0].tags == ("PRON", "VERB", "SYM", "NUM")
    assert (corpus.n_sentences, corpus.n_words, corpus.scheme.name) == (2, 5, "none")
    assert corpus.columns.word_column == "0" and corpus.columns.tag_column == "1"


def test_uner_like_columns_are_detected_past_the_index_and_annotator(tmp_path):
    path = write(tmp_path, "ner.iob2", "# text = Tampa bay\n1\tin\tO\t-\t-\n2\tTampa\tB-LOC\t-\tann\n3\tbay\tI-LOC\t-\tann\n\n")
    corpus = read_tagged(path)
    assert (corpus.columns.word_column, corpus.columns.tag_column) == ("1", "2")
    assert corpus.head(1)[0].tags == ("O", "B-LOC", "I-LOC")
    assert corpus.scheme == TagScheme("IOB2", "IOB2")


def test_conll2003_iob1_with_spaces_is_read_as_iob2_from_its_last_column(tmp_path):
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\nGerman JJ I-NP I-MISC\n"
            "call NN I-NP O\n\nPeter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\nand CC O O\nAnna NNP I-NP I-PER\n"
            "Paula NNP I-NP B-PER\n\n")
    corpus = read_tagged(write(tmp_path, "conll.txt", text))
    assert corpus.columns.tag_column == "3"
    assert corpus.scheme == TagScheme("IOB2", "IOB1")
    assert corpus.columns.tag_scheme == "IOB1"
    tags = [s.tags for s in corpus.sentences()]
    assert tags[0] == ("B-ORG", "O", "B-MISC", "O")
    assert tags[1] == ("B-PER", "I-PER", "O", "B-PER", "B-PER")
    assert corpus.tag_counts == {"B-ORG": 1, "O": 3, "B-MISC": 1, "B-PER": 3, "I-PER": 1}


def test_bioes_and_bilou_read_as_iobes(tmp_path):
    corpus = read_tagged(write_jsonl(tmp_path, [{"tokens": ["New", "York", "is", "Big", "Apple"],
                                                 "tags": ["B-LOC", "L-LOC", "O", "B-LOC", "E-LOC"]},
                                                {"tokens": ["Paris"], "tags": ["U-LOC"]}]))
    assert corpus.scheme == TagScheme("IOBES", "IOBES")
    assert [s.tags for s in corpus.sentences()] == [("B-LOC", "E-LOC", "O", "B-LOC", "E-LOC"), ("S-LOC",)]


def test_detect_scheme_and_iob2_rewrite():
    assert detect_scheme([["O", "B-PER", "I-PER"]]) == "IOB2"
    assert detect_scheme([["I-PER", "O"]]) == "IOB1"
    assert detect_scheme([["O", "S-PER"]]) == "IOBES"
    assert detect_scheme([["NOUN", "O"]]) == "none"
    assert to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == ["B-PER", "I-PER", "B-PER", "O", "B-LOC",
                                                                            "B-ORG"]


def test_json_list_and_column_chosen_by_name(tmp_path):
    path = write(tmp_path, "rows.json", json.dumps([{"words": ["a", "b"], "pos_tags": ["DET", "X"], "ner": [1, 0]}]))
    corpus = read_tagged(path)
    assert (corpus.columns.word_column, corpus.columns.tag_column) == ("words", "pos_tags")
    assert read_tagged(path, TaggedColumns(tag_column="ner")).head(1)[0].tags == ("1", "0")
    header = write(tmp_path, "plus.conllup", "# global.columns = ID FORM UPOS\n1\tHi\tINTJ\n2\tyou\tPRON\n\n")
    named = read_tagged(header, TaggedColumns("form", "upos"))
    assert named.head(1)[0].words == ("Hi", "you") and named.tags == ("INTJ", "PRON")


def test_chunks_stream_the_file_in_order(tmp_path):
    path = write(tmp_path, "many.tsv", "".join(f"w{i}\tT{i % 3}\n\n" for i in range(7)))
    chunks = list(read_tagged(path).chunks(3))
    assert [len(c) for c in chunks] == [3, 3, 1]
    assert [s.words[0] for c in chunks for s in c] == [f"w{i}" for i in range(7)]


def test_settings_round_trip():
    columns = TaggedColumns("1", "ner", "IOB1")
    assert TaggedColumns.from_json(json.loads(json.dumps(columns.to_json()))) == columns
    scheme = TagScheme.read_as("IOB1")
    assert TagScheme.from_json(json.loads(json.dumps(scheme.to_json()))) == scheme


@pytest.mark.parametrize(("rows", "expected"), [
    ([{"tokens": ["a", "b"], "tags": ["O"]}], "ragged: 2 words but 1 tags"),
    ([{"tokens": [], "tags": []}], "empty sentence"),
    ([{"tokens": ["a"], "tags": "O"}], "must both be lists"),
    ([{"tokens": ["a"], "tags": [None]}], "not a tag"),
])
def test_bad_json_rows_are_user_errors(tmp_path, rows, expected):
    with pytest.raises(UserError, match=expected) as error:
        read_tagged(write_jsonl(tmp_path, rows))
    assert "row 1" in str(error.value)


def test_short_column_line_names_the_line_and_the_flags(tmp_path):
    path = write(tmp_path, "ner.txt", "a O\nb\n\n")
    with pytest.raises(UserError, match=r"line 2: 1 column.*--text-column/--label-column"):
        read_tagged(path)


@pytest.mark.parametrize(("text", "columns", "reason"), [
    ("a\tO\nb\tO\n\n", TaggedColumns("0", "0"), "it is the word column"),
    ("1\ta\t-\n2\tb\t-\n3\tc\t-\n\n", TaggedColumns(tag_column="2"), "only placeholders"),
    ("".join(f"w{i}\tx{i}\n" for i in range(80)) + "\n", TaggedColumns(), "different values"),
])
def test_a_tag_column_that_is_not_tags(tmp_path, text, columns, reason):
    with pytest.raises(UserError, match=f"not a tag column: .*{reason}.*--label-column"):
        read_tagged(write(tmp_path, "f.tsv", text), columns)


def test_unknown_column_and_scheme_mismatch(tmp_path):
    path = write(tmp_path, "f.tsv", "a\tNOUN\n\n")
    with pytest.raises(UserError, match=r"--label-column 5 is not a column.*0 to 1"):
        read_tagged(path, TaggedColumns(tag_column="5"))
    with pytest.raises(UserError, match="not an entity tag, but --tag-scheme is IOB2"):
        read_tagged(path, TaggedColumns(tag_scheme="IOB2"))
    with pytest.raises(UserError, match="--tag-scheme 'BIO' is not a tag scheme"):
        TaggedColumns(tag_scheme="BIO")


def test_a_dev_tag_never_seen_in_training_is_named(tmp_path):
    train = read_tagged(write(tmp_path, "train.tsv", "a\tB-PER\nb\tO\n\n"))
    dev = read_tagged(write(tmp_path, "dev.tsv", "a\tB-MISC\nb\tO\n\n"))
    with pytest.raises(UserError, match=r"never seen in training.*B-MISC \(1 words\).*map them"):
        check_dev_tags(train, dev)
    check_dev_tags(dev, read_tagged(write(tmp_path, "dev2.tsv", "c\tB-MISC\n\n")))


@pytest.mark.skipif(not (SHARED / "uner_ewt").is_dir(), reason="shared data not on this machine")
def test_shared_corpora_counts_match_their_readmes():
    ner = read_tagged(SHARED / "uner_ewt" / "train.iob2")
    assert (ner.n_sentences, ner.n_words, ner.scheme.name) == (2001, 25149, "IOB2")
    assert ner.tag_counts["B-LOC"] == 399
    pos = read_tagged(SHARED / "ud_ewt_pos" / "dev.tsv")
    assert (pos.n_sentences, pos.n_words, len(pos.tags)) == (2001, 25147, 17)
