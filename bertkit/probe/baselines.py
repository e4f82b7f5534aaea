"""The yardsticks a probe is read against: the majority class, TF-IDF + logistic regression on the raw text, and
the same architecture with random weights at the best cell (regression and tag probes: their own versions, from
`bertkit.probe.shapes`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.encoding.reading import Reading
from bertkit.probe import shapes as probe_shapes
from bertkit.probe.fit import MAX_ITER, fit_probe
from bertkit.probe.inputs import ProbeInputs, cached_features
from bertkit.probe.search import Cell, fit_kwargs_from, score_probe, shape_kwargs, shaped_cell
from bertkit.scoring.metrics import classification_metrics

BASELINE_NAMES = {
    "single_label": {"majority": "majority class", "tfidf": "TF-IDF + LR", "random_encoder": "random-init encoder"},
    "regression": {"mean": "mean predictor", "tfidf": "TF-IDF + ridge", "random_encoder": "random-init encoder"},
    "multi_label": {"majority": "per-label majority", "tfidf": "TF-IDF + OvR LR", "random_encoder": "random-init encoder"},
}
"""How the baselines are named in the layer-curve legend, per problem shape."""

log = logging.getLogger(__name__)


def majority_baseline(y_train: np.ndarray, y_dev: np.ndarray, label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Always predict the most frequent training label (scikit-learn's DummyClassifier, as in Alammar's notebook)."""
    from sklearn.dummy import DummyClassifier


    dummy = DummyClassifier(strategy="most_frequent").fit(np.zeros((len(y_train), 1)), y_train)
    pred = dummy.predict(np.zeros((len(y_dev), 1)))
    return classification_metrics(y_dev, pred, label_names=label_names)


def tfidf_baseline(
    train_texts: Sequence[str], y_train: np.ndarray, dev_texts: Sequence[str], y_dev: np.ndarray, *,
    label_names: Sequence[str] | None = None, class_weight: str | None = None, seed: int = 42,
) -> dict[str, Any]:
    """TF-IDF (word 1-2 grams, sublinear tf) + logistic regression on the raw text: the no-BERT yardstick."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression


    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    X_train = vectorizer.fit_transform(train_texts)
    lr = LogisticRegression(C=10.0, max_iter=MAX_ITER, class_weight=class_weight, random_state=seed)
    lr.fit(X_train, y_train)
    return classification_metrics(y_dev, lr.predict(vectorizer.transform(dev_texts)), label_names=label_names)


def joined_texts(texts: Sequence[str], pairs: Sequence[str] | None) -> list[str]:
    """Text (and its pair, if any) as one string for the TF-IDF baseline."""
    if pairs is None:
        return list(texts)
    return [f"{a} [SEP] {b}" for a, b in zip(texts, pairs, strict=True)]


def run_baselines(cfg: Any, inputs: ProbeInputs, best: Cell, names: list[str], cache: Path | None,
                  progress: bool) -> dict[str, Any]:
    """Majority class, TF-IDF + LR on the raw text, and the random-weights encoder at the best cell (numbers: the
    training mean, TF-IDF + ridge; tags: each tag's majority value, TF-IDF + one-vs-rest LR)."""

    task = best.fit.task
    if task == "single_label":
        baselines: dict[str, Any] = {"majority": majority_baseline(inputs.y_train, inputs.y_dev, names)}
    else:
        key = "mean" if task == "regression" else "majority"
        baselines = {key: probe_shapes.trivial_baseline(task, inputs.y_train, inputs.y_dev, names)}
    train_ds, dev_ds = inputs.datasets.get("train"), inputs.datasets.get("dev")
    if train_ds is None or dev_ds is None:
        return baselines
    texts = joined_texts(train_ds.texts, train_ds.pairs), joined_texts(dev_ds.texts, dev_ds.pairs)
    if task == "single_label":
        baselines["tfidf"] = tfidf_baseline(
            texts[0], inputs.y_train, texts[1], inputs.y_dev, label_names=names,
            class_weight=fit_kwargs_from(cfg)["class_weight"], seed=cfg.inputs.seed)
    else:
        baselines["tfidf"] = probe_shapes.tfidf_shaped_baseline(task, texts[0], inputs.y_train, texts[1],
                                                                 inputs.y_dev, names, seed=cfg.inputs.seed)
    index = inputs.layer_indices[best.layer]
    if index is None or not inputs.feature_meta.get("model"):
        inputs.notes.append("Random-encoder baseline skipped: the best features combine several layers.")
        return baselines
    X = random_encoder_features(cfg, inputs, best.pool, index, cache, progress)
    fit = fit_probe(X["train"], inputs.y_train, **shape_kwargs(cfg, task)[0])
    if task == "single_label":
        random = score_probe(fit, X["dev"], inputs.y_dev, names)
    else:
        random = shaped_cell(fit, best.pool, best.layer, best.layer_name, X["dev"], inputs.y_dev, names,
                              cfg.inputs.threshold, cfg.inputs.seed).metrics
    random.update(pool=best.pool, layer=best.layer_name, C=fit.C)
    baselines["random_encoder"] = random
    return baselines


def random_encoder_features(cfg: Any, inputs: ProbeInputs, pool: str, index: int, cache: Path | None,
                            progress: bool) -> dict[str, np.ndarray]:
    """Train/dev features of the same architecture with freshly initialised weights (seeded), one pool, one layer."""
    import torch

    from bertkit.features import extract
    from bertkit.models import loading, quantize

    meta = dict(inputs.feature_meta)
    model = str(meta["model"])
    state: dict[str, Any] = {}

    def compute(ds: Any, split: str) -> dict[str, np.ndarray]:
        if "encoder" not in state:
            log.info("random-init baseline: the same architecture with fresh weights reads train and dev again at "
                     "%s layer %s (the slowest baseline; --no-baselines skips the baselines)", pool, index)
            torch.manual_seed(cfg.inputs.seed)
            state["encoder"] = loading.load_encoder(model, bool(meta.get("trust_remote_code")), random_init=True)
            if meta.get("dtype") == loading.INT8:  # the baseline reads texts in the probed features' precision
                state["encoder"] = quantize.quantized_int8(state["encoder"], inplace=True)
            state["tokenizer"] = loading.load_tokenizer(model, bool(meta.get("trust_remote_code")))
        dtype = loading.DTYPE_NAMES.get(str(meta.get("dtype")), torch.float32)
        return extract.extract_pooled(state["encoder"], state["tokenizer"], ds, pools=[pool], layers=[index],
                              reading=Reading.from_record(meta), batch_size=cfg.batch_size, dtype=dtype,
                              normalize=bool(meta.get("normalize")), progress=progress,
                              desc=f"random-init baseline, {split}")

    key = {**meta, "revision": f"random-init(seed={cfg.inputs.seed})/{meta.get('revision')}", "layers": str(index)}
    return {
        split: cached_features(cache, split, inputs.datasets[split], key, [pool], [index],
                               lambda ds=inputs.datasets[split], split=split: compute(ds, split),
                               prefix="random-")[pool][:, 0]
        for split in ("train", "dev")
    }


def losing_to_baselines(best_where: str, score: float, baselines: dict[str, Any], metric: str,
                        searched_all: bool) -> list[str]:
    """A warning line, with the fix, for each yardstick the best cell does not beat (TF-IDF on the raw text, the same
    encoder with random weights), when it ran; `searched_all`: every pooling and layer was probed already."""
    wider = "" if searched_all else "probe every pooling and layer (--pool cls,mean,max --layers all), "
    problems = {
        "tfidf": ("TF-IDF on the raw text", f"the frozen features add nothing over word counts here. Fix: {wider}"
                  "fine-tune the encoder (`bertkit finetune`) or try a stronger --model"),
        "random_encoder": ("the same encoder with random weights", "the pretrained weights add nothing at this cell. "
                           "Fix: check that --model is the trained model you meant and --max-length covers the "
                           f"texts, {wider}or fine-tune (`bertkit finetune`)"),
    }
    lines = []
    for key, (what, fix) in problems.items():
        base = baselines.get(key, {}).get(metric)
        if base is not None and not score > base:
            lines.append(f"warning: the best cell ({best_where}, dev {metric} {score:.3f}) does not beat {what} "
                         f"({base:.3f}): {fix}.")
    return lines
