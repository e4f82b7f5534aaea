"""`bertkit tokens`: the tokenizer made visible — one sentence token by token, or a dataset's length profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.dataset import TextDataset
from bertkit.encoding.batches import SORT_WINDOW, sorted_batches
from bertkit.encoding.encode import encode_for
from bertkit.encoding.longtext import default_stride
from bertkit.encoding.reading import Reading


@dataclass
class SentenceTokens:
    """One sentence (or pair) as the model reads it: its tokens, ids, attention mask, segment ids and where the
    special tokens sit (`special_positions`: cls, sep, pad -> positions)."""

    text: str
    text_pair: str | None
    tokens: list[str]
    input_ids: list[int]
    attention_mask: list[int]
    token_type_ids: list[int] | None
    special_positions: dict[str, list[int]]
    n_tokens: int


def explain_sentence(tokenizer: Any, text: str, pair: str | None = None) -> SentenceTokens:
    """Tokens, ids, special-token positions, attention mask and segment ids for one sentence (or pair)."""
    enc = tokenizer(text, pair, return_token_type_ids=True, return_attention_mask=True)
    ids = list(enc["input_ids"])
    specials = {
        name: [i for i, t in enumerate(ids) if t == token_id]
        for name, token_id in (
            ("cls", tokenizer.cls_token_id),
            ("sep", tokenizer.sep_token_id),
            ("pad", tokenizer.pad_token_id),
        )
        if token_id is not None
    }
    return SentenceTokens(text, pair, tokenizer.convert_ids_to_tokens(ids), ids, list(enc["attention_mask"]),
                          enc.get("token_type_ids"), specials, len(ids))


@dataclass
class LengthReport:
    """Token-length statistics of one split and the padding each batching strategy would waste."""

    split: str
    source: str
    rows: int
    min: int
    p50: float
    p95: float
    p99: float
    max: int
    mean: float
    truncated: int
    truncated_share: float
    suggested_max_length: int
    waste_static: float
    """Share of padded token slots that are padding when every row is padded to --max-length."""
    waste_dynamic_random: float
    """... when each batch (random order) is padded to its longest row."""
    waste_dynamic_sorted: float
    """... when batches are formed from length-sorted rows (what bertkit does)."""
    label_counts: dict[str, int] | None
    length_counts: np.ndarray
    """Rows per untruncated token length (index = tokens): the histogram; not part of tokens.json."""


def padding_sums(lengths: np.ndarray, batches: list[np.ndarray]) -> tuple[int, int]:
    """(real tokens, padded tensor slots) of the given batches."""
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(int(lengths[b].max()) * len(b) for b in batches)
    return real, padded


def padding_waste(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the padded tensor's slots that hold padding, for the given batches."""
    return _waste(*padding_sums(lengths, batches))


def _waste(real: int, padded: int) -> float:
    return 1.0 - real / padded if padded else 0.0


def suggest_max_length(full_lengths: np.ndarray, limit: int) -> int:
    """The smallest multiple of 8 covering 99% of rows, capped at the model's limit."""
    return _suggest(float(np.percentile(full_lengths, 99)), limit)


def _suggest(p99: float, limit: int) -> int:
    return int(min(limit, max(8, int(np.ceil(p99 / 8.0)) * 8)))


def percentile_of_counts(counts: np.ndarray, q: float) -> float:
    """`np.percentile(values, q)` (its default linear interpolation, bit for bit) of the values whose histogram is
    `counts` (counts[v] = how many values equal v), without the values: the two order statistics around the
    virtual index (n - 1) * q / 100 come from the cumulative counts, then numpy's own lerp."""
    cumulative = np.cumsum(counts)
    n = int(cumulative[-1])

    def value_at(k: int) -> int:  # the k-th smallest value (0-based)
        return int(np.searchsorted(cumulative, k, side="right"))

    virtual = (n - 1) * float(np.true_divide(q, 100))
    if virtual >= n - 1:
        return float(value_at(n - 1))
    previous = int(np.floor(virtual))
    gamma = virtual - previous
    below, above = value_at(previous), value_at(previous + 1)
    diff = above - below
    return float(above - diff * (1 - gamma)) if gamma >= 0.5 else float(below + diff * gamma)


@dataclass
class _Tally:
    """What the streaming pass keeps over a split: a histogram and running sums, no per-row values."""

    counts: np.ndarray
    kept_tokens: int = 0
    sorted_sums: tuple[int, int] = (0, 0)
    random_sums: tuple[int, int] = (0, 0)
    labels: dict[str, int] | None = None

    def add(self, full: np.ndarray, cut: np.ndarray, batch_size: int, rng: np.random.Generator) -> None:
        """One window's untruncated (`full`) and kept (`cut`) lengths."""
        window = np.bincount(full)
        if len(window) > len(self.counts):
            self.counts = np.pad(self.counts, (0, len(window) - len(self.counts)))
        self.counts[: len(window)] += window
        self.kept_tokens += int(cut.sum())
        order = rng.permutation(len(cut))
        shuffled = [order[i : i + batch_size] for i in range(0, len(cut), batch_size)]
        self.random_sums = _plus(self.random_sums, padding_sums(cut, shuffled))
        self.sorted_sums = _plus(self.sorted_sums, padding_sums(cut, sorted_batches(cut, batch_size)))

    def add_labels(self, labels: Any) -> None:
        self.labels = {} if self.labels is None else self.labels
        for label in labels:
            self.labels[str(label)] = self.labels.get(str(label), 0) + 1


def _plus(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def length_report(
    tokenizer: Any, dataset: TextDataset, split: str, max_length: int, batch_size: int, model_limit: int, seed: int,
    cache_dir: str | None = None,
) -> LengthReport:
    """Token-length profile of `dataset` at `max_length` (truncation, suggestion, padding waste).

    Streams: the dataset is tokenized `SORT_WINDOW` rows at a time and only a histogram of lengths and running sums
    are kept, so memory stays flat however many rows there are. Min, max, mean, percentiles and truncation are
    exact (from the histogram). The padding wastes are those of batches formed within each window (length-sorted,
    or shuffled with one generator seeded by `seed`), as the inference batches are: for a dataset of at most one
    window they are the whole-dataset numbers; a larger one is sorted/shuffled within windows.
    """
    tally = _Tally(np.zeros(0, dtype=np.int64))
    rng = np.random.default_rng(seed)
    for _, window in dataset.chunks(SORT_WINDOW):
        encoded = encode_for(tokenizer, window, Reading(max_length), cache_dir=cache_dir).encoded
        tally.add(encoded.full_lengths, encoded.lengths.astype(np.int64), batch_size, rng)
        if window.labels is not None:
            tally.add_labels(window.labels)
    return _report_of(tally, dataset, split, max_length, model_limit)


def _report_of(tally: _Tally, dataset: TextDataset, split: str, max_length: int, model_limit: int) -> LengthReport:
    counts = tally.counts
    rows = int(counts.sum())
    if rows == 0:
        raise ValueError(f"{split} of {dataset.source} has no rows: no length report")
    p50, p95, p99 = (percentile_of_counts(counts, q) for q in (50, 95, 99))
    truncated = int(counts[max_length + 1 :].sum())
    present = np.flatnonzero(counts)
    return LengthReport(
        split=split,
        source=dataset.source,
        rows=rows,
        min=int(present[0]),
        p50=p50,
        p95=p95,
        p99=p99,
        max=int(present[-1]),
        mean=float(int((counts * np.arange(len(counts))).sum())) / rows,
        truncated=truncated,
        truncated_share=truncated / rows,
        suggested_max_length=_suggest(p99, model_limit),
        waste_static=1.0 - float(tally.kept_tokens) / (rows * max_length),
        waste_dynamic_random=_waste(*tally.random_sums),
        waste_dynamic_sorted=_waste(*tally.sorted_sums),
        label_counts=None if tally.labels is None else dict(sorted(tally.labels.items())),
        length_counts=counts,
    )


CUT_SHARE_TO_SUGGEST = 0.05
"""From this share of cut rows on, the report suggests a way to keep the cut tokens."""


def long_text_note(report: LengthReport, max_length: int, model_limit: int) -> str | None:
    """A suggestion when many rows of a split are cut: a larger --max-length where the model allows one that
    covers them, else reading whole texts in windows (--long-text chunk) or keeping both ends (--truncation)."""
    if report.rows == 0 or report.truncated_share < CUT_SHARE_TO_SUGGEST:
        return None
    cut = (f"{report.split}: {report.truncated:,} of {report.rows:,} rows ({report.truncated_share:.1%}) are longer "
           f"than --max-length {max_length} and get cut.")
    if report.suggested_max_length > max_length and report.p99 <= model_limit:
        return f"{cut} --max-length {report.suggested_max_length} covers 99% of them (model limit {model_limit})."
    return (f"{cut} They are longer than the model reads at once ({model_limit} tokens): keep every token with "
            f"`--long-text chunk --stride {default_stride(max_length)}` (embed, predict, evaluate: overlapping windows, "
            f"pooled), or keep both ends with `--truncation head+tail`.")
