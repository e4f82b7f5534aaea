"""A trivial third problem family, made for the test that proves the claim of `bertkit.families`: adding a family is
its module and one registry line, and `finetune`, `predict` and `evaluate` reach it with no edit to `commands/`.

"parity": a `.parity` file holds one text per line, labelled by the parity of its word count (even, odd). Its runs
fine-tune a sequence classifier through the one training loop (a `Task` whose data it reads itself), its models
record `"family": "parity"`, and predict and evaluate read them back."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from bertkit.data.dataset import TextDataset
from bertkit.data.labels import LabelMap
from bertkit.data.splits import Splits
from bertkit.encoding.reading import Reading
from bertkit.families.base import Family
from bertkit.families.results import Evaluation, Predictions
from bertkit.models.metadata import read_model_info
from bertkit.scoring.scores import Scores
from bertkit.training.plans import Training

READING = Reading(max_length=32)


def parity_rows(path: str) -> TextDataset:
    """A `.parity` file's texts, each labelled even or odd by its number of words."""
    texts = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    labels = ["even" if len(t.split()) % 2 == 0 else "odd" for t in texts]
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    return TextDataset(texts, labels=labels, source=str(path), fingerprint=f"sha256:{digest}")


class ParityTraining(Training):
    """Runs on `.parity` files: the splits read once, a classifier task recording the family."""

    def __init__(self, splits: Splits) -> None:
        super().__init__()
        self.data = splits

    def reading(self, cfg: Any) -> Reading:
        return READING

    def task(self) -> Any:
        from bertkit.training.finetune import Task, _for_the_shape

        splits = self.data

        class ParityTask(Task):
            def training_data(self, cfg: Any, warn: bool) -> tuple[Any, Splits]:
                return _for_the_shape(cfg, splits, warn), splits

            def model_record(self) -> dict[str, Any]:
                return {"family": "parity"}

        return ParityTask()


class Parity(Family):
    name = "parity"
    rows = "texts labelled by the parity of their word count"
    chosen_by = "a .parity file"
    model_noun = "a parity classifier"

    def reads(self, inputs: Any, task: str) -> bool:
        return str(inputs.data or "").endswith(".parity")

    def made(self, folder: str) -> bool:
        return Path(folder).is_dir() and read_model_info(folder).get("family") == self.name

    def training(self, cfg: Any) -> ParityTraining:
        train, dev = parity_rows(cfg.inputs.data), parity_rows(cfg.inputs.dev)
        return ParityTraining(Splits(train, dev, label_map=LabelMap.build(train.labels)))

    def predict(self, cfg: Any, *, keep: int | None, progress: bool, on_chunk: Any) -> Predictions:
        dataset = TextDataset(list(cfg.text)) if cfg.text else parity_rows(cfg.inputs.data)
        names, proba = _probabilities(cfg.model, dataset)
        labels = [names[i] for i in proba.argmax(axis=1)]
        return Predictions("single_label", names, 0.5, None, "fp32", READING.max_length, dataset=dataset,
                           labels=labels, proba=proba, family=self.name)

    def evaluate(self, cfg: Any, claim: Any, progress: bool) -> Evaluation:
        dataset = parity_rows(cfg.inputs.data)
        names, proba = _probabilities(cfg.model, dataset)
        correct = [names[i] == label for i, label in zip(proba.argmax(axis=1), dataset.labels or [], strict=True)]
        scores = Scores.from_json({"task": "single_label", "accuracy": sum(correct) / len(correct), "n": len(correct)})
        return Evaluation(cfg.model, dataset.source, dataset.fingerprint, READING.max_length, READING.long_text,
                          READING.truncation, "fp32", scores)


def _probabilities(model: str, dataset: TextDataset) -> tuple[list[str], Any]:
    import numpy as np

    from bertkit.models import infer
    from bertkit.models.compute import Compute

    classifier, tokenizer, label_map = infer.load_for_inference(model, Compute("cpu", "fp32"))
    logits = infer.classifier_logits(classifier, tokenizer, dataset, reading=READING, batch_size=8, precision="fp32")
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return [str(x) for x in label_map.labels], exp / exp.sum(axis=1, keepdims=True)


PARITY = Parity()
