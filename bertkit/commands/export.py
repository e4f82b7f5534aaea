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
from typing import TYPE_CHECKING, Any

from bertkit.data.gate_sentences import GateSentences, read_gate_sentences, run_dev_sentences
from bertkit.data.options import LabelOptions, config_problems
from bertkit.data.tagged import TaggedColumns
from bertkit.encoding.reading import LongTextOptions, Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.features.settings import Pooling, PoolingOptions, layers_problem
from bertkit.io import atomic, trail
from bertkit.models.card import export_card_facts, write_model_card
from bertkit.models.export_gate import GateOptions, GateReport, refusal_message
from bertkit.models.folders import resolve_model_name
from bertkit.models.metadata import is_tagger, read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.options import (
    MODEL,
    OUTPUT,
    Config,
    all_fields,
    build,
    command_line,
    config_dict,
    group,
    option,
    overwrite_option,
    replaced,
    value,
)
from bertkit.scoring.table import SHAPE
from bertkit.training.options import DistillOptions, FinetuneOptions

if TYPE_CHECKING:
    from bertkit.data.dataset import TextDataset

log = logging.getLogger(__name__)


EXPORT_KINDS = ("auto", "classifier", "features", "tagger")
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
    kind: str = option("auto", "classifier (logits of a fine-tuned head), tagger (per-piece logits of a tagging model) "
                       "or features (pooled encoder features); auto: tagger for a tagging model, classifier when the "
                       "folder has a trained classification head.", panel=MODEL, choices=EXPORT_KINDS)
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
        problems += layers_problem(self.pooling.layers)
        raise_if_problems(problems)

    @property
    def quantized(self) -> str | None:
        return None if self.quantize == "none" else self.quantize
RUN_CONFIGS = {"finetune": FinetuneOptions, "distill": DistillOptions}


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
    """Export --model to --out through the gate; the report (also export_report.json in the folder)."""
    tagged = is_tagger(cfg.model or "")  # its gate data is tagged: read by its own reader
    raise_if_problems(tagger_problems(cfg, tagged))  # before torch, before the data is looked at
    check_inputs(cfg, need_labels=False, models=(cfg.model,), data_fields=() if tagged else ("data",))  # before torch
    sentences = tagger_gate_data(cfg) if tagged else None  # tagged data: read and checked before torch too
    from bertkit.features.pooling import encoder_shape
    from bertkit.io import faults, ownership, rundir
    from bertkit.models import loading, onnx
    from bertkit.models.metadata import read_model_info
    from bertkit.scoring import tag_gate

    onnx.require_onnxruntime(exporting=True)
    assert cfg.model and cfg.out
    kind = export_kind(cfg)
    cfg = read_as_saved(applicable_config(cfg, kind))  # what the export is made with: also its record and card
    plan = rundir.inspect_run_dir(cfg.out, "export", overwrite=cfg.overwrite, inputs=ownership.input_paths(cfg),
                                  compare=trail.report_compare(config_dict(cfg), onnx.REPORT_FILE))  # read-only
    tokenizer = loading.load_tokenizer(cfg.model)
    model = onnx.load_source_model(cfg.model, kind)
    # the graph takes any length: the export records the reading for predict and embed (a tagger's: its windows)
    options = cfg.reading
    reading = Reading.of_words("first", options.max_length, options.stride) if kind == "tagger" \
        else Reading.from_options(options)
    loading.check_max_length(reading.max_length, tokenizer, model.config, cfg.model,
                             pair=cfg.inputs.text_pair_column is not None)
    spec = Pooling.from_config(cfg.pooling) if kind == "features" else None
    if spec is not None:
        spec.resolve(encoder_shape(model)[0])  # an out-of-range --layers fails before the export
    dataset = sentences if sentences is not None else gate_data(cfg, model, kind)
    if isinstance(dataset, GateSentences):  # gold tags in another scheme than the model's: refused before the export
        for note in tag_gate.gold_tag_notes(cfg.model, model, tokenizer, reading, dataset):
            log.warning("%s", note)
    source = loading.resolve_model_name(cfg.model)
    run = plan.claim()  # the export is built inside --out (a kill leaves nothing elsewhere); a refusal takes it back
    try:
        with atomic.scratch_folder(run.path / "export", role="build") as scratch:  # recorded: a re-run removes it
            staged = scratch / "export"
            onnx.write_export(staged, model, tokenizer, kind=kind, quantize=cfg.quantized, source=cfg.model,
                              revision=loading.model_revision(cfg.model), source_info=read_model_info(source),
                              reading=reading.to_json(), features=spec.to_json() if spec else None,
                              features_fn=_features_fn(model, spec) if spec else None)
            faults.kill_point("export.built")
            report, gate = _gated_report(cfg, kind, staged, model, tokenizer, dataset, spec, reading)
            atomic.write_json_atomic(staged / onnx.REPORT_FILE, report)
            gate_rows = {"source": str(dataset.source), "fingerprint": dataset.fingerprint, "rows": len(dataset)}
            write_model_card(staged, export_card_facts(report, cfg.model, source, gate_rows, model.config.id2label,
                                                       command_line("export", cfg, skip=("overwrite",))))
            for item in sorted(staged.iterdir()):  # each copied in atomically and recorded as bertkit's
                ownership.place_file(item, run.path / item.name)
    except UserError:
        run.abandon()  # a refused export leaves --out as it was
        raise
    run.commit()
    return ExportResult(cfg.model, kind, cfg.out or "", cfg.quantized, report["backend"], dataset.source,
                        dataset.fingerprint, GateReport.from_json(gate), report["forced"],
                        os.path.getsize(Path(cfg.out or "").expanduser() / onnx.MODEL_FILE))


def _gated_report(cfg: ExportConfig, kind: str, staged: Path, model: Any, tokenizer: Any,
                  dataset: TextDataset | GateSentences, spec: Pooling | None,
                  reading: Reading) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the export report, its gate's part): the export in `staged` through its gate (a UserError when it fails
    without --force)."""
    from bertkit.io.trail import package_versions
    from bertkit.models import onnx
    from bertkit.scoring import tag_gate

    exported = onnx.load_export(staged, kind)
    if isinstance(dataset, GateSentences):
        gate = tag_gate.export_tagger_gate(cfg.model or "", model, exported, tokenizer, reading, dataset,
                                           batch_size=cfg.batch_size, min_agreement=cfg.gate.min_agreement,
                                           max_drop=cfg.gate.max_drop)
    elif kind == "classifier":
        gate = classifier_gate(model, exported, tokenizer, dataset, cfg, reading)
    else:
        gate = features_gate(model, exported, tokenizer, dataset, cfg, spec, reading)
    report = {"model": cfg.model, "kind": kind, "quantized": cfg.quantized, "backend": exported.backend,
              "data": dataset.source, "data_fingerprint": dataset.fingerprint, **gate,
              "forced": bool(cfg.gate.force and not gate["passed"]), "config": config_dict(cfg),
              "versions": {k: v for k, v in package_versions().items()
                           if k in ("bertkit", "torch", "transformers", "onnxruntime", "onnx")}}
    del exported  # the session holds model.onnx open
    if not gate["passed"] and not cfg.gate.force:
        raise UserError(refusal_message(report, cfg))
    return report, gate


def export_kind(cfg: ExportConfig) -> str:
    """--kind, or for auto: tagger for a tagging model (its record's task `tags`), classifier when the folder's config
    names a sequence classifier, else features (`tagger_problems` refused a kind that does not fit a tagger)."""
    from bertkit.models import loading

    if is_tagger(cfg.model or ""):
        return "tagger"
    if cfg.kind != "auto":
        return cfg.kind
    architectures = getattr(loading.load_config(cfg.model or ""), "architectures", None) or []
    return "classifier" if any(str(a).endswith("ForSequenceClassification") for a in architectures) else "features"


def tagger_problems(cfg: ExportConfig, tagged: bool) -> list[str]:
    """--kind tagger for a model that is not a tagging model (`tagged`); for one, another --kind and the options of
    sentence rows: it reads words in windows."""
    if not tagged:
        return [f"--kind tagger exports a tagging model (`bertkit finetune` on tagged data: its bertkit_model.json "
                f"records the task `tags`); {cfg.model} is not one. Drop --kind (auto), or pass a tagging model's "
                f"best/ folder."] if cfg.kind == "tagger" else []
    problems = [f"--kind {cfg.kind} does not apply to {cfg.model}: it is a tagging model (one tag per word), exported "
                f"with its logits per word piece. Drop --kind (auto), or pass --kind tagger."
                ] if cfg.kind not in ("auto", "tagger") else []
    given = [flag for flag, value, unset in (("--text-pair-column", cfg.inputs.text_pair_column, None),
                                             ("--long-text", cfg.reading.long_text, "chunk"),
                                             ("--truncation", cfg.reading.truncation, Reading.truncation),
                                             ("--label-sep", cfg.inputs.label_sep, None),
                                             ("--task-preset", cfg.inputs.task_preset, None))
             if value not in (None, unset)]
    return problems + [f"{flag} does not apply to a tagging model: its gate reads sentences of words (a tagged file, "
                       f"or text with one sentence per line), a long one in windows of its max length. Drop {flag}."
                       for flag in given]


NOT_FOR = {"classifier": (*Pooling.KEYS, "min_cosine", "max_drop"), "features": ("min_agreement", "max_drop"),
           "tagger": (*Pooling.KEYS, "min_cosine")}
"""The options each kind of export ignores: a classifier's graph ends in its head, a tagger's in per-piece logits
(no pooling; gated by agreement, a tagger's also by the drop of its score on gold tags), an encoder's in pooled
features (gated by cosine)."""


def applicable_config(cfg: ExportConfig, kind: str) -> ExportConfig:
    """`cfg` with the options `kind` ignores back at their defaults, after one warning for each one given, so the
    record and the card's Reproduce line hold only what made the export."""
    defaults = {f.name: f.default for f in all_fields(ExportConfig) if f.name in NOT_FOR[kind]}
    given = {name: value(cfg, name) for name in NOT_FOR[kind] if value(cfg, name) != defaults[name]}
    what = {"classifier": "a classifier (its graph ends in the trained head)", "features": "an encoder's features",
            "tagger": "a tagging model (its graph ends in per-piece logits)"}[kind]
    for name, asked in given.items():
        flag = f"--{name.replace('_', '-')}" + ("" if isinstance(asked, bool) else f" {asked}")
        other = {"max_drop": "tagger", "min_agreement": "classifier and tagger"}.get(name, "features")
        log.warning("%s does not apply to the export of %s and is ignored (it is an option of --kind %s exports). "
                    "Drop it.", flag, what, other)
    return replaced(cfg, **{name: defaults[name] for name in given}) if given else cfg


def _features_fn(model: Any, spec: Pooling) -> Any:
    """batch -> (a batch -> pooled features function): embed's pruned pass where `prune_applies` on that batch."""
    import torch

    from bertkit.features.pooling import encoder_shape, forward_features, prune_applies

    n_layers = encoder_shape(model)[0]
    indices = spec.resolve(n_layers)

    def make(batch: dict[str, torch.Tensor]) -> Any:
        prune = prune_applies(model, batch, spec, indices, n_layers)
        return lambda b: forward_features(model, b, spec, indices, n_layers, prune)

    return make


# ---------------------------------------------------------------- gate data


def tagger_gate_data(cfg: ExportConfig) -> GateSentences:
    """A tagger's gate sentences (the first --limit): --data (gold tags when it has them), or the dev set of the
    tagging run the model folder was saved in."""
    columns = TaggedColumns(cfg.inputs.text_column, cfg.inputs.label_column)
    sentences = read_gate_sentences(cfg.inputs.data, columns, cfg.inputs.limit, cfg.inputs.data_config,
                                    cfg.inputs.train_split) if cfg.inputs.data \
        else run_dev_set(cfg, tagged=True)
    if len(sentences) == 0:
        raise UserError(f"The gate data {sentences.source} has no sentences. Pass --data with sentences to compare "
                        f"the models on.")
    return sentences


def gate_data(cfg: ExportConfig, model: Any, kind: str) -> TextDataset:
    """--data (labels when it has them), or the dev set of the finetune/distill run the model folder was saved in."""
    from bertkit.data.splits import load_dataset_split

    if cfg.inputs.data:
        task = _task(model) if kind == "classifier" else None
        try:
            dataset = load_dataset_split(cfg.inputs, cfg.inputs.data, need_labels=True, task=task)
        except UserError as exc:
            if cfg.inputs.label_column is not None or not str(exc).startswith("No label column"):
                raise
            dataset = load_dataset_split(cfg.inputs, cfg.inputs.data, need_labels=False)
    else:
        dataset = run_dev_set(cfg)
    if cfg.inputs.limit is not None and len(dataset) > cfg.inputs.limit:
        dataset = dataset.subset(range(cfg.inputs.limit))
    if len(dataset) == 0:
        raise UserError(f"The gate data {dataset.source} has no rows. Pass --data with rows to compare the models on.")
    return dataset


def run_dev_set(cfg: ExportConfig, tagged: bool = False) -> Any:
    """The dev set of the `bertkit finetune`/`distill` run holding --model (RUN/best or RUN/final), as it read it:
    rows of text (`TextDataset`), or for a tagging run (`tagged`) its sentences (`GateSentences`, --limit applied)."""
    from bertkit.data.splits import load_splits

    folder = Path(resolve_model_name(cfg.model or ""))
    record = atomic.read_json_or_none(folder.parent / "config.json") if folder.is_dir() else None
    command = record.get("command") if isinstance(record, dict) else None
    fix = (f"Pass --data with rows to compare the PyTorch and the exported model on (labelled rows also give the "
           f"metric before and after), e.g. `bertkit export --model {cfg.model} --data "
           f"{'dev.iob2' if tagged else 'dev.tsv'} --out {cfg.out}`.")
    if command not in RUN_CONFIGS or not isinstance(record.get("config"), dict):
        raise UserError(f"No gate data: --data is not given and {cfg.model} is not a model saved by `bertkit "
                        f"finetune` (whose dev set would be used). {fix}")
    config = trail.config_as_run_read_it(record)
    try:
        if tagged:
            dev = run_dev_sentences(config, cfg.inputs.limit)
        else:
            known = {f.name for f in all_fields(RUN_CONFIGS[command])}  # an older record may hold more
            dev = load_splits(build(RUN_CONFIGS[command], {k: v for k, v in config.items() if k in known}).inputs,
                              need_labels=True).dev
    except (TypeError, UserError) as exc:
        raise UserError(f"Could not read the dev set of the {command} run {folder.parent} ({str(exc)[:200]}). "
                        f"{fix}") from None
    if dev is None:
        raise UserError(f"The {command} run {folder.parent} has no dev set. {fix}")
    log.info("gate data: the dev set of %s (%d %s)", folder.parent, len(dev), "sentences" if tagged else "rows")
    return dev


def _task(model: Any) -> str:
    from bertkit.data.labels import task_of_problem_type

    return task_of_problem_type(getattr(model.config, "problem_type", None), model.config.num_labels)


# ---------------------------------------------------------------- the gate


def classifier_gate(model: Any, exported: Any, tokenizer: Any, dataset: TextDataset, cfg: ExportConfig,
                    reading: Reading) -> dict:
    """Label agreement with fp32, the headline metric before/after (labelled rows), the largest logit difference."""
    import numpy as np

    from bertkit.data.labels import LabelMap
    from bertkit.models import infer
    from bertkit.models.metadata import saved_threshold
    from bertkit.scoring.outputs import Outputs, score_outputs
    from bertkit.scoring.shapes import model_outputs

    read = {"reading": reading, "batch_size": cfg.batch_size, "precision": "fp32"}
    reference = infer.classifier_logits(model, tokenizer, dataset, **read)
    logits = infer.classifier_logits(exported, tokenizer, dataset, **read)
    task = _task(model)
    id2label = getattr(model.config, "id2label", None) or {i: str(i) for i in range(model.config.num_labels)}
    label_map = LabelMap.from_id2label(id2label, getattr(model.config, "problem_type", None))
    threshold = saved_threshold(cfg.model or "")
    before = Outputs(label_map, model_outputs(task, reference), threshold)
    after = Outputs(label_map, model_outputs(task, logits), threshold)
    if task == "regression":  # numbers: "agree" = within 1% of the fp32 outputs' range
        tolerance = 0.01 * max(1.0, float(np.ptp(reference)) if reference.size else 1.0)
        same = np.abs(reference - logits).max(axis=1) <= tolerance
    else:
        a, b = before.decisions(), after.decisions()
        same = (a == b) if a.ndim == 1 else (a == b).all(axis=1)
    agreement = float(same.mean()) if len(same) else 1.0
    result: dict[str, Any] = {
        "statistic": "agreement", "threshold": cfg.gate.min_agreement, "rows": len(dataset), "task": task,
        "agreement": agreement, "disagreeing_rows": int((~same).sum()),
        "max_abs_logit_diff": float(np.abs(reference - logits).max()) if len(dataset) else 0.0,
        "passed": agreement >= cfg.gate.min_agreement}
    if dataset.labels is not None:
        y = label_map.encode(dataset.labels, f"The gate data {dataset.source}")
        metric = SHAPE[task].headline
        result.update(metric=metric, metric_fp32=score_outputs(before, y).get(metric),
                      metric_export=score_outputs(after, y).get(metric))
    return result


def features_gate(model: Any, exported: Any, tokenizer: Any, dataset: TextDataset, cfg: ExportConfig,
                  spec: Pooling, reading: Reading) -> dict[str, Any]:
    """Per-row cosine similarity of the export's and the PyTorch fp32 features (mean, min) and the largest
    absolute difference; the mean is gated."""
    import numpy as np
    import torch

    from bertkit.features.extract import encode_features

    read = {"reading": reading, "batch_size": cfg.batch_size, "device": torch.device("cpu"), "dtype": torch.float32}
    reference = encode_features(model, tokenizer, dataset, spec, **read)[0].reshape(len(dataset), -1)
    features = encode_features(exported, tokenizer, dataset, spec, **read)[0].reshape(len(dataset), -1)
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(features, axis=1)
    cosine = (reference * features).sum(axis=1) / np.maximum(norms, 1e-12)
    mean = float(cosine.mean()) if len(cosine) else 1.0
    return {"statistic": "mean_cosine", "threshold": cfg.gate.min_cosine, "rows": len(dataset),
            "mean_cosine": mean, "min_cosine": float(cosine.min()) if len(cosine) else 1.0,
            "max_abs_diff": float(np.abs(reference - features).max()) if len(cosine) else 0.0,
            "passed": mean >= cfg.gate.min_cosine}
