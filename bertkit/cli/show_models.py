"""What `bertkit export` and `bertkit push` print: the export's gate numbers and where it is; where the model went
and which files. Or the same as JSON (--json)."""

from __future__ import annotations

from typing import Any

from bertkit.cli.output import View, emit_json, format_score, format_size, info, out_console, table
from bertkit.commands.export import ExportResult
from bertkit.commands.push import PushResult
from bertkit.models.export_gate import GateReport


def show_push(result: PushResult, view: View) -> None:
    if view.json:
        emit_json(result)
        return
    visibility = "private" if result.private else "public unless it existed"
    out_console.print(f"pushed {result.model} to {result.url} ({visibility}): {len(result.files)} files "
                      f"({', '.join(result.files)})", highlight=False)
    out_console.print(f"commit: {result.commit}", highlight=False)


def show_export(result: ExportResult, view: View) -> None:
    """The accuracy gate's numbers and where the export is."""
    if view.json:
        emit_json(result)
        return
    backend = "ONNX int8" if result.quantized else "ONNX fp32"
    out_console.print(table(f"{backend} {result.kind} export of {result.model}: gate on {result.data}",
                            ["measure", "value"], _gate_rows(result.gate)))
    if result.forced:
        info("the gate refused this export; kept because of --force (export_report.json says forced)", view.quiet)
    info(f"wrote {result.out} (model.onnx {format_size(result.size_bytes)}, export_report.json)", view.quiet)


def _gate_rows(gate: GateReport) -> list[list[Any]]:
    """The gate's numbers, each gated one with its threshold: features' cosines; a classifier's label agreement per
    row; a tagger's tag agreement per word, its entity agreement and, on gold tags, the drop of its score; a
    question-answering model's answer agreement per question, its overlap, and the drop of its F1."""
    minimum = f" (min {gate.threshold:g})"
    if gate.statistic == "mean_cosine":
        return [["rows", gate.rows], ["mean cosine with fp32", f"{gate.mean_cosine:.4f}{minimum}"],
                ["lowest cosine", f"{gate.min_cosine:.4f}"], ["largest difference", f"{gate.max_abs_diff:.4g}"]]
    if gate.answer_f1_agreement is not None:  # a question-answering model: answers per question
        rows: list[list[Any]] = [["questions", gate.rows], ["answer agreement with fp32", f"{gate.agreement:.4f}"
                                                                                          f"{minimum}"],
                                 ["answer overlap with fp32 (F1)", f"{gate.answer_f1_agreement:.4f}"]]
    elif gate.words is None:
        rows = [["rows", gate.rows], ["label agreement with fp32", f"{gate.agreement:.4f}{minimum}"]]
    else:
        rows = [["sentences", gate.rows], ["words", gate.words], ["tag agreement with fp32", f"{gate.agreement:.4f}"
                                                                  f"{minimum}"]]
        if gate.entity_agreement is not None:
            rows.append(["entity agreement with fp32 (F1)", f"{gate.entity_agreement:.4f}"])
    rows.append(["largest logit difference", f"{gate.max_abs_logit_diff:.4g}"])
    if gate.metric:
        rows.append([f"{gate.metric} fp32 -> export",
                     f"{format_score(gate.metric_fp32)} -> {format_score(gate.metric_export)}"])
    if gate.metric_drop is not None:
        rows.append([f"{gate.metric} drop", f"{gate.metric_drop:.4f} (max {gate.max_drop:g})"])
    return rows
