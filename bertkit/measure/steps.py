"""The timed steps of `bertkit bench`: each step times exactly its counted work (batch-1 latency, a forward pass
over a prepared batch, a training step), and the prepared batches they run on. A tagger (tagged data) is timed on
sentences given as words, each read in its windows of word pieces (`encoding.words.align_words`), and trained on
a label per piece. A question-answering model is timed on questions (with their passages), each read in its
windows (`encoding.qa_windows.qa_windows`), and trained on a start and an end position per window."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.encoding.batches import pad_batch, sorted_batches
from bertkit.encoding.encode import Encoded
from bertkit.encoding.qa_windows import QAReading, qa_windows
from bertkit.encoding.reading import Reading
from bertkit.encoding.word_labels import IGNORE
from bertkit.encoding.words import align_words
from bertkit.measure.contenders import Contender
from bertkit.measure.timing import Budget, Step
from bertkit.models import fastforward, infer, loading
from bertkit.models.replay import Replayed


def model_inputs(batch: dict[str, Any], accepted: frozenset[str], device: Any = None) -> dict[str, Any]:
    """The batch tensors the model accepts, on `device`.

    `pad_batch(..., inputs=, device=)` pads token ids and then selects and moves; here the batch is already padded
    (one batch serves every model) or is the tokenizer's output, so only the selection and the move are left.
    """
    return {k: (v.to(device) if device is not None else v) for k, v in batch.items() if k in accepted}


def inference_forward(c: Contender, device: Any, dtype: Any) -> Callable[[dict[str, Any]], Any]:
    """The forward bertkit's own inference runs for `c`: on a GPU, for allowlisted models, its encoder
    layers (`fastforward.hidden_states`) on a copy of the weights in the compute dtype (`cast_for_inference`),
    small batches replayed as CUDA graphs (`replay.Replayed`); otherwise the model's own forward. Made once per
    contender and device."""
    key = (str(device), str(dtype))
    if key not in c.forwards:
        if getattr(device, "type", None) != "cuda" or fastforward.unsupported_reason(c.model) is not None:
            c.forwards[key] = lambda inputs: c.model(**inputs)
        else:
            c.forwards[key] = Replayed(_own_forward(loading.cast_for_inference(copy.deepcopy(c.model), device,
                                                                                 dtype).eval()), device)
    return c.forwards[key]


def _own_forward(model: Any) -> Callable[[dict[str, Any]], Any]:
    """A classifier's logits as `bertkit predict` computes them (`SequenceClassifier`), an encoder's last layer."""
    if type(model).__name__ in fastforward.CLASSIFIERS:
        net = fastforward.SequenceClassifier(model)
        return lambda batch: net(**batch)
    depth = len(fastforward.encoder_layers(model))
    return lambda batch: fastforward.hidden_states(model, batch, depth, False)[depth]


def latency_step(c: Contender, texts: Sequence[str], max_length: int, device: Any, budget: Budget,
                 dtype: Any = None) -> Step:
    """Batch 1 over real sentences in turn: returns (model seconds, tokenization seconds). On a GPU the row is
    padded to its bucket width (`infer.gpu_padded_width`), as `bertkit predict` pads, so shapes repeat."""
    position = itertools.count()

    def tokenized() -> dict[str, Any]:
        text = texts[next(position) % len(texts)]
        return dict(c.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt"))

    return _batch_one_step(c, tokenized, device, budget, dtype)


def _batch_one_step(c: Contender, tokenized: Callable[[], dict[str, Any]], device: Any, budget: Budget,
                    dtype: Any) -> Step:
    """One input at a time: `tokenized()` (timed as tokenization, with the GPU's bucket padding), then the model's
    forward (timed as the model); returns (model seconds, tokenization seconds)."""
    accepted, clock, sync = c.input_names, budget.clock, budget.sync
    forward = inference_forward(c, device, dtype)
    pad_to = getattr(device, "type", None) == "cuda"
    pad_id = infer.pad_id_of(c.tokenizer)

    def step() -> tuple[float, ...]:
        t0 = clock()
        inputs = tokenized()
        if pad_to:
            inputs = padded_to(inputs, infer.gpu_padded_width(inputs["input_ids"].shape[1]), pad_id)
        t1 = clock()
        inputs = model_inputs(inputs, accepted, device)
        sync()
        t2 = clock()
        forward(inputs)
        sync()
        t3 = clock()
        return t3 - t2, t1 - t0

    return step


def padded_to(batch: dict[str, Any], width: int, pad_id: int) -> dict[str, Any]:
    """A tokenizer's (rows, length) tensors padded on the right to `width` (ids with `pad_id`, the rest with 0)."""
    import torch

    extra = width - batch["input_ids"].shape[1]
    return {name: torch.nn.functional.pad(t, (0, extra), value=pad_id if name == "input_ids" else 0)
            for name, t in batch.items()}


def tag_latency_step(c: Contender, sentences: Sequence[Sequence[str]], reading: Reading, device: Any,
                     budget: Budget, dtype: Any = None) -> Step:
    """One sentence (given as words) at a time, as a tagger reads it: its windows of word pieces made (timed as
    tokenization: word pieces, windows, padding), then the model's forward over them (one window for a sentence
    that fits --max-length); returns (model seconds, tokenization seconds)."""
    position = itertools.count()
    pad_id = infer.pad_id_of(c.tokenizer)

    def tokenized() -> dict[str, Any]:
        windows = align_words(c.tokenizer, [sentences[next(position) % len(sentences)]], reading)
        lengths = windows.lengths
        encoded = Encoded(windows.ids, None, lengths, lengths, reading.max_length)
        return pad_batch(encoded, range(len(lengths)), pad_id)

    return _batch_one_step(c, tokenized, device, budget, dtype)


def question_latency_step(c: Contender, questions: Sequence[Any], reading: QAReading, device: Any, budget: Budget,
                          dtype: Any = None) -> Step:
    """One question (with its passage) at a time, as a question-answering model reads it: its windows made (timed as
    tokenization: the question cut, the passage in windows sharing the doc stride, padding), then the model's forward
    over all of them in one batch; returns (model seconds, tokenization seconds)."""
    position = itertools.count()
    pad_id = infer.pad_id_of(c.tokenizer)

    def tokenized() -> dict[str, Any]:
        windows = qa_windows(c.tokenizer, [questions[next(position) % len(questions)]], reading)
        return pad_batch(windows.encoded, range(windows.n_windows), pad_id)

    return _batch_one_step(c, tokenized, device, budget, dtype)


@dataclass
class PreparedBatch:
    """A padded batch, ready before the clock starts, with what it counts."""

    inputs: dict[str, Any]
    rows: int
    tokens: int
    """Real (non-padding) tokens."""
    padded_tokens: int
    labels: Any = None


def forward_step(c: Contender, batches: Sequence[PreparedBatch], device: Any, budget: Budget,
                 dtype: Any = None) -> Step:
    """Forward passes over prepared batches in turn: returns (seconds, rows, tokens, padded tokens)."""
    position = itertools.count()
    moved = [model_inputs(b.inputs, c.input_names, device) for b in batches]
    clock, sync = budget.clock, budget.sync
    forward = inference_forward(c, device, dtype)

    def step() -> tuple[float, ...]:
        i = next(position) % len(batches)
        sync()
        t0 = clock()
        forward(moved[i])
        sync()
        t1 = clock()
        return t1 - t0, batches[i].rows, batches[i].tokens, batches[i].padded_tokens

    return step


def train_step(c: Contender, batches: Sequence[PreparedBatch], device: Any, dtype: Any, budget: Budget) -> Step:
    """Forward + backward + AdamW step of the encoder and a linear head (a sentence's label read at [CLS]), of a
    tagger (its own head, a label at every real piece), or of a question-answering model (its own head, a start and an
    end position per window): returns (seconds, rows, tokens)."""
    import torch

    head = torch.nn.Identity() if c.tagger or c.answerer else torch.nn.Linear(_hidden_size(c.model), 2).to(device)
    optimizer = torch.optim.AdamW(list(c.model.parameters()) + list(head.parameters()), lr=1e-5)
    moved = [(model_inputs(b.inputs, c.input_names, device),
              (piece_labels(b.inputs, c.model.config.num_labels) if c.tagger else b.labels).to(device))
             for b in batches]
    position = itertools.count()
    clock, sync = budget.clock, budget.sync

    def step() -> tuple[float, ...]:
        i = next(position) % len(batches)
        inputs, labels = moved[i]
        sync()
        t0 = clock()
        with loading.autocast(device, dtype):
            logits, targets = training_logits(c, head, inputs, labels)
        loss = torch.nn.functional.cross_entropy(logits.float(), targets, ignore_index=IGNORE)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        t1 = clock()
        return t1 - t0, batches[i].rows, batches[i].tokens

    return step


def training_logits(c: Contender, head: Any, inputs: dict[str, Any], labels: Any) -> tuple[Any, Any]:
    """(the logits the training step's loss reads, their targets): a tagger's at every piece; a question-answering
    model's start and end scores of each window, both against its position label (the mean of the two losses, as its
    own loss takes them); else the head's over the [CLS] vector."""
    import torch

    if c.tagger:
        return c.model(**inputs).logits.flatten(0, 1), labels.flatten()
    if c.answerer:
        out = c.model(**inputs)
        return torch.cat([out.start_logits, out.end_logits]), torch.cat([labels, labels])
    return head(c.model(**inputs).last_hidden_state[:, 0]), labels.flatten()


def piece_labels(inputs: dict[str, Any], n_tags: int) -> Any:
    """A tag id at every real piece of a padded batch and `IGNORE` at padding (the values do not change step time;
    which pieces count does: the loss reads real pieces only, as a tagger's does)."""
    import torch

    ids = inputs["input_ids"]
    labels = torch.arange(ids.numel()).view_as(ids) % n_tags
    return labels.masked_fill(inputs["attention_mask"] == 0, IGNORE)


def _hidden_size(model: Any) -> int:
    """Width of the encoder's output (BERT's config calls it hidden_size, DistilBERT's dim)."""
    config = model.config
    return int(getattr(config, "hidden_size", None) or config.dim)


def prepare_batches(
    encoded: Encoded, batch_size: int, pad_id: int, pad_to: int | None, seed: int, with_labels: bool = False
) -> list[PreparedBatch]:
    """Length-sorted batches of every row (dynamic padding, or static to `pad_to`), in a seeded shuffled order.

    Sorting keeps padding low; shuffling the batch order makes any prefix of the list a fair sample of lengths.
    The rows of a batch are those inference groups for a fixed batch size (`sorted_batches`, what
    `infer.plan_batches` calls); the padding is plain `pad_batch`, not its model-call form (`inputs=`/`device=`):
    that one has no static padding, and on a GPU it rounds the width up to a multiple of 8, which would change what "dynamic"
    measured there.
    """
    import torch

    groups = sorted_batches(encoded.lengths, batch_size)
    order = np.random.default_rng(seed).permutation(len(groups))
    prepared = []
    for g in order:
        idx = groups[g]
        inputs = pad_batch(encoded, idx, pad_id, pad_to)
        width = int(inputs["input_ids"].shape[1])
        labels = torch.arange(len(idx)) % 2 if with_labels else None  # labels do not change step time
        prepared.append(PreparedBatch(inputs, len(idx), int(encoded.lengths[idx].sum()), width * len(idx), labels))
    return prepared

