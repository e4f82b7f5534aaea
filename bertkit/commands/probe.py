"""`bertkit probe`: linear probes on frozen features, per layer (and pooling), with baselines and a saved probe, by
the problem family of the data or store (`bertkit.families`): sentence probes (`bertkit.probe.sentence_run`: a
store, or features from text -> per-layer sweep -> baselines -> repeated fits -> test -> the run directory) or the
word probe table (`bertkit.probe.words_run`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.data.options import TaskOptions, config_problems
from bertkit.data.tagged import is_file_value
from bertkit.encoding.reading import LongTextOptions, TaggedReadingOptions, doc_stride_option
from bertkit.errors import raise_if_problems
from bertkit.families.base import Family
from bertkit.families.registry import cached_family
from bertkit.features.settings import combine_option
from bertkit.models.compute import TRUST_HELP, precision_option
from bertkit.options import DATA, MODEL, OUTPUT, Config, group, option, overwrite_option
from bertkit.probe.fit import FitOptions
from bertkit.probe.records import ProbeReport
from bertkit.scoring.options import MetricOptions


@dataclass(frozen=True)
class ProbeConfig(Config):
    """`bertkit probe`: linear probes on frozen features, per pooling and layer, with baselines: logistic regression
    (one label), one-vs-rest logistic regression (tags) or ridge regression (numbers)."""

    ADVANCED_OPTIONS = ("stride", "doc_stride", "trust_remote_code")
    HELP_OVERRIDES = {"combine": "Tagged data: one row of the --layers (default last4) combined (concat, mean or sum) "
                                 "instead of the default table (every layer, plus the BERT paper's sum/concat of the "
                                 "last four and sum of all)."}

    features: str | None = option(None, "A `bertkit embed` store (its --out directory) instead of --data; a word "
                                  "store (embed on tagged data, with --dev) probes its words.", panel=DATA)
    model: str | None = option(None, "Encoder for on-the-fly features (default minilm-offline); with --features it "
                               "must match the store.", panel=MODEL)
    inputs: TaskOptions = group(TaskOptions)
    reading: LongTextOptions = group(LongTextOptions)
    metrics: MetricOptions = group(MetricOptions)
    doc_stride: int | None = doc_stride_option()
    tagged: TaggedReadingOptions = group(TaggedReadingOptions)
    combine: str | None = combine_option(families=("words",))
    pool: str | None = option(None, "Poolings to compare: cls, mean, max, comma-separated. Default with --data: cls "
                              "plus the pooling the model was trained with (its sentence-transformers folder's: mean "
                              "for minilm-offline); with --features: the store's.", panel=MODEL,
                              families=("sentences",))
    layers: str | None = option(None, "Layers probed one by one: -1, a list like 0,3,6 (0 = embeddings), or all. "
                                "Default with --data: all (one feature pass, a fit per layer; the features take rows x "
                                "poolings x (layers + 1) x hidden x 4 bytes of memory, 2 GiB for 100,000 rows of "
                                "minilm-offline with cls,mean: give --layers -1 for large data); with --features: "
                                "every layer in the store.", panel=MODEL)
    batch_size: int = option(64, "Rows per batch for feature extraction.", above=0)
    precision: str = precision_option()
    normalize: bool = option(False, "L2-normalise features before the probe (extraction option).", panel=MODEL,
                             families=("sentences",))
    fit: FitOptions = group(FitOptions)
    out: str | None = option(None, "Run directory: config, metrics, plots, saved probe, cached features.",
                             panel=OUTPUT)
    overwrite: bool = overwrite_option("a probe run")
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = config_problems(self)  # the data options' own rules first: they also fill unset lists
        problems += self.fit.fit_problems()
        raise_if_problems(problems + self.family.refused_options(self, "probe", self.features or self.inputs.data))

    @property
    def family(self) -> Family:
        """The problem family of --features (a store) or --data (`bertkit.families`), asked once."""
        return cached_family(self, data=self.inputs, task=self.inputs.task, store=self.features)

    @property
    def data_found(self) -> bool:
        """Whether --data is a hub name or a file that is there (a missing file is refused as missing, first)."""
        if self.inputs.data is None or not is_file_value(self.inputs.data):
            return self.inputs.data is not None
        try:
            return Path(self.inputs.data).expanduser().exists()
        except OSError:  # a name this system cannot stat: its reader refuses it
            return False

    @property
    def pools(self) -> list[str]:
        """--pool as a list (not given: cls; with --data, `probe.inputs.default_cells` adds the model's pooling)."""
        return [p.strip() for p in str(self.pool or "cls").split(",") if p.strip()]


@dataclass
class ProbeResult(ProbeReport):
    """What `bertkit probe` found (what metrics.json holds): the sweep over layers and poolings, the best cell with
    its dev (and test) scores, the baselines, the repeated fits, and the files written; on tagged data the word probes'
    table (`words`), `best` its best row; on questions on passages the span probes' table (`spans`)."""


def run(cfg: ProbeConfig, progress: bool = False) -> ProbeResult:
    """The probe of the data's (or store's) problem family (`bertkit.families`)."""
    return ProbeResult.of(cfg.family.probe(cfg, progress))
