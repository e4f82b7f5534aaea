"""Word vectors from an encoder: one vector per word (`bertkit.encoding.words` aligns words and pieces and pools
a word's pieces as the `Reading`'s `word_pool` says), for a single hidden state or a combination of several (a
`Pooling` with pool `WORD`: concat, mean or sum of a list, `last4`, `all`), several combinations from one forward
pass. `paper_rows` are the feature-based rows of the BERT paper's CoNLL-2003 table (embeddings, second-to-last,
last, sum of the last four, concat of the last four, sum of all encoder layers).

Speed: a chunk of sentences is tokenized once, its windows sorted by length and batched with dynamic padding,
run under `torch.inference_mode()` with `output_hidden_states`; each batch's word vectors are gathered straight
from the hidden states into the chunk's output arrays. Memory: `iter_word_features` holds one chunk at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.encoding.reading import Reading
from bertkit.encoding.words import WordWindows, align_words
from bertkit.errors import UserError, raise_if_problems
from bertkit.features.settings import WORD, Pooling, combine_layers, pieces_per_word

if TYPE_CHECKING:
    import torch  # imported where vectors are made: the settings (a CLI's --help) need no torch

CHUNK_SENTENCES = 1000


def word_pooling(layers: str | int = "-1", combine: str = "concat") -> Pooling:
    """The `Pooling` of word vectors made from `layers` (an index, a comma list, `last4` or `all`) combined by
    `combine` (concat, mean or sum)."""
    return Pooling.from_options(WORD, layers, combine, False)


def word_pooling_problems(pooling: Pooling) -> list[str]:
    """How `pooling` cannot make word vectors (empty: it can): its pool is `WORD`, and it is not normalised (the word
    path has no --normalize)."""
    problems = [] if pooling.pool == WORD else [f"Word vectors are pooled by the reading's --word-pool, not by pool "
                                                f"{pooling.pool!r}: pass a word pooling (`word_pooling`)."]
    return problems + (["--normalize does not apply to word vectors. Drop it."] if pooling.normalize else [])


def word_settings_problems(cfg: Any, layers: str | None, combine: str | None) -> list[str]:
    """What is wrong with a config's word reading (--word-pool, --max-length, --stride), its word pooling (`layers`,
    `combine`: its --layers and --combine) and --precision (no int8: word vectors are read in float): `bertkit embed`
    and `bertkit probe` on tagged data."""
    problems = Reading.of_words(cfg.tagged.word_pool, cfg.reading.max_length, cfg.reading.stride).word_problems()
    try:
        word_pooling(layers or "-1", combine or "concat")
    except UserError as exc:
        problems.append(str(exc))
    if cfg.precision == "int8":
        problems.append("--precision int8 does not apply to word vectors: they are read in float. Pass --precision "
                        "auto, fp32, bf16 or fp16.")
    return problems


def paper_rows(n_layers: int) -> tuple[tuple[str, Pooling], ...]:
    """(label, pooling): the BERT paper's feature-based NER rows (Devlin et al. 2019, table 7) for a model of
    `n_layers` layers; its "all" is every encoder layer (1 to n_layers, the embeddings not included)."""
    encoder_layers = ",".join(str(i) for i in range(1, n_layers + 1))
    return (("embeddings", word_pooling("0")), ("second-to-last hidden", word_pooling("-2")),
            ("last hidden", word_pooling("-1")), ("sum of last four", word_pooling("last4", "sum")),
            ("concat of last four", word_pooling("last4", "concat")),
            ("sum of all layers", word_pooling(encoder_layers, "sum")))


def word_pooling_from_json(record: dict[str, Any], n_layers: int | None = None) -> Pooling:
    """The word pooling an artifact records (`Pooling.from_json`). An older record (bertkit's `WordLayers`: layers and
    combine, no pool) is read as it meant: its `all` was every encoder layer (1 to `n_layers`, the depth the
    artifact records or its encoder states; not known: a UserError saying how to write the artifact again)."""
    if "pool" in record:
        return Pooling.from_json(record)
    layers = str(record.get("layers", "-1"))
    if layers.strip().lower() == "all":
        if n_layers is None:
            raise UserError("This word store or probe was written by an older bertkit with --layers all (every "
                            "encoder layer) and its encoder's depth cannot be read. Re-run the `bertkit embed` or "
                            "`bertkit probe` command that wrote it.")
        layers = ",".join(str(i) for i in range(1, n_layers + 1))
    return word_pooling(layers, str(record.get("combine", "concat")))


@dataclass(frozen=True)
class WordFeatures:
    """Word vectors of a run of sentences: `vectors[k]` is (n_words, width) float32 for `layers[k]`; the words of
    sentence s are rows `sentence_offsets[s]:sentence_offsets[s + 1]`."""

    layers: tuple[Pooling, ...]
    vectors: tuple[np.ndarray, ...]
    sentence_offsets: np.ndarray

    def of(self, layers: Pooling) -> np.ndarray:
        return self.vectors[self.layers.index(layers)]

    @property
    def n_words(self) -> int:
        return int(self.sentence_offsets[-1])


def check_fits_model(encoder: Any, reading: Reading) -> None:
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


def encode_word_chunk(encoder: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], reading: Reading,
                      layers: Sequence[Pooling], batch_size: int | None = 32,
                      dtype: torch.dtype | None = None) -> WordFeatures:
    """Word vectors of one chunk of sentences for every entry of `layers` (word poolings), from one forward pass per
    batch; `batch_size` None: batches by token budget (see `batch_plan`); `dtype`: the run's precision (see
    `compute_context`; None: the weights')."""
    import torch

    from bertkit.features.pooling import pool_word_vectors
    from bertkit.models.infer import auto_token_budget

    raise_if_problems([p for spec in layers for p in word_pooling_problems(spec)], "Invalid word pooling")
    n_layers = int(encoder.config.num_hidden_layers)
    dim = int(encoder.config.hidden_size) * pieces_per_word(str(reading.word_pool))
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
                out[words] = combine_layers([pooled[i] for i in indices], spec.combine).cpu().numpy()
    return WordFeatures(tuple(layers), tuple(outputs), windows.sentence_offsets)


def iter_word_features(encoder: Any, tokenizer: Any, chunks: Iterable[Sequence[Sequence[str]]],
                       reading: Reading, layers: Sequence[Pooling], batch_size: int = 32,
                       dtype: torch.dtype | None = None) -> Iterator[WordFeatures]:
    """`encode_word_chunk` over a stream of sentence chunks: one chunk's vectors in memory at a time."""
    check_fits_model(encoder, reading)
    for chunk in chunks:
        yield encode_word_chunk(encoder, tokenizer, chunk, reading, layers, batch_size, dtype)


def extract_word_features(encoder: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], reading: Reading,
                          layers: Sequence[Pooling], batch_size: int = 32,
                          chunk_sentences: int = CHUNK_SENTENCES, dtype: torch.dtype | None = None) -> WordFeatures:
    """Word vectors of all `sentences` (lists of words) for each of `layers`, one array per entry, in order, computed
    in `dtype` (the run's precision, `compute_context`; None: the weights')."""
    chunks = (sentences[i:i + chunk_sentences] for i in range(0, len(sentences), chunk_sentences))
    parts = list(iter_word_features(encoder, tokenizer, chunks, reading, layers, batch_size, dtype))
    return concatenated(parts, tuple(layers))


def concatenated(parts: Sequence[WordFeatures], layers: tuple[Pooling, ...]) -> WordFeatures:
    """Chunks' features as one run (offsets shifted)."""
    if not parts:
        return WordFeatures(layers, tuple(np.empty((0, 0), np.float32) for _ in layers), np.zeros(1, np.int64))
    offsets, shift = [np.zeros(1, np.int64)], 0
    for part in parts:
        offsets.append(part.sentence_offsets[1:] + shift)
        shift += part.n_words
    vectors = tuple(np.concatenate([p.vectors[k] for p in parts]) for k in range(len(layers)))
    return WordFeatures(layers, vectors, np.concatenate(offsets))
