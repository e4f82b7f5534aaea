"""`bertkit export`: a fine-tuned classifier, a tagging model or an encoder to an ONNX folder (optionally int8), kept
only when the accuracy gate passes. Returns the gate's report; `cli` prints it.

The gate runs the PyTorch model and the export through the same reading as `predict`/`evaluate`
(`infer.classifier_logits`, the problem shape's metrics of `bertkit.scoring.outputs`) and,
for an encoder, `embed`'s feature pass. The folder format is `bertkit.models.onnx`'s alone.

The gate (every export, fp32 or int8): both models run on --data (default: the finetune run's dev set). Classifiers:
label agreement with fp32, the headline metric before and after when the rows have labels, the largest absolute
logit difference. Features: the mean and minimum cosine similarity of each row's features and the largest absolute
difference; the mean cosine is gated (--min-cosine), since one odd row should not refuse a model whose features
are otherwise the same. Taggers (`bertkit.scoring.tag_gate`): the sentences of --data (default: the tagging run's dev
set) read by predict's path of windows and word tags; the tag agreement per word gated by --min-agreement, and with
gold tags the drop of entity F1 (plain tags: word accuracy) by --max-drop; the entity agreement reported. Below the
threshold nothing is kept (the export is built in a temp folder; the previous --out stays as it was) and a
UserError gives the numbers and the fixes, unless --force.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.options import LabelOptions, config_problems
from bertkit.encoding.reading import LongTextOptions, Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.families.base import Family
from bertkit.families.exports import Exporter, applicable_config
from bertkit.families.registry import cached_family
from bertkit.features.settings import Pooling, PoolingOptions
from bertkit.io import atomic, trail
from bertkit.models.card import export_card_facts, write_model_card
from bertkit.models.export_gate import GateOptions, GateReport, export_report, refusal_message
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.options import (
    MODEL,
    OUTPUT,
    Config,
    command_line,
    config_dict,
    group,
    option,
    overwrite_option,
)

log = logging.getLogger(__name__)


EXPORT_KINDS = ("auto", "classifier", "features", "tagger", "answerer")
QUANTIZE = ("int8", "none")
@dataclass(frozen=True)
class ExportConfig(Config):
    """`bertkit export`: a fine-tuned classifier (logits) or an encoder (pooled features) to an ONNX folder,
    optionally int8, kept only when the accuracy gate against the PyTorch fp32 model passes."""

    # the gate reads one --data file and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")
    REQUIRED_OPTIONS = ("model", "out")
    ADVANCED_OPTIONS = ("stride",)
    HELP_OVERRIDES = {"data": "Gate data: rows the PyTorch fp32 model and the export both run on (labels optional: with "
                              "them the metric before and after is reported; a tagger: a tagged file, or text with a "
                              "sentence per line). Default for a model saved by `bertkit finetune` (RUN/best, "
                              "RUN/final): that run's dev set.",
                      "limit": "Run the gate on the first N rows only (quicker, less sure).",
                      "pool": "Features: token pooling baked into the graph (as `embed --pool`).",
                      "layers": "Features: hidden states to pool (as `embed --layers`).",
                      "combine": "Features: how several --layers are combined (as `embed --combine`; default concat).",
                      "normalize": "Features: L2-normalise the feature vectors inside the graph."}

    model: str | None = option(None, "What to export: a fine-tuned model folder (e.g. runs/sst2/best) or an encoder "
                               "(a folder, hub id, or `minilm-offline`).", panel=MODEL)
    out: str | None = option(None, "The export folder: model.onnx, config.json, tokenizer, bertkit_model.json, "
                             "export_report.json.", panel=OUTPUT)
    kind: str = option("auto", "classifier (logits of a fine-tuned head), tagger (per-piece logits of a tagging model), "
                       "answerer (start and end logits of a question-answering model) or features (pooled encoder "
                       "features); auto: tagger for a tagging model, answerer for a question-answering model, "
                       "classifier when the folder has a trained classification head.", panel=MODEL,
                       choices=EXPORT_KINDS)
    quantize: str = option("int8", "int8: onnxruntime dynamic int8 weights (smaller, faster on a CPU); none: fp32.",
                           panel=MODEL, choices=QUANTIZE)
    inputs: LabelOptions = group(LabelOptions)
    reading: LongTextOptions = group(LongTextOptions)
    pooling: PoolingOptions = group(PoolingOptions)
    batch_size: int = option(64, "Rows per gate batch (sorted by length).", above=0)
    gate: GateOptions = group(GateOptions)
    overwrite: bool = overwrite_option("an export", done="passed the gate")

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if not self.model:
            problems.append("--model is required: a fine-tuned model folder (e.g. runs/sst2/best) or an encoder.")
        if not self.out:
            problems.append("--out is required: the folder the export is written to.")
        problems += self.gate.gate_problems()
        if self.model and not problems:  # the model decides the family
            problems += self.family.refused_options(self, "export", self.model)
        raise_if_problems(problems)

    @property
    def family(self) -> Family:
        """The problem family of the --model (`bertkit.families`), asked once."""
        return cached_family(self, model=self.model)

    @property
    def quantized(self) -> str | None:
        return None if self.quantize == "none" else self.quantize


@dataclass
class ExportResult:
    """The export kept (where, how big, which backend) and its accuracy gate against the PyTorch fp32 model (`gate`:
    the statistic, its threshold, the rows, whether it passed and the numbers: label agreement and logit difference,
    or feature cosines)."""

    model: str
    kind: str
    out: str
    quantized: str | None
    backend: str
    data: str
    data_fingerprint: str
    gate: GateReport
    forced: bool
    size_bytes: int


def run(cfg: ExportConfig, progress: bool = False) -> ExportResult:
    """Export --model to --out through the gate of its problem family's kind of export (`bertkit.families`); the
    report (also export_report.json in the folder)."""
    family = cfg.family
    check_inputs(cfg, need_labels=False, models=(cfg.model,), data_fields=family.table_fields)  # before torch
    exporter = family.exporter(cfg)
    checked = exporter.checked_data(cfg)  # what the kind can read before torch (a tagger's gate sentences)
    from bertkit.io import faults, ownership, rundir
    from bertkit.models import loading, onnx
    from bertkit.models.metadata import read_model_info

    onnx.require_onnxruntime(exporting=True)
    assert cfg.model and cfg.out
    cfg = read_as_saved(applicable_config(cfg, exporter, OPTION_OF))  # what the export is made with: its record, card
    plan = rundir.inspect_run_dir(cfg.out, "export", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.report_compare(config_dict(cfg), onnx.REPORT_FILE))  # read-only
    tokenizer = loading.load_tokenizer(cfg.model)
    model = onnx.load_source_model(cfg.model, exporter.kind)
    reading = exporter.reading(cfg)  # the graph takes any length: the export records the reading
    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model,
                             pair=cfg.inputs.text_pair_column is not None)
    spec = exporter.pooling(cfg, model)
    dataset = exporter.gate_data(cfg, model, checked)
    for note in exporter.notes(cfg, model, tokenizer, reading, dataset):  # a refusal comes before the export
        log.warning("%s", note)
    source = loading.resolve_model_name(cfg.model)
    run = plan.claim()  # the export is built inside --out (a kill leaves nothing elsewhere); a refusal takes it back
    try:
        with atomic.scratch_folder(run.path / "export", role="build") as scratch:  # recorded: a re-run removes it
            staged = scratch / "export"
            onnx.write_export(staged, model, tokenizer, kind=exporter.kind, quantize=cfg.quantized, source=cfg.model,
                              revision=loading.model_revision(cfg.model), source_info=read_model_info(source),
                              reading=reading.to_json(), features=spec.to_json() if spec else None,
                              features_fn=exporter.features_fn(model, spec), family=cfg.family.name)
            faults.kill_point("export.built")
            report, gate = _gated_report(cfg, exporter, staged, model, tokenizer, dataset, spec, reading)
            atomic.write_json_atomic(staged / onnx.REPORT_FILE, onnx.export_report_record(report, cfg.family.name))
            gate_rows = {"source": str(dataset.source), "fingerprint": dataset.fingerprint, "rows": len(dataset)}
            write_model_card(staged, export_card_facts(report, cfg.model, source, gate_rows, model.config.id2label,
                                                       command_line("export", cfg, skip=("overwrite",))))
            for item in sorted(staged.iterdir()):  # each copied in atomically and recorded as bertkit's
                ownership.place_file(item, run.path / item.name)
    except UserError:
        run.abandon()  # a refused export leaves --out as it was
        raise
    run.commit()
    return ExportResult(cfg.model, exporter.kind, cfg.out or "", cfg.quantized, report["backend"], dataset.source,
                        dataset.fingerprint, gate, report["forced"],
                        os.path.getsize(Path(cfg.out or "").expanduser() / onnx.MODEL_FILE))


OPTION_OF = {"max_drop": "tagger and answerer", "min_agreement": "classifier, tagger and answerer"}
"""The kinds of export an option is read by, where not only features exports (the warning about an ignored one)."""


def _gated_report(cfg: ExportConfig, exporter: Exporter, staged: Path, model: Any, tokenizer: Any, dataset: Any,
                  spec: Pooling | None, reading: Reading) -> tuple[dict[str, Any], GateReport]:
    """(the export report, its gate's part): the export in `staged` through its gate (a UserError when it fails
    without --force)."""
    from bertkit.io.trail import package_versions
    from bertkit.models import onnx

    exported = onnx.load_export(staged, exporter.kind)
    gate = exporter.gate(cfg, model, exported, tokenizer, dataset, spec, reading)
    report = export_report(
        {"model": cfg.model, "kind": exporter.kind, "quantized": cfg.quantized, "backend": exported.backend,
         "data": dataset.source, "data_fingerprint": dataset.fingerprint}, gate,
        {"forced": bool(cfg.gate.force and not gate.passed), "config": config_dict(cfg),
         "versions": {k: v for k, v in package_versions().items()
                      if k in ("bertkit", "torch", "transformers", "onnxruntime", "onnx")}})
    del exported  # the session holds model.onnx open
    if not gate.passed and not cfg.gate.force:
        raise UserError(refusal_message(gate, cfg))
    return report, gate
