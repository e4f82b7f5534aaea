"""What `bertkit probe` prints for questions on passages (SQuAD): which layer answers - a row per layer choice with
its width and the official dev exact match and F1 (with the F1's 95% bootstrap interval over the dev questions), the
best row starred, the baselines beside them (the overlap sentence, the random-init encoder at the best row), the layer
where the per-layer curve peaks, and the files written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertkit.cli.output import View, info, out_console, table, table_unless_json

if TYPE_CHECKING:
    from bertkit.probe.span_records import SpanProbeRun, SpanScore

BASELINE_MARK = "baseline"


def interval_cell(scores: SpanScore) -> str:
    return f"{scores.f1_interval[0]:.1f}-{scores.f1_interval[1]:.1f}" if scores.f1_interval is not None else "-"


def show_span_probe(spans: SpanProbeRun, view: View) -> None:
    """The span probe table (or the run's JSON with --json) and the files written."""
    table_ = table_unless_json(spans, view)
    if table_ is None:
        return
    best = table_.best()
    rows = [[row.label + (" *" if row is best else ""), row.dim, row.scores.exact_match, row.scores.f1,
             interval_cell(row.scores)] for row in table_.rows]
    rows += [[f"{BASELINE_MARK}: {name}" + (f" ({table_.random_encoder_row})" if table_.random_encoder_row and
                                             name.startswith("random") else ""), "", s.exact_match, s.f1,
              interval_cell(s)] for name, s in table_.baselines.items()]
    reading = spans.reading
    title = (f"Span probe (which layer answers) — {spans.model} — train {spans.questions['train']:,} questions "
             f"({table_.windows['train']:,} windows), dev {spans.questions['dev']:,} ({table_.windows['dev']:,} "
             f"windows); SQuAD v{spans.rules} scores in %, max length {reading.max_length}, doc stride "
             f"{reading.doc_stride}, C {spans.C:g}, {spans.compute.precision} (* = best dev F1; 95% CI: 1,000 "
             f"resamples of the dev questions)")
    out_console.print(table(title, ["row", "dim", "EM", "F1", "F1 95% CI"], rows,
                            formats={"EM": ".1f", "F1": ".1f", "dim": "d"}))
    out_console.print(f"best: {best.label}, dev EM {best.scores.exact_match:.1f}, F1 {best.scores.f1:.1f}",
                      highlight=False)
    peak = table_.peak_layer()
    if peak is not None:
        out_console.print(f"peak layer: {peak.label}, dev F1 {peak.scores.f1:.1f} ({interval_cell(peak.scores)})",
                          highlight=False)
    for note in spans.notes:
        info(note, view.quiet)
    if spans.outputs:
        info(f"wrote {spans.outputs['metrics']}, {spans.outputs['layer_curve']}", view.quiet)
