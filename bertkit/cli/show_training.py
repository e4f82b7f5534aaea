"""What the training commands print (finetune, distill, sweep): epoch tables, best scores, the sweep's ranking, or
their results as JSON (--json). The rest of the commands' output is `bertkit.cli.show`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.cli.output import View, emit_json, format_score, format_threshold, info, out_console, table
from bertkit.cli.show import METRIC_HEADERS
from bertkit.commands.distill import DistillResult
from bertkit.commands.finetune import FinetuneResult
from bertkit.commands.sweep import SweepResult
from bertkit.measure import distill_report
from bertkit.scoring.table import SHAPE, SPAN_METRICS
from bertkit.training.checkpoints import resumed_line
from bertkit.training.outcome import EpochRow, RunSummary
from bertkit.training.trackers import summary_lines

# ---------------------------------------------------------------- finetune / distill


def _shown_whole(main_process: bool, result: Any, notes: Any, view: View) -> bool:
    """Whether a training summary is done already: nothing on another process, the whole result with --json; else
    its notes were shown, and the tables follow."""
    if not main_process:
        return True
    if view.json:
        emit_json(result.to_json())
        return True
    for note in notes:
        info(note, view.quiet)
    return False


def show_finetune(result: FinetuneResult, view: View) -> None:
    """A training run's summary: resumed or finished already, the epoch table, the best dev scores, what it saved."""
    if _shown_whole(result.is_main_process, result, result.notes, view):
        return
    _print_start(result)
    _print_epoch_table(result.epoch_table)
    summary = result.summary
    shown = [k for k in dict.fromkeys(TABLE_METRICS) if summary.best_dev.has(k)]  # its shape's
    _print_best(summary, shown)
    _print_tests(summary, shown)
    saved = [Path(p).name for k, p in summary.outputs.items() if k not in ("best", "final", "metrics.jsonl")]
    shared = " (final = best's step: its weights are best's, linked)" if summary.final_same_as_best else ""
    removed = "" if summary.checkpoints_kept else "; checkpoints/ removed (--keep-checkpoints keeps them)"
    out_console.print(f"saved {result.out}/best, {result.out}/final{shared}, metrics.json, {', '.join(saved)}"
                      f"{removed}", highlight=False)
    if summary.calibration is not None:
        fit = summary.calibration
        out_console.print(f"calibrated best/: temperature {fit.temperature:.3g} fitted on {fit.rows:,} dev rows (dev "
                          f"ECE {fit.ece_before:.4f} -> {fit.ece_after:.4f}; measured on the rows it was fitted on: "
                          f"evaluate other rows for the held-out effect)", highlight=False)
    for line in summary_lines(summary.trackers):
        out_console.print(line, highlight=False)


def _print_start(result: FinetuneResult) -> None:
    """Whether the run had finished already (nothing done) or resumed, and from where."""
    if result.already_finished:
        out_console.print(f"{result.out} holds a finished run (step {result.summary.global_step}); nothing to do. "
                          "Use a new --out, or --overwrite to train again.", highlight=False)
    elif result.restored is not None:  # the line the run logged as it resumed (shown once)
        info(resumed_line(result.restored.to_json(), result.summary.best_metric_name))


def _print_best(summary: RunSummary, shown: list[str]) -> None:
    """The best evaluation's --metric-for-best (named once), the shape's other metrics, its rows and throughput."""
    best = summary.best_dev
    others = [f"{k} {format_score(best.score(k))}" for k in shown if k != summary.best_metric_name]
    others += [f"threshold {format_threshold(best.threshold)}"] if best.has("threshold") else []
    also = f" ({', '.join(others)})" if others else ""
    rows = f" on {best.n:,} dev {_unit(best)}" if best.n is not None else ""
    out_console.print(
        f"best {summary.best_metric_name} {format_score(summary.best_metric)} at step {summary.best_step}"
        f"{rows}{also}; {summary.train_samples_per_second:.1f} train samples/s",
        highlight=False,
    )


def _print_tests(summary: RunSummary, shown: list[str]) -> None:
    """Labelled --test data, scored with the best and the final model's weights."""
    for role, test in (("best", summary.best_test), ("final", summary.final_test)):
        if test:
            out_console.print(f"test ({role} model, {test.value('n')} {_unit(test)}): "
                              f"{', '.join(f'{k} {format_score(test.score(k))}' for k in shown if test.has(k))}",
                              highlight=False)


def _unit(scores: Any) -> str:
    """What one evaluation's `n` counts: a tagger's scores are per word, a question-answering model's per question,
    others per row."""
    return "words" if scores.has("sentences") else "questions" if scores.has("rules") else "rows"


TABLE_METRICS = (*(k for shape in SHAPE.values() for k in shape.table_metrics), *SPAN_METRICS[:2])
"""The dev metrics a training summary shows, those its run scored: its shape's, or a question-answering run's."""
EPOCH_COLUMNS = {f"dev_{k}": f"dev {METRIC_HEADERS[k]}" for k in TABLE_METRICS}


def _print_epoch_table(rows: tuple[EpochRow, ...]) -> None:
    if not rows:
        return
    keys = ["epoch", "train_loss", "dev_loss", *(k for k in rows[0].record if k in EPOCH_COLUMNS), "train_seconds",
            "samples_per_second"]
    # train_seconds and samples_per_second are running totals since the first step (evaluation time excluded).
    columns = ["epoch", "train loss", "dev loss", *(EPOCH_COLUMNS[k] for k in keys[3:-2]), "train s, total",
               "samples/s, mean"]
    out_console.print(table("Training", columns, [[row.record.get(k) for k in keys] for row in rows],
                            formats={"train s, total": ",.1f", "samples/s, mean": ",.1f"}))


def show_distill(result: DistillResult, view: View) -> None:
    """The student's training summary, teacher vs student and DistilBERT's claims measured."""
    training, report = result.training, result.report
    if _shown_whole(training.is_main_process, result, training.notes, view):
        return
    _print_epoch_table(training.epoch_table)
    if report is not None:
        out_console.print(table("Teacher vs student (dev data)", report.model_columns(), report.model_rows()))
        out_console.print(table("DistilBERT's claims, measured", distill_report.CLAIM_COLUMNS,
                                report.claim_rows()))
        info(report.claims_context(), view.quiet)
    out_console.print(f"saved {training.out}/best, {training.out}/final, metrics.json"
                      + (", distill_report.json/.md/.png" if report is not None else ""), highlight=False)
    for line in summary_lines(training.summary.trackers):
        out_console.print(line, highlight=False)


# ---------------------------------------------------------------- sweep


def show_sweep(result: SweepResult, view: View) -> None:
    """The trials ranked by configuration (mean ± spread over seeds), the best trial and what was written."""
    summary = result.summary
    if not result.is_main_process or summary is None:
        return
    if view.json:
        emit_json(result.to_json())
        return
    for note in summary.notes:
        info(note, view.quiet)
    params = summary.params
    rows = [[g.rank, *(_sweep_value(g.params[p]) for p in params), len(g.values),
             format_score(g.mean) + (f" ± {g.std:.4f}" if len(g.values) > 1 else ""),
             "pruned" if g.pruned else "", ", ".join(g.trials)[:60]] for g in summary.ranking]
    out_console.print(table(f"Sweep: best dev {summary.metric} ({summary.search}, {len(summary.rows)} trials"
                            f", {summary.pruned} pruned)", ["rank", *params, "seeds", f"{summary.metric}",
                                                            "status", "trials"], rows))
    best = summary.best
    if best is not None:
        out_console.print(f"best trial {best.row.trial}: dev {summary.metric} {format_score(best.row.best)} at step "
                          f"{best.row.best_step}; its model is {result.out}/best", highlight=False)
    out_console.print(f"saved {result.out}/trials.csv, sweep.json, sweep.png, best/", highlight=False)


def _sweep_value(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
