"""A probe's result (`ProbeReport`, what metrics.json holds) and its parts as typed records: the sweep's cells, the
best cell, the baselines and the refits.
`bertkit probe` returns them (`cli/show.py` reads their attributes); each is read from the JSON object metrics.json
holds (`from_json`) and writes that object back unchanged (`JsonRecord`), so --json and metrics.json stay as they were.
Scores stay a map from metric name to value: which metrics a probe reports depends on its problem shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from bertkit.data.options import WORD_TASK
from bertkit.io.atomic import JsonRecord

if TYPE_CHECKING:
    from bertkit.probe.span_records import SpanProbeRun
    from bertkit.probe.words_run import WordProbeRun

PLACE_KEYS = frozenset({"layer", "hidden_state", "C", "alpha", "threshold", "n", "cv"})
"""Entries of a record that say where or how it was fitted (or on how many rows), not how well it scored."""


def scores_of(record: dict[str, Any]) -> dict[str, float | None]:
    """The record's metric values: its numbers, and None for a metric undefined on these rows (Pearson of constant
    predictions), less `PLACE_KEYS` (flags, lists and maps left out)."""
    return {k: None if v is None else float(v) for k, v in record.items()
            if (v is None or isinstance(v, int | float) and not isinstance(v, bool)) and k not in PLACE_KEYS}


def intervals_of(record: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """metric -> its 95% bootstrap interval, from the record's `<metric>_ci95` entries."""
    return {k.removesuffix("_ci95"): (float(v[0]), float(v[1])) for k, v in record.items()
            if k.endswith("_ci95") and v is not None}


@dataclass(frozen=True)
class ProbeCell(JsonRecord):
    """One (pooling, layer) cell of the sweep: its dev scores, their intervals, its penalty C."""

    pool: str
    layer_name: str
    best: bool
    C: float
    scores: dict[str, float | None]
    intervals: dict[str, tuple[float, float]]
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> ProbeCell:
        return cls(str(record["pool"]), str(record["layer_name"]), bool(record.get("best")), float(record["C"]),
                   scores_of(record), intervals_of(record), record)


@dataclass(frozen=True)
class ProbeBaseline(JsonRecord):
    """A baseline's dev scores; `where` is the random-init encoder's (pooling, layer), `C` its penalty if fitted."""

    name: str
    scores: dict[str, float | None]
    C: float | None
    where: tuple[str, str] | None
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, name: str, record: dict[str, Any]) -> ProbeBaseline:
        where = (str(record["pool"]), str(record["layer"])) if "pool" in record else None
        C = float(record["C"]) if "C" in record else None
        return cls(name, scores_of(record), C, where, record)


@dataclass(frozen=True)
class HeldOut(JsonRecord):
    """The best cell's scores on the test split."""

    rows: int
    scores: dict[str, float | None]
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> HeldOut:
        return cls(int(record["n"]), scores_of(record), record)


@dataclass(frozen=True)
class BestCell(JsonRecord):
    """The best cell by the dev metric: where it is, its penalty, its dev scores (and the --metric ones asked for),
    the tag threshold or ridge alpha of the shaped probes, and its test scores where there is a test split."""

    pool: str
    layer: str
    C: float
    dev: dict[str, float | None]
    asked: dict[str, float]
    """The scores --metric asked for: built-in ones by name, then the `evaluate` modules'."""
    alpha: float | None
    threshold: float | list[float] | None
    """The tag threshold of a multi-label probe (one for all, or one per tag); None for other shapes."""
    test: HeldOut | None
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> BestCell:
        dev = record.get("dev", {})
        asked = {k: float(dev[k]) for k in dev.get("requested", ()) if isinstance(dev.get(k), float)}
        asked.update({k: float(v) for k, v in dev.get("external", {}).items()})
        test = HeldOut.from_json(record["test"]) if "test" in record else None
        alpha = float(record["alpha"]) if "alpha" in record else None
        return cls(str(record["pool"]), str(record["layer"]), float(record["C"]), scores_of(dev), asked, alpha,
                   record.get("threshold"), test, record)


@dataclass(frozen=True)
class Spread:
    mean: float
    std: float


@dataclass(frozen=True)
class Refits(JsonRecord):
    """The best cell refitted `repeats` times on random `fraction`s of the training rows: each metric's spread."""

    repeats: int
    fraction: float
    spreads: dict[str, Spread]
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Refits:
        spreads = {k: Spread(float(v["mean"]), float(v["std"])) for k, v in record.items() if isinstance(v, dict)}
        return cls(int(record["repeats"]), float(record["fraction"]), spreads, record)



@dataclass(frozen=True)
class SplitRows(JsonRecord):
    """Rows per split the probe was fitted and scored on (train, dev, and test when given)."""

    record: dict[str, int]

    @property
    def train(self) -> int:
        return self.record["train"]

    @property
    def dev(self) -> int:
        return self.record["dev"]


@dataclass(frozen=True)
class ProbeSettings(JsonRecord):
    """The probe's kind and settings (C or its search, class weights; the shape for numbers and tags), as fitted."""

    record: dict[str, Any]


@dataclass(frozen=True)
class Baselines(JsonRecord):
    """The baselines' scores by name (majority, tfidf, random_encoder: which ran is data)."""

    by_name: Mapping[str, ProbeBaseline]

    @classmethod
    def from_json(cls, record: Mapping[str, Any] | None) -> Baselines | None:
        return cls({k: ProbeBaseline.from_json(k, v) for k, v in record.items()}) if record else None

    def to_json(self) -> dict[str, Any]:
        return {k: v.to_json() for k, v in self.by_name.items()}


@dataclass(frozen=True)
class ProbeOutputs(JsonRecord):
    """What a probe run wrote: output name (metrics, layer_curve, probe, the shape's figure...) -> path."""

    paths: Mapping[str, str]

    @classmethod
    def from_json(cls, record: Mapping[str, str] | None) -> ProbeOutputs | None:
        return cls(dict(record)) if record else None

    def to_json(self) -> dict[str, str]:
        return dict(self.paths)


@dataclass
class ProbeReport:
    """What `bertkit probe` found (what metrics.json holds): the sweep over layers and poolings, the best cell with
    its dev (and test) scores, the baselines, the repeated fits, and the files written."""

    model: str | None
    revision: str | None
    source: str
    features: str | None
    dtype: str | None
    """The precision the features were computed in."""
    rows: SplitRows
    labels: list[str]
    probe: ProbeSettings
    """The probe's kind and settings (C or its search, class weights; the shape for numbers and tags)."""
    sweep: list[ProbeCell]
    best: BestCell
    notes: list[str] = field(default_factory=list)
    task: str | None = field(default=None, metadata={"omit_empty": True})
    """regression or multi_label (their own metrics); None for one label per row."""
    baselines: Baselines | None = field(default=None, metadata={"omit_empty": True})
    repeats: Refits | None = field(default=None, metadata={"omit_empty": True})
    outputs: ProbeOutputs | None = field(default=None, metadata={"omit_empty": True})
    words: WordProbeRun | None = field(default=None, metadata={"omit_empty": True})
    """Tagged data: the word probes' table (a row per layer choice, baselines, scheme, reading); then `best` is its
    best row and `sweep` is empty."""
    spans: SpanProbeRun | None = field(default=None, metadata={"omit_empty": True})
    """Questions on passages: the span probes' table (a row per layer choice, its official dev EM and F1, the
    baselines); then `best` is its best row and `sweep` is empty."""

    @classmethod
    def of_words(cls, words: WordProbeRun) -> ProbeReport:
        """The result of the word path: its table, with the sentence fields saying what they can (sentences per
        split, the tags, the best row)."""
        best = words.table.best()
        metric = best.scores.main_name.replace(" ", "_")
        outputs = ProbeOutputs.from_json(dict(words.outputs))
        return cls(words.model, words.revision, words.train, words.features, words.compute.precision,
                   SplitRows(dict(words.sentences)),
                   list(words.table.tags), ProbeSettings({"kind": "logistic regression per word", "C": words.C}), [],
                   BestCell.from_json({"pool": f"word {words.reading.word_pool}", "layer": best.label, "C": words.C,
                                       "dev": {metric: best.scores.main}}),
                   list(words.notes), task=WORD_TASK, outputs=outputs, words=words)

    @classmethod
    def of_spans(cls, spans: SpanProbeRun) -> ProbeReport:
        """The result of the span path: its table, with the sentence fields saying what they can (questions per
        split, the heads' two outputs, the best row by dev F1)."""
        best = spans.table.best()
        return cls(spans.model, spans.revision, spans.train, None, spans.compute.precision,
                   SplitRows(dict(spans.questions)), ["start", "end"],
                   ProbeSettings({"kind": "linear start and end heads per token", "C": spans.C}), [],
                   BestCell.from_json({"pool": "tokens", "layer": best.label, "C": spans.C,
                                       "dev": {"f1": best.scores.f1, "exact_match": best.scores.exact_match}}),
                   list(spans.notes), task="spans", outputs=ProbeOutputs.from_json(dict(spans.outputs)), spans=spans)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> ProbeReport:
        """The result from the object metrics.json holds (its nested records typed, see `bertkit.probe.records`)."""
        typed = {"sweep": [ProbeCell.from_json(row) for row in record["sweep"]],
                 "best": BestCell.from_json(record["best"]),
                 "rows": SplitRows(dict(record["rows"])), "probe": ProbeSettings(dict(record["probe"])),
                 "baselines": Baselines.from_json(record.get("baselines")),
                 "repeats": Refits.from_json(record["repeats"]) if record.get("repeats") else None,
                 "outputs": ProbeOutputs.from_json(record.get("outputs"))}
        return cls(**{**record, **typed})

    @classmethod
    def of(cls, report: ProbeReport) -> ProbeReport:
        """This class (a command's result) holding `report`'s values."""
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})
