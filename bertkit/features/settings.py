"""What pooled features are, as options and as the settings object artifacts record: the poolings (--pool), the
hidden states pooled (--layers), how several layers are combined and normalised, and the stored precision. Word
vectors (tagged data) are pooled features too: `Pooling` with pool `WORD` (each word's pieces pooled as the reading's
`word_pool` says) and the same layers and combinations."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from bertkit.errors import UserError, raise_if_problems
from bertkit.models.preflight import saved_model_limits
from bertkit.options import MODEL, OUTPUT, option, overwrite_option

POOLS = ("cls", "mean", "max")
WORD = "word"
"""The pool of word vectors (tagged data): not a --pool choice, the word path's marker in its `Pooling` (how a word's
pieces are pooled is the reading's `word_pool`, `bertkit.encoding.reading.Reading`)."""
COMBINES = ("concat", "mean", "sum")
STORE_DTYPES = ("float32", "float16")
LAST4 = (-4, -3, -2, -1)
LAYER_NAMES = {"all": None, "last4": LAST4}
"""--layers by name: all = every hidden state (the embeddings and each layer); last4 = the last four layers (the BERT
paper's feature-based rows sum or concatenate them)."""


def layers_problem(spec: str | None, default: str = "-1") -> list[str]:
    """A problem with --layers (the syntax; the range is checked against the model)."""
    try:
        parse_layers(spec if spec is not None else default)
    except ValueError:
        return [f"--layers must be -1, a comma list of distinct layer indices (e.g. -4,-3,-2,-1; 0 = embeddings), "
                f"last4 or all; got {spec!r}."]
    return []


def parse_layers(spec: str | int) -> list[int] | None:
    """`--layers`: `all` -> None; `last4` -> the last four; `-1` / `-4,-3,-2,-1` / `0,6` -> list of hidden-state
    indices.

    Index 0 is the embedding output, 1..L the encoder layers; negative indices count from the last layer.
    Raises ValueError on anything else.
    """
    text = str(spec).strip().lower()
    if text in LAYER_NAMES:
        named = LAYER_NAMES[text]
        return None if named is None else list(named)
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p.lstrip("-").isdigit() for p in parts):
        raise ValueError(spec)
    values = [int(p) for p in parts]
    if len(set(values)) != len(values):
        raise ValueError(spec)
    return values


@dataclass(frozen=True)
class Pooling:
    """Which hidden states are pooled, how, and how several are combined (normalised or not): the settings every
    feature artifact records (store manifests, saved probes, feature exports; word stores and saved word probes, with
    pool `WORD`) and is read back with."""

    pool: str = "cls"
    layers: tuple[int, ...] | None = (-1,)
    """Indices into hidden_states (0 = embeddings ... L = last layer; negatives from the end); None = all."""
    combine: str = "concat"
    normalize: bool = False

    KEYS: ClassVar[tuple[str, ...]] = ("pool", "layers", "combine", "normalize")
    """The keys (= the option names) in manifests, probe.json and export records."""

    @classmethod
    def from_options(cls, pool: str, layers: str | int, combine: str, normalize: bool) -> Pooling:
        """The spec for these option values (the library path: the same rules as the CLI's, from config.py)."""
        problems = layers_problem(str(layers))
        problems += [f"--pool must be one of {', '.join(POOLS)}; got {pool!r}."] if pool not in (*POOLS, WORD) else []
        problems += [f"--combine must be one of {', '.join(COMBINES)}; got {combine!r}."] if combine not in COMBINES else []
        raise_if_problems(problems)
        parsed = parse_layers(layers)
        return cls(pool, None if parsed is None else tuple(parsed), combine, normalize)

    @classmethod
    def from_config(cls, options: PoolingOptions) -> Pooling:
        """The pooling a command's pooling group asks for (--pool, --layers, --combine, --normalize); --combine
        unset (None) concatenates."""
        return cls.from_options(options.pool, options.layers, options.combine or cls.combine, options.normalize)

    def resolve(self, n_layers: int) -> list[int]:
        """Positive hidden-state indices for a model with `n_layers` encoder layers (n_layers + 1 states)."""
        if self.layers is None:
            return list(range(n_layers + 1))
        resolved = []
        for index in self.layers:
            positive = index + n_layers + 1 if index < 0 else index
            if not 0 <= positive <= n_layers:
                raise UserError(
                    f"--layers {index} is out of range: the model has {n_layers} layers, so valid indices are "
                    f"0 (embeddings) to {n_layers}, or -1 to -{n_layers + 1}. Pass --layers with indices in that range."
                )
            resolved.append(positive)
        check_distinct_layers(self.layers, resolved, n_layers)
        return resolved

    def row_shape(self, n_layers: int, hidden: int) -> tuple[int, ...]:
        """Shape of one row's features: (dim,), or (layers, dim) for `all` with concat."""
        k = len(self.resolve(n_layers))
        if self.combine != "concat" or k == 1:
            return (hidden,)
        if self.layers is None:
            return (k, hidden)
        return (k * hidden,)

    def layer_names(self, n_layers: int) -> list[str]:
        return ["embeddings" if i == 0 else f"layer {i}" for i in self.resolve(n_layers)]

    def width(self, n_layers: int, hidden: int) -> int:
        """The length of one row's features flattened (a word vector: `hidden` per layer for concat)."""
        return math.prod(self.row_shape(n_layers, hidden))

    @property
    def single_layer(self) -> bool:
        """Whether one hidden state is pooled (a point of a per-layer curve), not a combination of several."""
        return self.layers is not None and len(self.layers) == 1

    @property
    def label(self) -> str:
        """The name of a row in a table: 'layer -1', 'sum last4', 'concat -2,-1', 'mean all'."""
        if self.single_layer:
            return f"layer {self.layers_option}"
        return f"{self.combine} {'last4' if self.layers == LAST4 else self.layers_option}"

    @property
    def layers_option(self) -> str:
        """--layers as given: `all`, `-1`, `0,6`."""
        return "all" if self.layers is None else ",".join(map(str, self.layers))

    def to_json(self) -> dict[str, Any]:
        """The record every feature artifact writes: the option values, under the option names (`KEYS`)."""
        return {"pool": self.pool, "layers": self.layers_option, "combine": self.combine, "normalize": self.normalize}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Pooling:
        """The pooling an artifact records (its option values); missing keys read as the defaults."""
        default = cls().to_json()
        values = {key: record.get(key, default[key]) for key in cls.KEYS}
        return cls.from_options(str(values["pool"]), str(values["layers"]), str(values["combine"]),
                                bool(values["normalize"]))


def pieces_per_word(word_pool: str) -> int:
    """How many hidden vectors one word vector holds under `word_pool`: 2 for first_last (concatenated), else 1."""
    return 2 if word_pool == "first_last" else 1


def combine_layers(parts: Sequence[Any], combine: str) -> Any:
    """One vector per row (or word) from its per-layer vectors (torch tensors or numpy arrays, the same shape): the
    one part, or the parts concatenated, averaged or summed (`combine`) - the one combination of layers every
    feature bertkit makes goes through (sentence features, word vectors)."""
    if len(parts) == 1:
        return parts[0]
    if combine != "concat":
        total = functools.reduce(operator.add, parts)
        return total / len(parts) if combine == "mean" else total
    import numpy as np

    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=-1)
    import torch

    return torch.cat(list(parts), dim=-1)


def combine_option(families: tuple[str, ...] = ()) -> Any:
    """--combine, declared here once for `bertkit embed` (sentences and words) and `bertkit probe` (words): unset
    (None), several layers are concatenated (`Pooling.from_config`); probe's word path then probes each layer of its
    table alone."""
    return option(None, "How several --layers are combined: concat (default; a sentence's --layers all + concat keeps "
                  "a layer axis), mean or sum.", panel=MODEL, choices=COMBINES, families=families)


@dataclass(frozen=True)
class PoolingOptions:
    """The pooling group of the commands that write pooled features (`bertkit embed`, `bertkit export --kind
    features`): the options `Pooling.from_config` builds the one `Pooling` from."""

    pool: str = option("cls", "Token pooling (mean/max ignore padding).", panel=MODEL, choices=POOLS,
                       families=("sentences",))
    layers: str = option("-1", "Hidden states to pool: -1 (last), a list like -4,-3,-2,-1 (0 = embeddings), last4 or "
                         "all.", panel=MODEL)
    combine: str | None = combine_option()
    normalize: bool = option(False, "L2-normalise every feature vector (each layer's for --layers all).", panel=MODEL,
                             families=("sentences",))


@dataclass(frozen=True)
class StoreOptions:
    """The output group of `bertkit embed`: where the feature store goes, in what precision and shard size."""

    ADVANCED_OPTIONS = ("shard_size",)

    out: str | None = option(None, "Store directory (with --dev/--test: OUT/train, OUT/dev, OUT/test).", panel=OUTPUT)
    store_dtype: str = option("float32", "Stored precision (float16 halves the disk).", panel=OUTPUT,
                              choices=STORE_DTYPES)
    shard_size: int = option(2048, "Rows per shard: the unit of streaming writes and of resume.", panel=OUTPUT,
                             above=0)
    overwrite: bool = overwrite_option("a store")


def check_layers_exist(layers: str | None, model: str | None) -> None:
    """--layers against the depth `model`'s folder states (read without torch), so a layer it lacks is refused before
    any data is read or cached; a hub id, or --layers not given, is left to the extraction (`Pooling.resolve`)."""
    limits = saved_model_limits(model) if layers is not None else None
    if limits is not None and limits.layers is not None and not layers_problem(layers):
        Pooling.from_options("cls", layers, "concat", False).resolve(limits.layers)


def check_distinct_layers(asked: Sequence[int], resolved: Sequence[int], n_layers: int) -> None:
    """--layers must name each hidden state once after resolving negatives (-1 and 6 are one state of 6 layers)."""
    seen: dict[int, int] = {}
    for index, state in zip(asked, resolved, strict=True):
        if state in seen:
            raise UserError(
                f"--layers {','.join(map(str, asked))} names hidden state {state} twice ({seen[state]} and {index}: "
                f"negative indices count from the last layer, and this model has {n_layers} layers, so -1 is "
                f"{n_layers}). Pass each layer once, e.g. --layers {','.join(map(str, dict.fromkeys(resolved)))}."
            )
        seen[state] = index
