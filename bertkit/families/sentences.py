"""The sentences family: a label, a value or a set of labels per text (or text pair) - tables of rows (CSV, TSV,
JSON(L), parquet, hub datasets), sequence classifiers fine-tuned on them, sentence probes and feature stores. What
differs from the other families lives here; the work itself is the layers' (`data.splits`, `encoding.encode`,
`training.finetune.Task`, `scoring.outputs`, `probe.search`, `features.store`)."""

from __future__ import annotations

from typing import Any, ClassVar

from bertkit.encoding.reading import Reading
from bertkit.families.base import MODEL_COMMANDS, Family
from bertkit.families.results import Evaluation, Predictions
from bertkit.families.sentence_runs import row_evaluation, row_predictions
from bertkit.models.preflight import DATA_FIELDS
from bertkit.options import flag
from bertkit.training.plans import Training


class Sentences(Family):
    name = "sentences"
    rows = "rows of text"
    model_noun = "a sentence classifier (one label per text)"
    chosen_by = "a table with a text column"

    def reads(self, inputs: Any, task: str) -> bool:
        return inputs.data is not None

    # ---------------------------------------------------------------- fine-tuning (finetune, sweep)

    table_fields: ClassVar[tuple[str, ...]] = DATA_FIELDS
    """The data options checked as tables before torch is imported (each run reads them again itself)."""

    def training(self, cfg: Any) -> Training:
        """A sequence classifier's runs: each reads its rows as its data options say (`training.finetune.Task`)."""
        return Training(lambda trial: self.refused_options(trial, "sweep"))

    def evaluate(self, cfg: Any, claim: Any, progress: bool) -> Evaluation:
        """`bertkit evaluate`'s scores of the model on labelled --data (`row_evaluation`)."""
        return row_evaluation(cfg, claim, progress)

    def predict(self, cfg: Any, *, keep: int | None, progress: bool, on_chunk: Any) -> Predictions:
        """A classifier's or a saved probe's labels (or numbers) of rows of text (`sentence_runs.row_predictions`)."""
        return row_predictions(cfg, keep, progress, on_chunk)

    def distillation(self, cfg: Any) -> tuple[Any, Any]:
        """A sentence classifier's student (`training.distill.DistillTask`: the teacher's soft targets over the
        rows), and `cfg` reading the data in the teacher's problem shape."""
        from bertkit.training.distill import DistillTask

        task = DistillTask(cfg, Reading.from_options(cfg.reading))
        return cfg.in_the_teachers_shape(task.teacher_labels.task), task

    def refusal(self, name: str, owners: tuple[Family, ...], command: str, source: str | None) -> str:
        """Another family's option given for rows of text: what it applies to, and how data is read as that."""
        if not owners:
            return super().refusal(name, owners, command, source)
        owner = owners[0]
        what = f"{flag(name)} applies to {owner.owner_phrase.get(command, owner.rows)}; {self.describe(source, command)}"
        if command in MODEL_COMMANDS:  # the model decides the family: only dropping the option helps
            return f"{what}. Drop {flag(name)}."
        return f"{what}. Pass {owner.chosen_by}, or drop {flag(name)}."


SENTENCES = Sentences()
