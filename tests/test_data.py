"""data.py: both real layouts, formats, pairs, labels, splits, batching, and every validation error."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bertkit import data
from bertkit.config import DataOptions
from bertkit.errors import UserError


def opts(**kw) -> DataOptions:
    return DataOptions(**kw)


# ---------------------------------------------------------------- real layouts


def test_sst2_headerless_layout(shared_data):
    ds = data.load_dataset_split(opts(text_column="0", label_column="1"), str(shared_data / "sst2" / "train.tsv"))
    assert len(ds) == 6920
    assert set(ds.labels) == {0, 1}
    assert ds.texts[0].startswith("a stirring , funny and finally transporting")
    assert ds.line_numbers[0] == 1 and ds.fingerprint.startswith("sha256:")


def test_rte_header_pairs_and_string_labels(shared_data):
    o = opts(data=str(shared_data / "rte" / "train.tsv"), dev=str(shared_data / "rte" / "dev.tsv"),
             text_column="sentence1", text_pair_column="sentence2", label_column="label")
    splits = data.load_splits(o)
    assert (len(splits.train), len(splits.dev)) == (2490, 277)
    assert splits.label_map.labels == ("entailment", "not_entailment")
    assert splits.train.pairs is not None and splits.train.pairs[0] != splits.train.texts[0]
    assert splits.train.line_numbers[0] == 2  # line 1 is the header


def test_rte_by_index_detects_header(shared_data):
    ds = data.load_dataset_split(opts(text_column="1", text_pair_column="2", label_column="3"),
                                 str(shared_data / "rte" / "dev.tsv"))
    assert len(ds) == 277 and "label" not in ds.labels


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".json", ".jsonl", ".parquet"])
def test_every_local_format(tmp_path, toy_rows, suffix):
    frame = pd.DataFrame(toy_rows, columns=["text", "label"])
    path = tmp_path / f"d{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".tsv":
        frame.to_csv(path, index=False, sep="\t")
    elif suffix == ".json":
        path.write_text(json.dumps(frame.to_dict("records")))
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in frame.to_dict("records")))
    else:
        frame.to_parquet(path)
    ds = data.load_dataset_split(opts(), str(path))  # default columns: text / label
    assert ds.texts == [r[0] for r in toy_rows] and ds.labels == [r[1] for r in toy_rows]


def test_csv_quotes_and_commas(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('text,label\n"hello, world",1\n"she said ""hi""",0\n')
    ds = data.load_dataset_split(opts(), str(path))
    assert ds.texts == ["hello, world", 'she said "hi"'] and ds.labels == [1, 0]


def test_integer_labels_from_text_and_sorted_map():
    assert data.LabelMap.build([10, 2, 2, 1]).labels == (1, 2, 10)
    assert data.LabelMap.build(["b", "a", "c"]).labels == ("a", "b", "c")
    assert data._normalise_labels(["1", "0", "2"]) == [1, 0, 2]
    assert data._normalise_labels(["1", "x"]) == ["1", "x"]


def test_label_map_round_trip_and_id2label():
    lm = data.LabelMap.build(["pos", "neg"])
    assert lm.id2label == {0: "neg", 1: "pos"}
    assert data.LabelMap.from_json(json.loads(json.dumps(lm.to_json()))) == lm
    assert data.LabelMap.from_id2label({"0": "3", "1": "7"}).labels == (3, 7)
    assert lm.encode(["pos", "neg"], "x").tolist() == [1, 0]


# ---------------------------------------------------------------- splits


def test_stratified_split_is_deterministic_and_reported(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("text", "label"))
    a = data.load_splits(opts(data=str(path), dev_fraction=0.25, seed=3))
    b = data.load_splits(opts(data=str(path), dev_fraction=0.25, seed=3))
    c = data.load_splits(opts(data=str(path), dev_fraction=0.25, seed=4))
    assert a.dev.texts == b.dev.texts and a.dev.texts != c.dev.texts
    assert len(a.dev) == 10 and sorted(a.dev.labels).count("pos") == 5  # stratified: 5 of each
    assert a.notes and "held out 10 of 40" in a.notes[0]


def test_unseen_dev_labels_are_listed(write_tsv, toy_rows):
    train = write_tsv("train.tsv", toy_rows, header=("text", "label"))
    dev = write_tsv("dev.tsv", [("x", "pos"), ("y", "meh"), ("z", "huh")], header=("text", "label"))
    with pytest.raises(UserError, match=r"labels not seen in the training data: 'huh', 'meh'"):
        data.load_splits(opts(data=str(train), dev=str(dev)))


def test_single_class_in_train(write_tsv):
    path = write_tsv("one.tsv", [("a", 1), ("b", 1)], header=("text", "label"))
    with pytest.raises(UserError, match="single class"):
        data.load_splits(opts(data=str(path)))


# ---------------------------------------------------------------- validation errors


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        data.load_dataset_split(opts(), str(tmp_path / "nope.tsv"))


def test_empty_file(tmp_path):
    (tmp_path / "e.tsv").write_bytes(b"")
    with pytest.raises(UserError, match="is empty"):
        data.load_dataset_split(opts(), str(tmp_path / "e.tsv"))


def test_header_only(tmp_path):
    (tmp_path / "h.tsv").write_text("text\tlabel\n")
    with pytest.raises(UserError, match="header but no data rows"):
        data.load_dataset_split(opts(text_column="text", label_column="label"), str(tmp_path / "h.tsv"))


def test_unknown_column_lists_real_ones(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("sentence", "label"))
    with pytest.raises(UserError, match=r"Column 'txt' \(from --text-column\) not found.*columns are: sentence, label"):
        data.load_dataset_split(opts(text_column="txt", label_column="label"), str(path))


def test_wrong_delimiter_hint(tmp_path):
    (tmp_path / "c.tsv").write_text("text,label\nhello,1\nbye,0\n")
    with pytest.raises(UserError, match="delimiter"):
        data.load_dataset_split(opts(text_column="text", label_column="label"), str(tmp_path / "c.tsv"))


def test_empty_text_rows_are_counted_with_lines(tmp_path):
    (tmp_path / "t.tsv").write_text("text\tlabel\nfine\t1\n\t0\nok\t1\n \t0\n")
    with pytest.raises(UserError, match=r"2 empty text cell\(s\).*lines 3, 5"):
        data.load_dataset_split(opts(), str(tmp_path / "t.tsv"))


def test_missing_labels(tmp_path):
    (tmp_path / "t.tsv").write_text("text\tlabel\nfine\t1\nbad\t\nok\tNaN\n")
    with pytest.raises(UserError, match=r"2 missing/blank label\(s\).*lines 3, 4"):
        data.load_dataset_split(opts(), str(tmp_path / "t.tsv"))


def test_non_utf8_names_line_and_encoding_option(tmp_path):
    path = tmp_path / "l.tsv"
    path.write_bytes("text\tlabel\nok\t1\ncaf\xe9 au lait\t0\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"line 3.*--encoding"):
        data.load_dataset_split(opts(), str(path))
    ds = data.load_dataset_split(opts(encoding="latin-1"), str(path))
    assert ds.texts[1] == "café au lait"


def test_unsupported_suffix_and_directory(tmp_path):
    (tmp_path / "x.xlsx").write_text("a")
    with pytest.raises(UserError, match="unsupported file type"):
        data.load_dataset_split(opts(), str(tmp_path / "x.xlsx"))
    with pytest.raises(UserError, match="is a directory"):
        data.load_dataset_split(opts(), str(tmp_path))


def test_unreachable_hub_dataset_is_a_user_error():
    with pytest.raises(UserError, match="Could not load hub dataset.*local file"):
        data.load_dataset_split(opts(), "no-such-user/no-such-dataset-bertkit")


def test_no_label_column_when_needed(tmp_path):
    (tmp_path / "t.tsv").write_text("text\tscore\na\t1\nb\t0\n")
    with pytest.raises(UserError, match="--label-column"):
        data.load_dataset_split(opts(), str(tmp_path / "t.tsv"))


# ---------------------------------------------------------------- tokenization and batching


def test_encode_counts_truncation_and_pairs(tiny_bert_dir):
    from bertkit.modeling import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    ds = data.TextDataset(texts=["short", "word " * 50], pairs=["p", "q"])
    enc = data.encode_dataset(tok, ds, max_length=16)
    assert enc.n_truncated == 1 and enc.lengths.tolist()[1] == 16 and enc.full_lengths[1] > 50
    assert enc.token_type_ids is not None and enc.token_type_ids[0] == [0, 0, 0, 1, 1]


def test_sorted_batches_and_restore_order():
    lengths = np.array([5, 1, 9, 3, 7, 2])
    batches = data.sorted_batches(lengths, 4)
    assert [lengths[b].tolist() for b in batches] == [[9, 7, 5, 3], [2, 1]]
    outputs = [lengths[b] * 10 for b in batches]
    assert data.restore_order(batches, outputs).tolist() == (lengths * 10).tolist()


def test_grouped_batches_cover_rows_once_deterministically():
    lengths = np.random.default_rng(0).integers(1, 60, size=203)
    a = data.grouped_batches(lengths, 8, seed=1, epoch=0, group=4)
    assert sorted(np.concatenate(a).tolist()) == list(range(203))
    assert all(x.tolist() == y.tolist() for x, y in zip(a, data.grouped_batches(lengths, 8, 1, 0, 4), strict=True))
    assert [x.tolist() for x in a] != [x.tolist() for x in data.grouped_batches(lengths, 8, 1, 1, 4)]
    # grouping keeps padding low compared with random batches
    waste = sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in a)
    rand = np.random.default_rng(0).permutation(203)
    rand_waste = sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in np.array_split(rand, 26))
    assert waste < rand_waste / 2


def test_token_budget_batches():
    lengths = np.array([100, 10, 10, 10, 10, 50])
    batches = data.token_budget_batches(lengths, max_tokens=100, max_rows=3)
    assert [len(b) for b in batches] == [1, 2, 3]


def test_pad_batch_dynamic_and_static(tiny_bert_dir):
    from bertkit.modeling import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    enc = data.encode_dataset(tok, data.TextDataset(texts=["a b c", "a"]), 32)
    dyn = data.pad_batch(enc, [0, 1], tok.pad_token_id)
    assert dyn["input_ids"].shape == (2, 5) and dyn["attention_mask"].sum().item() == 8
    assert data.pad_batch(enc, [1], tok.pad_token_id, pad_to=12)["input_ids"].shape == (1, 12)


def test_split_name_with_local_data_is_explained(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("text", "label"))
    with pytest.raises(UserError, match="looks like a split name.*--dev dev.tsv"):
        data.load_splits(opts(data=str(path), dev="validation"))
