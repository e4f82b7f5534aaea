"""The model card of a saved model folder: README.md with Hugging Face YAML metadata (library_name, pipeline_tag,
base_model, tags, label names, metrics in model-index form) and a body written from what the run measured - data,
hyper-parameters, dev/test metrics with bootstrap 95% intervals, the label map, speed, versions and the command
that reproduces it. Rendered (`card_text`), written (`write_model_card`) and checked (`check_model_card`) here, read
through `huggingface_hub.ModelCard`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit import __version__

CARD_FILE = "README.md"
OFFLINE_MODELS = {"minilm-offline": "sentence-transformers/all-MiniLM-L6-v2"}
"""bertkit's offline names of hub models -> the hub id the weights came from."""
PIPELINE_TAGS = ("text-classification", "feature-extraction", "token-classification", "question-answering")
PIPELINES = {"features": "feature-extraction", "tags": "token-classification", "spans": "question-answering"}
"""The transformers pipeline of each task that is not text classification."""
SPLIT_NAMES = {"dev": "validation", "test": "test", "gate": "validation"}
"""model-index dataset splits, the hub's names."""
FILE_TYPES = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text"}
"""model-index dataset types of local files: the `datasets` builder that reads them."""


@dataclass(frozen=True)
class CardFacts:
    """What a card says, all measured or resolved by the run that saved the folder."""

    command: str
    """finetune, distill or export."""
    model: str
    """Where the weights started: a hub id, a local folder, `minilm-offline` (export: the exported folder)."""
    task: str
    """single_label, regression, multi_label, tags, spans, or features (an encoder export)."""
    labels: list[str] = field(default_factory=list)
    data: list[dict[str, Any]] = field(default_factory=list)
    """One record per split: split, source, fingerprint, rows."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    command_line: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    role: str = ""
    """best, final, or export."""
    step: int | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    """{"dev": {"metrics": {...}, "intervals": {...}, "rows": n}, "test": ...} (export: "gate")."""
    speed: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    """Distill: teacher, student layers. Export: source model, precision, the gate's numbers."""

    def with_results(self, role: str, step: int | None, results: dict[str, dict[str, Any]],
                     speed: dict[str, Any] | None = None) -> CardFacts:
        return dataclasses.replace(self, role=role, step=step, results=results, speed=speed or self.speed)


# ---------------------------------------------------------------- writing


def hub_base_model(model: str) -> str | None:
    """The hub id `model` names (minilm-offline: the hub model it is), or None for a local folder or a name that
    is not a valid hub id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    name = OFFLINE_MODELS.get(model, model)
    if Path(name).expanduser().exists() or name.startswith((".", "/", "~")):
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def card_data(facts: CardFacts) -> Any:
    """The YAML metadata (`huggingface_hub.ModelCardData`)."""
    from huggingface_hub import EvalResult, ModelCardData

    pipeline = PIPELINES.get(facts.task, "text-classification")
    evals = [EvalResult(task_type=pipeline, dataset_type=_dataset_type(facts, split), dataset_name=_dataset_name(facts, split),
                        dataset_split=SPLIT_NAMES.get(split, split), metric_type=name, metric_value=value)
             for split, result in facts.results.items() for name, value in result.get("metrics", {}).items()
             if isinstance(value, (int, float)) and not isinstance(value, bool)]
    hub_data = sorted({d["source"].split("[")[0] for d in facts.data if str(d.get("fingerprint", "")).startswith("hub:")})
    tags = ["bertkit", pipeline, facts.task.replace("_", "-"), *(["onnx"] if facts.command == "export" else []),
            *(["distillation"] if facts.command == "distill" else [])]
    return ModelCardData(
        library_name="onnx" if facts.command == "export" else "transformers", pipeline_tag=pipeline,
        base_model=hub_base_model(facts.model), tags=list(dict.fromkeys(tags)), datasets=hub_data or None,
        metrics=sorted({e.metric_type for e in evals}) or None, eval_results=evals or None,
        model_name=_model_name(facts) if evals else None, label_names=facts.labels or None)


def write_model_card(folder: str | Path, facts: CardFacts) -> Path:
    """README.md (metadata + body) in `folder`, written atomically; its path."""
    from bertkit.io import atomic

    path = Path(folder) / CARD_FILE
    atomic.write_text_atomic(path, card_text(facts))
    return path


def card_text(facts: CardFacts) -> str:
    """README.md's text (YAML metadata + body) as `huggingface_hub.ModelCard` writes it: what a folder saver writes
    once its folder is started, the card rendered before anything is written."""
    from huggingface_hub import ModelCard

    return str(ModelCard(f"---\n{card_data(facts).to_yaml()}\n---\n\n{card_body(facts)}"))


def card_body(facts: CardFacts) -> str:
    """The card's markdown: what the model is, its data, numbers, labels, speed, lineage and how to reproduce it."""
    title = {"finetune": "fine-tuned from", "distill": "distilled from", "export": "exported to ONNX from"}[facts.command]
    base = hub_base_model(facts.model)
    origin = f"[{base}](https://huggingface.co/{base})" if base else f"the local model `{facts.model}`"
    where = f" (the `{facts.role}/` model, step {facts.step})" if facts.role in ("best", "final") else ""
    lines = [f"# {_model_name(facts)}", "",
             f"A {_shape_words(facts.task)} model {title} {origin} with [bertkit](https://pypi.org/project/bertkit)"
             f"{where}.", ""]
    lines += _lineage(facts)
    if facts.data:
        lines += ["## Data", "", "| split | file | fingerprint | rows |", "|---|---|---|---|"]
        lines += [f"| {d['split']} | `{Path(str(d['source'])).name}` | `{d['fingerprint']}` | {d['rows']} |"
                  for d in facts.data] + [""]
    for split, result in facts.results.items():
        lines += _results_table(split, result)
    if facts.labels:
        lines += ["## Labels", "", "| id | label |", "|---|---|"]
        lines += [f"| {i} | {name} |" for i, name in enumerate(facts.labels)] + [""]
    if facts.hyperparameters:
        lines += ["## Hyper-parameters", "", "| option | value |", "|---|---|"]
        lines += [f"| `--{k.replace('_', '-')}` | {_cell(v)} |" for k, v in facts.hyperparameters.items()] + [""]
    if facts.speed:
        lines += ["## Export gate" if facts.command == "export" else "## Speed", "", *(f"- {k.replace('_', ' ')}: {_cell(v)}" for k, v in facts.speed.items()), ""]
    if facts.command_line:
        lines += ["## Reproduce", "", "```bash", facts.command_line, "```", ""]
    if facts.versions:
        lines += ["## Versions", "", ", ".join(f"{k} {v}" for k, v in facts.versions.items()), ""]
    return "\n".join(lines)


def _lineage(facts: CardFacts) -> list[str]:
    if not facts.lineage:
        return []
    heading = "Distillation" if facts.command == "distill" else "Export"
    return [f"## {heading}", "", *(f"- {k.replace('_', ' ')}: {_cell(v)}" for k, v in facts.lineage.items()), ""]


def _results_table(split: str, result: dict[str, Any]) -> list[str]:
    """One split's metrics with their bootstrap 95% intervals."""
    heading = {"dev": "Dev metrics", "test": "Test metrics", "gate": "Gate metrics"}.get(split, split)
    rows = f" ({result['rows']} {result.get('unit', 'rows')}" + (f", {result['source']}" if result.get("source") else "") + ")" \
        if result.get("rows") else ""
    lines = [f"## {heading}{rows}", "", "| metric | value | 95% interval (bootstrap) |", "|---|---|---|"]
    for name, value in result.get("metrics", {}).items():
        low_high = result.get("intervals", {}).get(name)
        shown = f"{low_high[0]:.4f} - {low_high[1]:.4f}" if low_high else ""
        lines.append(f"| {name} | {_cell(value)} | {shown} |")
    if result.get("per_type"):  # a tagger: strict entity scores per type
        lines += ["", "| entity type | precision | recall | F1 | gold | predicted |", "|---|---|---|---|---|---|"]
        lines += [f"| {name} | {_cell(r['precision'])} | {_cell(r['recall'])} | {_cell(r['f1'])} | {r['support']} | "
                  f"{r['predicted']} |" for name, r in result["per_type"].items()]
    return lines + [""]


def _shape_words(task: str) -> str:
    return {"single_label": "text-classification", "regression": "text-regression",
            "multi_label": "multi-label text-classification", "features": "feature-extraction",
            "tags": "token-classification (tagging)",
            "spans": "extractive question-answering (an answer span of a passage per question)"}.get(task, task)


def _model_name(facts: CardFacts) -> str:
    stem = Path(OFFLINE_MODELS.get(facts.model, facts.model).rstrip("/")).name or "model"
    return re.sub(r"[^\w.-]+", "-", f"{stem}-bertkit-{facts.command}" + (f"-{facts.role}" if facts.role else ""))


def _dataset_name(facts: CardFacts, split: str) -> str:
    source = next((d["source"] for d in facts.data if d["split"] == split), None) or \
        facts.results.get(split, {}).get("source") or "unknown"
    return Path(str(source).split("[")[0]).name if Path(str(source)).suffix else str(source).split("[")[0]


def _dataset_type(facts: CardFacts, split: str) -> str:
    record = next((d for d in facts.data if d["split"] == split), None)
    if record is not None and str(record.get("fingerprint", "")).startswith("hub:"):
        return str(record["source"]).split("[")[0]
    source = str(record["source"]) if record else str(facts.results.get(split, {}).get("source", ""))
    return FILE_TYPES.get(Path(source).suffix.lower(), "local")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 or abs(value) >= 1e4 else f"{value:.4f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return "" if value is None else str(value).replace("|", "\\|")


# ---------------------------------------------------------------- checking


def read_model_card(folder: str | Path) -> Any:
    """The folder's card (`huggingface_hub.ModelCard`), its metadata parsed strictly."""
    from huggingface_hub import ModelCard

    return ModelCard.load(Path(folder) / CARD_FILE, ignore_metadata_errors=False)


def check_model_card(folder: str | Path) -> list[str]:
    """What is wrong with the folder's card (empty: it loads strictly, its model-index parses into results, it names
    its library and a pipeline tag, and its base_model is a valid hub id)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(folder) / CARD_FILE
    if not path.is_file():
        return [f"{path} is missing"]
    try:
        card = read_model_card(folder)
    except Exception as exc:  # yaml, ValueError, KeyError...: whatever the parser says is the problem
        return [f"{path} does not load with huggingface_hub.ModelCard ({type(exc).__name__}: {exc})"]
    data, problems = card.data, []
    if not data.library_name:
        problems.append(f"{path} names no library_name")
    if data.pipeline_tag not in PIPELINE_TAGS:
        problems.append(f"{path} has pipeline_tag {data.pipeline_tag!r}; expected one of {', '.join(PIPELINE_TAGS)}")
    for result in data.eval_results or []:
        if not isinstance(result.metric_value, (int, float)):
            problems.append(f"{path}: model-index metric {result.metric_type} is not a number")
    if data.eval_results is None and "model-index" in card.content.split("---")[1]:
        problems.append(f"{path}: model-index does not parse into results")
    bases = data.base_model if isinstance(data.base_model, list) else [data.base_model] if data.base_model else []
    for base in bases:
        try:
            validate_repo_id(base)
        except HFValidationError as exc:
            problems.append(f"{path}: base_model {base!r} is not a hub repo id ({exc})")
    return problems


EXPORT_GATE_KEYS = ("statistic", "threshold", "agreement", "disagreeing_rows", "words", "disagreeing_words",
                    "entity_agreement", "max_abs_logit_diff", "mean_cosine", "min_cosine", "metric", "metric_fp32",
                    "metric_export", "metric_drop", "max_drop", "passed", "forced")
"""The numbers of an export's gate its card shows (those the gate of its kind measured)."""


def export_card_facts(report: dict[str, Any], model: str, source: str, data: dict[str, Any],
                      id2label: dict[int, str] | None, command_line: str) -> CardFacts:
    """An export folder's card (`report`: its export_report.json's object): the source `model` (the folder `source`;
    the hub model it came from, as that folder's own card says), its labels or tags (`id2label`; none for features),
    the precision, and the gate's numbers - its metric on the gate data (`data`: source, fingerprint, rows) after
    export, agreement or cosine with fp32."""
    labels = [str(v) for _, v in sorted((id2label or {}).items())] if report["kind"] != "features" else []
    source_card = Path(source) / CARD_FILE
    base = read_model_card(source).data.base_model if source_card.is_file() else None
    results = {}
    if report.get("metric") and isinstance(report.get("metric_export"), (int, float)):
        results["gate"] = {"metrics": {report["metric"]: report["metric_export"]}, "rows": report["rows"],
                           "source": data["source"]}
    return CardFacts(
        command="export", model=base if isinstance(base, str) else model,
        task="features" if report["kind"] == "features" else report.get("task", "single_label"), labels=labels,
        data=[{"split": "gate", **data}], command_line=command_line, role="export", results=results,
        versions={"bertkit": __version__, **{k: v for k, v in report["versions"].items() if k != "bertkit"}},
        speed={k: report[k] for k in EXPORT_GATE_KEYS if report.get(k) is not None},
        lineage={"source_model": model, "precision": "int8 (dynamic, per-channel weights)" if report["quantized"]
                 else "fp32", "kind": report["kind"]})
