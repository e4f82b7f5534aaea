"""The sentences family's exports: a fine-tuned classifier (its logits; gated by label agreement with the PyTorch
fp32 model, and the headline metric before and after on labelled rows) and an encoder's pooled features (gated by
the cosine similarity of each row's features). Both read rows of text as `predict`/`evaluate` and `embed` do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bertkit.errors import UserError
from bertkit.families.exports import Exporter, run_config, run_dev_set
from bertkit.features.settings import Pooling
from bertkit.models.export_gate import GateReport
from bertkit.scoring.table import SHAPE

if TYPE_CHECKING:
    from bertkit.data.dataset import TextDataset
    from bertkit.encoding.reading import Reading


class RowsExport(Exporter):
    """What the two kinds of row exports share: rows of text as gate data (--data, or the run's dev set)."""

    table_fields = ("data",)

    def gate_data(self, cfg: Any, model: Any, checked: Any) -> TextDataset:
        return rows_gate_data(cfg, model, self.kind)


class ClassifierExport(RowsExport):
    """A fine-tuned classifier: the graph ends in its trained head."""

    kind = "classifier"
    ignores = (*Pooling.KEYS, "min_cosine", "max_drop")
    what = "a classifier (its graph ends in the trained head)"

    def gate(self, cfg: Any, model: Any, exported: Any, tokenizer: Any, dataset: Any, spec: Any,
             reading: Reading) -> GateReport:
        return classifier_gate(model, exported, tokenizer, dataset, cfg, reading)


class FeaturesExport(RowsExport):
    """An encoder's pooled features (`embed`'s, with the pooling baked into the graph)."""

    kind = "features"
    ignores = ("min_agreement", "max_drop")
    what = "an encoder's features"

    def pooling(self, cfg: Any, model: Any) -> Pooling:
        from bertkit.features.pooling import encoder_shape

        spec = Pooling.from_config(cfg.pooling)
        spec.resolve(encoder_shape(model)[0])  # an out-of-range --layers fails before the export
        return spec

    def gate(self, cfg: Any, model: Any, exported: Any, tokenizer: Any, dataset: Any, spec: Any,
             reading: Reading) -> GateReport:
        return features_gate(model, exported, tokenizer, dataset, cfg, spec, reading)

    def features_fn(self, model: Any, spec: Pooling) -> Any:
        return _features_fn(model, spec)


def row_exporter(cfg: Any) -> Exporter:
    """--kind, or for auto: classifier when the folder's config names a sequence classifier, else features."""
    from bertkit.models import loading

    if cfg.kind == "auto":
        architectures = getattr(loading.load_config(cfg.model or ""), "architectures", None) or []
        classifier = any(str(a).endswith("ForSequenceClassification") for a in architectures)
        return ClassifierExport() if classifier else FeaturesExport()
    return {"classifier": ClassifierExport, "features": FeaturesExport}[cfg.kind]()


def dev_rows(config: dict[str, Any], command: str) -> Any:
    """A run's dev rows, read as the run read them (`export.run_dev_set`)."""
    from bertkit.data.splits import load_splits

    return load_splits(run_config(config, command).inputs, need_labels=True).dev


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


def rows_gate_data(cfg: Any, model: Any, kind: str) -> TextDataset:
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
        dataset = run_dev_set(cfg, dev_rows, "rows", "dev.tsv")
    if cfg.inputs.limit is not None and len(dataset) > cfg.inputs.limit:
        dataset = dataset.subset(range(cfg.inputs.limit))
    if len(dataset) == 0:
        raise UserError(f"The gate data {dataset.source} has no rows. Pass --data with rows to compare the models on.")
    return dataset


def _task(model: Any) -> str:
    from bertkit.data.labels import task_of_problem_type

    return task_of_problem_type(getattr(model.config, "problem_type", None), model.config.num_labels)


def classifier_gate(model: Any, exported: Any, tokenizer: Any, dataset: TextDataset, cfg: Any,
                    reading: Reading) -> GateReport:
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
    return GateReport.of(**result)


def features_gate(model: Any, exported: Any, tokenizer: Any, dataset: TextDataset, cfg: Any,
                  spec: Pooling, reading: Reading) -> GateReport:
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
    return GateReport.of(statistic="mean_cosine", threshold=cfg.gate.min_cosine, rows=len(dataset),
                         mean_cosine=mean, min_cosine=float(cosine.min()) if len(cosine) else 1.0,
                         max_abs_diff=float(np.abs(reference - features).max()) if len(cosine) else 0.0,
                         passed=mean >= cfg.gate.min_cosine)
