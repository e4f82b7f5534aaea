"""A training run's token ids, made in one call before its --out is claimed (`encode_run`): the train, dev and
labelled --test splits encoded as the run reads texts (`encode_for`), and the number of optimizer steps an epoch of
the train split makes (`batches.global_batches`); data too small for one step is refused here, so a refused start
leaves --out as it was."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.data.splits import Splits
from bertkit.encoding.batches import global_batches
from bertkit.encoding.encode import Encoded, encode_for
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError


@dataclass(frozen=True)
class RunTokens:
    """What a training session reads of its data: the encoded splits and the steps of an epoch."""

    train: Encoded
    dev: Encoded
    test: Encoded | None
    """The --test split's ids when it has labels (scored at each new best and at the end); None otherwise."""
    steps_per_epoch: int
    """Optimizer steps of one epoch (its global batches of `batch_size x processes x grad_accum` rows)."""


def encode_run(tokenizer: Any, splits: Splits, reading: Reading, *, cache_dir: str | None, batch_size: int,
               seed: int, min_rows: int) -> RunTokens:
    """`splits` (with a dev split) as token ids, and the steps of an epoch; `min_rows` (processes x --grad-accum)
    micro-batches of one row at least make a step. A UserError when not one step fits."""
    assert splits.dev is not None
    train = encode_for(tokenizer, splits.train, reading, cache_dir=cache_dir).encoded
    dev = encode_for(tokenizer, splits.dev, reading, cache_dir=cache_dir).encoded
    test = (encode_for(tokenizer, splits.test, reading, cache_dir=cache_dir).encoded
            if splits.test is not None and splits.test.labels is not None else None)
    return RunTokens(train, dev, test, epoch_steps(train.lengths, batch_size, seed, min_rows, len(splits.train)))


def epoch_steps(lengths: Any, batch_size: int, seed: int, min_rows: int, n_rows: int) -> int:
    """Optimizer steps of one epoch over rows of `lengths` (global batches of `batch_size x min_rows` rows); a
    UserError naming the `n_rows` of training data (rows, or a tagger's windows) when not one step fits."""
    steps = len(global_batches(lengths, batch_size * min_rows, seed, 0, min_rows))
    if steps == 0:
        raise too_few_rows(n_rows, min_rows)
    return steps


def too_few_rows(n_rows: int, min_rows: int) -> UserError:
    """The refusal of training data with fewer rows than one optimizer step's micro-batches (one row each)."""
    return UserError(f"Training data has {n_rows} rows: too few for one batch of {min_rows} micro-batches. Add "
                     f"data or lower --grad-accum.")
