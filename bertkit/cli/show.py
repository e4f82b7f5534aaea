"""What each command prints: its tables and summary lines on stdout, status lines on stderr, or its results as
JSON (--json; then nothing else goes to stdout). The commands (`bertkit.cli.app`) call one `show_*` each."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from bertkit.cli.output import (
    JsonStream,
    View,
    emit_json,
    format_score,
    format_size,
    format_threshold,
    info,
    out_console,
    result_json,
    table,
)
from bertkit.cli.show_answers import print_answers_jsonl, show_answer_evaluation, show_answer_predictions
from bertkit.cli.show_span_probe import show_span_probe
from bertkit.cli.show_tag_report import show_tag_report
from bertkit.cli.show_word_predictions import print_sentences_jsonl, show_word_predictions
from bertkit.cli.show_words import show_store_split, show_word_embed, show_word_probe
from bertkit.commands.bench import BenchResult
from bertkit.commands.embed import EmbedResult
from bertkit.commands.evaluate import EvaluateConfig, EvaluateResult
from bertkit.commands.predict import PredictConfig, PredictResult
from bertkit.commands.probe import ProbeResult
from bertkit.commands.tokens import TokensConfig, TokensResult
from bertkit.families.sentence_runs import PredictedWindow
from bertkit.families.span_runs import AnsweredChunk
from bertkit.scoring.table import SHAPE

if TYPE_CHECKING:
    from bertkit.encoding.report import SentenceTokens

# ---------------------------------------------------------------- tokens


def show_tokens(result: TokensResult, cfg: TokensConfig, view: View) -> None:
    """A sentence's tokens, or a dataset's token-length report."""
    if result.sentence is not None:
        _show_sentence(result.sentence, view)
    else:
        _show_length_report(result, cfg, view)


def _show_sentence(result: SentenceTokens, view: View) -> None:
    if view.json:
        emit_json(result)
        return
    columns = ["position", "token", "id", "attention_mask"] + (["token_type_id"] if result.token_type_ids else [])
    rows = []
    for i, token in enumerate(result.tokens):
        row = [str(i), token, result.input_ids[i], result.attention_mask[i]]
        if result.token_type_ids:
            row.append(result.token_type_ids[i])
        rows.append(row)
    out_console.print(table(f"{result.n_tokens} tokens", columns, rows, formats={"id": "d"}))
    specials = ", ".join(f"{k.upper()} at {v}" for k, v in result.special_positions.items() if v)
    out_console.print(f"special tokens: {specials}", highlight=False)


def _show_length_report(result: TokensResult, cfg: TokensConfig, view: View) -> None:
    reports, notes = result.reports, result.notes
    if view.json:
        emit_json(result.to_json())
        return
    rows = [[r.split, r.rows, r.min, r.p50, r.p95, r.p99, r.max, f"{r.truncated} ({r.truncated_share:.1%})",
             r.suggested_max_length, f"{r.waste_static:.0%}", f"{r.waste_dynamic_random:.0%}", f"{r.waste_dynamic_sorted:.0%}"]
            for r in reports]
    columns = ["split", "rows", "min", "p50", "p95", "p99", "max", f"cut@{result.max_length}", "suggest",
               "waste static", "dynamic", "sorted"]
    out_console.print(table(f"Token lengths — {cfg.model} (model limit {result.model_limit})", columns, rows))
    for r in reports:
        if r.label_counts:
            out_console.print(f"{r.split} labels: " + ", ".join(f"{k}={v}" for k, v in r.label_counts.items()), highlight=False)
    for note in notes:
        info(note, view.quiet)
    if result.outputs is not None:
        info(f"wrote {result.outputs.report} and {result.outputs.histogram}", view.quiet)


# ---------------------------------------------------------------- embed


def show_embed(summary: EmbedResult, view: View) -> None:
    """Each split's store (complete already, written, resumed) and the throughput; nothing on other processes."""
    if not summary.main_process:
        return
    if view.json:
        emit_json(summary)
        return
    if summary.words is not None:  # tagged data: the word stores
        show_word_embed(summary.words)
        return
    for split in summary.splits:
        show_store_split(split.split, split.status, split.path, f"{split.rows:,} rows",
                         "x".join(str(d) for d in split.shape), split.size_bytes, "shards", split.shards_skipped,
                         split.shards_total)
    if not summary.complete_already:
        rate = (f"{summary.rows_per_s:,.1f} rows/s, {summary.tokens_per_s:,.0f} tokens/s" if summary.rows_per_s
                else "-")
        windows = f" (the store's texts as {summary.windows:,} windows)" if summary.long_text == "chunk" else ""
        out_console.print(
            f"embedded {summary.rows_encoded:,} rows{windows}, {summary.tokens_encoded:,} tokens in "
            f"{summary.seconds:.1f} s ({rate}; {summary.dtype} on {summary.device}); store "
            f"{format_size(summary.size_bytes)}; {summary.n_truncated:,} rows truncated at --max-length "
            f"{summary.max_length}", highlight=False)


# ---------------------------------------------------------------- probe


def show_probe(result: ProbeResult, view: View) -> None:
    """The probe table (every layer and pooling, baselines, the best cell), notes and the files written."""
    if result.words is not None:  # tagged data: the word probes' own table
        show_word_probe(result.words, view)
        return
    if result.spans is not None:  # questions on passages: the span probes' own table
        show_span_probe(result.spans, view)
        return
    if view.json:
        emit_json(result_json(result))
        return
    _print_probe_report(result)
    for note in result.notes:
        info(note, view.quiet)
    if result.outputs is not None:
        outputs = result.outputs.paths
        figure = next(outputs[k] for k in ("confusion_matrix", "scatter", "per_label_f1") if k in outputs)
        info(f"wrote {outputs['metrics']}, {outputs['layer_curve']}, {figure}; "
             f"saved probe: {outputs['probe']} (use: bertkit predict --probe {outputs['probe']} --text ...)", view.quiet)


def _print_probe_report(result: ProbeResult) -> None:
    if result.task is not None:  # regression or tags: their own metrics
        _print_shaped_probe_report(result)
        return
    rows = []
    for cell in result.sweep:
        low, high = cell.intervals["accuracy"]
        rows.append([cell.pool, cell.layer_name + (" *" if cell.best else ""), cell.scores["accuracy"],
                     f"{low:.3f}-{high:.3f}", cell.scores["f1"], cell.scores["mcc"], f"{cell.C:g}"])
    names = {"majority": "majority class", "tfidf": "TF-IDF + LR (text)", "random_encoder": "random-init encoder"}
    for key, base in (result.baselines.by_name if result.baselines is not None else {}).items():
        where = f" ({base.where[0]} {base.where[1]})" if base.where else ""
        rows.append(["baseline", names.get(key, key) + where, base.scores["accuracy"], "", base.scores["f1"],
                     base.scores["mcc"], "" if base.C is None else f"{base.C:g}"])
    sizes = result.rows
    settings = result.probe.record if result.probe is not None else {}
    searched = settings.get("C") is None and settings.get("cv") is None  # the default: the kept cell's C by CV
    marker = ("* = the saved probe: best dev accuracy at C = 1, then refit at the C that 5-fold CV on log-loss "
              "chose; its row shows the refit's scores" if searched else "* = best dev accuracy")
    title = f"Linear probe — {result.model} — train {sizes.train:,} rows, dev {sizes.dev:,} rows ({marker})"
    out_console.print(table(title, ["pool", "layer", "dev acc", "95% CI", "macro-F1", "MCC", "C"], rows))
    above = refit_below_another(result)
    if above:
        out_console.print(above, highlight=False)
    best = result.best
    if best.asked:  # --metric: the scores asked for, of the best cell's dev predictions
        out_console.print(table(f"--metric on dev — best cell ({best.pool} {best.layer})", ["metric", "value"],
                                [[k, v] for k, v in best.asked.items()]))
    line = f"best: {best.pool} {best.layer}, dev accuracy {best.dev['accuracy']:.3f}"
    out_console.print(line + _repeats_and_test(result, "accuracy", "accuracy"), highlight=False)
    calibration = calibration_line(best.dev.get("ece"))
    if calibration:
        out_console.print(calibration, highlight=False)


def refit_below_another(result: ProbeResult) -> str | None:
    """Why a row scores above the * row, when one does: the rows were compared at C = 1 and the * row's C chosen
    afterwards by cross-validated log-loss, which moved its dev accuracy (None when the * row is the top one)."""
    starred = next((cell for cell in result.sweep if cell.best), None)
    if starred is None or starred.scores.get("accuracy") is None:
        return None
    score = starred.scores["accuracy"]
    higher = [cell for cell in result.sweep if not cell.best and (cell.scores.get("accuracy") or 0.0) > score]
    if not higher:
        return None
    top = max(higher, key=lambda cell: cell.scores["accuracy"] or 0.0)
    low, high = starred.intervals.get("accuracy", (score, score))
    other = top.scores["accuracy"] or 0.0
    within = " (inside the * row's 95% CI)" if low <= other <= high else ""
    spec = ".3f" if format(other, ".3f") != format(score, ".3f") else ".4f"
    return (f"{top.pool} {top.layer_name} scores above the * row ({other:{spec}} vs {score:{spec}}){within}: "
            f"the rows were compared at C = 1, where {starred.pool} {starred.layer_name} was best; its refit at C = "
            f"{starred.C:g}, chosen by cross-validated log-loss rather than dev accuracy, moved its dev score. The "
            f"saved probe is the * row's refit.")


OVERCONFIDENT = 0.1
"""An expected calibration error above this is called out: probabilities off by 10 points on average."""


def calibration_line(ece: float | None) -> str | None:
    """How far the dev probabilities are from the dev accuracy (expected calibration error), with what follows from
    it when they are far; None without probabilities."""
    if ece is None:
        return None
    if ece <= OVERCONFIDENT:
        return f"calibration: expected calibration error {ece:.3f} on dev (probabilities track accuracy)"
    return (f"calibration: expected calibration error {ece:.3f} on dev - read its probabilities as rankings, not as "
            f"chances (a 0.99 is right far less often than 99%); metrics.json has the reliability table")


def _repeats_and_test(result: ProbeResult, metric: str, name: str) -> str:
    """The probe summary's tail: the spread of the refits on subsets, and the test score, where the run has them."""
    best, tail = result.best, ""
    if result.repeats:
        refits, spread = result.repeats, result.repeats.spreads[metric]
        tail += f"; {refits.repeats} refits on {refits.fraction:.0%} subsets: {spread.mean:.3f} ± {spread.std:.3f}"
    if best.test is not None:
        tail += f"; test {name} {format_score(best.test.scores.get(metric), '.3f')} (n={best.test.rows})"
    return tail


METRIC_HEADERS = {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "pearson": "Pearson", "spearman": "Spearman",
                  "mse": "MSE", "mae": "MAE", "micro_f1": "micro-F1", "macro_f1": "macro-F1",
                  "subset_accuracy": "subset acc", "hamming_loss": "Hamming", "exact_match": "EM"}
"""A metric's column header in the regression and tag probe tables and (after `dev `) the training table."""
PROBE_BASELINE_NAMES = {"mean": "mean predictor", "majority": "per-label majority", "random_encoder": "random-init encoder"}


def _print_shaped_probe_report(result: ProbeResult) -> None:
    """The probe table of a regression or tag probe: the shape's metrics per cell, its baselines, the best cell."""
    task = result.task or "single_label"
    metric, keys = SHAPE[task].headline, SHAPE[task].probe_keys
    header = [METRIC_HEADERS[k] for k in keys]
    rows = []
    for cell in result.sweep:
        low, high = cell.intervals[metric]
        rows.append([cell.pool, cell.layer_name + (" *" if cell.best else ""), cell.scores[metric],
                     f"{low:.3f}-{high:.3f}", *[cell.scores[k] for k in keys[1:]], _penalty(task, cell.C)])
    tfidf = "TF-IDF + ridge (text)" if task == "regression" else "TF-IDF + OvR LR (text)"
    for key, base in (result.baselines.by_name if result.baselines is not None else {}).items():
        where = f" ({base.where[0]} {base.where[1]})" if base.where else ""
        name = tfidf if key == "tfidf" else PROBE_BASELINE_NAMES.get(key, key)
        rows.append(["baseline", name + where, base.scores[metric], "", *[base.scores[k] for k in keys[1:]],
                     "" if base.C is None else _penalty(task, base.C)])
    sizes = result.rows
    title = (f"Linear probe ({task.replace('_', '-')}) — {result.model} — train {sizes.train:,} rows, dev "
             f"{sizes.dev:,} rows (* = best dev {header[0]})")
    penalty = "ridge alpha" if task == "regression" else "C"
    out_console.print(table(title, ["pool", "layer", f"dev {header[0]}", "95% CI", *header[1:], penalty], rows))
    best = result.best
    line = f"best: {best.pool} {best.layer}, dev {header[0]} {best.dev[metric]:.3f}"
    line += f" (ridge alpha {best.alpha:g})" if task == "regression" else f" (threshold {format_threshold(best.threshold)})"
    out_console.print(line + _repeats_and_test(result, metric, header[0]), highlight=False)


def _penalty(task: str, C: float) -> str:
    """The regularisation shown in the probe table: ridge alpha (= 1/C) for regression, else C."""
    return f"{1.0 / C:g}" if task == "regression" else f"{C:g}"


# ---------------------------------------------------------------- predict / evaluate


def predictions_shown(cfg: PredictConfig) -> int:
    """How many rows the predictions table shows (the first ones)."""
    return 20 if cfg.out else 200


class PredictionsJson:
    """`predict --json`: each window's (or chunk's) predictions printed as they come (`on_chunk` of
    `bertkit.commands.predict.run`): rows of text as the one JSON object `emit_json` of all of them prints, tagged
    sentences as JSON lines (one object per sentence)."""

    def __init__(self) -> None:
        self.stream = JsonStream("predictions")

    def __call__(self, chunk: Any) -> None:
        if isinstance(chunk, AnsweredChunk):  # answers to questions: a line each
            print_answers_jsonl(chunk)
            return
        if not isinstance(chunk, PredictedWindow):  # tagged sentences: a line each
            print_sentences_jsonl(chunk)
            return
        outputs = chunk.outputs
        for t, lab, p in zip(chunk.part.texts, chunk.labels, outputs.values, strict=True):
            self.stream.add(_prediction_json(outputs.task, t, lab, p, outputs.label_names))


def show_predictions(result: PredictResult, cfg: PredictConfig, view: View,
                     stream: PredictionsJson | None = None) -> None:
    """The predictions as their problem family shows them (rows of text: the first 20 or 200 rows, or all of them
    as JSON, printed as they came: `stream`; tagged sentences: `show_word_predictions`)."""
    PREDICTION_VIEWS.get(result.family, _show_row_predictions)(result, cfg, view, stream)


def _show_row_predictions(result: PredictResult, cfg: PredictConfig, view: View,
                          stream: PredictionsJson | None = None) -> None:
    dataset, labels, proba, names = result.dataset, result.labels, result.proba, result.label_names
    task = result.task
    if view.json:
        rest = {"task": task, **({"threshold": result.threshold} if task == "multi_label" else {}), "out": cfg.out,
                "dtype": result.dtype, "max_length": result.max_length, "truncation": result.truncation,
                "rows_cut": result.rows_cut, "temperature": result.temperature,
                **({"pooling": result.pooling} if result.pooling else {})}
        if stream is None:  # the result holds every row
            stream = PredictionsJson()
            outputs = SimpleNamespace(task=task, label_names=names, values=proba)
            stream(PredictedWindow(dataset, outputs, labels))
        stream.stream.close(rest)
        return
    shown = min(len(dataset), predictions_shown(cfg))
    header, rows = _prediction_rows(task, list(dataset.texts[:shown]), labels[:shown], proba[:shown], names)
    out_console.print(table(f"{len(dataset)} prediction(s)" + (f" (first {shown})" if shown < len(dataset) else ""),
                            header, rows))
    info(reading_line(result), view.quiet)
    if cfg.out:
        columns = {"regression": "predicted", "multi_label": "predicted (tags joined by |), p_<tag>"}.get(
            task, "predicted, confidence, p_<label>")
        info(f"wrote {cfg.out} ({len(dataset)} rows, columns: {columns})", view.quiet)


PREDICTION_VIEWS = {"words": lambda result, cfg, view, stream: show_word_predictions(result, cfg, view),
                    "spans": lambda result, cfg, view, stream: show_answer_predictions(result, cfg, view)}
"""How a problem family's predictions are shown, where not as rows of text."""


def reading_line(result: PredictResult) -> str:
    """How the rows were read: the max length and truncation (and a probe's features), in the model's precision."""
    features = f"; features: {result.pooling}" if result.pooling else ""
    return f"{read_line(result.max_length, result.truncation, result.rows_cut, len(result.dataset))}{features}, " \
           f"{result.dtype}{calibration_words(result.temperature)}"


def calibration_words(temperature: float | None) -> str:
    """'; probabilities calibrated (logits / T, fitted on dev)' for a model trained with --calibrate temperature."""
    return "" if temperature is None else f"; probabilities calibrated (logits / {temperature:.3g}, fitted on dev)"


def read_line(max_length: int | None, truncation: str | None, cut: int | None, rows: int) -> str:
    """'read at max length N tokens: K of R rows were longer and kept their head' (or read whole in windows)."""
    if cut is None:
        return f"read at max length {max_length} tokens, longer rows whole in overlapping windows"
    return f"read at max length {max_length} tokens: {cut:,} of {rows:,} rows were longer and kept their {truncation}"


def _prediction_json(task: str, text: str, label: Any, p: Any, names: list[str]) -> dict[str, Any]:
    if task == "regression":
        return {"text": text, "score": label}
    if task == "multi_label":
        return {"text": text, "labels": list(label), "probabilities": dict(zip(names, p.tolist(), strict=True))}
    return {"text": text, "label": label, "probabilities": dict(zip(names, p.tolist(), strict=True))}


def _prediction_rows(task: str, texts: list[str], labels: list[Any], proba: Any,
                     names: list[str]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of the predictions table: label + probability, score, or tags with their probabilities."""
    short = [t if len(t) <= 80 else t[:77] + "..." for t in texts]
    if task == "regression":
        return ["text", names[0]], [[t, float(lab)] for t, lab in zip(short, labels, strict=True)]
    if task == "multi_label":
        index = {n: j for j, n in enumerate(names)}
        return ["text", "labels (probability)"], [
            [t, ", ".join(f"{tag} ({p[index[tag]]:.2f})" for tag in lab) or "(none)"]
            for t, lab, p in zip(short, labels, proba, strict=True)]
    return ["text", "label", "probability"], [[t, lab, float(p.max())]
                                              for t, lab, p in zip(short, labels, proba, strict=True)]


EVALUATION_VIEWS = {"spans": show_answer_evaluation}
"""How a problem shape's scores are shown, where not as the headline metrics table."""


def show_evaluate(result: EvaluateResult, cfg: EvaluateConfig, view: View) -> None:
    """The headline metrics, per tag or confusion matrix (a tagging model: its report), and the files written."""
    from bertkit.scoring import metrics

    if result.task in EVALUATION_VIEWS:
        EVALUATION_VIEWS[result.task](result, cfg, view)
        return
    if view.json:
        emit_json(result)
        return
    unit = "words" if result.task == "tags" else "rows"
    out_console.print(table(f"{cfg.model} on {result.data} ({result.rows} {unit})", ["metric", "value"],
                            [[k, "undefined" if v is None else v]
                             for k, v in metrics.headline(result.metrics.to_json()).items()]))
    if result.note:
        info(f"note: {result.note}", view.quiet)
    info(read_line(result.max_length, result.truncation, result.rows_cut, result.rows)
         + calibration_words(result.temperature), view.quiet)
    plot = {"regression": "scatter.png", "multi_label": "per_label_f1.png"}.get(result.task, "confusion_matrix.png")
    if result.task == "multi_label":
        out_console.print(table(f"per tag (threshold {result.threshold})", ["tag", "F1", "precision", "recall",
                                                                            "support"],
                                [[tag, r["f1"], r["precision"], r["recall"], r["support"]]
                                 for tag, r in result.per_tag.items()]))
    elif result.task == "single_label":
        names, matrix = result.confusion
        out_console.print(table("confusion matrix (rows = true)", ["true \\ predicted", *names],
                                [[names[i], *row] for i, row in enumerate(matrix)]))
    elif result.task == "tags":
        show_tag_report(result)
    if cfg.out:
        files = "predictions.jsonl" if result.task == "tags" else f"predictions.csv, {plot}"
        info(f"wrote {cfg.out}/metrics.json, {files}", view.quiet)


# ---------------------------------------------------------------- bench


def _models_as_columns(columns: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[Any]]]:
    """The bench summary turned so each model is a column and each measure a row: a dozen measures side by side
    would not fit a terminal, two or three models do."""
    return ["measure", *(str(row[0]) for row in rows)], [[name, *(row[i] for row in rows)]
                                                         for i, name in enumerate(columns) if i > 0]


def show_bench(result: BenchResult, view: View) -> None:
    """Size, latency and throughput per model, the claims of the DistilBERT paper, and the files written."""

    if view.json:
        emit_json(result)
        return
    report = result.report
    title = f"bertkit bench ({report.protocol}) — {report.machine}"
    out_console.print(table(title, *_models_as_columns(*report.summary_rows()), measures_as_rows=True))
    columns, rows = report.throughput_rows()
    if rows:
        out_console.print(table("Throughput (dynamic = length-sorted batches; static = padded to --max-length)",
                                columns, rows, formats={"rows/s": ",.1f", "windows/s": ",.1f", "questions/s": ",.1f",
                                                        "tokens/s": ",.0f"}, wrap_first=28))
    out_console.print("[bold]Claims vs the DistilBERT paper[/]")
    for line in report.claim_lines():
        out_console.print(f"  {escape(line)}", highlight=False)
    for note in report.notes:
        info(f"note: {escape(note)}", view.quiet)
    info(f"wrote {', '.join(report.outputs.values())}", view.quiet)
