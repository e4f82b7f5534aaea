"""`bertkit probe` on questions on passages (SQuAD): which layer answers (van Aken et al. 2019, "How does BERT answer
questions?", on the user's own data). The questions are read as fine-tuning reads them (`encoding.qa_windows`:
windows of the run's max length sharing its doc stride, the first gold answer's first and last token as labels, [CLS]
where a window does not hold it); the frozen encoder reads every window once and every real token's hidden states go
to layer files (`features.window_layers`: memory holds one batch); then each row of the table - every hidden state,
and the BERT paper's sum and concat of the last four and sum of all layers (`words_run.table_rows`) - gets a linear
start and end head (`probe.span_head`) fitted on its training tokens, from the row before's solution where the sizes
agree (a concat row: from its states' own solutions side by side), and is scored on dev as a fine-tuned model is:
run_qa.py's post-processing (`scoring.answers`: n-best starts x ends across a question's windows, spans inside the
passage, at most the max answer length) and the official SQuAD exact match and F1 with 95% bootstrap intervals over
questions. Memory holds one row's training matrix (a row above `words_run.ROW_MEMORY_BYTES` is streamed from the
layer files block by block at every pass of its fit).

Baselines: the passage sentence with the most question words (`scoring.squad.overlap_answers`, fine-tuning's
baseline), and the same architecture with random weights probed at the best row's layers (as the word probe's)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.squad import Question
from bertkit.data.squad_splits import QATraining
from bertkit.encoding.qa_windows import QAReading, QAWindows
from bertkit.features.settings import Pooling
from bertkit.features.window_layers import WindowLayers
from bertkit.features.word_layers import RowReader
from bertkit.models.compute import Compute
from bertkit.probe.engine import LinearSolution
from bertkit.probe.fit import DEFAULT_C
from bertkit.probe.span_head import FittedSpanHead, SpanTargets, fitted_span_head
from bertkit.probe.span_records import (
    OVERLAP,
    RANDOM_ENCODER,
    SpanProbeRow,
    SpanProbeRun,
    SpanProbeTable,
    SpanScore,
)
from bertkit.probe.words_run import concat_start, needed_states, row_features, table_rows
from bertkit.scoring.answers import AnswerSettings

log = logging.getLogger(__name__)

BOOTSTRAP_RESAMPLES = 1000


@dataclass(frozen=True)
class DevSet:
    """What a row is scored on: the dev questions, their windows, the rules of their SQuAD version, how answers are
    read, and the bootstrap's seed."""

    questions: Sequence[Question]
    windows: QAWindows
    rules: str
    settings: AnswerSettings
    seed: int = 0


def span_targets(windows: QAWindows, layers: WindowLayers) -> SpanTargets:
    """The training labels in the layer files' window order (fine-tuning's labels: `encoding.qa_windows`)."""
    return SpanTargets(layers.window_offsets, windows.start_positions[layers.order], windows.end_positions[layers.order])


def window_logits(logits: np.ndarray, layers: WindowLayers) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(start, end) scores per window in the windows' own order, from (tokens, 2) scores in the files' order."""
    starts: list[Any] = [None] * len(layers.order)
    ends: list[Any] = [None] * len(layers.order)
    offsets = layers.window_offsets
    for i, k in enumerate(layers.order):
        starts[int(k)], ends[int(k)] = logits[offsets[i]:offsets[i + 1], 0], logits[offsets[i]:offsets[i + 1], 1]
    return starts, ends


def scored_predictions(dev: DevSet, predictions: dict[str, str]) -> SpanScore:
    from bertkit.scoring.squad import score_squad

    return SpanScore.of(score_squad(dev.questions, predictions, rules=dev.rules, n_boot=BOOTSTRAP_RESAMPLES,
                                    seed=dev.seed))


def dev_scores(head: FittedSpanHead, layers: WindowLayers, spec: Pooling, dev: DevSet) -> SpanScore:
    """The row's dev answers (run_qa.py's post-processing of its start and end scores) scored officially."""
    from bertkit.scoring.answer_objective import scored_answers
    from bertkit.scoring.answers import predicted_answers

    starts, ends = window_logits(head.logits(RowReader(layers.layers, spec), layers.n_tokens), layers)
    answers = predicted_answers(dev.questions, dev.windows, starts, ends, dev.settings)
    return SpanScore.of(scored_answers(dev.questions, answers, dev.rules, dev.settings, BOOTSTRAP_RESAMPLES, dev.seed))


def fitted_row(label: str, spec: Pooling, train: WindowLayers, targets: SpanTargets, dev_layers: WindowLayers,
               dev: DevSet, C: float, init: LinearSolution | None) -> tuple[SpanProbeRow, LinearSolution]:
    """One row: its head fitted on the training tokens (the row's matrix built just before and dropped after), scored
    on dev; and its solution, where the next row starts."""
    X = row_features(train.layers, spec)
    head = fitted_span_head(X, targets, C, init=init, owned=True)
    del X
    dim = int(head.solution.coef.shape[1])
    row = SpanProbeRow(label, spec, dim, dev_scores(head, dev_layers, spec, dev), head.solution.objective,
                       head.solution.n_iter, head.seconds)
    return row, head.solution


def probe_span_rows(train: WindowLayers, targets: SpanTargets, dev_layers: WindowLayers, dev: DevSet,
                    rows: Sequence[tuple[str, Pooling]], C: float = DEFAULT_C,
                    say: Callable[[str], None] | None = None) -> list[SpanProbeRow]:
    """A span head per row, each fitted from the previous row's solution where the sizes agree (a concat row: from
    its states' solutions, `words_run.concat_start`)."""
    out, previous, singles = [], None, {}
    for label, spec in rows:
        start = concat_start(spec, train.layers.n_layers, singles) or previous
        row, previous = fitted_row(label, spec, train, targets, dev_layers, dev, C, start)
        if spec.single_layer:
            singles[spec.resolve(train.layers.n_layers)[0]] = previous
        if say is not None:
            say(f"{label}: dev EM {row.scores.exact_match:.1f} F1 {row.scores.f1:.1f} ({row.dim} dims, "
                f"{row.iterations} iterations, {row.fit_seconds:.1f}s)")
        out.append(row)
    return out


@dataclass(frozen=True)
class Encoder:
    """What reads the windows: the model's name, its tokenizer, where and in what precision, the batch size, and the
    scratch folder's cache (--cache-dir)."""

    model: str
    tokenizer: Any
    compute: Compute
    batch_size: int = 32
    cache_dir: str | None = None
    trust_remote_code: bool = False


def read_layers(encoder: Encoder, windows: Sequence[QAWindows], states: Sequence[int], random_init: bool = False,
                seed: int = 0, progress: bool = False) -> list[WindowLayers]:
    """Each windows' hidden states `states` (the pretrained encoder, or with `random_init` the same architecture
    with fresh weights, seeded before it is built) into layer files, one forward pass per batch."""
    import torch

    from bertkit.features.window_layers import write_window_layers
    from bertkit.models import infer, loading

    torch.manual_seed(seed)
    net = loading.cast_for_inference(loading.load_encoder(encoder.model, encoder.trust_remote_code,
                                                          random_init=random_init).eval(),
                                     encoder.compute.torch_device, encoder.compute.dtype)
    made: list[WindowLayers] = []
    try:
        for part in windows:
            desc = "random-init encoder" if random_init else "encode"
            with infer.closing(infer.progress_bar(part.n_windows, desc, progress, unit="windows")) as bar:
                made.append(write_window_layers(net, part, states, infer.pad_id_of(encoder.tokenizer),
                                                encoder.cache_dir, encoder.batch_size, encoder.compute.dtype, bar))
    except BaseException:
        for layers in made:
            layers.close()
        raise
    return made


def random_encoder_row(encoder: Encoder, train: QAWindows, dev: DevSet, best: SpanProbeRow, C: float, seed: int,
                       n_layers: int, progress: bool = False) -> SpanProbeRow:
    """The best row's head again on the same architecture with random weights (seeded before it is built), as the
    word probe's baseline: what the pretrained weights add at that row. Reads train and dev once more, for the
    row's hidden states only."""
    train_layers, dev_layers = read_layers(encoder, (train, dev.windows), best.pooling.resolve(n_layers),
                                           random_init=True, seed=seed, progress=progress)
    with train_layers, dev_layers:
        row = probe_span_rows(train_layers, span_targets(train, train_layers), dev_layers, dev,
                              [(best.label, best.pooling)], C)[0]
    return replace(row, label=f"{RANDOM_ENCODER} ({best.label})")


def run_span_probe(data: QATraining, reading: QAReading, encoder: Encoder, layers: str | None = None,
                   C: float = DEFAULT_C, seed: int = 0, baselines: bool = True,
                   say: Callable[[str], None] | None = None, progress: bool = False) -> SpanProbeRun:
    """The questions read into windows, the encoder's hidden states of every window written once, a span head per row
    (`table_rows`: `layers` None - every hidden state and the paper's combinations -, or the --layers given), and the
    baselines (with `baselines`: overlap and the random-init encoder)."""
    from bertkit.encoding.qa_windows import qa_windows
    from bertkit.models import loading
    from bertkit.scoring.squad import overlap_answers

    train_q, dev_q = list(data.train_questions), list(data.dev_questions)
    train, dev_windows = (qa_windows(encoder.tokenizer, q, reading) for q in (train_q, dev_q))
    dev = DevSet(dev_q, dev_windows, data.dev.version, AnswerSettings(allow_null=data.allow_null), seed)
    config = loading.load_config(encoder.model, encoder.trust_remote_code)
    loading.check_max_length(reading.max_length, encoder.tokenizer, config, encoder.model, pair=True)
    n_layers = int(config.num_hidden_layers)
    rows = table_rows(layers, None, n_layers)
    if say is not None:
        say(f"{len(train_q):,} train / {len(dev_q):,} dev questions ({train.n_windows:,} / {dev_windows.n_windows:,} "
            f"windows, {int(train.lengths.sum()):,} / {int(dev_windows.lengths.sum()):,} tokens); {len(rows)} rows")
    train_layers, dev_layers = read_layers(encoder, (train, dev_windows), needed_states(rows, n_layers),
                                           progress=progress)
    with train_layers, dev_layers:
        table_rows_ = probe_span_rows(train_layers, span_targets(train, train_layers), dev_layers, dev, rows, C, say)
    table = SpanProbeTable(tuple(table_rows_), {"train": train.n_windows, "dev": dev_windows.n_windows},
                           {"train": int(train.lengths.sum()), "dev": int(dev_windows.lengths.sum())})
    notes = tuple(data.notes)
    if baselines:
        random_row = random_encoder_row(encoder, train, dev, table.best(), C, seed, n_layers, progress)
        if say is not None:
            say(f"{random_row.label}: dev EM {random_row.scores.exact_match:.1f} F1 {random_row.scores.f1:.1f}")
        table, notes = with_baselines(table, notes, scored_predictions(dev, overlap_answers(dev_q)), random_row)
    return SpanProbeRun(encoder.model, loading.model_revision(encoder.model), str(data.train.source),
                        str(data.dev.source), dev.rules, reading, dev.settings, C,
                        {"train": len(train_q), "dev": len(dev_q)}, table, encoder.compute, notes)


def with_baselines(table: SpanProbeTable, notes: tuple[str, ...], overlap: SpanScore,
                   random_row: SpanProbeRow) -> tuple[SpanProbeTable, tuple[str, ...]]:
    """The table with both baselines, and a warning (with the fix) for each one the best row does not beat."""
    best = table.best()
    table = replace(table, baselines={OVERLAP: overlap, RANDOM_ENCODER: random_row.scores},
                    random_encoder_row=random_row.label.removeprefix(f"{RANDOM_ENCODER} (").removesuffix(")"))
    if best.scores.f1 <= overlap.f1:
        notes += (f"warning: the best row ({best.label}, dev F1 {best.scores.f1:.1f}) does not beat the overlap "
                  f"baseline ({overlap.f1:.1f}): a linear head on these frozen vectors finds no answer the question's "
                  f"words do not. Fix: give more training questions, or fine-tune (bertkit finetune).",)
    if best.scores.f1 <= random_row.scores.f1:
        notes += (f"warning: the best row ({best.label}, dev F1 {best.scores.f1:.1f}) does not beat the same encoder "
                  f"with random weights ({random_row.scores.f1:.1f}): the pretrained weights add nothing there. Fix: "
                  f"check that --model is the trained model you meant.",)
    return table, notes


def write_span_probe_run(run_dir: Path, run: SpanProbeRun, config: dict[str, Any],
                         final_dir: Path | None = None) -> SpanProbeRun:
    """config.json (family spans, the reading and the answers' settings), metrics.json and probe_layers.png written
    into `run_dir`; the run with the paths it will have in `final_dir` (where a staged run ends up)."""
    from bertkit import plots
    from bertkit.io import atomic, trail

    final = final_dir or run_dir
    trail.write_run_config(run_dir, "probe", config, family="spans",
                           spans={"reading": run.reading.to_json(), "answers": run.answers.to_json(),
                                  "model": run.model, "compute": run.compute.to_json(), "C": run.C})
    best = run.table.best()
    curve_rows = [{"pool": "single layers" if r.pooling.single_layer else "combined layers", "layer_name": r.label,
                   "f1": r.scores.f1, "best": r is best} for r in run.table.rows]
    curve = plots.probe_layer_curve(curve_rows, {name: s.f1 for name, s in run.table.baselines.items()},
                                    run_dir / "probe_layers.png", f"Span probe per layer — {Path(run.model).name}",
                                    metric="f1")
    run = replace(run, outputs={"config": str(final / "config.json"), "metrics": str(final / "metrics.json"),
                                "layer_curve": str(final / curve.name)})
    atomic.write_json_atomic(run_dir / "metrics.json", run.to_json())
    return run
