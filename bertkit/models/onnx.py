"""The ONNX export folder, written and read here only: `write_export` builds one, `load_export` opens it as a
runner the inference loop (`bertkit.models.infer.run_batches`) calls like a model (a padded batch of torch tensors
in, a torch tensor out), so predict, evaluate and embed read an export folder as they read a PyTorch one.

A folder holds `model.onnx` (inputs input_ids, attention_mask and - where the model takes them - token_type_ids,
int64, dynamic batch and sequence axes; output `logits` for a classifier (batch, labels) and for a tagger (batch,
pieces, tags: one row per word piece), `features` for an encoder), `config.json` (the model's Hugging Face config,
id2label included, so optimum's ORTModelFor{Sequence,Token}Classification loads it), the tokenizer files,
`bertkit_model.json` with an `"onnx"` section (kind, quantized, the baked-in feature spec, opset, source model and
revision) beside the source's own record for a classifier or a tagger (a tagger's task `tags`, tag scheme and reading
of words: read back by `bertkit.models.onnx_tagger`), and `export_report.json` (the accuracy gate's numbers,
`bertkit.families.sentence_exports`).

The graph is traced through bertkit's own fast forward, so it skips the same work: a classifier's last layer runs
for [CLS] alone (`fastforward.SequenceClassifier`), an encoder runs only the layers its features read and pools
inside the graph (`pooling.forward_features`). int8 is onnxruntime's dynamic quantization of the weights (QInt8,
per channel: see `quantize_int8`). onnxruntime is an optional extra; without it, asking for ONNX is a UserError.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.data.labels import LabelMap
from bertkit.errors import UserError
from bertkit.io import library_files, record
from bertkit.io.atomic import scratch_folder
from bertkit.io.record_format import FAMILY, RecordKind, checked_version, sealed, upgrade
from bertkit.logs import quieted
from bertkit.models import loading
from bertkit.models.compute import Compute
from bertkit.models.fastforward import SequenceClassifier
from bertkit.models.inputs import INPUT_NAMES, accepted_inputs
from bertkit.models.metadata import read_model_info, write_model_info

log = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
REPORT_FILE = "export_report.json"
FORMAT = "bertkit-onnx/1"
OPSET = 17
KINDS = ("classifier", "features", "tagger")
OUTPUT_NAMES = {"classifier": "logits", "features": "features", "tagger": "logits"}
WANTED = {"classifier": "a fine-tuned classifier", "features": "an encoder's features", "tagger": "a tagging model"}
"""What a command that needs each kind of export asks for, in its refusal of another kind."""
INSTALL_HINT = "pip install 'bertkit[onnx]' (or `make install`)"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "added_tokens.json", "chat_template.jinja")
CARD_FILE = "README.md"
FOLDER_FILES = frozenset({MODEL_FILE, "config.json", "bertkit_model.json", REPORT_FILE, CARD_FILE, *TOKENIZER_FILES})
"""Every name an export folder may hold (the run-directory rules of `bertkit.io.ownership` list them too)."""


def require_onnxruntime(exporting: bool = False) -> Any:
    """The onnxruntime module (and for `exporting`, the onnx package the quantizer needs); a UserError naming the
    extra when it is not installed."""
    try:
        import onnxruntime

        if exporting:
            import onnx  # noqa: F401
    except ImportError:
        raise UserError(
            "ONNX export and ONNX model folders need onnxruntime, which is not installed (it is an optional extra). "
            f"Install it with {INSTALL_HINT}, or use the PyTorch model folder instead."
        ) from None
    return onnxruntime


def is_export(name: str | Path | None) -> bool:
    """Whether --model names an ONNX export folder (model.onnx beside a bertkit_model.json with an onnx section)."""
    if not name:
        return False
    path = Path(name).expanduser()
    return path.is_dir() and (path / MODEL_FILE).is_file() and isinstance(read_model_info(path).get("onnx"), dict)


# ---------------------------------------------------------------- the runner


class OnnxModel:
    """An export folder's session, called like a model by the inference loop: a padded batch of torch tensors ->
    the graph's output as a torch tensor. `config` is the model's HF config (batch budgets and shapes read it)."""

    def __init__(self, folder: Path, session: Any, config: Any, info: dict[str, Any]) -> None:
        self.folder, self.session, self.config, self.info = folder, session, config, info
        self.accepted_input_names = frozenset(i.name for i in session.get_inputs())
        """The inputs the graph takes (`bertkit.models.inputs.accepted_inputs` asks this)."""

    @property
    def kind(self) -> str:
        return str(self.info["kind"])

    @property
    def backend(self) -> str:
        """`onnx` or `onnx-int8`: what a store's identity and a report record."""
        return "onnx-int8" if self.info.get("quantized") == "int8" else "onnx"

    def __call__(self, batch: dict[str, torch.Tensor] | None = None, **inputs: torch.Tensor) -> torch.Tensor:
        """`runner(batch)` or `runner(**batch)`, as the feature loop and the classifier loop call a model. Rows
        given without token_type_ids (a tagger's windows of one segment) are segment 0, as transformers reads them."""
        batch = inputs if batch is None else batch
        feeds = {name: (batch[name] if name in batch else torch.zeros_like(batch["input_ids"])).cpu().numpy()
                 .astype(np.int64, copy=False) for name in self.accepted_input_names}
        return torch.from_numpy(self.session.run(None, feeds)[0])

    def eval(self) -> OnnxModel:
        return self


@dataclass(frozen=True)
class TokenLogits:
    """What a transformers token classifier returns, as far as its callers read it: per-piece `logits`."""

    logits: torch.Tensor


class OnnxTokenClassifier(OnnxModel):
    """A tagger export's session called as a transformers token classifier is (`models.tagger.TokenClassifier` calls
    it): keyword inputs -> an output whose `logits` are (batch, pieces, tags). Never in training mode."""

    training = False

    def __call__(self, batch: dict[str, torch.Tensor] | None = None,  # type: ignore[override]
                 **inputs: torch.Tensor) -> TokenLogits:
        return TokenLogits(super().__call__(batch, **inputs))


def open_session(path: Path) -> Any:
    """An onnxruntime CPU session: all graph optimisations, as many threads as torch uses. A graph onnxruntime cannot
    read (truncated, or not ONNX: an export saved before digests were recorded) is a UserError, not a traceback."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types (InvalidProtobuf, Fail, ...)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"{path} cannot be read as an ONNX graph ({reason}): the file is damaged or truncated. "
                        f"Export the model again with `bertkit export --model MODEL --out {path.parent} "
                        f"--overwrite`.") from None


def load_export(folder: str | Path, kind: str | None = None, command: str = "this command") -> OnnxModel:
    """The export folder as a runner; `kind` (classifier|features) must match what it was exported as."""
    path = Path(folder).expanduser()
    info = read_model_info(path).get("onnx")
    if not isinstance(info, dict) or info.get("kind") not in KINDS or not (path / MODEL_FILE).is_file():
        raise UserError(f"{path} is not a bertkit ONNX export folder (no model.onnx, or no onnx section in "
                        f"bertkit_model.json). Export one with `bertkit export --model MODEL --out {path}`.")
    if kind is not None and info["kind"] != kind:
        raise UserError(f"{path} is an ONNX export of {info['kind']} but {command} needs {WANTED[kind]}. Export the "
                        f"model with `bertkit export --kind {kind} ...`, or pass the PyTorch model folder.")
    loading.check_model_folder(str(path))  # model.onnx, config and tokenizer as recorded at export
    session = open_session(path / MODEL_FILE)
    runner = OnnxTokenClassifier if info["kind"] == "tagger" else OnnxModel
    return runner(path, session, loading.load_config(str(path)), info)


def load_for_inference(folder: str) -> tuple[OnnxModel, Any, LabelMap]:
    """A classifier export (as `infer.load_for_inference` returns a PyTorch one): runner, tokenizer, labels."""
    model = load_export(folder, "classifier", "predict/evaluate")
    config = model.config
    id2label = getattr(config, "id2label", None) or {i: str(i) for i in range(config.num_labels)}
    labels = LabelMap.from_id2label(id2label, getattr(config, "problem_type", None))
    return model, loading.load_tokenizer(folder), labels


def check_precision(precision: str, folder: str, flag: str = "--precision") -> None:
    """An export's precision is baked in (fp32 or int8 weights): only auto/fp32 may be asked for."""
    if precision not in ("auto", "fp32"):
        raise UserError(f"{flag} {precision} does not apply to the ONNX export {folder}: its precision was fixed when "
                        f"it was exported (fp32, or int8 with --quantize int8). Drop {flag} (or pass {flag} fp32), "
                        f"or export again with the precision you want.")


# ---------------------------------------------------------------- export


class _Positional(nn.Module):
    """The legacy exporter passes inputs positionally: (input_ids, attention_mask[, token_type_ids]) -> batch dict."""

    def __init__(self, fn: Any, names: tuple[str, ...], owner: nn.Module) -> None:
        super().__init__()
        self.fn, self.names, self.owner = fn, names, owner

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.fn(dict(zip(self.names, tensors, strict=True)))


def classifier_function(model: Any) -> Any:
    """A classifier's graph as a batch -> logits function: the [CLS]-only last layer where it applies. (An encoder's
    pooled-features function is the caller's, `bertkit.families.sentence_exports`: pooling lives above this layer.)"""
    net = SequenceClassifier(model)
    return lambda b: net(**b)


def tagger_function(model: Any) -> Any:
    """A tagger's graph as a batch -> per-piece logits function: the model's own forward, every position (what
    `models.tagger.TokenClassifier` runs at inference, without its padding to a common width)."""
    return lambda b: model(**b).logits


def load_source_model(name: str, kind: str) -> Any:
    """The PyTorch model an export of `kind` traces (a classifier, a tagger with its token head, or an encoder):
    fp32, eval mode, eager attention (what the tracer reads)."""
    if kind == "features":
        model = loading.load_encoder(name, attn_implementation="eager")
    else:
        model = loading.load_classifier(name, require_head=True, tokens=kind == "tagger", attn_implementation="eager")
    return model.float().eval()


def sample_batch(model: Any, tokenizer: Any) -> dict[str, torch.Tensor]:
    """Two padded rows of the inputs the model takes: what the exporter traces."""
    names = [n for n in INPUT_NAMES if n in accepted_inputs(model)]
    encoded = tokenizer(["an example sentence to trace the graph with", "a short one"], padding=True,
                        return_tensors="pt")
    batch = {n: encoded[n] for n in names if n in encoded}
    if "token_type_ids" in names and "token_type_ids" not in batch:
        batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
    return batch


def export_onnx(model: Any, tokenizer: Any, kind: str, features_fn: Any, path: Path) -> None:
    """Trace `model` (fp32, eval) into `path` as an fp32 ONNX graph (see the module docstring for its contract).
    `features_fn(batch) -> fn` makes an encoder's batch -> features function (checked on the sample batch)."""
    model = model.float().eval()
    batch = sample_batch(model, tokenizer)
    names = tuple(batch)
    if kind == "features":
        fn = features_fn(batch)
    else:
        fn = (classifier_function if kind == "classifier" else tagger_function)(model)
    output = OUTPUT_NAMES[kind]
    per_piece = kind == "tagger"  # a tagger's logits have a row per piece: the sequence axis is dynamic too
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {output: {0: "batch", 1: "sequence"} if per_piece
                                                               else {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings(), _quiet_exporter():
        warnings.simplefilter("ignore")
        # eval mode on the wrapper too: the exporter restores the wrapper's mode, and with it its submodules'
        torch.onnx.export(_Positional(fn, names, model).eval(), tuple(batch[n] for n in names), str(path),
                          input_names=list(names), output_names=[output], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
    model.eval()


def _quiet_exporter(name: str = "torch.onnx") -> contextlib.AbstractContextManager:
    """The exporter and the quantizer log notes (onnxruntime's through the root logger, name ""); keep them out of
    the command's output."""
    return quieted(name or None)


def quantize_int8(source: Path, target: Path) -> None:
    """onnxruntime's dynamic int8 quantization of the weights (QInt8, one scale per output channel), `source` ->
    `target`. Per channel, measured on a MiniLM fine-tuned on SST-2: label agreement with fp32 0.984 (per tensor:
    0.964) at the same speed."""
    require_onnxruntime(exporting=True)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_exporter(""):  # "consider pre-processing": measured, it changes neither speed nor accuracy here
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)


def write_export(folder: Path, model: Any, tokenizer: Any, *, kind: str, quantize: str | None, source: str,
                 revision: str, source_info: dict[str, Any], reading: dict[str, Any] | None = None,
                 features: dict[str, Any] | None = None, features_fn: Any = None, family: str | None = None) -> None:
    """A complete export folder in `folder` (an empty one bertkit made; see `bertkit.families.sentence_exports`). `reading` is
    how its inputs are read (`Reading.to_json`: predict and embed read it back). For an encoder, `features` are the
    baked-in options (pool, layers, combine, normalize) and `features_fn` their graph. `family`: the export's
    problem family (None: its source's, `source_info`; an encoder's features: sentences).

    Every file is written beside `folder` or in it (never in the system's temp folder), each name recorded before a
    library writes it when `folder` is in a run directory (`commands.export` builds in a recorded temp folder of
    --out): a kill leaves only what the next run of the command removes."""
    require_onnxruntime(exporting=True)
    record.note(record.DIR, folder)
    folder.mkdir(parents=True)
    library_files.expect(folder, sorted(FOLDER_FILES))
    with scratch_folder(folder, role="onnx") as scratch:  # the fp32 graph before quantizing, what the libraries save
        library_files.expect(scratch, sorted({MODEL_FILE, *FOLDER_FILES, *_vocabulary_files(tokenizer)}))
        fp32 = scratch / MODEL_FILE if quantize else folder / MODEL_FILE
        export_onnx(model, tokenizer, kind, features_fn, fp32)
        if quantize == "int8":
            quantize_int8(fp32, folder / MODEL_FILE)
        model.config.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        for name in FOLDER_FILES - {MODEL_FILE}:  # the format's files; anything else a tokenizer writes stays behind
            if (scratch / name).is_file():
                (scratch / name).replace(folder / name)
    section = {"format": FORMAT, "kind": kind, "quantized": quantize, "opset": OPSET, "output": OUTPUT_NAMES[kind],
               "inputs": [n for n in INPUT_NAMES if n in accepted_inputs(model)], "source_model": source,
               "source_revision": revision}
    section.update(features or {})
    kept = {k: v for k, v in source_info.items() if k != "onnx"} if kind != "features" else {}
    compute = Compute("cpu", "int8" if quantize == "int8" else "fp32")  # onnxruntime's CPU provider, its weights
    write_model_info(folder, {**kept, **({"reading": reading} if reading else {}), "compute": compute.to_json(),
                              "onnx": section}, family)


def _vocabulary_files(tokenizer: Any) -> list[str]:
    """The files a tokenizer's `save_pretrained` writes besides the format's (its vocabulary, by its own names)."""
    vocab = getattr(tokenizer, "vocab_files_names", None)
    return [v for v in vocab.values() if isinstance(v, str) and "/" not in v] if isinstance(vocab, dict) else []


def export_compute(folder: str | Path) -> Compute:
    """Where and in what precision an export runs, as its record says: always the CPU, in the precision baked into
    its weights (exports made before it was recorded: `metadata.migrated_model_record` reads it from `quantized`)."""
    recorded = Compute.from_json(read_model_info(Path(folder).expanduser()).get("compute"))
    return recorded if recorded is not None else Compute("cpu", "fp32")


# ---------------------------------------------------------------- export_report.json


EXPORT_REPORT = RecordKind("bertkit-export-report", current=2, sealed_since=2, family_since=2)
"""Layout 1 (no format): no family, no seal. Layout 2: the family and the seal."""


def export_report_record(report: dict[str, Any], family: str) -> dict[str, Any]:
    """export_report.json as written: the gate's report (its numbers, the export's `config`) of `family`, sealed."""
    return sealed(report, EXPORT_REPORT, family)


def read_export_report(folder: str | Path) -> dict[str, Any] | None:
    """An export folder's export_report.json in the current layout (None: it has none); a UserError naming it when
    it is not JSON, was edited or damaged since it was written, or was made by a newer bertkit."""
    file = Path(folder).expanduser() / REPORT_FILE
    if not file.is_file():
        return None
    try:
        return migrated_export_report(json.loads(file.read_text(encoding="utf-8")))
    except ValueError as exc:  # not JSON, or a RecordProblem
        raise UserError(f"{file} is damaged ({exc}). Export the model again: `bertkit export --model MODEL --out "
                        f"{file.parent} --overwrite`.") from None


def migrated_export_report(record: Any) -> dict[str, Any]:
    """export_report.json in the current layout from any layout this bertkit reads (a `RecordProblem` for one it
    cannot trust). The only place layout 1 is understood: its family is words for a tagger's export (task tags),
    else sentences."""
    def layout_2(old: dict[str, Any]) -> dict[str, Any]:
        tagger = old.get("task") == "tags" or old.get("kind") == "tagger"
        return {**old, FAMILY: "words" if tagger else "sentences"}

    return upgrade(record, EXPORT_REPORT, checked_version(record, EXPORT_REPORT), {1: layout_2})


FEATURE_OPTIONS = ("pool", "layers", "combine", "normalize")


def read_feature_options(folder: str) -> dict[str, Any]:
    """The feature options baked into a features export (embed's option names -> values); {} for a classifier."""
    info = read_model_info(Path(folder).expanduser()).get("onnx") or {}
    return {name: info[name] for name in FEATURE_OPTIONS if name in info}
