"""The one seam through which bertkit reads data: files or hub datasets -> validated texts, pairs and labels
-> tokenized, length-aware batches with dynamic padding.

Only this module knows file formats. Everything returns plain values (lists, numpy arrays, dataclasses),
so a test can hand in 20 rows.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertkit.config import DataOptions
from bertkit.errors import UserError

log = logging.getLogger(__name__)

LOCAL_SUFFIXES = {".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet"}
DEFAULT_TEXT_COLUMNS = ("sentence", "text", "sentence1", "question", "premise")
DEFAULT_PAIR_COLUMNS = ("sentence2", "hypothesis")
MAX_LISTED = 10


# ---------------------------------------------------------------- datasets and labels


@dataclass
class TextDataset:
    """Rows of one split: texts, optional second texts (pairs), optional raw labels, and provenance."""

    texts: list[str]
    pairs: list[str] | None = None
    labels: list[Any] | None = None
    source: str = "<memory>"
    fingerprint: str = ""
    line_numbers: list[int] | None = None
    """1-based line in the source file for each row (for error messages); None for hub data."""

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Sequence[int]) -> TextDataset:
        """The rows at `indices`, in that order."""
        pick = list(indices)
        return TextDataset(
            texts=[self.texts[i] for i in pick],
            pairs=None if self.pairs is None else [self.pairs[i] for i in pick],
            labels=None if self.labels is None else [self.labels[i] for i in pick],
            source=self.source,
            fingerprint=self.fingerprint,
            line_numbers=None if self.line_numbers is None else [self.line_numbers[i] for i in pick],
        )


@dataclass(frozen=True)
class LabelMap:
    """Deterministic label <-> id mapping: the distinct labels sorted (numbers numerically, strings as text)."""

    labels: tuple[Any, ...]

    @classmethod
    def build(cls, labels: Sequence[Any]) -> LabelMap:
        distinct = set(labels)
        ordered = sorted(distinct) if all(isinstance(x, int) for x in distinct) else sorted(distinct, key=str)
        return cls(tuple(ordered))

    @property
    def label2id(self) -> dict[Any, int]:
        return {label: i for i, label in enumerate(self.labels)}

    @property
    def id2label(self) -> dict[int, str]:
        """Ids to label names as strings (what a transformers config stores)."""
        return {i: str(label) for i, label in enumerate(self.labels)}

    def __len__(self) -> int:
        return len(self.labels)

    def encode(self, labels: Sequence[Any], where: str) -> np.ndarray:
        """Label ids for `labels`; labels absent from the mapping are an error that lists them."""
        mapping = self.label2id
        unseen = sorted({label for label in labels if label not in mapping}, key=str)
        if unseen:
            shown = ", ".join(repr(x) for x in unseen[:MAX_LISTED])
            raise UserError(
                f"{where} has labels not seen in the training data: {shown}. Known labels: "
                f"{', '.join(repr(x) for x in self.labels)}. Fix the labels, or train on data that contains them."
            )
        return np.asarray([mapping[label] for label in labels], dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> list[Any]:
        return [self.labels[int(i)] for i in ids]

    def to_json(self) -> dict[str, Any]:
        return {"labels": list(self.labels)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LabelMap:
        return cls(tuple(obj["labels"]))

    @classmethod
    def from_id2label(cls, id2label: dict[Any, str]) -> LabelMap:
        """Rebuild from a transformers config's id2label (keys may be strings in JSON)."""
        names = [id2label[k] for k in sorted(id2label, key=int)]
        return cls(tuple(int(n) if _is_int_text(n) else n for n in names))


@dataclass
class Splits:
    """Train/dev/test datasets with the label mapping built from train, and notes to show the user."""

    train: TextDataset
    dev: TextDataset | None = None
    test: TextDataset | None = None
    label_map: LabelMap | None = None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- reading tables


def is_local_source(source: str) -> bool:
    """A path on disk (or one that looks like a file) rather than a hub dataset name."""
    path = Path(source)
    return path.exists() or path.suffix.lower() in LOCAL_SUFFIXES or source.startswith((".", "/", "~"))


def fingerprint_file(path: Path) -> str:
    """sha256 of the file's bytes: identifies exactly which data a result came from."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def _decode_text(raw: bytes, path: Path, encoding: str) -> str:
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path} is not valid {encoding}: byte 0x{raw[exc.start]:02x} at line {line} cannot be decoded. "
            f"Pass --encoding with the file's real encoding (e.g. --encoding latin-1), or re-save it as UTF-8."
        ) from None
    except LookupError:
        raise UserError(f"Unknown --encoding {encoding!r}. Use a Python codec name such as utf-8 or latin-1.") from None


def _looks_like_header(first: list[str], rest: pd.DataFrame, label_index: int | None) -> bool:
    """Guess whether the first row of a file read without header is a header row.

    Used only when every column is addressed by index and --header is auto. The label column decides: a header
    cell like `label` is a value that never recurs in a column of few distinct values, or is text in a column
    of numbers.
    """
    if label_index is None or label_index >= len(first) or rest.empty:
        return False
    cell, column = first[label_index], rest.iloc[:, label_index].astype(str)
    numeric = column.str.fullmatch(r"-?\d+(\.\d+)?").mean() > 0.95
    if numeric:
        return not _is_number_text(cell)
    return column.nunique() <= 50 and cell not in set(column)


def read_local_table(path: Path, encoding: str, header: str, by_index: bool, label_index: int | None) -> pd.DataFrame:
    """A local file as a DataFrame of strings (csv/tsv/txt) or native values (json/jsonl/parquet)."""
    if not path.exists():
        raise UserError(f"Data file {path} does not exist. Check the path given to --data/--dev/--test.")
    if path.is_dir():
        raise UserError(f"{path} is a directory; --data/--dev/--test take a file (.csv, .tsv, .json, .jsonl, .parquet).")
    suffix = path.suffix.lower()
    if suffix not in LOCAL_SUFFIXES:
        raise UserError(
            f"{path}: unsupported file type {suffix or '(none)'}. Supported: {', '.join(sorted(LOCAL_SUFFIXES))}."
        )
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty (0 bytes). Point --data at a file with rows.")
    if suffix == ".parquet":
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises many types for a bad file
            raise UserError(f"{path} is not a readable parquet file ({exc}). Re-export it.") from None
    text = _decode_text(path.read_bytes(), path, encoding)
    if not text.strip():
        raise UserError(f"{path} contains only whitespace. Point --data at a file with rows.")
    if suffix in {".json", ".jsonl"}:
        return _read_json_text(text, path, lines=suffix == ".jsonl")
    return _read_delimited_text(text, path, "," if suffix == ".csv" else "\t", header, by_index, label_index)


def _read_json_text(text: str, path: Path, lines: bool) -> pd.DataFrame:
    try:
        if lines:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            loaded = json.loads(text)
            records = loaded if isinstance(loaded, list) else pd.DataFrame(loaded).to_dict("records")
    except (json.JSONDecodeError, ValueError) as exc:
        raise UserError(f"{path} is not valid {'JSON Lines' if lines else 'JSON'}: {exc}. Fix the file.") from None
    if not records or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path} must hold a list of objects (one per row), e.g. {{\"text\": ..., \"label\": ...}}.")
    return pd.DataFrame.from_records(records)


def _read_delimited_text(
    text: str, path: Path, sep: str, header: str, by_index: bool, label_index: int | None
) -> pd.DataFrame:
    import csv

    # TSV (GLUE style) has no quoting: quotes are literal characters in sentences.
    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    read_kw: dict[str, Any] = dict(sep=sep, quoting=quoting, dtype=str, keep_default_na=False, engine="c")
    try:
        frame = pd.read_csv(io.StringIO(text), header=None, **read_kw)
    except pd.errors.ParserError as exc:
        raise UserError(
            f"{path} could not be parsed as {'TSV' if sep == chr(9) else 'CSV'}: {exc}. Check the delimiter "
            f"(.tsv files are tab-separated, .csv comma-separated) and that every row has the same number of fields."
        ) from None
    has_header = header == "yes" or (
        header == "auto" and (not by_index or _looks_like_header(list(frame.iloc[0]), frame.iloc[1:200], label_index))
    )
    if has_header:
        names = [str(c) for c in frame.iloc[0]]
        frame = frame.iloc[1:].reset_index(drop=True)
        frame.columns = _unique_names(names)
        frame.attrs["first_data_line"] = 2
    else:
        frame.attrs["first_data_line"] = 1
    if frame.empty:
        raise UserError(f"{path} has a header but no data rows. Add rows, or use --header no if that row is data.")
    return frame


def _unique_names(names: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for name in names:
        out.append(name if not seen[name] else f"{name}.{seen[name]}")
        seen[name] += 1
    return out


def read_hub_split(name: str, config: str | None, split: str) -> pd.DataFrame:
    """One split of a hub dataset as a DataFrame (needs network unless it is cached)."""
    try:
        import datasets

        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # connection, missing dataset, missing config, missing split all land here
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise UserError(
            f"Could not load hub dataset {name!r} (config {config!r}, split {split!r}): {reason}. "
            f"The hub may be unreachable (offline?) or the name/config/split wrong. Use a local file instead: "
            f"--data train.tsv [--dev dev.tsv] with --text-column/--label-column, or run where the hub is reachable."
        ) from None
    return dataset.to_pandas()


# ---------------------------------------------------------------- columns


def resolve_column(frame: pd.DataFrame, selector: str | None, option: str, source: str) -> Any:
    """The DataFrame column a --*-column selector names: a column name, or a 0-based index."""
    columns = list(frame.columns)
    if selector in columns:
        return selector
    if selector is not None and _is_int_text(selector):
        index = int(selector)
        if 0 <= index < len(columns):
            return columns[index]
    shown = ", ".join(str(c) for c in columns)
    hint = ""
    if len(columns) == 1:
        hint = " The file parsed into a single column: is the delimiter right (.tsv = tab, .csv = comma)?"
    raise UserError(
        f"Column {selector!r} (from {option}) not found in {source}; columns are: {shown} "
        f"(or 0-based indexes 0..{len(columns) - 1}).{hint} Pass {option} with one of them."
    )


def _default_column(frame: pd.DataFrame, candidates: tuple[str, ...]) -> Any:
    for name in candidates:
        if name in frame.columns:
            return name
    return None


def _is_int_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def _is_number_text(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def _normalise_labels(values: list[Any]) -> list[Any]:
    """Integers stay integers (also when read as text: '1' -> 1); everything else becomes a string."""
    def as_int(v: Any) -> int | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, str) and _is_int_text(v):
            return int(v)
        return None

    ints = [as_int(v) for v in values]
    if all(i is not None for i in ints):
        return ints
    return [str(v).strip() for v in values]


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and np.isnan(value):
        return True
    return isinstance(value, str) and value.strip() in {"", "nan", "NaN", "None", "null"}


def _where(rows: list[int], line_numbers: list[int] | None, unit: str = "line") -> str:
    shown = [line_numbers[r] if line_numbers else r for r in rows[:MAX_LISTED]]
    more = f" (+{len(rows) - MAX_LISTED} more)" if len(rows) > MAX_LISTED else ""
    return f"{unit}{'s' if len(rows) > 1 else ''} {', '.join(map(str, shown))}{more}"


# ---------------------------------------------------------------- loading one split


def load_dataset_split(opts: DataOptions, source: str, *, split: str | None = None, need_labels: bool = True) -> TextDataset:
    """Read one split (a local file, or `split` of the hub dataset `source`) into a validated TextDataset."""
    by_index = all(s is None or _is_int_text(s) for s in (opts.text_column, opts.text_pair_column, opts.label_column))
    if is_local_source(source):
        path = Path(source).expanduser()
        label_index = int(opts.label_column) if _is_int_text(opts.label_column) else None
        frame = read_local_table(path, opts.encoding, opts.header, by_index and opts.text_column is not None, label_index)
        fingerprint, first_line = fingerprint_file(path), frame.attrs.get("first_data_line", 1)
    else:
        hub_split = split or opts.train_split
        frame = read_hub_split(source, opts.data_config, hub_split)
        fingerprint, first_line = f"hub:{source}/{opts.data_config or ''}/{hub_split}", None
        source = f"{source}[{hub_split}]"
    if opts.limit is not None:
        frame = frame.iloc[: opts.limit]
    return _dataset_from_frame(frame, opts, source, fingerprint, first_line, need_labels)


def _dataset_from_frame(
    frame: pd.DataFrame, opts: DataOptions, source: str, fingerprint: str, first_line: int | None, need_labels: bool
) -> TextDataset:
    text_col = (
        resolve_column(frame, opts.text_column, "--text-column", source)
        if opts.text_column is not None
        else (_default_column(frame, DEFAULT_TEXT_COLUMNS) or frame.columns[0])
    )
    pair_col = None
    if opts.text_pair_column is not None:
        pair_col = resolve_column(frame, opts.text_pair_column, "--text-pair-column", source)
    lines = None if first_line is None else [first_line + i for i in range(len(frame))]
    texts = _text_cells(frame[text_col].tolist(), source, "--text-column", lines)
    pairs = _text_cells(frame[pair_col].tolist(), source, "--text-pair-column", lines) if pair_col is not None else None
    labels = None
    if opts.label_column is not None:
        label_col = resolve_column(frame, opts.label_column, "--label-column", source)
        labels = _label_cells(frame[label_col].tolist(), source, lines)
    else:
        label_col = _default_column(frame, ("label", "labels"))
        if label_col is None and need_labels:
            raise UserError(
                f"No label column in {source}: pass --label-column (columns are: "
                f"{', '.join(map(str, frame.columns))}, or 0-based indexes)."
            )
        if label_col is not None and (need_labels or not any(_is_missing(v) for v in frame[label_col])):
            # An auto-detected label column is used when complete; when labels are optional, gaps just drop it.
            labels = _label_cells(frame[label_col].tolist(), source, lines)
    return TextDataset(texts, pairs, labels, source, fingerprint, lines)


def _text_cells(values: list[Any], source: str, option: str, lines: list[int] | None) -> list[str]:
    texts = ["" if _is_missing(v) else str(v) for v in values]
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise UserError(
            f"{len(empty)} empty text cell(s) in {source} ({option}) at {_where(empty, lines, 'line' if lines else 'row')}. "
            f"Remove those rows or fill them in; a model cannot learn from or embed an empty text."
        )
    return texts


def _label_cells(values: list[Any], source: str, lines: list[int] | None) -> list[Any]:
    missing = [i for i, v in enumerate(values) if _is_missing(v)]
    if missing:
        raise UserError(
            f"{len(missing)} missing/blank label(s) in {source} (--label-column) at "
            f"{_where(missing, lines, 'line' if lines else 'row')}. Fill them in or drop those rows."
        )
    return _normalise_labels(values)


# ---------------------------------------------------------------- train/dev/test


def _load_named(opts: DataOptions, source: str, need_labels: bool) -> TextDataset:
    """A --dev/--test value: a local file, or a split name of the hub dataset given by --data."""
    if opts.data is not None and is_local_source(opts.data) and not is_local_source(source) and "/" not in source:
        # e.g. a hub recipe (`dev = "validation"`) run with `--data train.tsv`: a split name needs a hub --data.
        raise UserError(
            f"--dev/--test {source!r} looks like a split name of a hub dataset, but --data {opts.data} is a local "
            f"file. Pass --dev/--test with local files of the same layout (e.g. --dev dev.tsv)."
        )
    if is_local_source(source) or opts.data is None or is_local_source(opts.data):
        return load_dataset_split(opts, source, need_labels=need_labels)
    return load_dataset_split(opts, opts.data, split=source, need_labels=need_labels)


def stratified_split(labels: Sequence[Any], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held_out): stratified by label, deterministic for a seed; plain random if a class is tiny."""
    from sklearn.model_selection import train_test_split

    indices = np.arange(len(labels))
    counts = Counter(labels)
    stratify = list(labels) if min(counts.values()) >= 2 else None
    train_idx, held_idx = train_test_split(indices, test_size=fraction, random_state=seed, stratify=stratify)
    return np.sort(train_idx), np.sort(held_idx)


def load_splits(opts: DataOptions, *, need_labels: bool = True, need_dev: bool = True) -> Splits:
    """Train (from --data), dev (--dev, or a stratified hold-out of train) and test (--test), with the label map."""
    if opts.data is None:
        raise UserError("No data given: pass --data with a file (.tsv/.csv/.json/.jsonl/.parquet) or a hub dataset name.")
    train = load_dataset_split(opts, opts.data, need_labels=need_labels)
    notes: list[str] = []
    dev = _load_named(opts, opts.dev, need_labels) if opts.dev else None
    test = _load_named(opts, opts.test, need_labels) if opts.test else None
    label_map = None
    if need_labels and train.labels is not None:
        label_map = LabelMap.build(train.labels)
        if len(label_map) < 2:
            raise UserError(
                f"Training data {train.source} has a single class ({label_map.labels[0]!r}) in --label-column; "
                f"a classifier needs at least two. Check the label column, or the data file."
            )
        if dev is None and need_dev:
            train_idx, dev_idx = stratified_split(train.labels, opts.dev_fraction, opts.seed)
            train, dev = train.subset(train_idx), train.subset(dev_idx)
            notes.append(
                f"No --dev given: held out {len(dev)} of {len(train) + len(dev)} training rows as dev "
                f"(stratified, --dev-fraction {opts.dev_fraction}, seed {opts.seed})."
            )
        for name, split in (("dev", dev), ("test", test)):
            if split is not None and split.labels is not None:
                label_map.encode(split.labels, f"The {name} data {split.source}")
    return Splits(train, dev, test, label_map, notes)


# ---------------------------------------------------------------- tokenization and batching


@dataclass
class Encoded:
    """Token ids per row (unpadded), their lengths, and how many rows were truncated."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    lengths: np.ndarray
    full_lengths: np.ndarray
    """Lengths before truncation (for length reports)."""
    max_length: int

    @property
    def n_truncated(self) -> int:
        return int((self.full_lengths > self.max_length).sum())


def encode_dataset(tokenizer: Any, dataset: TextDataset, max_length: int, chunk: int = 4096) -> Encoded:
    """Tokenize every row (pairs as true pairs) with truncation to `max_length`; no padding.

    Rows are first tokenized untruncated to count truncation; only over-long rows are tokenized again.
    """
    want_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    ids: list[list[int]] = []
    types: list[list[int]] | None = [] if want_types else None
    full: list[int] = []
    quiet = logging.getLogger("transformers.tokenization_utils_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the "longer than the maximum" warning is reported by us, per dataset
    try:
        for start in range(0, len(dataset), chunk):
            part = dataset.subset(range(start, min(start + chunk, len(dataset))))
            enc = tokenizer(part.texts, part.pairs, truncation=False, return_token_type_ids=want_types)
            long_rows = [i for i, row in enumerate(enc["input_ids"]) if len(row) > max_length]
            full.extend(len(row) for row in enc["input_ids"])
            if long_rows:
                cut = tokenizer(
                    [part.texts[i] for i in long_rows],
                    None if part.pairs is None else [part.pairs[i] for i in long_rows],
                    truncation=True, max_length=max_length, return_token_type_ids=want_types,
                )
                for j, i in enumerate(long_rows):
                    enc["input_ids"][i] = cut["input_ids"][j]
                    if want_types:
                        enc["token_type_ids"][i] = cut["token_type_ids"][j]
            ids.extend(enc["input_ids"])
            if types is not None:
                types.extend(enc["token_type_ids"])
    finally:
        quiet.setLevel(level)
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=len(ids))
    return Encoded(ids, types, lengths, np.asarray(full, dtype=np.int64), max_length)


def sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Inference batches: rows sorted by length, longest first (memory peaks show up at once)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def token_budget_batches(lengths: np.ndarray, max_tokens: int, max_rows: int) -> list[np.ndarray]:
    """Inference batches by padded-token budget: long rows in small batches, short rows in big ones."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, start = [], 0
    while start < len(order):
        longest = int(lengths[order[start]])
        size = max(1, min(max_rows, max_tokens // max(longest, 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def grouped_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, group: int = 50) -> list[np.ndarray]:
    """Training batches: shuffled, then sorted by length within groups of `group` batches, batch order shuffled.

    Rows of similar length share a batch (little padding) while every epoch sees a new random order.
    Deterministic for (seed, epoch).
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    batches: list[np.ndarray] = []
    span = batch_size * group
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)  # type: ignore[arg-type]
    return batches


def pad_batch(encoded: Encoded, indices: Sequence[int], pad_id: int, pad_to: int | None = None) -> dict[str, Any]:
    """Tensors for the rows at `indices`, padded to the longest of them (dynamic) or to `pad_to` (static)."""
    import torch

    rows = [encoded.input_ids[i] for i in indices]
    width = pad_to or max(len(r) for r in rows)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for j, row in enumerate(rows):
        input_ids[j, : len(row)] = row
        mask[j, : len(row)] = 1
    batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
    if encoded.token_type_ids is not None:
        types = np.zeros((len(rows), width), dtype=np.int64)
        for j, i in enumerate(indices):
            row = encoded.token_type_ids[i]
            types[j, : len(row)] = row
        batch["token_type_ids"] = torch.from_numpy(types)
    return batch


def restore_order(batches: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> np.ndarray:
    """Stack per-batch outputs (rows in batch order) back into the original row order."""
    order = np.concatenate(batches)
    stacked = np.concatenate(outputs)
    result = np.empty_like(stacked)
    result[order] = stacked
    return result
