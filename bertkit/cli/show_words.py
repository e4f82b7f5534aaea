"""What `bertkit embed` prints for tagged data (each word store), and what `bertkit probe` prints for it: the table of word probes, a row per layer choice
with its width and its dev entity F1 (precision, recall) or token accuracy with its 95% bootstrap interval over
sentences, the best row marked, the baselines beside them, the layer where the per-layer curve peaks, and the
files written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertkit.cli.output import View, format_size, info, out_console, table, table_unless_json
from bertkit.probe.words_run import RANDOM_ENCODER
from bertkit.scoring.entities import BOOTSTRAP_RESAMPLES

if TYPE_CHECKING:
    from bertkit.features.word_embed import WordEmbedRun
    from bertkit.probe.words_run import WordProbeRun
    from bertkit.scoring.entities import TagScores

BASELINE_MARK = "baseline"


def score_cells(scores: TagScores) -> list[object]:
    """The main score and its interval, then precision and recall (entity tags) or tag macro-F1 (plain tags)."""
    if scores.entities is not None:
        return [scores.entities.f1, interval_cell(scores), scores.entities.precision, scores.entities.recall,
                scores.token_accuracy]
    return [scores.token_accuracy, interval_cell(scores), scores.tag_macro_f1]


def interval_cell(scores: TagScores) -> str:
    return f"{scores.interval[0]:.3f}-{scores.interval[1]:.3f}" if scores.interval is not None else "-"


def baseline_label(name: str, row: str | None) -> str:
    """A baseline's name; the random-init encoder's with the row whose layers it read."""
    return f"{BASELINE_MARK}: {name}" + (f" ({row})" if name == RANDOM_ENCODER and row else "")


def show_word_probe(words: WordProbeRun, view: View) -> None:
    """The word probe table (or the run's JSON with --json) and the files written."""
    table_ = table_unless_json(words, view)
    if table_ is None:
        return
    best = table_.best()
    entities = table_.scheme.has_entities
    header = (["row", "dim", "entity F1", "95% CI", "precision", "recall", "token acc"] if entities else
              ["row", "dim", "token acc", "95% CI", "tag macro-F1"])
    rows = [[row.label + (" *" if row is best else ""), row.dim, *score_cells(row.scores)] for row in table_.rows]
    rows += [[baseline_label(name, table_.random_encoder_row), "", *score_cells(scores)]
             for name, scores in table_.baselines.items()]
    reading = words.reading
    title = (f"Word probe — {words.model} — train {words.sentences['train']:,} sentences ({table_.n_train_words:,} "
             f"words), dev {words.sentences['dev']:,} ({table_.n_dev_words:,} words); tags {table_.scheme.name}, "
             f"word pool {reading.word_pool}, max length {reading.max_length}, {words.compute.precision} (* = best dev {best.scores.main_name}; 95% "
             f"CI: {BOOTSTRAP_RESAMPLES:,} resamples of the dev sentences)")
    out_console.print(table(title, header, rows))
    out_console.print(f"best: {best.label}, dev {best.scores.main_name} {best.scores.main:.3f}", highlight=False)
    peak = table_.peak_layer()
    if peak is not None:
        out_console.print(f"peak layer: {peak.label}, dev {peak.scores.main_name} {peak.scores.main:.3f} "
                          f"({interval_cell(peak.scores)})", highlight=False)
    for note in words.notes:
        info(note, view.quiet)
    outputs = words.outputs
    if outputs:
        probe = outputs.get("probe")
        saved = (f"; saved probe: {probe} (the best row's; use: bertkit predict --probe {probe} --text ..., or "
                 f"--data FILE)") if probe else ""
        info(f"wrote {outputs['metrics']}, {outputs['layer_curve']}{saved}", view.quiet)


def show_store_split(split: str, status: str, path: str, rows: str, shape: str, size_bytes: int, parts: str,
                     done: int, total: int) -> None:
    """One split of `embed`'s stores: complete already (nothing to do), or `rows` written to `path` (`shape`,
    `size_bytes`), resumed where `done` of its `total` `parts` (shards, chunks) were already written."""
    store = "word store" if parts == "chunks" else "store"
    if status == "complete":
        out_console.print(f"{split}: {store} {path} is already complete ({shape}, same settings); nothing to do.",
                          highlight=False)
        return
    resumed = f", resumed: {done} of {total} {parts} were already done" if status == "resumed" else ""
    out_console.print(f"{split}: {rows} -> {path} ({shape}, {format_size(size_bytes)}){resumed}", highlight=False)


def show_word_embed(words: WordEmbedRun) -> None:
    """Each split's word store (complete already, written, resumed), then the throughput."""
    layers = words.pooling.label
    for split in words.splits:
        show_store_split(split.split, split.status, split.path, f"{split.sentences:,} sentences",
                         f"{split.words:,} words x {split.width}", split.size_bytes, "chunks", split.chunks_skipped,
                         split.chunks_total)
    if not words.complete_already:
        rate = f"{words.words_per_s:,.0f} words/s" if words.words_per_s else "-"
        out_console.print(f"embedded {words.words_encoded:,} words in {words.seconds:.1f} s ({rate}; {words.precision} "
                          f"on {words.device}); {layers}, word pool {words.reading.word_pool}, tags {words.scheme}; "
                          f"store {format_size(words.size_bytes)}", highlight=False)
