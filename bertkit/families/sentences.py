"""The sentences family: a label, a value or a set of labels per text (or text pair) - tables of rows (CSV, TSV,
JSON(L), parquet, hub datasets), sequence classifiers fine-tuned on them, sentence probes and feature stores. What
differs from the other families lives here; the work itself is the layers' (`data.splits`, `encoding.encode`,
`training.finetune.Task`, `scoring.outputs`, `probe.search`, `features.store`)."""

from __future__ import annotations

from typing import Any, ClassVar

from bertkit.families.base import Family
from bertkit.models.preflight import DATA_FIELDS
from bertkit.options import flag
from bertkit.training.plans import Training


class Sentences(Family):
    name = "sentences"
    rows = "rows of text"
    chosen_by = "a table with a text column"

    def reads(self, inputs: Any, task: str) -> bool:
        return inputs.data is not None

    # ---------------------------------------------------------------- fine-tuning (finetune, sweep)

    table_fields: ClassVar[tuple[str, ...]] = DATA_FIELDS
    """The data options checked as tables before torch is imported (each run reads them again itself)."""

    def training(self, cfg: Any) -> Training:
        """A sequence classifier's runs: each reads its rows as its data options say (`training.finetune.Task`)."""
        return Training(lambda trial: self.refused_options(trial, "sweep"))

    def refusal(self, name: str, owners: tuple[Family, ...], command: str, source: str | None) -> str:
        """Another family's option given for rows of text: what it applies to, and how data is read as that."""
        if not owners:
            return super().refusal(name, owners, command, source)
        owner = owners[0]
        read = f"{source} is read as {self.rows}" if source else f"this is read as {self.rows}"
        return f"{flag(name)} applies to {owner.rows}; {read}. Pass {owner.chosen_by}, or drop {flag(name)}."


SENTENCES = Sentences()
