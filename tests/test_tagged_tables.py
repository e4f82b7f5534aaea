"""Tagged corpora as Arrow tables (issue 45): parquet files with word and tag lists, read a record batch at a time,
and hub splits with a list-of-ClassLabel tag feature (ids read as their names), through the same TaggedCorpus and
checks as JSON rows; hub names and split names mapped to sources; offline, a hub name is the house's clear error.
The hub is never reached: `datasets.load_dataset` (the seam `sources.read_hub_split` calls) is replaced by splits
built in memory or saved with `save_to_disk`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import ClassLabel, Dataset, Features, Value
from datasets import Sequence as HubSequence

from bertkit.data import tagged_tables
from bertkit.data.options import reads_tagged
from bertkit.data.tagged import (
    DataSource,
    TaggedColumns,
    is_tagged_file,
    may_be_tagged,
    read_tagged,
    read_tagged_splits,
    tagged_sources,
)
from bertkit.data.tagscheme import TagScheme
from bertkit.data.word_lines import file_sentences
from bertkit.errors import UserError

NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
POS = ["NNP", "VBD", "IN"]
FEATURES = Features({"tokens": HubSequence(Value("string")), "pos_tags": HubSequence(ClassLabel(names=POS)),
                     "ner_tags": HubSequence(ClassLabel(names=NER))})
ROWS = {"tokens": [["Anna", "met", "Bob", "Smith"], ["Paris", "saw", "Anna"]],
        "pos_tags": [[0, 1, 0, 0], [0, 1, 0]], "ner_tags": [[1, 0, 1, 2], [3, 0, 1]]}


def hub_split(rows: dict | None = None, features: Features = FEATURES) -> Dataset:
    return Dataset.from_dict(rows or ROWS, features=features)


def write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture
def fake_hub(monkeypatch):
    """`datasets.load_dataset` answering from {split: Dataset}; the calls are recorded."""
    splits: dict[str, Dataset] = {}
    asked: list[tuple] = []

    def load_dataset(name, config, split):
        asked.append((name, config, split))
        if split not in splits:
            raise ValueError(f"Unknown split {split!r}. Should be one of {sorted(splits)}.")
        return splits[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return splits, asked


# ---------------------------------------------------------------- parquet


def test_parquet_with_classlabel_names_reads_tag_names_and_is_detected(tmp_path):
    path = tmp_path / "train.parquet"
    hub_split().to_parquet(str(path))  # `datasets` keeps the ClassLabel names in the schema metadata
    assert is_tagged_file(path) and reads_tagged("auto", str(path))
    corpus = read_tagged(path)
    assert (corpus.columns.word_column, corpus.columns.tag_column) == ("tokens", "ner_tags")
    assert [s.tags for s in corpus.sentences()] == [("B-PER", "O", "B-PER", "I-PER"), ("B-LOC", "O", "B-PER")]
    assert (corpus.n_sentences, corpus.n_words, corpus.scheme) == (2, 7, TagScheme("IOB2", "IOB2"))
    pos = read_tagged(path, TaggedColumns(tag_column="pos_tags"))
    assert pos.scheme.name == "none" and pos.tag_counts == {"NNP": 5, "VBD": 2}
    assert corpus.data_identity()["data_size"] == path.stat().st_size


def test_parquet_string_tags_in_iob1_are_read_as_iob2_by_name_or_index(tmp_path):
    path = write_parquet(tmp_path / "iob1.parquet", {"id": ["0", "1"], "words": [["EU", "rejects", "German"],
                                                                                  ["Anna", "Paula"]],
                                                     "labels": [["I-ORG", "O", "I-MISC"], ["I-PER", "B-PER"]]})
    corpus = read_tagged(path)
    assert corpus.scheme == TagScheme("IOB2", "IOB1") and corpus.columns.tag_scheme == "IOB1"
    assert [s.tags for s in corpus.sentences()] == [("B-ORG", "O", "B-MISC"), ("B-PER", "B-PER")]
    by_index = read_tagged(path, TaggedColumns("1", "-1"))
    assert (by_index.columns.word_column, by_index.columns.tag_column) == ("words", "labels")


def test_parquet_is_read_one_batch_at_a_time(tmp_path, monkeypatch):
    n = 50
    path = write_parquet(tmp_path / "big.parquet", {"tokens": [[f"w{i}", "x"] for i in range(n)],
                                                    "tags": [["B-PER", "O"]] * n})
    monkeypatch.setattr(tagged_tables, "BATCH_ROWS", 8)
    seen: list[int] = []
    real = tagged_tables.table_sentences

    def spy(batches, *args):
        yield from real((seen.append(b.num_rows) or b for b in batches), *args)

    monkeypatch.setattr(tagged_tables, "table_sentences", spy)
    corpus = read_tagged(path)
    seen.clear()
    assert [s.words[0] for s in corpus.sentences()] == [f"w{i}" for i in range(n)]
    assert max(seen) <= 8 and sum(seen) == n


def test_integer_ids_without_names_are_read_as_text_with_a_warning(tmp_path, caplog):
    path = write_parquet(tmp_path / "ids.parquet", {"tokens": [["a", "b"], ["c"]], "ner_tags": [[0, 3], [3]]})
    with caplog.at_level(logging.WARNING):
        corpus = read_tagged(path)
    assert corpus.tag_counts == {"0": 1, "3": 2} and corpus.scheme.name == "none"
    assert "integer ids without names" in caplog.text


@pytest.mark.parametrize(("columns", "expected"), [
    ({"tokens": [["a", "b"], ["c"]], "tags": [["O", "O"], ["O", "B-PER"]]}, "row 2 is ragged: 1 words but 2 tags"),
    ({"tokens": [["a"], []], "tags": [["O"], []]}, "row 2 is an empty sentence"),
    ({"tokens": [["a", None]], "tags": [["O", "O"]]}, "holds a missing word (null) at position 2"),
    ({"tokens": [["a"], None], "tags": [["O"], ["O"]]}, "must both be lists"),
    ({"text": ["a b"], "label": [1]}, "no list column of words and one of tags"),
    ({"tokens": [[f"w{i}" for i in range(100)]], "tags": [[f"t{i}" for i in range(100)]]}, "not a tag column"),
])
def test_bad_parquet_rows_are_user_errors_naming_the_row(tmp_path, columns, expected):
    path = write_parquet(tmp_path / "bad.parquet", columns)
    with pytest.raises(UserError) as error:
        read_tagged(path)
    assert expected in str(error.value) and str(path) in str(error.value)


def test_given_columns_are_checked(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", {"tokens": [["a", "b"]], "tags": [["O", "O"]], "n": [1]})
    with pytest.raises(UserError, match="--label-column nope is not a column .* tokens, tags, n"):
        read_tagged(path, TaggedColumns(tag_column="nope"))
    with pytest.raises(UserError, match="--label-column n .* is not a list of strings or integer ids"):
        read_tagged(path, TaggedColumns(tag_column="n"))
    with pytest.raises(UserError, match="it is the word column"):
        read_tagged(path, TaggedColumns(tag_column="tokens"))


def test_parquet_shapes_that_are_not_tagged(tmp_path):
    sentences = write_parquet(tmp_path / "s.parquet", {"sentence": ["a fine film"], "label": [1]})
    multi_label = write_parquet(tmp_path / "m.parquet", {"text": ["a fine film"], "tags": [["good", "film"]]})
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    assert not any(is_tagged_file(p) for p in (sentences, multi_label, broken))
    assert not reads_tagged("auto", str(multi_label)) and reads_tagged("tags", str(multi_label))
    with pytest.raises(UserError, match="not a readable parquet file"):
        read_tagged(broken)


def test_a_dev_tag_unseen_in_training_is_named_across_kinds(tmp_path):
    train = tmp_path / "train.parquet"
    hub_split().to_parquet(str(train))
    dev = write_parquet(tmp_path / "dev.parquet", {"tokens": [["Acme", "rose"]], "ner_tags": [["B-ORG", "O"]]})
    with pytest.raises(UserError, match=r"dev.parquet has tags never seen in training .*B-ORG \(1 words\)"):
        read_tagged_splits(train, [dev], TaggedColumns())


def test_predict_reads_a_parquet_files_words(tmp_path):
    path = tmp_path / "words.parquet"
    hub_split().to_parquet(str(path))
    assert [s.words for s in file_sentences(path)] == [tuple(w) for w in ROWS["tokens"]]
    plain = write_parquet(tmp_path / "plain.parquet", {"sentence": ["a fine film"]})
    with pytest.raises(UserError, match="parquet file without a list of words and a list of tags"):
        list(file_sentences(plain))


# ---------------------------------------------------------------- hub splits


def test_hub_names_and_split_names_become_sources(tmp_path):
    local = tmp_path / "train.iob2"
    assert tagged_sources("eriktks/conll2003", ["validation", "test"], "conll2003", "train") == [
        DataSource("eriktks/conll2003", "train", "conll2003"), DataSource("eriktks/conll2003", "validation",
                                                                             "conll2003"),
        DataSource("eriktks/conll2003", "test", "conll2003")]
    assert tagged_sources("wnut_17", [str(local)]) == [DataSource("wnut_17", "train"), DataSource(str(local))]
    assert str(DataSource("wnut_17", "validation")) == "wnut_17[validation]"
    with pytest.raises(UserError, match="'validation' looks like a split name .* --dev dev.iob2"):
        tagged_sources(str(local), ["validation"])
    assert may_be_tagged("conll2003") and may_be_tagged("validation")


def test_a_hub_split_with_classlabel_tags_is_detected_and_read_as_names(fake_hub):
    splits, asked = fake_hub
    splits["train"] = hub_split()
    splits["validation"] = hub_split({"tokens": [["Bob", "met", "Anna"]], "pos_tags": [[0, 1, 0]],
                                      "ner_tags": [[1, 0, 1]]})
    assert reads_tagged("auto", "someone/conll2003", "conll2003", "train")
    assert asked[-1] == ("someone/conll2003", "conll2003", "train")
    train_source, dev_source = tagged_sources("someone/conll2003", ["validation"], "conll2003")
    train, dev = read_tagged_splits(train_source, [dev_source], TaggedColumns())
    assert str(dev.source) == "someone/conll2003[validation]" and asked[-1][2] == "validation"
    assert [s.tags for s in dev.sentences()] == [("B-PER", "O", "B-PER")]
    assert train.scheme == TagScheme("IOB2", "IOB2") and train.tags == ("B-LOC", "B-PER", "I-PER", "O")
    identity = train.data_identity()
    assert identity["data_hub"] == "someone/conll2003[train]" and identity["data_fingerprint"]
    pos = read_tagged(DataSource("someone/conll2003", "train"), TaggedColumns(tag_column="pos_tags"))
    assert pos.scheme.name == "none" and pos.tags == ("NNP", "VBD")


def test_a_split_saved_to_disk_is_read_memory_mapped(fake_hub, tmp_path):
    splits, _ = fake_hub
    hub_split().save_to_disk(str(tmp_path / "saved"))
    splits["train"] = datasets.load_from_disk(str(tmp_path / "saved"))
    assert splits["train"].cache_files  # arrow files on disk, not a table in memory
    corpus = read_tagged(DataSource("someone/wnut", "train"))
    assert corpus.n_words == 7 and corpus.head(1)[0].tags == ("B-PER", "O", "B-PER", "I-PER")


def test_hub_splits_that_are_not_tagged_or_not_there(fake_hub):
    splits, _ = fake_hub
    splits["train"] = Dataset.from_dict({"sentence": ["a fine film"], "label": [1]})
    assert not reads_tagged("auto", "nyu-mll/glue", "sst2")
    with pytest.raises(UserError, match=r"nyu-mll/glue\[train\] has no list column of words"):
        read_tagged(DataSource("nyu-mll/glue", "train", "sst2"))
    with pytest.raises(UserError, match="Could not load hub dataset 'nyu-mll/glue'.*split 'validation'"):
        read_tagged(DataSource("nyu-mll/glue", "validation", "sst2"))
    splits["train"] = hub_split({"tokens": [["a", "b"]], "pos_tags": [[0, 1]], "ner_tags": [[0, 9]]},
                                Features({"tokens": HubSequence(Value("string")), "pos_tags": HubSequence(Value("int64")),
                                          "ner_tags": HubSequence(Value("int64"))}))
    with pytest.raises(UserError, match="row 1"):
        read_tagged(DataSource("x/y", "train"), TaggedColumns(tag_column="ner_tags", tag_scheme="IOB2"))


def test_a_classlabel_id_out_of_range_names_the_row(tmp_path):
    features = Features({"tokens": HubSequence(Value("string")), "tags": HubSequence(ClassLabel(names=["O", "B-X"]))})
    table = pa.table({"tokens": [["a"], ["b", "c"]], "tags": [[0], [0, 7]]})
    path = tmp_path / "ids.parquet"
    pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features.to_dict()}})}),
                   path)
    with pytest.raises(UserError, match=r"ids.parquet row 2: tag id 7 in 'tags' names no tag: its 2 names are ids 0 "
                                        r"to 1 \(O, B-X\)"):
        read_tagged(path)


def test_offline_a_hub_name_is_the_houses_clear_error():
    """conftest sets HF_HUB_OFFLINE=1: the real `datasets.load_dataset` cannot reach the hub."""
    assert not reads_tagged("auto", "eriktks/conll2003")
    with pytest.raises(UserError, match="Could not load hub dataset 'eriktks/conll2003'.*offline.*local file"):
        read_tagged(DataSource("eriktks/conll2003", "train"))
