"""`bertkit predict` and `bertkit evaluate`: labels, probabilities and metrics from a fine-tuned model or a
saved probe. Returns values; `cli.py` prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertkit import data, metrics, runs
from bertkit.config import EvaluateConfig, PredictConfig, config_dict, recipe_path


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
        from bertkit.finetune import write_predictions_csv

        write_predictions_csv(Path(cfg.out), dataset, proba, label_names)
    labels = [label_names[i] for i in proba.argmax(axis=1)]
    return {"dataset": dataset, "labels": labels, "proba": proba, "label_names": label_names, "out": cfg.out}


def probabilities(cfg: Any, dataset: data.TextDataset, progress: bool) -> tuple[list[str], np.ndarray]:
    """(label names, probabilities in input order) from a fine-tuned folder (--model) or a saved probe (--probe)."""
    if getattr(cfg, "probe", None) is not None:
        from bertkit.probe import load_probe, predict_with_probe

        saved = load_probe(cfg.probe)
        _, proba = predict_with_probe(saved, dataset, batch_size=cfg.batch_size, dtype=None, progress=progress)
        return [str(x) for x in saved.label_map.labels], proba
    from bertkit.finetune import load_for_inference, predict_proba

    model, tokenizer, label_map = load_for_inference(cfg.model)
    proba = predict_proba(model, tokenizer, dataset, max_length=cfg.max_length, batch_size=cfg.batch_size,
                          precision=cfg.precision, progress=progress)
    return [str(x) for x in label_map.labels], proba


def run_evaluate(cfg: EvaluateConfig, *, progress: bool = False) -> dict[str, Any]:
    """Metrics of a fine-tuned model on labelled --data; metrics.json, predictions.csv and the confusion matrix
    in --out when given."""
    from bertkit.finetune import load_for_inference, predict_proba, write_predictions_csv

    plan = runs.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite,
                                compare=runs.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    dataset = data.load_dataset_split(cfg, cfg.data or "", need_labels=True)
    model, tokenizer, label_map = load_for_inference(cfg.model or "")
    y = label_map.encode(dataset.labels or [], f"The data {dataset.source}")
    proba = predict_proba(model, tokenizer, dataset, max_length=cfg.max_length, batch_size=cfg.batch_size,
                          precision=cfg.precision, progress=progress)
    names = [str(x) for x in label_map.labels]
    result = metrics.classification_metrics(y, proba.argmax(axis=1), proba, names)
    result.update(model=cfg.model, data=dataset.source, data_fingerprint=dataset.fingerprint)
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
