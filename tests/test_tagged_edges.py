"""Issue 57, the reading side: every word read, and read once. Plain text and tables given to a tagger are read as
sentences of words (not as column files); CoNLL-2003's word `#` is kept; one stray tag never switches the scheme (and
so the metric) silently; a declared scheme the tags contradict is refused; a word column of tags is refused;
--encoding is honoured and a file it cannot read names its line; a missing tag in a CoNLL `.txt` names its line;
dev/test tags unseen in training are refused, dropped or mapped as --unseen-tags says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.data.options import DataOptions
from bertkit.data.tagged import (
    TaggedColumns,
    check_dev_tags,
    is_tagged_file,
    read_tagged,
    read_tagged_splits,
    unseen_tags_problems,
)
from bertkit.data.tagged_splits import tagged_columns
from bertkit.data.tagscheme import TagScheme
from bertkit.data.word_lines import data_sentences, file_sentences
from bertkit.errors import UserError

NER = "Anna\tB-PER\nmet\tO\nBob\tB-PER\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n\nBob\tB-PER\nleft\tO\n\n"


def write(tmp_path: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def words_of(path: Path, **kwargs) -> list[tuple[str, ...]]:
    return [s.words for s in file_sentences(path, **kwargs)]


# ---------------------------------------------------------------- words read wrong without a warning


def test_plain_text_with_blank_lines_between_is_read_as_sentences_of_words(tmp_path):
    text = "alice went to paris today\n\nbob met carol in london\n\ndave saw the big dog\n"  # five words each
    path = write(tmp_path, "plain.txt", text)
    assert not is_tagged_file(path)
    assert words_of(path) == [tuple(line.split()) for line in text.split("\n") if line]


def test_a_table_is_read_by_its_text_column_not_its_header_or_labels(tmp_path):
    headed = write(tmp_path, "headed.tsv", "text\tlabel\nalice went to paris\tpos\nbob met carol\tneg\n")
    assert words_of(headed) == [("alice", "went", "to", "paris"), ("bob", "met", "carol")]
    three = write(tmp_path, "three.tsv", "id\tbody\tlabel\n1\talice went home\tpos\n2\tbob left\tneg\n")
    assert words_of(three, columns=TaggedColumns("body")) == [("alice", "went", "home"), ("bob", "left")]
    csv = write(tmp_path, "rows.csv", 'sentence,label\n"new york , today",1\n')
    assert words_of(csv) == [("new", "york", ",", "today")]
    rows = write(tmp_path, "rows.jsonl", '{"text": "a b c", "label": 1}\n{"text": "d e", "label": 0}\n')
    assert words_of(rows) == [("a", "b", "c"), ("d", "e")]
    lists = write(tmp_path, "lists.jsonl", '{"tokens": ["New York", "x"]}\n')
    assert words_of(lists) == [("New York", "x")]
    opts = DataOptions(data=str(three), text_column="body", limit=1)
    assert [s.words for s in data_sentences(opts)] == [("alice", "went", "home")]


def test_an_empty_cell_of_a_table_is_refused_by_line(tmp_path):
    path = write(tmp_path, "gap.tsv", "text\tlabel\nalice went\tpos\n\tneg\n")
    with pytest.raises(UserError, match=r"line 3"):
        words_of(path)


def test_conll2003s_word_hash_is_a_word_and_ud_comments_stay_comments(tmp_path):
    conll = write(tmp_path, "eng.txt", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n# # I-NP O\n1 CD I-NP O\n\n"
                                       "# # O O\nwins VBZ B-VP O\n\n")
    corpus = read_tagged(conll)
    assert [s.words for s in corpus.sentences()] == [("EU", "#", "1"), ("#", "wins")]
    assert corpus.columns.tag_column == "3" and corpus.n_words == 5
    ud = write(tmp_path, "ud.iob2", "# newdoc id = weblog-1\n# sent_id = 1\n# text = # 1 fan\n1\t#\tO\n2\t1\tO\n"
                                    "3\tfan\tO\n\n# text = Anna\n1\tAnna\tB-PER\n\n")
    assert [s.words for s in read_tagged(ud).sentences()] == [("#", "1", "fan"), ("Anna",)]
    spaced = write(tmp_path, "spaced.conll", "# a comment before the first sentence\n\n# SYM\nfoo NOUN\n\n")
    assert [s.tags for s in read_tagged(spaced).sentences()] == [("SYM", "NOUN")]


@pytest.mark.parametrize(("stray", "tag"), [("Carl\tX-PER", "'X-PER'"), ("Carl\tb-per", "'b-per'"),
                                            ("Carl\tB-", "'B-'"), ("Carl\t", "''")])
def test_one_malformed_tag_among_entity_tags_is_refused_by_line_not_read_as_plain_labels(tmp_path, stray, tag):
    path = write(tmp_path, "ner.iob2", NER.replace("Bob\tB-PER\nleft", f"{stray}\nleft"))
    with pytest.raises(UserError, match=rf"ner\.iob2 line 8: {tag} is not an entity tag, but .* have entity tags.*"
                                        rf"word accuracy instead of entity F1.*--tag-scheme none"):
        read_tagged(path)


def test_a_three_field_line_among_two_field_lines_is_refused_by_line(tmp_path):
    path = write(tmp_path, "ner.txt", "Anna B-PER\nmet O\n\nNew York B-LOC\nis O\n\nBob B-PER\nleft O\n\n")
    assert is_tagged_file(path)
    with pytest.raises(UserError, match=r"ner\.txt line 4: 3 space-separated fields \(New \| York \| B-LOC\) where "
                                        r"the file's lines have 2"):
        read_tagged(path)


def test_a_stray_i_in_an_iob2_file_stays_iob2_and_is_counted(tmp_path):
    path = write(tmp_path, "dev.iob2", NER.replace("Bob\tB-PER\nleft", "Bob\tI-PER\nleft"))
    corpus = read_tagged(path)
    assert corpus.scheme == TagScheme("IOB2", "IOB2")
    assert [s.tags for s in corpus.sentences()][1] == ("I-PER", "O")  # as the file has it: not rewritten
    assert len(corpus.notes) == 1 and "1 entity opens with I-" in corpus.notes[0] and "line 8" in corpus.notes[0]
    iob1 = write(tmp_path, "iob1.txt", "EU I-ORG\nrejects O\n\nPeter I-PER\nBlackburn I-PER\n\nParis B-LOC\nis O\n\n"
                                       "Anna I-PER\nPaula B-PER\n\n")
    read = read_tagged(iob1)
    assert read.scheme == TagScheme("IOB2", "IOB1") and "1 open with B-" in read.notes[0]


@pytest.mark.parametrize(("text", "declared", "problem"), [
    (NER, "IOBES", r"line 1: 'B-PER' opens or continues an entity that no I- or E- .* --tag-scheme is IOBES.* "
                   r"these tags read as IOB2.*Pass --tag-scheme IOB2"),
    ("Paris\tS-LOC\nis\tO\n\n", "IOB2", r"line 1: 'S-LOC' is an IOBES tag .* --tag-scheme is IOB2.*--tag-scheme "
                                        r"IOBES"),
    ("the\tDET\ndog\tNOUN\n\n", "IOB2", r"line 1: 'DET' is not an entity tag, but --tag-scheme is IOB2"),
])
def test_a_declared_scheme_the_tags_contradict_is_refused(tmp_path, text, declared, problem):
    with pytest.raises(UserError, match=problem):
        read_tagged(write(tmp_path, "data.iob2", text), TaggedColumns(tag_scheme=declared))


def test_a_dev_set_without_entities_is_refused_rather_than_scored_zero(tmp_path):
    train = read_tagged(write(tmp_path, "train.iob2", NER))
    dev = read_tagged(write(tmp_path, "dev.iob2", "a\tO\nb\tO\n\n"))
    with pytest.raises(UserError, match=r"holds no entity .*entity F1 is undefined"):
        check_dev_tags(train, dev)


def test_a_tag_column_given_as_the_word_column_is_refused(tmp_path):
    ner = write(tmp_path, "ner.iob2", NER)
    with pytest.raises(UserError, match=r"Column 1 of .*ner\.iob2, read as the words, holds tags \(B-LOC, B-PER, "
                                        r"I-LOC, O\).*--text-column with the words' column"):
        read_tagged(ner, TaggedColumns("1"))
    pos = write(tmp_path, "pos.tsv", "".join(f"{d}\tDET\n{a}\tADJ\n{n}\tNOUN\n{v}\tVERB\n\n" for d, a, n, v in
                                         (("the", "big", "dog", "ran"), ("a", "red", "cat", "sat"))))
    with pytest.raises(UserError, match=r"read as the words, holds tags"):
        read_tagged(pos, TaggedColumns("1", "0"))


def test_encoding_is_honoured_and_a_file_it_cannot_read_names_its_line(tmp_path):
    text = "Anna\tB-PER\nmet\tO\nJosé\tB-PER\n\n"
    path = write(tmp_path, "latin.iob2", text, "latin-1")
    with pytest.raises(UserError, match=r"latin\.iob2 line 3 is not utf-8 text \(byte 0xe9 .*--encoding latin-1"):
        read_tagged(path)
    corpus = read_tagged(path, TaggedColumns(encoding="latin-1"))
    assert [s.words for s in corpus.sentences()] == [("Anna", "met", "José")]
    rows = write(tmp_path, "latin.jsonl", json.dumps({"tokens": ["Zoë"], "tags": ["B-PER"]}, ensure_ascii=False)
                 + "\n", "latin-1")
    with pytest.raises(UserError, match=r"latin\.jsonl line 1 is not utf-8"):
        read_tagged(rows)
    assert read_tagged(rows, TaggedColumns(encoding="latin-1")).head(1)[0].words == ("Zoë",)
    plain = write(tmp_path, "plain.txt", "fine line\ncafé crème\n", "latin-1")
    with pytest.raises(UserError, match=r"plain\.txt line 2 .*--encoding latin-1"):
        words_of(plain)
    assert [s.words for s in data_sentences(DataOptions(data=str(plain), encoding="latin-1"))][1] == ("café",
                                                                                                       "crème")
    columns = tagged_columns(DataOptions(encoding="latin-1", text_column="1"), "IOB2")
    assert (columns.encoding, columns.word_column, columns.tag_scheme) == ("latin-1", "1", "IOB2")
    assert TaggedColumns.from_json(json.loads(json.dumps(columns.to_json()))) == columns
    assert "encoding" not in TaggedColumns().to_json()  # records made before --encoding are unchanged


@pytest.mark.parametrize("name", ["eng.txt", "eng.conll"])
def test_a_missing_tag_in_a_conll_file_names_its_line_whatever_its_extension(tmp_path, name):
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP\ncall NN B-NP O\n\n"
            "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n")
    path = write(tmp_path, name, text)
    assert is_tagged_file(path)
    with pytest.raises(UserError, match=rf"{name} line 4: 3 column\(s\) \(rejects \| VBZ \| B-VP\).*a missing tag"):
        read_tagged(path)


# ---------------------------------------------------------------- --unseen-tags


def test_unseen_dev_tags_are_refused_dropped_or_mapped_and_counted(tmp_path):
    train = write(tmp_path, "train.tsv", "the\tDET\ndog\tNOUN\n\na\tDET\ncat\tNOUN\n\n")
    dev = write(tmp_path, "dev.tsv", "the\tDET\ndog\tNOUN\nran\tVERB\n\na\tDET\ncat\tNOUN\n\n")
    with pytest.raises(UserError, match=r"VERB \(1 words\).*--unseen-tags drop.*--unseen-tags X"):
        read_tagged_splits(train, [dev], TaggedColumns())
    _, dropped = read_tagged_splits(train, [dev], TaggedColumns(), "drop")
    assert [s.words for s in dropped.sentences()] == [("a", "cat")]
    assert (dropped.n_sentences, dropped.n_words, dict(dropped.tag_counts)) == (1, 2, {"DET": 1, "NOUN": 1})
    assert "1 sentence(s) (3 words) left out for tags never seen in training: VERB (1)" in dropped.notes[0]
    _, mapped = read_tagged_splits(train, [dev], TaggedColumns(), "NOUN")
    assert [s.tags for s in mapped.sentences()][0] == ("DET", "NOUN", "NOUN")
    assert mapped.tag_counts["NOUN"] == 3 and "1 word(s) tagged VERB (1), never seen in training, read as NOUN" \
        in mapped.notes[0]
    with pytest.raises(UserError, match=r"--unseen-tags ADJ: .*can only be read as a training tag: DET, NOUN"):
        read_tagged_splits(train, [dev], TaggedColumns(), "ADJ")
    assert unseen_tags_problems("O") == [] and unseen_tags_problems("drop") == []
    assert "not refuse, drop or one tag" in unseen_tags_problems("B-PER I-PER")[0]


def test_unseen_entity_tags_map_only_to_o(tmp_path):
    train = write(tmp_path, "train.iob2", NER)
    dev = write(tmp_path, "dev.iob2", "EU\tB-ORG\nsaid\tO\nAnna\tB-PER\n\n")
    _, mapped = read_tagged_splits(train, [dev], TaggedColumns(), "O")
    assert mapped.head(1)[0].tags == ("O", "O", "B-PER")
    with pytest.raises(UserError, match=r"can only be read as O \(entity tags\)"):
        read_tagged_splits(train, [dev], TaggedColumns(), "B-PER")


def test_a_runs_notes_carry_each_corpus_notes_and_its_encoding(tmp_path):
    from bertkit.data.tagged_splits import load_tagged_training_for

    train = write(tmp_path, "train.iob2", NER.replace("Anna", "Zoë"), "latin-1")
    dev = write(tmp_path, "dev.iob2", "Rome\tI-LOC\nfell\tO\n\nEU\tB-ORG\nsaid\tO\nAnna\tB-PER\n\n", "latin-1")
    data = load_tagged_training_for(DataOptions(data=str(train), dev=str(dev), encoding="latin-1"), "auto", "drop")
    assert data.train_sentences[0].words[0] == "Zoë" and len(data.dev_sentences) == 1
    assert any("entity opens with I-" in note for note in data.notes)
    assert any("left out for tags never seen in training: B-ORG (1)" in note for note in data.notes)
