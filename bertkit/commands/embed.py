"""`bertkit embed`: encoder features of every row (or every word, for tagged data) into a sharded, resumable store,
by the problem family of --data (`bertkit.families`): pooled features of rows of text
(`bertkit.features.sentence_embed`), or word vectors of tagged sentences (`bertkit.features.word_embed`)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.options import WORD_TASKS, DataOptions, config_problems
from bertkit.encoding.reading import LongTextOptions, TaggedReadingOptions
from bertkit.errors import raise_if_problems
from bertkit.families.base import Family
from bertkit.families.registry import cached_family
from bertkit.features.sentence_embed import EmbedReport, SplitResult
from bertkit.features.settings import PoolingOptions, StoreOptions
from bertkit.models.compute import TRUST_HELP, check_device, precision_option
from bertkit.options import DATA, MODEL, Config, group, option

__all__ = ["EmbedConfig", "EmbedResult", "SplitResult", "run"]


@dataclass(frozen=True)
class EmbedConfig(Config):
    """`bertkit embed`: pooled encoder features for every row, written to a sharded, resumable store."""

    # embed writes every row of every split it is given and makes no hold-out split, so these
    # DataOptions fields are not options of the command (nor valid recipe keys).
    NOT_OPTIONS = ("seed", "dev_fraction")
    REQUIRED_OPTIONS = ("data", "out")
    ADVANCED_OPTIONS = ("stride", "trust_remote_code")
    HELP_OVERRIDES = {"dev": "Dev data (a file or a hub split), embedded into OUT/dev; no hold-out is made.",
                      "test": "Test data (a file or a hub split), embedded into OUT/test."}

    model: str = option("minilm-offline", "Encoder: a hub id, a local folder, or `minilm-offline`.", panel=MODEL)
    inputs: DataOptions = group(DataOptions)
    reading: LongTextOptions = group(LongTextOptions)
    pooling: PoolingOptions = group(PoolingOptions)
    output: StoreOptions = group(StoreOptions)
    tagged: TaggedReadingOptions = group(TaggedReadingOptions)
    batch_size: str = option("auto", "Rows per batch, or auto (a padded-token budget from the model size).")
    precision: str = precision_option()
    device: str = option("auto", "cpu, cuda, cuda:N, mps or auto.")
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)
    task: str = option("auto", "tags: --data is a tagged corpus (one tag per word), written as a word-level store "
                       "(a vector per word); auto: detected from .iob2/.conll files and their content.", panel=DATA,
                       choices=WORD_TASKS)

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if self.inputs.data is None:
            problems.append("--data is required: the file (or hub dataset) whose rows to embed.")
        if not self.output.out:
            problems.append("--out is required: the directory the feature store is written to.")
        if str(self.batch_size) != "auto" and (not str(self.batch_size).isdigit() or int(self.batch_size) <= 0):
            problems.append(f"--batch-size must be a positive integer or auto; got {self.batch_size!r}.")
        check_device(problems, self.device)
        raise_if_problems(problems + self.family.refused_options(self, "embed", self.inputs.data))

    @property
    def family(self) -> Family:
        """The problem family of --data (`bertkit.families`: rows of text, or tagged data as a word store)."""
        return cached_family(self, data=self.inputs, task=self.task)

    @property
    def rows_per_batch(self) -> int | None:
        """--batch-size as a number, or None for `auto`."""
        return None if str(self.batch_size) == "auto" else int(self.batch_size)


@dataclass
class EmbedResult(EmbedReport):
    """What `bertkit embed` did: per split (`splits`), and in all (rows, tokens, throughput, size); tagged data: the
    word stores (`words`), `rows` being sentences."""


def run(cfg: EmbedConfig, progress: bool = True) -> EmbedResult:
    """Every split to its store under --out, as the data's problem family stores it; what was done."""
    return EmbedResult.of(cfg.family.embed(cfg, progress))
