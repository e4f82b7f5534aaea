"""bertkit/data (and encoding/ batching): both real layouts, formats, pairs, labels, splits, batching, and every
validation error."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from bertkit.data.cells import is_blank_text
from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap, check_tag_columns, normalise_labels
from bertkit.data.options import DataOptions
from bertkit.data.sources import record_lines
from bertkit.data.splits import hold_out_size, load_dataset_split, load_splits, stratified_split
from bertkit.encoding.batches import (
    grouped_batches,
    pad_batch,
    restore_order,
    sorted_batches,
    token_budget_batches,
)
from bertkit.encoding.encode import encode_dataset
from bertkit.errors import UserError


def opts(**kw) -> DataOptions:
    return DataOptions(**kw)


# ---------------------------------------------------------------- real layouts


def test_sst2_headerless_layout(shared_data):
    ds = load_dataset_split(opts(text_column="0", label_column="1"), str(shared_data / "sst2" / "train.tsv"))
    assert len(ds) == 6920
    assert set(ds.labels) == {0, 1}
    assert ds.texts[0].startswith("a stirring , funny and finally transporting")
    assert ds.line_numbers[0] == 1 and ds.fingerprint.startswith("sha256:")


def test_rte_header_pairs_and_string_labels(shared_data):
    o = opts(data=str(shared_data / "rte" / "train.tsv"), dev=str(shared_data / "rte" / "dev.tsv"),
             text_column="sentence1", text_pair_column="sentence2", label_column="label")
    splits = load_splits(o)
    assert (len(splits.train), len(splits.dev)) == (2490, 277)
    assert splits.label_map.labels == ("entailment", "not_entailment")
    assert splits.train.pairs is not None and splits.train.pairs[0] != splits.train.texts[0]
    assert splits.train.line_numbers[0] == 2  # line 1 is the header


def test_rte_by_index_detects_header(shared_data):
    ds = load_dataset_split(opts(text_column="1", text_pair_column="2", label_column="3"),
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
    ds = load_dataset_split(opts(), str(path))  # default columns: text / label
    assert ds.texts == [r[0] for r in toy_rows] and ds.labels == [r[1] for r in toy_rows]


def test_csv_quotes_and_commas(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('text,label\n"hello, world",1\n"she said ""hi""",0\n')
    ds = load_dataset_split(opts(), str(path))
    assert ds.texts == ["hello, world", 'she said "hi"'] and ds.labels == [1, 0]


def test_integer_labels_from_text_and_sorted_map():
    assert LabelMap.build([10, 2, 2, 1]).labels == (1, 2, 10)
    assert LabelMap.build(["b", "a", "c"]).labels == ("a", "b", "c")
    assert normalise_labels(["1", "0", "2"]) == [1, 0, 2]
    assert normalise_labels(["1", "x"]) == ["1", "x"]


def test_label_map_round_trip_and_id2label():
    lm = LabelMap.build(["pos", "neg"])
    assert lm.id2label == {0: "neg", 1: "pos"}
    assert LabelMap.from_json(json.loads(json.dumps(lm.to_json()))) == lm
    assert LabelMap.from_id2label({"0": "3", "1": "7"}).labels == (3, 7)
    assert lm.encode(["pos", "neg"], "x").tolist() == [1, 0]


# ---------------------------------------------------------------- splits


def test_stratified_split_is_deterministic_and_reported(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("text", "label"))
    a = load_splits(opts(data=str(path), dev_fraction=0.25, seed=3))
    b = load_splits(opts(data=str(path), dev_fraction=0.25, seed=3))
    c = load_splits(opts(data=str(path), dev_fraction=0.25, seed=4))
    assert a.dev.texts == b.dev.texts and a.dev.texts != c.dev.texts
    assert len(a.dev) == 10 and sorted(a.dev.labels).count("pos") == 5  # stratified: 5 of each
    assert a.notes and "held out 10 of 40" in a.notes[0]


def test_unseen_dev_labels_are_listed(write_tsv, toy_rows):
    train = write_tsv("train.tsv", toy_rows, header=("text", "label"))
    dev = write_tsv("dev.tsv", [("x", "pos"), ("y", "meh"), ("z", "huh")], header=("text", "label"))
    with pytest.raises(UserError, match=r"labels not seen in the training data: 'huh', 'meh'"):
        load_splits(opts(data=str(train), dev=str(dev)))


def test_single_class_in_train(write_tsv):
    path = write_tsv("one.tsv", [("a", 1), ("b", 1)], header=("text", "label"))
    with pytest.raises(UserError, match="single class"):
        load_splits(opts(data=str(path)))


# ---------------------------------------------------------------- validation errors


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_dataset_split(opts(), str(tmp_path / "nope.tsv"))


def test_empty_file(tmp_path):
    (tmp_path / "e.tsv").write_bytes(b"")
    with pytest.raises(UserError, match="is empty"):
        load_dataset_split(opts(), str(tmp_path / "e.tsv"))


def test_header_only(tmp_path):
    (tmp_path / "h.tsv").write_text("text\tlabel\n")
    with pytest.raises(UserError, match="header but no data rows"):
        load_dataset_split(opts(text_column="text", label_column="label"), str(tmp_path / "h.tsv"))


def test_unknown_column_lists_real_ones(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("sentence", "label"))
    with pytest.raises(UserError, match=r"Column 'txt' \(from --text-column\) not found.*columns are: sentence, label"):
        load_dataset_split(opts(text_column="txt", label_column="label"), str(path))


def test_wrong_delimiter_hint(tmp_path):
    (tmp_path / "c.tsv").write_text("text,label\nhello,1\nbye,0\n")
    with pytest.raises(UserError, match="delimiter"):
        load_dataset_split(opts(text_column="text", label_column="label"), str(tmp_path / "c.tsv"))


def test_empty_text_rows_are_counted_with_lines(tmp_path):
    (tmp_path / "t.tsv").write_text("text\tlabel\nfine\t1\n\t0\nok\t1\n \t0\n")
    with pytest.raises(UserError, match=r"2 empty text cell\(s\).*lines 3, 5"):
        load_dataset_split(opts(), str(tmp_path / "t.tsv"))


def test_missing_labels(tmp_path):
    (tmp_path / "t.tsv").write_text("text\tlabel\nfine\t1\nbad\t\nok\tNaN\n")
    with pytest.raises(UserError, match=r"2 missing/blank label\(s\).*lines 3, 4"):
        load_dataset_split(opts(), str(tmp_path / "t.tsv"))


def test_non_utf8_names_line_and_encoding_option(tmp_path):
    path = tmp_path / "l.tsv"
    path.write_bytes("text\tlabel\nok\t1\ncaf\xe9 au lait\t0\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"line 3.*--encoding"):
        load_dataset_split(opts(), str(path))
    ds = load_dataset_split(opts(encoding="latin-1"), str(path))
    assert ds.texts[1] == "café au lait"


def test_unsupported_suffix_and_directory(tmp_path):
    (tmp_path / "x.xlsx").write_text("a")
    with pytest.raises(UserError, match="unsupported file type"):
        load_dataset_split(opts(), str(tmp_path / "x.xlsx"))
    with pytest.raises(UserError, match="is a directory"):
        load_dataset_split(opts(), str(tmp_path))


def test_unreachable_hub_dataset_is_a_user_error():
    with pytest.raises(UserError, match="Could not load hub dataset.*local file"):
        load_dataset_split(opts(), "no-such-user/no-such-dataset-bertkit")


def test_no_label_column_when_needed(tmp_path):
    (tmp_path / "t.tsv").write_text("text\tscore\na\t1\nb\t0\n")
    with pytest.raises(UserError, match="--label-column"):
        load_dataset_split(opts(), str(tmp_path / "t.tsv"))


# ---------------------------------------------------------------- tokenization and batching


def test_encode_counts_truncation_and_pairs(tiny_bert_dir):
    from bertkit.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    ds = TextDataset(texts=["short", "word " * 50], pairs=["p", "q"])
    enc = encode_dataset(tok, ds, max_length=16)
    assert enc.n_truncated == 1 and enc.lengths.tolist()[1] == 16 and enc.full_lengths[1] > 50
    assert enc.token_type_ids is not None and enc.token_type_ids[0].tolist() == [0, 0, 0, 1, 1]


def test_sorted_batches_and_restore_order():
    lengths = np.array([5, 1, 9, 3, 7, 2])
    batches = sorted_batches(lengths, 4)
    assert [lengths[b].tolist() for b in batches] == [[9, 7, 5, 3], [2, 1]]
    outputs = [lengths[b] * 10 for b in batches]
    assert restore_order(batches, outputs).tolist() == (lengths * 10).tolist()


def test_grouped_batches_cover_rows_once_deterministically():
    lengths = np.random.default_rng(0).integers(1, 60, size=203)
    a = grouped_batches(lengths, 8, seed=1, epoch=0, group=4)
    assert sorted(np.concatenate(a).tolist()) == list(range(203))
    assert all(x.tolist() == y.tolist() for x, y in zip(a, grouped_batches(lengths, 8, 1, 0, 4), strict=True))
    assert [x.tolist() for x in a] != [x.tolist() for x in grouped_batches(lengths, 8, 1, 1, 4)]
    # grouping keeps padding low compared with random batches
    waste = sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in a)
    rand = np.random.default_rng(0).permutation(203)
    rand_waste = sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in np.array_split(rand, 26))
    assert waste < rand_waste / 2


def test_token_budget_batches():
    lengths = np.array([100, 10, 10, 10, 10, 50])
    batches = token_budget_batches(lengths, max_tokens=100, max_rows=3)
    assert [len(b) for b in batches] == [1, 2, 3]


def test_pad_batch_dynamic_and_static(tiny_bert_dir):
    from bertkit.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    enc = encode_dataset(tok, TextDataset(texts=["a b c", "a"]), 32)
    dyn = pad_batch(enc, [0, 1], tok.pad_token_id)
    assert dyn["input_ids"].shape == (2, 5) and dyn["attention_mask"].sum().item() == 8
    assert pad_batch(enc, [1], tok.pad_token_id, pad_to=12)["input_ids"].shape == (1, 12)


def test_pad_batch_for_a_model_keeps_its_inputs_on_its_device(tiny_bert_dir):
    """The model-call form (what `encoding.batches.pad_batch` with `inputs=`/`device=` asks for): only the inputs the model takes, on its device;
    the width on a CPU is the longest row's."""
    import torch

    from bertkit.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_bert_dir))
    enc = encode_dataset(tok, TextDataset(texts=["a b c", "a"]), 32)
    batch = pad_batch(enc, [0, 1], tok.pad_token_id, inputs={"input_ids", "attention_mask"}, device=torch.device("cpu"))
    assert list(batch) == ["input_ids", "attention_mask"] and batch["input_ids"].shape == (2, 5)
    assert torch.equal(batch["input_ids"], pad_batch(enc, [0, 1], tok.pad_token_id)["input_ids"])


def test_split_name_with_local_data_is_explained(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("text", "label"))
    with pytest.raises(UserError, match="looks like a split name.*--dev dev.tsv"):
        load_splits(opts(data=str(path), dev="validation"))


# ---------------------------------------------------------------- issue 13: small data, files, cells, labels


def _labels_file(tmp_path, rows, name="t.tsv"):
    path = tmp_path / name
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in rows), encoding="utf-8")
    return str(path)


def test_hold_out_is_at_least_one_row_per_class(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows[:10], header=("text", "label"))
    splits = load_splits(opts(data=str(path), dev_fraction=0.01))
    assert len(splits.dev) == 2 and sorted(splits.dev.labels) == ["neg", "pos"] and len(splits.train) == 8
    assert "held out 2 of 10" in splits.notes[0] and "raised from 1 to one row per class" in splits.notes[0]
    assert hold_out_size(10, 2, 0.01) == 2 and hold_out_size(40, 2, 0.25) == 10


def test_hold_out_size_unchanged_where_sklearn_worked(toy_rows):
    labels = [lab for _, lab in toy_rows]
    from sklearn.model_selection import train_test_split

    want_train, want_dev = train_test_split(np.arange(40), test_size=0.25, random_state=3, stratify=labels)
    got_train, got_dev = stratified_split(labels, 0.25, 3)
    assert got_dev.tolist() == sorted(want_dev.tolist()) and got_train.tolist() == sorted(want_train.tolist())


def test_hold_out_too_small_data_is_a_user_error():
    with pytest.raises(UserError, match=r"hold-out\s+needs 2 rows.*at least 4 rows are needed.*--dev"):
        stratified_split(["a", "b", "a"], 0.1, 0)


def test_single_row_classes_stay_in_training():
    labels = ["a"] * 6 + ["b"] * 6 + ["rare"]
    for seed in range(10):
        train, held = stratified_split(labels, 0.3, seed)
        assert 12 in train.tolist() and len(held) == 4


def test_hold_out_that_starves_a_class_is_refused():
    with pytest.raises(UserError, match=r"leaves no training row for class\(es\) 'a'"):
        stratified_split(["a", "a"] + ["b"] * 18, 0.9, 0)


def test_read_error_names_the_os_reason(tmp_path, monkeypatch):
    path = _labels_file(tmp_path, [("fine", "pos"), ("bad", "neg")])
    from bertkit.data import ingest

    def denied(file, *args, **kwargs):  # the file's bytes are streamed with open()
        if str(file) == path:
            raise PermissionError(13, "Permission denied", path)
        return open(file, *args, **kwargs)

    monkeypatch.setattr(ingest, "open", denied, raising=False)
    with pytest.raises(UserError, match=r"Cannot read data file .*t\.tsv: Permission denied.*chmod u\+r"):
        load_dataset_split(opts(), path)


def test_other_os_errors_on_read(tmp_path, monkeypatch):
    path = _labels_file(tmp_path, [("fine", "pos"), ("bad", "neg")])
    from bertkit.data import ingest

    monkeypatch.setattr(ingest, "open", lambda *a, **k: (_ for _ in ()).throw(OSError(5, "Input/output error")),
                        raising=False)
    with pytest.raises(UserError, match=r"Input/output error \(OS error 5\)"):
        load_dataset_split(opts(), path)


def test_utf8_bom_just_works(tmp_path):
    path = tmp_path / "bom.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + b"sentence\tlabel\nfine\tpos\nbad\tneg\n")
    ds = load_dataset_split(opts(label_column="label"), str(path))
    assert ds.texts == ["fine", "bad"] and ds.labels == ["pos", "neg"]
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps([{"text": "a", "label": 1}]).encode())
    assert load_dataset_split(opts(), str(tmp_path / "bom.json"), need_labels=False).texts == ["a"]


def test_utf16_reads_with_its_encoding(tmp_path):
    path = tmp_path / "u16.tsv"
    path.write_bytes("sentence\tlabel\nfine\tpos\nbad\tneg\n".encode("utf-16"))
    with pytest.raises(UserError, match=r"UTF-16-encoded.*--encoding utf-16"):
        load_dataset_split(opts(), str(path))
    assert load_dataset_split(opts(encoding="utf-16"), str(path)).texts == ["fine", "bad"]


def test_multiline_csv_fields_give_real_line_numbers(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text('text,label\n"one\ntwo\nthree",pos\n\nok,neg\n" ",pos\n"a\r\nb",\nfine,neg\n')
    with pytest.raises(UserError) as err:
        load_dataset_split(opts(), str(path))
    message = str(err.value)
    assert re.search(r"1 empty text cell\(s\).*at line 7\b", message, re.S), message
    assert re.search(r"1 missing/blank label\(s\).*at line 8\b", message, re.S), message


def test_line_numbers_follow_blank_lines_and_limit(tmp_path):
    path = tmp_path / "b.tsv"
    path.write_text("text\tlabel\nx\tpos\n\n   \ny\tneg\nz\tpos\n")
    ds = load_dataset_split(opts(limit=2), str(path))
    assert ds.line_numbers == [2, 5]
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text('{"text": "a", "label": 1}\n\n{"text": "b", "label": 0}\n')
    assert load_dataset_split(opts(), str(jsonl)).line_numbers == [1, 3]


def test_record_lines_matches_pandas_on_odd_layouts():
    assert record_lines('a,b\n"x\n\ny",1\n\nz,2\n', ",", 0) == [1, 2, 6]
    assert record_lines("a\tb\rx\t1\r\ry\t2", "\t", 3) == [1, 2, 4]


def test_text_and_label_problems_in_one_message(tmp_path):
    path = _labels_file(tmp_path, [("fine", "pos"), ("", "neg"), ("ok", ""), ("\u200b\u2060", "pos")])
    with pytest.raises(UserError) as err:
        load_dataset_split(opts(), path)
    message = str(err.value)
    assert "2 empty text cell(s)" in message and "lines 3, 5" in message
    assert "1 missing/blank label(s)" in message and "line 4" in message


@pytest.mark.parametrize("text", ["\u200b", "\u200b\u200c\u200d", "\ufeff \u00ad", "\u2060\t", "\u3164"])
def test_invisible_only_texts_are_blank(text):
    assert is_blank_text(text)
    assert not is_blank_text(text + "a") and not is_blank_text("\u0301")


def test_equal_numeric_labels_are_one_label(tmp_path):
    path = _labels_file(tmp_path, [("a", "1"), ("b", "1.0"), ("c", "0"), ("d", "0.0"), ("e", "1e0")])
    ds = load_dataset_split(opts(), path)
    assert ds.labels == [1, 1, 0, 0, 1] and LabelMap.build(ds.labels).labels == (0, 1)
    assert normalise_labels(["0.5", "1.50", 2]) == [0.5, 1.5, 2]
    assert normalise_labels(["1", "1.0", "x", 2.0]) == ["1", "1", "x", "2"]
    assert normalise_labels([True, 1]) == ["True", "1"]


def test_dev_label_1_0_meets_train_label_1(tmp_path, toy_rows):
    train = _labels_file(tmp_path, [(t, "1" if lab == "pos" else "0") for t, lab in toy_rows], "tr.tsv")
    dev = _labels_file(tmp_path, [("good", "1.0"), ("bad", "0.0")], "dev.tsv")
    splits = load_splits(opts(data=train, dev=dev))
    assert splits.label_map.labels == (0, 1)
    assert splits.label_map.encode(splits.dev.labels, "dev").tolist() == [1, 0]
    assert splits.label_map.encode(["1", 1.0, "0.0"], "x").tolist() == [1, 1, 0]
    assert LabelMap.from_id2label({"0": "0.5", "1": "1.5"}).labels == (0.5, 1.5)


def test_list_cells_are_refused_with_column_and_rows(tmp_path):
    path = tmp_path / "l.json"
    path.write_text(json.dumps([{"text": "ok", "label": "a"}, {"text": ["x", "y"], "label": ["a", "b"]},
                                {"text": {"k": 1}, "label": "b"}]))
    with pytest.raises(UserError) as err:
        load_dataset_split(opts(), str(path))
    message = str(err.value)
    assert "2 cell(s) of column 'text' (--text-column)" in message and "lines 2, 3" in message
    assert "1 cell(s) of column 'label'" in message and "multi-label data is not supported" in message


def test_parquet_list_column_is_refused(tmp_path):
    path = tmp_path / "l.parquet"
    pd.DataFrame({"text": ["a", "b"], "label": [[1, 2], [0]]}).to_parquet(path)
    with pytest.raises(UserError, match=r"column 'label' \(--label-column\).*single value"):
        load_dataset_split(opts(), str(path))


@pytest.mark.parametrize(("kw", "roles"), [
    ({"text_column": "0", "label_column": "0"}, "--text-column and --label-column"),
    ({"text_column": "sentence", "label_column": "0"}, "--text-column and --label-column"),
    ({"text_column": "sentence", "text_pair_column": "0"}, "--text-column and --text-pair-column"),
    ({"label_column": "sentence"}, "the text column chosen by default and --label-column"),
    ({"text_column": "label"}, "--text-column and the label column found by default"),
])
def test_one_column_in_two_roles_is_refused(write_tsv, toy_rows, kw, roles):
    path = write_tsv("t.tsv", toy_rows, header=("sentence", "label"))
    with pytest.raises(UserError, match=f"{roles} both select column"):
        load_dataset_split(opts(**kw), str(path))


def test_optional_labels_never_reuse_the_text_column(write_tsv, toy_rows):
    path = write_tsv("t.tsv", toy_rows, header=("sentence", "label"))
    ds = load_dataset_split(opts(text_column="label"), str(path), need_labels=False)
    assert ds.labels is None and ds.texts[0] == "pos"


def test_small_data_without_dev_runs_through_the_cli(tmp_path, tiny_bert_dir, toy_rows):
    """`probe --limit 10`, `finetune --limit 10` and `--dev-fraction 0.01` used to crash in sklearn."""
    from typer.testing import CliRunner

    from bertkit.cli.app import app

    path = tmp_path / "t.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in toy_rows), encoding="utf-8")
    runner = CliRunner()
    runs = [
        ["probe", "--model", str(tiny_bert_dir), "--data", str(path), "--limit", "10", "--no-baselines", "--json"],
        ["probe", "--model", str(tiny_bert_dir), "--data", str(path), "--dev-fraction", "0.01", "--no-baselines", "--json"],
        ["finetune", "--model", str(tiny_bert_dir), "--data", str(path), "--limit", "10", "--epochs", "1",
         "--batch-size", "4", "--out", str(tmp_path / "ft"), "--json", "--quiet"],
    ]
    for argv in runs:
        result = runner.invoke(app, argv, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)
    probe = json.loads(runner.invoke(app, runs[0], catch_exceptions=False).stdout)
    assert probe["rows"] == {"train": 8, "dev": 2} and "raised from 1 to one row per class" in probe["notes"][0]


def test_hub_limit_asks_for_a_split_slice(monkeypatch):
    """--limit N on a hub dataset loads `split[:N]`: the rest of the split is never read into a DataFrame."""
    import datasets

    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split

    asked = []

    def fake_load_dataset(name, config, split):
        asked.append(split)
        return datasets.Dataset.from_dict({"sentence": ["good", "bad", "fine"][:3], "label": [1, 0, 1]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_dataset_split(DataOptions(data="someone/glue-like", limit=2), "someone/glue-like")
    assert asked == ["train[:2]"]
    assert len(ds) == 2
    load_dataset_split(DataOptions(data="someone/glue-like"), "someone/glue-like", split="validation")
    assert asked[-1] == "validation"


def test_each_split_is_located_once(tmp_path, monkeypatch):
    """Train, dev and test are each judged local or hub once (`split_sources`), then read as decided."""
    from bertkit.data import splits

    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / name).write_text("sentence\tlabel\n" + "".join(f"row {i}\t{i % 2}\n" for i in range(8)),
                                     encoding="utf-8")
    asked = []
    real = splits.is_local_source
    monkeypatch.setattr(splits, "is_local_source", lambda source: asked.append(source) or real(source))
    loaded = load_splits(opts(data=str(tmp_path / "train.tsv"), dev=str(tmp_path / "dev.tsv")))
    assert len(loaded.train) == 8 and len(loaded.dev) == 8
    assert sorted(asked) == [str(tmp_path / "dev.tsv"), str(tmp_path / "train.tsv")]


def test_named_split_sources():
    from bertkit.data.splits import SplitSource, named_source, named_split_source

    assert named_split_source("nyu-mll/glue", "validation") == SplitSource("nyu-mll/glue", False, "validation")
    assert named_source("nyu-mll/glue", "validation") == ("nyu-mll/glue", "validation")
    assert named_split_source(None, "someone/dev-set") == SplitSource("someone/dev-set", False)
    with pytest.raises(UserError, match=r"--dev/--test 'validation' looks like a split name.*--data t\.tsv is a local"):
        named_split_source("t.tsv", "validation")


def test_confusion_matrix_plot_is_written(tmp_path):
    from bertkit import plots

    path = plots.save_figure(plots.confusion_matrix([[3, 1], [0, 4]], ["neg", "pos"], "t"), tmp_path / "cm.png")
    assert path.is_file() and path.stat().st_size > 1000


def test_zero_one_columns_must_be_exactly_the_models_tags():
    tags = LabelMap(("a", "b", "c"), "multi_label")
    read = TextDataset(["x", "y"], labels=[("a",), ()], source="t.csv", task="multi_label", label_columns=("a", "b"))
    with pytest.raises(UserError) as err:
        check_tag_columns(tags, read, "model m")
    assert "no column for its tag(s) 'c'" in str(err.value) and "Pass --label-column a,b,c" in str(err.value)
    read.label_columns = ("a", "b", "c", "d")
    with pytest.raises(UserError, match=r"column\(s\) 'd' that are not its tags"):
        check_tag_columns(tags, read, "model m")
    read.label_columns = ("c", "a", "b")  # the order of the columns does not matter
    check_tag_columns(tags, read, "model m")
    read.label_columns = ("labels",)  # one column of tag lists: its tags are checked when encoded
    check_tag_columns(tags, read, "model m")
    check_tag_columns(LabelMap(("a", "b")), read, "model m")  # single-label: nothing to check


def test_limit_says_when_it_cuts_the_dev_and_test_files(tmp_path):
    rows = "".join(f"row {i}\t{i % 2}\n" for i in range(12))
    for name in ("train", "dev", "test"):
        (tmp_path / f"{name}.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    splits = load_splits(opts(data=str(tmp_path / "train.tsv"), dev=str(tmp_path / "dev.tsv"),
                              test=str(tmp_path / "test.tsv"), limit=5))
    assert len(splits.dev) == len(splits.test) == 5
    cut = [n for n in splits.notes if n.startswith("--limit 5 applies to every split")]
    assert len(cut) == 2 and "dev is the first 5 rows" in cut[0] and "test is the first 5 rows" in cut[1]
    assert not [n for n in load_splits(opts(data=str(tmp_path / "train.tsv"), dev=str(tmp_path / "dev.tsv"))).notes
                if "--limit" in n]
