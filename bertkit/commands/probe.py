"""`bertkit probe`: inputs (a store, or features extracted from text: `bertkit.probe.inputs`) -> per-layer sweep
(`bertkit.probe.search`, fits from `bertkit.probe.fit`) -> baselines -> repeated fits -> test -> the run directory
(config, metrics, figures, and the best probe saved in the `bertkit.probe.saved` format)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.data.options import WORD_TASK, TaskOptions, config_problems, reads_tagged
from bertkit.data.tagged import TaggedColumns, is_file_value, may_be_tagged, tagged_sources
from bertkit.data.tagscheme import tag_scheme_option
from bertkit.encoding.reading import LongTextOptions, Reading, word_pool_option
from bertkit.errors import UserError, raise_if_problems
from bertkit.features.settings import POOLS, combine_option, layers_problem
from bertkit.features.word_store import word_store_splits
from bertkit.features.words import word_settings_problems
from bertkit.models.compute import TRUST_HELP, Compute, precision_option
from bertkit.models.folders import OFFLINE_NAME
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.options import (
    DATA,
    MODEL,
    OUTPUT,
    Config,
    all_fields,
    config_dict,
    flag,
    group,
    option,
    overwrite_option,
    value,
)
from bertkit.probe.fit import FitOptions
from bertkit.probe.records import (
    Baselines,
    BestCell,
    ProbeCell,
    ProbeOutputs,
    ProbeSettings,
    Refits,
    SplitRows,
)
from bertkit.probe.word_store_run import run_word_store_probe, word_store_problems
from bertkit.scoring.options import MetricOptions

if TYPE_CHECKING:
    from bertkit.probe.words_run import WordProbeRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeConfig(Config):
    """`bertkit probe`: linear probes on frozen features, per pooling and layer, with baselines: logistic regression
    (one label), one-vs-rest logistic regression (tags) or ridge regression (numbers)."""

    ADVANCED_OPTIONS = ("stride", "trust_remote_code", "tag_scheme")
    WORD_OPTIONS = ("data", "dev", "text_column", "label_column", "task", "seed", "max_length", "stride", "model",
                    "layers", "batch_size", "precision", "C", "baselines", "out", "overwrite", "trust_remote_code",
                    "word_pool", "combine", "tag_scheme", "encoding", "cache_dir", "limit", "data_config", "train_split")
    """The options the word path (tagged data) reads; any other one given there is refused, naming it."""
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
    word_pool: str | None = word_pool_option()
    tag_scheme: str = tag_scheme_option()
    combine: str | None = combine_option()
    pool: str | None = option(None, "Poolings to compare: cls, mean, max, comma-separated. Default with --data: cls "
                              "plus the pooling the model was trained with (its sentence-transformers folder's: mean "
                              "for minilm-offline); with --features: the store's.", panel=MODEL)
    layers: str | None = option(None, "Layers probed one by one: -1, a list like 0,3,6 (0 = embeddings), or all. "
                                "Default with --data: all (one feature pass, a fit per layer; the features take rows x "
                                "poolings x (layers + 1) x hidden x 4 bytes of memory, 2 GiB for 100,000 rows of "
                                "minilm-offline with cls,mean: give --layers -1 for large data); with --features: "
                                "every layer in the store.", panel=MODEL)
    batch_size: int = option(64, "Rows per batch for feature extraction.", above=0)
    precision: str = precision_option()
    normalize: bool = option(False, "L2-normalise features before the probe (extraction option).", panel=MODEL)
    fit: FitOptions = group(FitOptions)
    out: str | None = option(None, "Run directory: config, metrics, plots, saved probe, cached features.",
                             panel=OUTPUT)
    overwrite: bool = overwrite_option("a probe run")
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        if self.reads_words:  # the data options' own rules first: they also fill unset lists
            raise_if_problems(config_problems(self) + self.word_problems())
            return
        problems = config_problems(self)
        if (self.features is None) == (self.inputs.data is None):
            problems.append("Give exactly one of --features (a `bertkit embed` store) or --data (text to extract from).")
        problems += self.reading.long_text_problems()
        problems += [f"--pool must be one of {', '.join(POOLS)}; got {pool!r}." for pool in self.pools
                     if pool not in POOLS]
        if len(set(self.pools)) != len(self.pools) or not self.pools:
            problems.append(f"--pool must list distinct poolings (cls, mean, max), e.g. cls,mean; got {self.pool!r}.")
        problems += layers_problem(self.layers)
        problems += self.inputs.task_problems()
        if self.features is not None and (self.inputs.task in ("multi_label",
                                                               "regression") or self.inputs.label_sep is not None):
            problems.append("--features stores hold one class per row; probe tags or numbers from the text with --data "
                            "(and --task / --label-sep).")
        problems += self.fit.fit_problems()
        problems += [f"{flag(name)} reads tagged data (one tag per word); {self.inputs.data} is read as sentences. "
                     f"Pass a CoNLL-style file (.iob2, .conll) or --task tags, or drop {flag(name)}."
                     for name in ("word_pool", "combine") if getattr(self, name) is not None
                     and self.data_found]  # a --data that is not there: the data reader names it, with the fix
        raise_if_problems(problems)

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
    def reads_words(self) -> bool:
        """Whether this run probes words: --task tags, --data a tagged corpus (`data.options.reads_tagged`), or
        --features a word store (`bertkit embed` on tagged data)."""
        return (reads_tagged(self.inputs.task, self.inputs.data, self.inputs.data_config, self.inputs.train_split)
                or (self.features is not None and bool(word_store_splits(self.features))))

    def word_problems(self) -> list[str]:
        """The word path's refusals: --data and --dev tagged files (or --features a word store), and no option it
        does not read."""
        if self.features is not None:
            return word_store_problems(self) + word_settings_problems(self, self.layers, self.combine)
        problems = []
        if self.inputs.data is None or self.inputs.dev is None:
            problems.append("Probing words needs --data (tagged training data) and --dev (tagged dev data: a file, or "
                            "a split of the hub dataset --data); a dev split is not held out. Pass --dev dev.iob2 "
                            "(hub: --dev validation).")
        for path in (self.inputs.data, self.inputs.dev):
            if path is not None and not may_be_tagged(path):
                problems.append(f"--task tags reads one tag per word, but {path} does not look like a tagged corpus "
                                f"(a table of sentences?). Valid: a CoNLL-style column file (a word and its tag per "
                                f"line, TAB-separated, a blank line between sentences; space-separated ones named "
                                f".conll/.iob2), JSON lines or parquet with token and tag lists, or a hub dataset. "
                                f"Pass such data, or drop --task tags to probe sentences.")
        defaults = {f.name: f.default for f in all_fields(type(self))}
        given = [f for f in defaults if f not in self.WORD_OPTIONS and value(self, f) != defaults[f]
                 and (value(self, f) or defaults[f])]  # an empty list given for an empty tuple is not given
        problems += [f"{flag(name)} does not apply to word probes (tagged data): they take {', '.join(flag(o) for o in self.WORD_OPTIONS[1:])}. Drop {flag(name)}." for name in given]
        return problems + word_settings_problems(self, self.layers, self.combine)

    @property
    def pools(self) -> list[str]:
        """--pool as a list (not given: cls; with --data, `probe.inputs.default_cells` adds the model's pooling)."""
        return [p.strip() for p in str(self.pool or "cls").split(",") if p.strip()]


@dataclass
class ProbeResult:
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

    @classmethod
    def of_words(cls, words: WordProbeRun) -> ProbeResult:
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
    def from_json(cls, record: dict[str, Any]) -> ProbeResult:
        """The result from the object metrics.json holds (its nested records typed, see `bertkit.probe.records`)."""
        typed = {"sweep": [ProbeCell.from_json(row) for row in record["sweep"]],
                 "best": BestCell.from_json(record["best"]),
                 "rows": SplitRows(dict(record["rows"])), "probe": ProbeSettings(dict(record["probe"])),
                 "baselines": Baselines.from_json(record.get("baselines")),
                 "repeats": Refits.from_json(record["repeats"]) if record.get("repeats") else None,
                 "outputs": ProbeOutputs.from_json(record.get("outputs"))}
        return cls(**{**record, **typed})


def run(cfg: ProbeConfig, progress: bool = False) -> ProbeResult:
    """Tagged data: word probes (`run_words`); else sentence probes (`run_sentences`)."""
    return run_words(cfg, progress) if cfg.reads_words else run_sentences(cfg, progress)


def run_sentences(cfg: ProbeConfig, progress: bool = False) -> ProbeResult:
    """Inputs -> per-layer sweep -> baselines -> variance -> test -> run directory."""
    from bertkit.io import ownership, rundir, trail

    cfg = read_as_saved(cfg) if cfg.inputs.data else cfg  # features made now: texts read as a saved --model records it
    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None  # claimed once valid
    check_inputs(cfg, need_labels=True, models=(cfg.model or (OFFLINE_NAME if cfg.inputs.data else None),))  # no torch
    from bertkit.probe.baselines import losing_to_baselines, run_baselines
    from bertkit.probe.search import repeat_probe, score_probe, shape_kwargs, sweep_layers
    from bertkit.scoring.metrics import load_metrics

    external = load_metrics(tuple(cfg.metrics.external_metrics))  # a --metric that cannot load stops before any work
    cache = (lambda: plan.claim().path / "features") if plan is not None else None
    check = functools.partial(check_shape_options, cfg, external)
    inputs = probe_inputs(cfg, Reading.from_options(cfg.reading), cache, check, progress)
    run_dir = plan.claim() if plan is not None else None
    cache = run_dir.path / "features" if run_dir is not None else None
    names = [str(x) for x in inputs.label_map.labels]
    kwargs, metric = shape_kwargs(cfg, inputs.label_map.task)
    say = (lambda msg: log.info(msg)) if progress else None
    sweep = sweep_layers(inputs.train, inputs.y_train, inputs.dev, inputs.y_dev, layer_names=inputs.layer_names,
                         label_names=names, progress=say, metric=metric, threshold=cfg.inputs.threshold, **kwargs)
    best = sweep.best
    result: dict[str, Any] = {
        "model": inputs.feature_meta.get("model"), "revision": inputs.feature_meta.get("revision"),
        "source": inputs.source, "features": cfg.features, "dtype": inputs.feature_meta.get("dtype"),
        "rows": {"train": len(inputs.y_train), "dev": len(inputs.y_dev),
                 **({"test": len(inputs.y_test)} if inputs.y_test is not None else {})},
        "labels": names, "probe": {k: v for k, v in kwargs.items()},
        "sweep": sweep.rows(inputs.layer_indices),
        "best": {"pool": best.pool, "layer": best.layer_name, "hidden_state": inputs.layer_indices[best.layer],
                 "C": best.fit.C, "dev": best.metrics, "accuracy_ci95": list(best.ci)},
        "notes": inputs.notes,
    }
    if "task" in kwargs:  # regression / tags: the shape, its interval, ridge alpha or tag threshold
        result["task"] = kwargs["task"]
        result["best"].update({f"{metric}_ci95": result["best"].pop("accuracy_ci95")},
                              **{k: v for k, v in best.row().items() if k in ("alpha", "threshold")})
    if cfg.fit.baselines:
        result["baselines"] = run_baselines(cfg, inputs, best, names, cache, progress)
        searched_all = len(inputs.train) == len(POOLS) and inputs.feature_meta.get("layers") == "all"
        result["notes"] += losing_to_baselines(f"{best.pool} {best.layer_name}", best.metrics[metric],
                                               result["baselines"], metric, searched_all)
    if cfg.fit.repeats:
        result["repeats"] = repeat_probe(inputs.train[best.pool][:, best.layer], inputs.y_train,
                                         inputs.dev[best.pool][:, best.layer], inputs.y_dev, repeats=cfg.fit.repeats,
                                         label_names=names, threshold=cfg.inputs.threshold, **kwargs)
    if inputs.test is not None and inputs.y_test is not None:
        result["best"]["test"] = score_probe(best.fit, inputs.test[best.pool][:, best.layer], inputs.y_test, names)
    failed = requested_metrics_or_failure(cfg, result, best, inputs, external)
    if run_dir is not None:  # a --metric that failed on the real predictions: the rest is saved first
        result["outputs"] = write_probe_run(run_dir.path, cfg, inputs, sweep, result, final_dir=run_dir.out)
        run_dir.commit()  # with --overwrite: the new run replaces the previous one only now
    if failed is not None:
        saved = (f"The probe run is saved, not lost, without those scores: {run_dir.out} (saved probe "
                 f"{result['outputs']['probe']}). " if run_dir is not None else "")
        raise UserError(f"--metric {failed.spec} failed on the best probe's predictions: {failed.reason}. {saved}Fix "
                        f"the metric script and re-run this command, or drop --metric {failed.spec}.")
    return ProbeResult.from_json(result)


def run_words(cfg: ProbeConfig, progress: bool = False) -> ProbeResult:
    """The word path: tagged train/dev read and checked, one extraction of every hidden state the table needs, a
    word probe per row (`bertkit.probe.words_run`), then the run directory."""
    from bertkit.io import ownership, rundir, trail
    from bertkit.probe.fit import DEFAULT_C
    from bertkit.probe.words_run import run_word_probe, write_word_probe_run

    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None  # claimed once it ran
    if cfg.features is not None:  # a word store: its settings are the store's (`probe.word_store_run`)
        words = run_word_store_probe(cfg, say=log.info if progress else None)
    else:
        reading = Reading.of_words(cfg.word_pool, cfg.reading.max_length, cfg.reading.stride)
        columns = TaggedColumns(cfg.inputs.text_column, cfg.inputs.label_column, cfg.tag_scheme)
        train, dev = tagged_sources(str(cfg.inputs.data), [str(cfg.inputs.dev)], cfg.inputs.data_config,
                                    cfg.inputs.train_split)
        compute = Compute.resolve("cpu", cfg.precision)  # once: words are read on the CPU, as sentence probes' text
        words = run_word_probe(train, dev, columns, reading, cfg.model or OFFLINE_NAME, cfg.layers, cfg.combine,
                               cfg.batch_size, cfg.fit.C or DEFAULT_C, cfg.inputs.seed, cfg.fit.baselines,
                               cfg.trust_remote_code,
                               say=log.info if progress else None, limit=cfg.inputs.limit, compute=compute,
                               cache_dir=cfg.inputs.cache_dir)
    if plan is not None:
        run_dir = plan.claim()
        words = write_word_probe_run(run_dir.path, words, config_dict(cfg), final_dir=run_dir.out)
        run_dir.commit()
    return ProbeResult.of_words(words)


def probe_inputs(cfg: ProbeConfig, reading: Reading, cache: Any, check: Callable[[Any, Any], None],
                 progress: bool) -> Any:
    """The features and labels (`ProbeInputs`): a --features store's, checked by `check` once its labels are read,
    or extracted now from --data as `reading` says (`check` runs as soon as the data is read), on the CPU in
    --precision."""
    from bertkit.probe.inputs import load_store_inputs, load_text_inputs

    if not cfg.features:
        return load_text_inputs(cfg, cache, Compute.resolve("cpu", cfg.precision), reading, progress, on_labels=check)
    inputs = load_store_inputs(cfg, reading)  # a store's features are made already
    check(inputs.label_map, inputs.y_train)
    return inputs


def check_shape_options(cfg: Any, external: Sequence[Any], labels: Any, y_train: Any) -> None:
    """Once the labels (`data.LabelMap`: the problem shape; `y_train`: the training labels as ids) are read, before
    any model work and before --out is made: the fit options' refusals for the shape (--class-weight, --cv folds the
    training rows cannot fill), warnings for options the shape ignores (a built-in --metric it lacks, --threshold),
    and every --metric module tried on a synthetic input of the shape (a failure stops here)."""
    from bertkit.probe.fit import check_folds, folds_for
    from bertkit.probe.search import shape_kwargs
    from bertkit.scoring.metrics import check_external
    from bertkit.scoring.shapes import inapplicable_options

    shape_kwargs(cfg, labels.task)
    folds = folds_for(labels.task, cfg.fit.C, cfg.fit.cv)
    if folds is not None:
        check_folds(y_train, folds, labels.task)
    for note in inapplicable_options(labels.task, len(labels.labels), cfg.metrics.metric_list, cfg.inputs.threshold):
        log.warning("%s", note)
    check_external(external, labels.task, len(labels.labels))


def requested_metrics_or_failure(cfg: Any, result: dict[str, Any], best: Any, inputs: Any,
                                 external: Sequence[Any]) -> Any:
    """`add_requested_metrics`; a module that fails on the real predictions is returned (and noted in the result)
    instead of raised, so the run can be saved before the failure is reported. None: every module scored."""
    from bertkit.scoring.metrics import MetricFailed

    try:
        add_requested_metrics(cfg, result["best"], best, inputs, external)
    except MetricFailed as exc:
        result["notes"].append(f"--metric {exc.spec} failed on the best probe's predictions: {exc.reason}.")
        return exc
    return None


def add_requested_metrics(cfg: Any, best_result: dict[str, Any], best: Any, inputs: Any,
                          external: Sequence[Any]) -> None:
    """The --metric scores of the best cell: each evaluate module on its dev (and test) predictions, as label ids
    against the true ids (as `bertkit evaluate` passes them), and the names asked for under `requested`."""
    from bertkit.probe.search import predicted_ids
    from bertkit.scoring.metrics import add_requested

    if not cfg.metrics.metric_list:
        return
    add_requested(best_result["dev"], cfg.metrics.metric_list, external, best.pred, inputs.y_dev)
    if "test" in best_result and inputs.test is not None and inputs.y_test is not None:
        test_pred = predicted_ids(best.fit, inputs.test[best.pool][:, best.layer])
        add_requested(best_result["test"], cfg.metrics.metric_list, external, test_pred, inputs.y_test)


def write_probe_run(run_dir: Path, cfg: Any, inputs: Any, sweep: Any, result: dict[str, Any],
                    final_dir: Path | None = None) -> dict[str, str]:
    """config.json, metrics.json, the layer-curve and confusion-matrix PNGs and the saved probe (probe/), written
    into `run_dir`; the paths reported are those in `final_dir` (where a staged run ends up)."""
    from bertkit import plots
    from bertkit.io import atomic, trail
    from bertkit.probe.baselines import BASELINE_NAMES
    from bertkit.probe.saved import save_probe

    best = sweep.best
    fingerprints = {name: ds.fingerprint for name, ds in inputs.datasets.items()}
    trail.write_run_config(run_dir, "probe", config_dict(cfg), data_fingerprints=fingerprints,
                           features=inputs.feature_meta)
    baselines = {name: b[sweep.metric] for name, b in result.get("baselines", {}).items()}
    label = BASELINE_NAMES.get(best.fit.task, BASELINE_NAMES["single_label"])
    model = Path(str(inputs.feature_meta.get("model"))).name
    curve = plots.probe_layer_curve(sweep.rows(), {label.get(k, k): v for k, v in baselines.items()},
                                    run_dir / "probe_layers.png", f"Linear probe per layer — {model}",
                                    metric=sweep.metric)
    figures = best_cell_figures(run_dir, best, inputs.y_dev)
    index = inputs.layer_indices[best.layer]
    meta = {**inputs.feature_meta, "pool": best.pool, "layers": str(index) if index is not None else inputs.feature_meta["layers"],
            "layer_name": best.layer_name, f"dev_{sweep.metric}": best.metrics[sweep.metric]}
    save_probe(run_dir / "probe", best.fit, inputs.label_map, meta)
    final = final_dir or run_dir
    outputs = {"config": str(final / "config.json"), "metrics": str(final / "metrics.json"),
               "layer_curve": str(final / curve.name), **{k: str(final / f.name) for k, f in figures.items()},
               "probe": str(final / "probe")}
    atomic.write_json_atomic(run_dir / "metrics.json", {**result, "outputs": outputs})
    return outputs


def best_cell_figures(run_dir: Path, best: Any, y_dev: Any) -> dict[str, Path]:
    """Outputs key -> path of the best cell's dev figures: confusion matrix and reliability diagram (classes),
    true-vs-predicted scatter (numbers) or per-tag F1 bars (tags)."""
    from bertkit import plots

    title = f"{best.pool} {best.layer_name}"
    if best.fit.task == "regression":
        return {"scatter": plots.save_figure(plots.regression_scatter(y_dev, best.pred, f"Dev — {title}"),
                                             run_dir / "scatter.png")}
    if best.fit.task == "multi_label":
        return {"per_label_f1": plots.per_label_f1(best.metrics["per_label"], run_dir / "per_label_f1.png",
                                                   f"Dev per-tag F1 — {title}")}
    matrix = plots.confusion_matrix(best.metrics["confusion_matrix"], best.metrics["labels"], f"Dev confusion — {title}")
    reliability = plots.reliability_diagram(best.metrics["reliability"], best.metrics["ece"], f"Dev calibration — {title}")
    return {"confusion_matrix": plots.save_figure(matrix, run_dir / "confusion_matrix.png"),
            "reliability": plots.save_figure(reliability, run_dir / "reliability.png")}
