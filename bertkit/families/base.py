"""What a problem family is: one kind of problem bertkit reads, trains, predicts and scores - `sentences` (a label,
value or label set per text), `words` (a tag per word), `spans` (an answer span of a passage per question) - as one
object the commands call (`Family`).

A family recognises its data and what it saved (models, probes, stores: `reads`, `made`, `saved_probe`, `stores`),
says which options it reads (an option declared `families=(...)` is another family's; `not_read` names what its path
through a command does not read yet), and does a command's family-specific part: the training `Task`, predict's and
evaluate's readers and scorers, probe's table, embed's store, export's kind and gate, bench's workload. A command
asks `bertkit.families.family_of(...)` once and calls the family; it never branches on which family it got.

The base class holds the defaults: a family that lacks a command's part says so (`missing`), exit 2."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bertkit.data.tagged import is_file_value
from bertkit.errors import UserError
from bertkit.options import all_fields, flag, given_options


class Family:
    """A kind of problem, behind the one protocol every command calls (see the module docstring). Subclasses set
    the class attributes and override the parts they do; the registry (`bertkit.families.registry`) finds them."""

    name: ClassVar[str] = ""
    """The family's name in records and messages: sentences, words."""
    rows: ClassVar[str] = ""
    """What its data is, for messages: "rows of text", "tagged data (one tag per word)"."""
    chosen_by: ClassVar[str] = ""
    """How data is read as this family, for messages: "a CoNLL-style file (.iob2, .conll) or --task tags"."""
    model_noun: ClassVar[str] = ""
    """What its models are, for messages: "a sentence classifier (one label per text)"."""
    owner_phrase: ClassVar[Mapping[str, str]] = {}
    """Command -> how another family's refusal of this family's option names what the option applies to ("a tagging
    teacher"); a command not named: `rows`."""
    doing: ClassVar[Mapping[str, str]] = {}
    """Command -> what the command does on this family's data or models, for messages ("fine-tuning on tagged
    data"); a command not named: `rows`."""
    not_read: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """Command -> options every family may have but this family's path through that command does not read (given:
    refused, naming them)."""

    # ---------------------------------------------------------------- what it recognises (cheap: before torch)

    def reads(self, inputs: Any, task: str) -> bool:
        """Whether data (a data group: --data, --data-config, --train-split) under --task `task` is this family's."""
        return False

    def made(self, folder: str) -> bool:
        """Whether the model folder (or export, or hub id) is this family's."""
        return False

    def saved_probe(self, path: str) -> bool:
        """Whether the saved probe at `path` is this family's."""
        return False

    def stores(self, path: str) -> bool:
        """Whether the feature store at `path` holds this family's rows."""
        return False

    # ---------------------------------------------------------------- options

    def doing_in(self, command: str) -> str:
        return self.doing.get(command, self.rows)

    def describe(self, source: str | None, command: str) -> str:
        """What `source` (the data, or the model a command reads) is as this family's, for messages."""
        if command in MODEL_COMMANDS:
            return f"{source or 'the model'} is {self.model_noun}"
        return f"{source or 'the data'} is read as {self.rows}"

    def refusal(self, name: str, owners: tuple[Family, ...], command: str, source: str | None) -> str:
        """The message refusing option `name` (of the families `owners`; none: an option this family's path through
        `command` does not read)."""
        return f"{flag(name)} does not apply to {self.doing_in(command)}. Drop {flag(name)}."

    def option_problems(self, cfg: Any, command: str) -> list[str]:
        """The family's own rules on `cfg`'s options beyond which options it reads (default: none)."""
        return []

    def refused_options(self, cfg: Any, command: str, source: str | None = None) -> list[str]:
        """Every option given in `cfg` that this family does not read, refused naming it: another family's option
        (declared `option(families=...)`), or one its path through `command` does not read (`not_read`); then the
        family's own rules (`option_problems`). `source`: what is read (for the messages)."""
        owned = option_families(type(cfg))
        problems = []
        for name in given_options(cfg):
            if (name in owned and self.name not in owned[name]) or name in self.not_read.get(command, ()):
                owners = tuple(f for f in FAMILIES if f.name in owned.get(name, ()))
                problems.append(self.refusal(name, owners, command, source))
        return problems + self.option_problems(cfg, command)

    # ---------------------------------------------------------------- the commands' parts (defaults: missing)

    table_fields: ClassVar[tuple[str, ...]] = ()
    """The data options a training command checks as tables before torch is imported."""

    def training(self, cfg: Any) -> Any:
        """How this family's fine-tuning runs train (`training.plans.Training`), its data read and checked."""
        raise self.missing("finetune")

    def distillation(self, cfg: Any) -> tuple[Any, Any]:
        """(the distillation's config in the teacher's problem shape, its `Task`: the student and its objective)."""
        raise self.missing("distill")

    def predict(self, cfg: Any, *, keep: int | None, progress: bool, on_chunk: Any) -> Any:
        """`bertkit predict`'s predictions (`results.Predictions`): the first `keep` kept, every chunk written to
        --out and handed to `on_chunk` as it comes."""
        raise self.missing("predict")

    def evaluate(self, cfg: Any, claim: Any, progress: bool) -> Any:
        """`bertkit evaluate`'s scores of the model on labelled --data (`results.Evaluation`); its files (predictions,
        plots) written into `claim()` (the run's folder, claimed once everything was checked), if given."""
        raise self.missing("evaluate")

    def probe(self, cfg: Any, progress: bool) -> Any:
        """`bertkit probe`'s linear probes on frozen features (`probe.records.ProbeReport`), its run folder written."""
        raise self.missing("probe")

    def embed(self, cfg: Any, progress: bool) -> Any:
        """`bertkit embed`'s store of the data's features (`features.sentence_embed.EmbedReport`)."""
        raise self.missing("embed")

    def exporter(self, cfg: Any) -> Any:
        """`bertkit export`'s kind of export of the --model (`families.exports.Exporter`)."""
        raise self.missing("export")

    def bench_data(self, cfg: Any) -> Any:
        """What `bertkit bench` times (`results.TimedData`), read and checked before torch is imported."""
        raise self.missing("bench")

    def quality_options(self, cfg: Any) -> dict[str, Any]:
        """The options a `bench --quality` run gets so that it reads the data as this family does."""
        return {}

    def missing(self, what: str) -> UserError:
        """The refusal of a part this family does not have (`what`: e.g. "probe")."""
        return UserError(f"`bertkit {what}` does not read {self.rows} yet. Use another command, or data of another "
                         f"kind.")


MODEL_COMMANDS = ("distill", "predict", "evaluate", "export")
"""Commands whose family is their model's (the teacher's): the others' is their data's."""

FAMILIES: list[Family] = []
"""The registered families, in the order they are asked (`bertkit.families.registry` fills it)."""


def family_of(*, data: Any = None, task: str = "auto", model: str | None = None, probe: str | None = None,
              store: str | None = None) -> Family:
    """The family of what a command reads - a feature store, a saved probe, a model folder, or data (a data group,
    with --task `task`) - the first family that claims any of them; the last family when none does."""
    for family in FAMILIES[:-1]:
        claims = ((store is not None and family.stores(store)) or (probe is not None and family.saved_probe(probe))
                  or (model is not None and family.made(model)) or (data is not None and family.reads(data, task)))
        if claims:
            return family
    return FAMILIES[-1]


@dataclass(frozen=True)
class DataAt:
    """One data option's value as a data group (`Family.reads` takes one): a file, or a hub dataset."""

    data: str
    data_config: str | None = None
    train_split: str = "train"


def teacher_data_problems(family: Family, inputs: Any, teacher: str) -> list[str]:
    """--data and --dev files that another family reads, refused for a teacher of `family` (`teacher`: its folder):
    a student learns the teacher's outputs on them."""
    if not Path(teacher).expanduser().is_dir():  # a hub id, or a missing folder (refused as such when the run starts)
        return []
    problems = []
    for option, path in (("--data", inputs.data), ("--dev", inputs.dev)):
        if path is None or not is_file_value(path) or not Path(path).expanduser().is_file():
            continue  # a hub dataset's split, or a missing file: the data reader names it
        other = family_of(data=DataAt(path, inputs.data_config, inputs.train_split))
        if other is not family:
            problems.append(f"--teacher {teacher} is {family.model_noun}, but {option} {path} is read as {other.rows}: "
                            f"the student learns the teacher's outputs, so both must be of one kind. Pass "
                            f"{family.rows} as {option} ({family.chosen_by}), or a teacher fine-tuned on "
                            f"{other.rows} as --teacher.")
    return problems


def option_families(config_cls: type) -> dict[str, tuple[str, ...]]:
    """Option name -> the families it is declared for (`option(families=...)`), for the options that declare any."""
    return {f.name: tuple(f.metadata["families"]) for f in all_fields(config_cls) if f.metadata.get("families")}
