"""`bertkit predict` and `bertkit evaluate`: labels, probabilities and metrics from a fine-tuned model or a
saved probe. Returns values; `cli.py` prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertkit import data, infer, longtext, metrics, modeling, runs
from bertkit.config import EvaluateConfig, PredictConfig, config_dict, recipe_path
from bertkit.objectives import softmax


def run_predict(cfg: PredictConfig, *, recipe: str | None = None, progress: bool = False) -> dict[str, Any]:
    """Labels + probabilities for --text or --data (input order); the CSV at --out when given.

    `recipe` (the --recipe given) is one of the inputs --out must never overwrite.
    """
    if cfg.out:  # before any work: never over an input, never over a file bertkit did not write
        runs.check_predictions_out(cfg.out, {"--data": cfg.data, "--model": cfg.model, "--probe": cfg.probe,
                                             "--recipe": str(recipe_path(recipe)) if recipe else None})
    if cfg.text:
        dataset = data.TextDataset(list(cfg.text), source="--text")
    else:
        dataset = data.load_dataset_split(cfg, cfg.data or "", need_labels=False)
    label_names, proba = probabilities(cfg, dataset, progress)
    if cfg.out:
        write_predictions_csv(Path(cfg.out), dataset, proba, label_names)
    labels = [label_names[i] for i in proba.argmax(axis=1)]
    return {"dataset": dataset, "labels": labels, "proba": proba, "label_names": label_names, "out": cfg.out}


def probabilities(cfg: Any, dataset: data.TextDataset, progress: bool) -> tuple[list[str], np.ndarray]:
    """(label names, probabilities in input order) from a fine-tuned folder (--model) or a saved probe (--probe)."""
    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe_io import load_probe, predict_with_probe

        saved = load_probe(cfg.probe)
        _, proba = predict_with_probe(saved, dataset, batch_size=cfg.batch_size, precision=cfg.precision,
                                      max_length=cfg.max_length, progress=progress)
        return [str(x) for x in saved.label_map.labels], proba
    model, tokenizer, label_map = load_for_inference(cfg.model)
    proba = predict_proba(model, tokenizer, dataset, progress=progress, **reading(cfg))
    return [str(x) for x in label_map.labels], proba


def run_evaluate(cfg: EvaluateConfig, *, progress: bool = False) -> dict[str, Any]:
    """Metrics of a fine-tuned model on labelled --data; metrics.json, predictions.csv and the confusion matrix
    in --out when given."""
    plan = runs.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite,
                                compare=runs.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    external = [metrics.load_metric(spec) for spec in cfg.external_metrics]  # before any work: a missing one stops here
    dataset = data.load_dataset_split(cfg, cfg.data or "", need_labels=True)
    model, tokenizer, label_map = load_for_inference(cfg.model or "")
    y = label_map.encode(dataset.labels or [], f"The data {dataset.source}")
    proba = predict_proba(model, tokenizer, dataset, progress=progress, **reading(cfg))
    names = [str(x) for x in label_map.labels]
    result = metrics.classification_metrics(y, proba.argmax(axis=1), proba, names)
    metrics.add_requested(result, cfg.metric_list, external, proba.argmax(axis=1), y)
    result.update(model=cfg.model, data=dataset.source, data_fingerprint=dataset.fingerprint,
                  long_text=cfg.long_text, truncation=cfg.truncation)
    if plan is not None:
        from bertkit import plots

        run = plan.claim()
        runs.write_run_config(run.path, "evaluate", config_dict(cfg), data_fingerprint=dataset.fingerprint)
        runs.write_json_atomic(run.path / "metrics.json", result)
        write_predictions_csv(run.path / "predictions.csv", dataset, proba, names, y_true=y)
        plots.confusion_matrix(result["confusion_matrix"], names, run.path / "confusion_matrix.png",
                               f"{cfg.model} on {dataset.source}")
        run.commit()
    return result


# ---------------------------------------------------------------- fine-tuned folders


def load_for_inference(model_dir: str) -> tuple[Any, Any, data.LabelMap]:
    """A fine-tuned folder: classifier (eval mode, on the best device), tokenizer, and its label mapping."""
    model = modeling.load_classifier(model_dir, require_head=True)
    tokenizer = modeling.load_tokenizer(model_dir)
    id2label = getattr(model.config, "id2label", None) or {i: str(i) for i in range(model.config.num_labels)}
    model.to(modeling.choose_device()).eval()
    return model, tokenizer, data.LabelMap.from_id2label(id2label)


def reading(cfg: Any) -> dict[str, Any]:
    """How predict/evaluate run the model over the texts: window, batch, precision, and long texts (cut or chunk)."""
    return {"max_length": cfg.max_length, "batch_size": cfg.batch_size, "precision": cfg.precision,
            "truncation": cfg.truncation, "long_text": cfg.long_text, "stride": cfg.stride}


def predict_proba(model: Any, tokenizer: Any, dataset: data.TextDataset, *, max_length: int = 128,
                  batch_size: int = 64, precision: str = "fp32", progress: bool = False, truncation: str = "head",
                  long_text: str = "cut", stride: int | None = None) -> np.ndarray:
    """Class probabilities for every row of `dataset`, batched longest-first, returned in the original order.

    Texts longer than `max_length` are cut (`truncation`), or with `long_text="chunk"` read whole in overlapping
    windows whose logits are max-pooled (see `bertkit.longtext`)."""
    if long_text == "cut" and truncation == "head":  # the shared inference path, as always
        return softmax(infer.classifier_logits(model, tokenizer, dataset, max_length=max_length,
                                               batch_size=batch_size, precision=precision, progress=progress))
    return softmax(longtext.classifier_logits(model, tokenizer, dataset, max_length=max_length, batch_size=batch_size,
                                              precision=precision, truncation=truncation, long_text=long_text,
                                              stride=stride, progress=progress))


def write_predictions_csv(
    path: Path, dataset: data.TextDataset, proba: np.ndarray, label_names: list[str], *,
    y_true: np.ndarray | None = None, only_errors: bool = False,
) -> int:
    """Rows with predicted label and per-class probabilities (original order; errors most confident first)."""
    import pandas as pd

    predicted = proba.argmax(axis=1)
    frame = pd.DataFrame({"row": np.arange(len(dataset))})
    if dataset.line_numbers is not None:
        frame["line"] = dataset.line_numbers
    frame["text"] = dataset.texts
    if dataset.pairs is not None:
        frame["text_pair"] = dataset.pairs
    if y_true is not None:
        frame["label"] = [label_names[i] for i in y_true]
    frame["predicted"] = [label_names[i] for i in predicted]
    frame["confidence"] = proba.max(axis=1)
    for j, name in enumerate(label_names):
        frame[f"p_{name}"] = proba[:, j]
    if only_errors and y_true is not None:
        frame = frame[predicted != y_true].sort_values("confidence", ascending=False)
    with runs.atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return len(frame)
