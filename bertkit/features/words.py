"""Word vectors from an encoder: one vector per word (`bertkit.encoding.words` aligns words and pieces and pools
a word's pieces), for a single hidden state or a combination of several (`WordLayers`: sum or concat of a list,
`last4`, `all`), several combinations from one forward pass. `PAPER_ROWS` are the feature-based rows of the BERT
paper's CoNLL-2003 table (embeddings, second-to-last, last, sum of the last four, concat of the last four, sum
of all layers).

Speed: a chunk of sentences is tokenized once, its windows sorted by length and batched with dynamic padding,
run under `torch.inference_mode()` with `output_hidden_states`; each batch's word vectors are gathered straight
from the hidden states into the chunk's output arrays. Memory: `iter_word_features` holds one chunk at a time."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.encoding.words import WordReading, WordWindows, align_words, pool_word_vectors
from bertkit.errors import UserError, raise_if_problems

if TYPE_CHECKING:
    import torch  # imported where vectors are made: the settings (a CLI's --help) need no torch

LAYER_NAMES = ("last4", "all")
"""last4: the last four encoder layers; all: every encoder layer (not the embeddings, as the paper's 'all 12')."""
COMBINES = ("sum", "concat")
CHUNK_SENTENCES = 1000


@dataclass(frozen=True)
class WordLayers:
    """Which hidden states make a word vector and how several are combined: `layers` is one index (0 =
    embeddings, negative from the top), a comma list, `last4` or `all`; `combine` sums or concatenates them."""

    layers: str = "-1"
    """--layers: -1, 0, -4,-3,-2,-1, last4 or all."""
    combine: str = "concat"
    """--combine: sum or concat, for several layers."""

    def __post_init__(self) -> None:
        problems = []
        if self.layers not in LAYER_NAMES and not re.fullmatch(r"-?\d+(,-?\d+)*", self.layers.replace(" ", "")):
            problems.append(f"--layers {self.layers!r} is not a layer choice: valid are an index (0 = embeddings, "
                            f"-1 = last), a comma list (-4,-3,-2,-1) or a name ({', '.join(LAYER_NAMES)}). Pass one.")
        if self.combine not in COMBINES:
            problems.append(f"--combine {self.combine!r} is not a combination: valid are {', '.join(COMBINES)}. "
                            f"Pass one of them.")
        raise_if_problems(problems, "Invalid word layers")

    def resolve(self, n_layers: int) -> list[int]:
        """Hidden-state indices (0 = embeddings, n_layers = last) for a model of `n_layers` layers."""
        if self.layers == "all":
            return list(range(1, n_layers + 1))
        asked = list(range(-4, 0)) if self.layers == "last4" else [int(x) for x in self.layers.split(",")]
        resolved = [i + n_layers + 1 if i < 0 else i for i in asked]
        bad = [a for a, r in zip(asked, resolved, strict=True) if not 0 <= r <= n_layers]
        if bad or len(set(resolved)) != len(resolved):
            raise UserError(f"--layers {self.layers} does not fit a model of {n_layers} layers "
                            f"({'out of range: ' + ', '.join(map(str, bad)) if bad else 'a layer named twice'}): "
                            f"valid are 0 (embeddings) to {n_layers}, or -1 to -{n_layers + 1}, each once. Pass "
                            f"--layers within that range.")
        return resolved

    @property
    def name(self) -> str:
        """The row name in a table: 'layer -1', 'sum last4', 'concat -2,-1'."""
        single = self.layers not in LAYER_NAMES and "," not in self.layers
        return f"layer {self.layers}" if single else f"{self.combine} {self.layers}"

    def width(self, n_layers: int, dim: int) -> int:
        """The length of one word vector, for per-layer vectors of length `dim`."""
        return dim * len(self.resolve(n_layers)) if self.combine == "concat" else dim

    def to_json(self) -> dict[str, Any]:
        return {"layers": self.layers, "combine": self.combine}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> WordLayers:
        return cls(str(record.get("layers", "-1")), str(record.get("combine", "concat")))


PAPER_ROWS = (
    ("embeddings", WordLayers("0")),
    ("second-to-last hidden", WordLayers("-2")),
    ("last hidden", WordLayers("-1")),
    ("sum of last four", WordLayers("last4", "sum")),
    ("concat of last four", WordLayers("last4", "concat")),
    ("sum of all layers", WordLayers("all", "sum")),
)
"""(label, layers): the BERT paper's feature-based NER rows (Devlin et al. 2019, table 7)."""


@dataclass(frozen=True)
class WordFeatures:
    """Word vectors of a run of sentences: `vectors[k]` is (n_words, width) float32 for `layers[k]`; the words of
    sentence s are rows `sentence_offsets[s]:sentence_offsets[s + 1]`."""

    layers: tuple[WordLayers, ...]
    vectors: tuple[np.ndarray, ...]
    sentence_offsets: np.ndarray

    def of(self, layers: WordLayers) -> np.ndarray:
        return self.vectors[self.layers.index(layers)]

    @property
    def n_words(self) -> int:
        return int(self.sentence_offsets[-1])


def check_fits_model(encoder: Any, reading: WordReading) -> None:
    """A window longer than the model's position table cannot be read: say how to read it."""
    positions = getattr(encoder.config, "max_position_embeddings", None)
    if positions is not None and reading.max_length > positions:
        raise UserError(f"--max-length {reading.max_length} is longer than this model reads ({positions} positions). "
                        f"Valid: {positions} or less; longer sentences are read in overlapping windows (--stride). "
                        f"Pass --max-length {positions} or less.")


def batch_plan(lengths: np.ndarray, batch_size: int | None, budget: tuple[int, int] = (4096, 256)
               ) -> list[np.ndarray]:
    """Window indices in batches of similar length (sorted, so padding stays small): `batch_size` per batch, or
    with None (`--batch-size auto`) as many as fit `budget` = (padded tokens, rows), as the sentence path batches
    (`models.infer.auto_token_budget`): short windows in big batches, which a CPU runs several times faster."""
    if batch_size is None:
        from bertkit.encoding.batches import token_budget_batches

        return token_budget_batches(lengths, *budget)
    order = np.argsort(lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def compute_context(encoder: Any, dtype: torch.dtype | None) -> Any:
    """Where the run's precision is not the weights' (bf16/fp16 on a CPU, whose weights stay fp32: see
    `models.loading.cast_for_inference`), autocast to it; else nothing."""
    import contextlib

    weights = next(iter(encoder.parameters()), None)
    if dtype is None or weights is None or weights.dtype == dtype:
        return contextlib.nullcontext()
    from bertkit.models import loading

    return loading.autocast(weights.device, dtype)


def padded_batch(windows: WordWindows, rows: np.ndarray, pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    import torch

    width = int(max(len(windows.ids[r]) for r in rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for j, r in enumerate(rows):
        ids[j, : len(windows.ids[r])] = torch.tensor(windows.ids[r])
        mask[j, : len(windows.ids[r])] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def combined(pooled: dict[int, torch.Tensor], indices: list[int], combine: str) -> torch.Tensor:
    if len(indices) == 1:
        return pooled[indices[0]]
    import torch

    parts = [pooled[i] for i in indices]
    return torch.cat(parts, dim=-1) if combine == "concat" else torch.stack(parts).sum(dim=0)


def encode_word_chunk(encoder: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], reading: WordReading,
                      layers: Sequence[WordLayers], batch_size: int | None = 32,
                      dtype: torch.dtype | None = None) -> WordFeatures:
    """Word vectors of one chunk of sentences for every entry of `layers`, from one forward pass per batch;
    `batch_size` None: batches by token budget (see `batch_plan`); `dtype`: the run's precision (see
    `compute_context`; None: the weights')."""
    import torch

    from bertkit.models.infer import auto_token_budget

    n_layers, dim = int(encoder.config.num_hidden_layers), int(encoder.config.hidden_size) * reading.width
    resolved = [spec.resolve(n_layers) for spec in layers]
    needed = sorted({i for indices in resolved for i in indices})
    windows = align_words(tokenizer, sentences, reading)
    outputs = [np.empty((windows.n_words, spec.width(n_layers, dim)), dtype=np.float32) for spec in layers]
    by_window = np.argsort(windows.word_window, kind="stable")  # words grouped by the window they read from
    first_word = np.searchsorted(windows.word_window[by_window], np.arange(len(windows.ids) + 1))
    device = next(encoder.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with torch.inference_mode(), compute_context(encoder, dtype):
        for rows in batch_plan(windows.lengths, batch_size, auto_token_budget(encoder, device)):
            words = np.concatenate([by_window[first_word[r]:first_word[r + 1]] for r in rows])
            if not len(words):
                continue
            row_of = np.repeat(np.arange(len(rows)), [first_word[r + 1] - first_word[r] for r in rows])
            batch = padded_batch(windows, rows, pad_id, device)
            hidden = encoder(**batch, output_hidden_states=True, return_dict=True).hidden_states
            at = [torch.as_tensor(a, device=device) for a in (row_of, windows.word_start[words], windows.word_end[words])]
            pooled = {i: pool_word_vectors(hidden[i], *at, reading.word_pool) for i in needed}
            for out, indices, spec in zip(outputs, resolved, layers, strict=True):
                out[words] = combined(pooled, indices, spec.combine).cpu().numpy()
    return WordFeatures(tuple(layers), tuple(outputs), windows.sentence_offsets)


def iter_word_features(encoder: Any, tokenizer: Any, chunks: Iterable[Sequence[Sequence[str]]],
                       reading: WordReading, layers: Sequence[WordLayers],
                       batch_size: int = 32) -> Iterator[WordFeatures]:
    """`encode_word_chunk` over a stream of sentence chunks: one chunk's vectors in memory at a time."""
    check_fits_model(encoder, reading)
    for chunk in chunks:
        yield encode_word_chunk(encoder, tokenizer, chunk, reading, layers, batch_size)


def extract_word_features(encoder: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], reading: WordReading,
                          layers: Sequence[WordLayers], batch_size: int = 32,
                          chunk_sentences: int = CHUNK_SENTENCES) -> WordFeatures:
    """Word vectors of all `sentences` (lists of words) for each of `layers`, one array per entry, in order."""
    chunks = (sentences[i:i + chunk_sentences] for i in range(0, len(sentences), chunk_sentences))
    parts = list(iter_word_features(encoder, tokenizer, chunks, reading, layers, batch_size))
    return concatenated(parts, tuple(layers))


def concatenated(parts: Sequence[WordFeatures], layers: tuple[WordLayers, ...]) -> WordFeatures:
    """Chunks' features as one run (offsets shifted)."""
    if not parts:
        return WordFeatures(layers, tuple(np.empty((0, 0), np.float32) for _ in layers), np.zeros(1, np.int64))
    offsets, shift = [np.zeros(1, np.int64)], 0
    for part in parts:
        offsets.append(part.sentence_offsets[1:] + shift)
        shift += part.n_words
    vectors = tuple(np.concatenate([p.vectors[k] for p in parts]) for k in range(len(layers)))
    return WordFeatures(layers, vectors, np.concatenate(offsets))
