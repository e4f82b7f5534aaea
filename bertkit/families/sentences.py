"""The sentences family: a label, a value or a set of labels per text (or text pair) - tables of rows (CSV, TSV,
JSON(L), parquet, hub datasets), sequence classifiers fine-tuned on them, sentence probes and feature stores. What
differs from the other families lives here; the work itself is the layers' (`data.splits`, `encoding.encode`,
`training.finetune.Task`, `scoring.outputs`, `probe.search`, `features.store`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from bertkit.data.tagged import is_file_value
from bertkit.encoding.reading import LongTextOptions, Reading
from bertkit.families.base import MODEL_COMMANDS, Family, option_families
from bertkit.families.exports import Exporter
from bertkit.families.results import Evaluation, Predictions, TimedData
from bertkit.families.sentence_exports import row_exporter
from bertkit.families.sentence_runs import row_evaluation, row_predictions, rows_to_time
from bertkit.features.sentence_embed import EmbedReport
from bertkit.features.settings import POOLS, layers_problem
from bertkit.models.compute import Compute
from bertkit.models.preflight import DATA_FIELDS
from bertkit.options import flag
from bertkit.probe.records import ProbeReport
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

    def probe(self, cfg: Any, progress: bool) -> ProbeReport:
        """Sentence probes per layer and pooling (`probe.sentence_run.probe_sentences`)."""
        from bertkit.probe.sentence_run import probe_sentences

        return probe_sentences(cfg, lambda: Compute.resolve("cpu", cfg.precision), progress)  # read on the CPU

    def embed(self, cfg: Any, progress: bool) -> EmbedReport:
        """Pooled features of every row into a store (`features.sentence_embed.embed_rows`)."""
        from bertkit.features.sentence_embed import embed_rows

        return embed_rows(cfg, Compute.resolve, progress)

    def exporter(self, cfg: Any) -> Exporter:
        """A classifier's logits, or an encoder's pooled features (--kind; auto: by the folder's architecture)."""
        return row_exporter(cfg)

    def bench_data(self, cfg: Any) -> TimedData:
        """Rows of text: --dev if given, else --data, else the demo dev set (`sentence_runs.rows_to_time`)."""
        return rows_to_time(cfg)

    def distillation(self, cfg: Any) -> tuple[Any, Any]:
        """A sentence classifier's student (`training.distill.DistillTask`: the teacher's soft targets over the
        rows), and `cfg` reading the data in the teacher's problem shape."""
        from bertkit.training.distill import DistillTask

        task = DistillTask(cfg, Reading.from_options(cfg.reading))
        return cfg.in_the_teachers_shape(task.teacher_labels.task), task

    def option_problems(self, cfg: Any, command: str) -> list[str]:
        """--stride with --long-text chunk only (`LongTextOptions.long_text_problems`); probe: its poolings and
        layers, the problem shape's options, and what a feature store cannot give."""
        reading = getattr(cfg, "reading", None)
        problems = reading.long_text_problems() if isinstance(reading, LongTextOptions) else []
        if command in ("embed", "export"):
            problems += layers_problem(cfg.pooling.layers)
        if command == "export" and cfg.kind == "tagger":
            problems.append(f"--kind tagger exports a tagging model (`bertkit finetune` on tagged data: its "
                            f"bertkit_model.json records the task `tags`); {cfg.model} is not one. Drop --kind (auto), "
                            f"or pass a tagging model's best/ folder.")
        return problems + (probe_problems(cfg) if command == "probe" else [])

    def refused_options(self, cfg: Any, command: str, source: str | None = None) -> list[str]:
        """As every family refuses them; but another family's option given with --data that is not there is left to
        the data reader, which names the missing file first."""
        problems = super().refused_options(cfg, command, source)
        data = getattr(getattr(cfg, "inputs", None), "data", None)
        if data is not None and is_file_value(data) and not file_exists(data):
            owned = option_families(type(cfg))
            problems = [p for p in problems if not any(p.startswith(flag(n) + " applies to") for n in owned)]
        return problems

    def refusal(self, name: str, owners: tuple[Family, ...], command: str, source: str | None) -> str:
        """Another family's option given for rows of text: what it applies to, and how data is read as that."""
        if not owners:
            return super().refusal(name, owners, command, source)
        owner = owners[0]
        what = f"{flag(name)} applies to {owner.owner_phrase.get(command, owner.rows)}; {self.describe(source, command)}"
        if command in MODEL_COMMANDS:  # the model decides the family: only dropping the option helps
            return f"{what}. Drop {flag(name)}."
        return f"{what}. Pass {owner.chosen_by}, or drop {flag(name)}."


def file_exists(path: str) -> bool:
    """Whether `path` names an existing file or folder (a name this system cannot stat does not)."""
    try:
        return Path(path).expanduser().exists()
    except OSError:
        return False


def probe_problems(cfg: Any) -> list[str]:
    """A sentence probe's options: distinct poolings it knows, layers, the task's threshold and separator, and no
    other shape than one class per row from a --features store."""
    problems = [] if (cfg.features is None) != (cfg.inputs.data is None) else [
        "Give exactly one of --features (a `bertkit embed` store) or --data (text to extract from)."]
    problems += [f"--pool must be one of {', '.join(POOLS)}; got {pool!r}." for pool in cfg.pools if pool not in POOLS]
    if len(set(cfg.pools)) != len(cfg.pools) or not cfg.pools:
        problems.append(f"--pool must list distinct poolings (cls, mean, max), e.g. cls,mean; got {cfg.pool!r}.")
    problems += layers_problem(cfg.layers) + cfg.inputs.task_problems()
    if cfg.features is not None and (cfg.inputs.task in ("multi_label", "regression") or cfg.inputs.label_sep is not None):
        problems.append("--features stores hold one class per row; probe tags or numbers from the text with --data "
                        "(and --task / --label-sep).")
    return problems


SENTENCES = Sentences()
