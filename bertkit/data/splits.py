"""Train, dev and test data: one split read and validated (`load_dataset_split`), --dev/--test as files or hub
split names (`load_named_split`), and a dev set held out of train when none is given (`load_splits`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.cells import MAX_LISTED
from bertkit.data.columns import TextCheck, by_index_reading, choose_columns, reads_tags, text_values
from bertkit.data.dataset import TextDataset
from bertkit.data.ingest import hub_table, local_table
from bertkit.data.label_reader import LabelReader
from bertkit.data.labels import LabelMap
from bertkit.data.options import DataOptions
from bertkit.data.sources import is_local_source, read_hub_split
from bertkit.data.table import RowTable, line_column
from bertkit.data.tagged import has_tagged_suffix
from bertkit.data.tagged_text import tagged_text_dataset
from bertkit.errors import UserError, raise_if_problems


@dataclass
class Splits:
    """Train/dev/test datasets with the label mapping built from train, and notes to show the user."""

    train: TextDataset
    dev: TextDataset | None = None
    test: TextDataset | None = None
    label_map: LabelMap | None = None
    notes: list[str] = field(default_factory=list)

    def fingerprints(self) -> dict[str, str]:
        """{train, dev}: what identifies each split's content in a training run's resume key."""
        assert self.dev is not None
        return {"train": self.train.fingerprint, "dev": self.dev.fingerprint}


# ---------------------------------------------------------------- one split


@dataclass(frozen=True)
class SplitSource:
    """Where one split is read from, decided once (`split_source`) and carried, so reading it never asks again."""

    name: str
    """The file, or the hub dataset."""
    local: bool
    split: str | None = None
    """The hub split; None: --train-split (for a hub dataset)."""


def split_source(source: str, split: str | None = None) -> SplitSource:
    """`source` (a local file or a hub dataset) and the hub `split` to read of it, its kind decided here once."""
    return SplitSource(source, is_local_source(source), split)


def load_dataset_split(opts: DataOptions, source: str, *, split: str | None = None, need_labels: bool = True,
                       task: str | None = None) -> TextDataset:
    """Read one split (a local file, or `split` of the hub dataset `source`) into a validated TextDataset whose
    columns are lazy views of the parsed table (`bertkit.data.table`): memory does not grow with the rows.

    `task` (TASKS or auto) is the labels' shape; None: the command's --task (auto), or single_label for commands
    that read one class per row."""
    return read_split(opts, split_source(source, split), need_labels, task)


def read_split(opts: DataOptions, where: SplitSource, need_labels: bool = True,
               task: str | None = None) -> TextDataset:
    """`load_dataset_split` for a source whose kind is decided already."""
    source = where.name
    if where.local:
        path = Path(source).expanduser()
        if has_tagged_suffix(path):  # its sentences' words as text (`bertkit tokens` on a .iob2 file)
            return tagged_text_dataset(path, opts, need_labels)
        by_index, label_index = by_index_reading(opts)
        table, fingerprint = local_table(path, opts.encoding, opts.header, by_index, label_index,
                                         getattr(opts, "cache_dir", None))
    else:
        hub_split = where.split or opts.train_split
        table = hub_table(read_hub_split(source, opts.data_config, hub_split, opts.limit))
        fingerprint = f"hub:{source}/{opts.data_config or ''}/{hub_split}"
        source = f"{source}[{hub_split}]"
    if opts.limit is not None and opts.limit < len(table):
        table = table.head(opts.limit)
    wanted = task or getattr(opts, "task", None) or ("auto" if reads_tags(opts) else "single_label")
    return _dataset_from_table(table, opts, source, fingerprint, need_labels, wanted)


def _dataset_from_table(table: RowTable, opts: DataOptions, source: str, fingerprint: str, need_labels: bool,
                        task: str) -> TextDataset:
    """Validated texts/pairs/labels of a table, read a chunk at a time; every cell problem of the file is reported
    in one error."""
    cols = choose_columns(table, opts, source, need_labels)
    lines = line_column(table) if table.lines is not None else None
    checks = [TextCheck(source, "--text-column", cols.text)]
    if cols.pair is not None:
        checks.append(TextCheck(source, "--text-pair-column", cols.pair))
    for check in checks:  # a delimited file's strings are checked in Arrow; other cells in Python
        plain = table.plain_strings(check.column)
        for start, (cells,) in (table.scan_arrow if plain else table.scan)([check.column]):
            (check.feed_strings if plain else check.feed)(start, cells)
    problems = [problem for check in checks for problem in check.problems(lines)]
    labels, columns = None, None
    if cols.label is not None:
        reader = LabelReader(source, cols, lines, problems, getattr(opts, "label_sep", None), reads_tags(opts), table)
        task, labels = reader.read(task)
        columns = tuple(str(c) for c in (cols.tag_columns or (cols.label,)))
    raise_if_problems(problems, f"Problems in the data {source}")
    texts = table.column(cols.text, None if table.plain_strings(cols.text) else text_values)
    pairs = None if cols.pair is None else table.column(cols.pair,
                                                         None if table.plain_strings(cols.pair) else text_values)
    return TextDataset(texts, pairs, labels, source, fingerprint, lines,
                       task="single_label" if task == "auto" else task, label_columns=columns)


# ---------------------------------------------------------------- train/dev/test


def named_source(data: str | None, source: str) -> tuple[str, str | None]:
    """Where a --dev/--test value `source` is read from: (the file, None) when it is a local file (or --data is not
    a hub dataset), else (the hub dataset --data, `source` as its split name)."""
    where = named_split_source(data, source)
    return where.name, where.split


def named_split_source(data: str | None, source: str, data_local: bool | None = None) -> SplitSource:
    """A --dev/--test value `source` as the `SplitSource` it names: a local file, or a split name of the hub dataset
    --data (`named_source`; `data_local`: whether --data is a local file, when that is decided already). A split
    name with a local --data is refused: a split name needs a hub --data."""
    source_local = is_local_source(source)
    if data_local is None:
        data_local = data is not None and is_local_source(data)
    if data_local and not source_local and "/" not in source:
        # e.g. a hub recipe (`dev = "validation"`) run with `--data train.tsv`: a split name needs a hub --data.
        raise UserError(
            f"--dev/--test {source!r} looks like a split name of a hub dataset, but --data {data} is a local "
            f"file. Pass --dev/--test with local files of the same layout (e.g. --dev dev.tsv)."
        )
    if source_local or data is None or data_local:
        return SplitSource(source, source_local)
    return SplitSource(data, False, source)


def load_named_split(opts: DataOptions, source: str, need_labels: bool, task: str | None = None) -> TextDataset:
    """A --dev/--test value: a local file, or a split name of the hub dataset given by --data."""
    return read_split(opts, named_split_source(opts.data, source), need_labels, task)


def hold_out_size(n_rows: int, n_classes: int, fraction: float) -> int:
    """Rows held out as dev: ceil(fraction * rows), but at least one per class (a stratified split needs that)."""
    return max(math.ceil(fraction * n_rows), n_classes)


def stratified_split(labels: Sequence[Any], fraction: float, seed: int,
                     names: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held_out), deterministic for a seed: `hold_out_size` rows, stratified by label; rows of a
    class with a single row stay in training. Every class keeps a training row, or this is a UserError.

    `labels` may be label ids (an int array, one per row: what millions of rows are split by) with `names` the
    class of each id for messages; ids in the classes' sorted order split exactly as the labels themselves."""
    from sklearn.model_selection import train_test_split

    ids, classes = _class_ids(labels, names)
    counts = np.bincount(ids, minlength=len(classes))
    n_classes = int((counts > 0).sum())
    n_held = hold_out_size(len(ids), n_classes, fraction)
    if len(ids) - n_held < n_classes:
        raise UserError(
            f"Too little data to hold out a dev set: {len(ids)} rows of {n_classes} classes, and the hold-out "
            f"needs {n_held} rows (--dev-fraction {fraction}, at least one per class) while training keeps at least "
            f"one row per class, so at least {n_held + n_classes} rows are needed. Pass --dev with a dev file, "
            f"or use more data (a larger --limit)."
        )
    indices = np.arange(len(ids))
    single = counts[ids] == 1
    train_idx, held_idx = train_test_split(indices[~single], test_size=n_held, random_state=seed,
                                           stratify=ids[~single])
    train_idx = np.concatenate([train_idx, indices[single]])
    _check_every_class_trains(ids, classes, train_idx, n_held, fraction)
    return np.sort(train_idx), np.sort(held_idx)


def _class_ids(labels: Sequence[Any], names: Sequence[Any] | None) -> tuple[np.ndarray, list[Any]]:
    """(an id per row, the class of each id): `labels` as they are when `names` is given, else numbered in the
    order np.unique sorts them (the order sklearn's stratification uses)."""
    if names is not None:
        return np.asarray(labels, dtype=np.int64), list(names)
    classes, ids = np.unique(np.asarray(list(labels), dtype=object if _mixed(labels) else None), return_inverse=True)
    return ids.astype(np.int64), classes.tolist()


def _mixed(labels: Sequence[Any]) -> bool:
    return len({type(x) for x in labels}) > 1


def _check_every_class_trains(ids: np.ndarray, classes: list[Any], train_idx: np.ndarray, n_held: int,
                              fraction: float) -> None:
    present = np.flatnonzero(np.bincount(ids, minlength=len(classes)))
    kept = np.bincount(ids[train_idx], minlength=len(classes))
    lost = sorted((classes[i] for i in present if kept[i] == 0), key=str)
    if lost:
        raise UserError(
            f"Holding out {n_held} of {len(ids)} rows (--dev-fraction {fraction}) leaves no training row for "
            f"class(es) {', '.join(repr(x) for x in lost[:MAX_LISTED])}. Pass --dev with a dev file, a smaller "
            f"--dev-fraction, or more data."
        )


def load_splits(opts: DataOptions, *, need_labels: bool = True, need_dev: bool = True) -> Splits:
    """Train (from --data), dev (--dev, or a stratified hold-out of train) and test (--test), with the label map.

    The labels' shape (--task, auto-detected on the training data) holds for dev and test too."""
    if opts.data is None:
        raise UserError("No data given: pass --data with a file (.tsv/.csv/.json/.jsonl/.parquet) or a hub dataset name.")
    train_from, dev_from, test_from = split_sources(opts)
    train = read_split(opts, train_from, need_labels)
    task = train.task if train.labels is not None else None
    notes: list[str] = []
    dev = read_split(opts, dev_from, need_labels, task) if dev_from else None
    test = read_split(opts, test_from, need_labels, task) if test_from else None
    label_map = None
    if need_labels and train.labels is not None:
        label_map = LabelMap.build(train.labels, train.task, train.label_columns)
        _check_trainable(label_map, train)
        if dev is None and need_dev:
            train, dev, note = _hold_out_dev(train, label_map, opts)
            notes.append(note)
        for name, split in (("dev", dev), ("test", test)):
            if split is not None and split.labels is not None:
                label_map.encode(split.labels, f"The {name} data {split.source}")
    for name, split, flag in (("dev", dev, opts.dev), ("test", test, opts.test)):
        if flag and opts.limit is not None and split is not None and len(split) >= opts.limit:
            notes.append(f"--limit {opts.limit} applies to every split: {name} is the first {len(split)} rows of "
                         f"{split.source} (drop --limit, or cut only the training file, to score on all of it).")
    for split in (train, dev, test):
        table = getattr(split.texts, "table", None) if split is not None else None
        if table is not None and table.note and table.note not in notes:
            notes.append(table.note)
    return Splits(train, dev, test, label_map, notes)


def split_sources(opts: DataOptions) -> tuple[SplitSource, SplitSource | None, SplitSource | None]:
    """Where train (--data), dev and test (--dev/--test, when given) are read from, each decided once."""
    data = str(opts.data)
    train = split_source(data)
    dev, test = (named_split_source(data, value, train.local) if value else None for value in (opts.dev, opts.test))
    return train, dev, test


def _check_trainable(label_map: LabelMap, train: TextDataset) -> None:
    """A model needs two classes, one tag, or a target that varies."""
    if label_map.task == "single_label" and len(label_map) < 2:
        raise UserError(
            f"Training data {train.source} has a single class ({label_map.labels[0]!r}) in --label-column; "
            f"a classifier needs at least two. Check the label column, or the data file."
        )
    if label_map.task == "multi_label" and len(label_map) == 0:
        raise UserError(f"Training data {train.source} has no tags: every 0/1 label column is all zeros. Check "
                        f"--label-column, or the data file.")
    if label_map.task == "regression" and _constant(train.labels or []):
        raise UserError(f"Training data {train.source} has the same target value in every row; a regression needs "
                        f"targets that vary. Check --label-column, or the data file.")


def _hold_out_dev(train: TextDataset, label_map: LabelMap, opts: DataOptions) -> tuple[TextDataset, TextDataset, str]:
    """(train, dev, note): a stratified hold-out for single-label data, a random one for tags and numbers."""
    n_rows = len(train)
    if label_map.task != "single_label":
        train_idx, dev_idx = random_split(n_rows, opts.dev_fraction, opts.seed)
        note = (f"No --dev given: held out {len(dev_idx)} of {n_rows} training rows as dev (random, "
                f"--dev-fraction {opts.dev_fraction}, seed {opts.seed}).")
        return train.subset(train_idx), train.subset(dev_idx), note
    ids = label_map.encode(train.labels or [], f"The training data {train.source}")
    train_idx, dev_idx = stratified_split(ids, opts.dev_fraction, opts.seed, names=label_map.labels)
    raised = math.ceil(opts.dev_fraction * n_rows) < len(dev_idx)
    note = (
        f"No --dev given: held out {len(dev_idx)} of {n_rows} training rows as dev "
        f"(stratified, --dev-fraction {opts.dev_fraction}, seed {opts.seed})"
        + (f"; raised from {math.ceil(opts.dev_fraction * n_rows)} to one row per class "
           f"({len(label_map)} classes): a dev set this small says little, pass --dev for a real one."
           if raised else ".")
    )
    return train.subset(train_idx), train.subset(dev_idx), note


def random_split(n_rows: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held_out), deterministic for a seed: ceil(fraction * rows) random rows held out (at least one;
    at least one left to train on, or a UserError)."""
    n_held = max(math.ceil(fraction * n_rows), 1)
    if n_rows - n_held < 1:
        raise UserError(f"Too little data to hold out a dev set: {n_rows} row(s). Pass --dev with a dev file, or use "
                        f"more data.")
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


def _constant(values: Sequence[float]) -> bool:
    """Whether every value is the same (streamed: a lazy column is read a chunk at a time)."""
    first = None
    for value in values:
        if first is None:
            first = value
        elif value != first:
            return False
    return True
