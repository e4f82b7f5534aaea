"""The Arrow cache behind every dataset: parsed once, read a chunk at a time, the same rows as a whole-file read."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pandas as pd
import pytest

from bertkit.data import ingest, table
from bertkit.data.options import DataOptions
from bertkit.data.sources import record_lines
from bertkit.data.splits import load_dataset_split, load_splits
from bertkit.errors import UserError


def _rows(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    words = ["good", "bad", "film", "a", "the", "plot", "é", "naïve", '"quoted"', "x,y"]
    return [(" ".join(rng.choice(words, size=rng.integers(1, 8))), str(rng.integers(0, 3))) for _ in range(n)]


def _whole_file(path, sep):
    """What bertkit read before the cache: the whole file through pandas, and its record lines."""
    text = path.read_text(encoding="utf-8")
    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    frame = pd.read_csv(io.StringIO(text), header=None, sep=sep, quoting=quoting, dtype=str, keep_default_na=False)
    return frame, record_lines(text, sep, quoting)


@pytest.mark.parametrize("suffix", [".tsv", ".csv"])
def test_chunked_parse_equals_a_whole_file_read(tmp_path, monkeypatch, suffix):
    """Many small parse batches and read chunks give exactly the cells and line numbers of one whole-file read,
    blank lines and a quoted field spanning lines included."""
    monkeypatch.setattr(ingest, "PARSE_ROWS", 7)
    monkeypatch.setattr(table, "CHUNK_ROWS", 5)
    rows = _rows(60)
    sep = "\t" if suffix == ".tsv" else ","
    path = tmp_path / f"d{suffix}"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter=sep, quoting=csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL,
                            escapechar="\\" if sep == "\t" else None, lineterminator="\n")
        for i, row in enumerate(rows):
            writer.writerow(row if sep == "," or '"' not in row[0] else (row[0].replace('"', "'"), row[1]))
            if i % 13 == 0:
                handle.write("\n")  # a blank line: skipped, and the line numbers move on
        if sep == ",":
            handle.write('"two\nlines",1\n')
    frame, lines = _whole_file(path, sep)
    ds = load_dataset_split(DataOptions(text_column="0", label_column="1"), str(path))
    assert list(ds.texts) == frame[0].tolist()
    assert list(ds.labels) == [int(x) for x in frame[1]]
    assert list(ds.line_numbers) == lines
    part = ds.subset([3, 1, len(ds) - 1])
    assert list(part.texts) == [frame[0][3], frame[0][1], frame[0].iloc[-1]]
    assert list(part.line_numbers) == [lines[3], lines[1], lines[-1]]


def test_parsed_once_then_reused(tmp_path, monkeypatch):
    path = tmp_path / "d.tsv"
    path.write_text("".join(f"{t}\t{y}\n" for t, y in _rows(30)))
    opts = DataOptions(text_column="0", label_column="1", cache_dir=str(tmp_path / "cache"))
    first = load_dataset_split(opts, str(path))
    assert len(list((tmp_path / "cache" / "tables").iterdir())) == 1

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(ingest, "_parse_into", no_parse)
    again = load_dataset_split(opts, str(path))
    assert list(again.texts) == list(first.texts) and again.fingerprint == first.fingerprint
    path.write_text("".join(f"{t}\t{y}\n" for t, y in _rows(31)))  # new content: a new entry, parsed again
    with pytest.raises(AssertionError, match="parsed again"):
        load_dataset_split(opts, str(path))


def test_reading_options_are_part_of_the_key(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("sentence\tlabel\nfine\tpos\nbad\tneg\nok\tpos\n")
    cache = str(tmp_path / "cache")
    with_header = load_dataset_split(DataOptions(label_column="label", cache_dir=cache), str(path))
    without = load_dataset_split(DataOptions(text_column="0", header="no", cache_dir=cache), str(path),
                                 need_labels=False)
    assert list(with_header.texts) == ["fine", "bad", "ok"] and list(without.texts) == ["sentence", "fine", "bad", "ok"]
    assert len(list((tmp_path / "cache" / "tables").iterdir())) == 2


def test_cache_dir_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "d.tsv"
    path.write_text("a\t1\nb\t0\n")
    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "env-cache"))
    load_dataset_split(DataOptions(text_column="0", label_column="1"), str(path))
    assert (tmp_path / "env-cache" / "tables").is_dir()


def test_a_disk_too_small_for_the_cache_is_refused_before_parsing(tmp_path, monkeypatch):
    from bertkit.io import disk

    path = tmp_path / "d.tsv"
    path.write_text("a\t1\nb\t0\n")
    monkeypatch.setattr(disk, "free_bytes", lambda where: 1000)
    with pytest.raises(UserError, match=r"disk full at .*cache.*MB free"):
        load_dataset_split(DataOptions(text_column="0", label_column="1", cache_dir=str(tmp_path / "cache")), str(path))
    assert not any((tmp_path / "cache" / "tables").iterdir())


def test_a_killed_parse_leaves_no_entry(tmp_path, monkeypatch):
    path = tmp_path / "d.tsv"
    path.write_text("a\t1\nb\t0\n")
    real = ingest._parse_into

    def dies(target, *args):
        real(target, *args)
        raise KeyboardInterrupt  # after the rows are written, before the entry is renamed into place

    monkeypatch.setattr(ingest, "_parse_into", dies)
    opts = DataOptions(text_column="0", label_column="1", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(KeyboardInterrupt):
        load_dataset_split(opts, str(path))
    assert list((tmp_path / "cache" / "tables").iterdir()) == []
    monkeypatch.setattr(ingest, "_parse_into", real)
    assert list(load_dataset_split(opts, str(path)).texts) == ["a", "b"]


def test_problems_in_late_chunks_keep_their_lines_and_counts(tmp_path, monkeypatch):
    """Problems found in different chunks are one message: the total count and the first lines."""
    monkeypatch.setattr(ingest, "PARSE_ROWS", 4)
    monkeypatch.setattr(table, "CHUNK_ROWS", 3)
    lines = [f"text {i}\t{'' if i in (2, 9, 17) else i % 2}" for i in range(20)]
    lines[11] = " \t1"
    path = tmp_path / "d.tsv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        load_dataset_split(DataOptions(text_column="0", label_column="1", header="no"), str(path))
    message = str(err.value)
    assert "1 empty text cell(s)" in message and "line 12" in message
    assert "3 missing/blank label(s)" in message and "lines 3, 10, 18" in message


def test_labels_and_stratified_split_equal_the_list_path(tmp_path):
    """The hold-out split by label ids is the split sklearn makes from the label values."""
    from bertkit.data.splits import stratified_split

    rows = _rows(200, seed=3)
    path = tmp_path / "d.tsv"
    path.write_text("".join(f"{t}\t{['neg', 'pos', 'mid'][int(y)]}\n" for t, y in rows))
    splits = load_splits(DataOptions(data=str(path), text_column="0", label_column="1"))
    values = [["neg", "pos", "mid"][int(y)] for _, y in rows]
    train_idx, dev_idx = stratified_split(values, 0.1, 42)
    assert list(splits.dev.texts) == [rows[i][0] for i in dev_idx]
    assert list(splits.train.labels) == [values[i] for i in train_idx]


def test_json_lines_cells_keep_their_types(tmp_path):
    path = tmp_path / "d.jsonl"
    records = [{"text": "a", "label": 1}, {"text": "b", "label": 0.5}, {"text": "c", "label": 2}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    ds = load_dataset_split(DataOptions(task_preset=None), str(path), need_labels=True, task="regression")
    assert list(ds.labels) == [1.0, 0.5, 2.0] and list(ds.line_numbers) == [1, 2, 3]


def test_parquet_streams_its_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "PARSE_ROWS", 3)
    frame = pd.DataFrame({"text": [f"t{i}" for i in range(10)], "label": [i % 2 for i in range(10)]})
    frame.to_parquet(tmp_path / "d.parquet")
    ds = load_dataset_split(DataOptions(), str(tmp_path / "d.parquet"))
    assert list(ds.texts) == frame["text"].tolist() and list(ds.labels) == frame["label"].tolist()


def test_one_process_at_a_time_checks_and_parses_a_cache_entry(tmp_path, monkeypatch):
    """The entry's lock is held while it is parsed (another holder would wait: a second `flock` on it is refused
    while the first runs), and released after; the lock file sits in the cache's locks/, apart from the entries
    (issue 43)."""
    import fcntl

    from bertkit.data import ingest

    data = tmp_path / "train.tsv"
    data.write_text("sentence\tlabel\na fine film\t1\na dull film\t0\n", encoding="utf-8")
    held_during_build = []
    real_build = ingest._build

    def build(folder, path, size, options):
        lock = folder.parent.parent / "locks" / f"{folder.name}.lock"
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held_during_build.append(False)
        except BlockingIOError:
            held_during_build.append(True)
        finally:
            os.close(fd)
        return real_build(folder, path, size, options)

    monkeypatch.setattr(ingest, "_build", build)
    table, _ = ingest.local_table(data, "utf-8", "auto", False, None, cache_dir=str(tmp_path / "cache"))
    assert len(table) == 2 and held_during_build == [True]
    locks = list((tmp_path / "cache" / "locks").glob("*.lock"))
    assert len(locks) == 1 and not list((tmp_path / "cache" / "tables").rglob("*.lock"))
    fd = os.open(locks[0], os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released once the entry is written
    finally:
        os.close(fd)
