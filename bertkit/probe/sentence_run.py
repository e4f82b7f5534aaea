"""The sentences family's probe (`bertkit probe` on rows of text or a feature store): inputs (a store, or features
extracted from text: `bertkit.probe.inputs`) -> per-layer sweep (`bertkit.probe.search`, fits from `bertkit.probe.fit`)
-> baselines -> repeated fits -> test -> the run directory (config, metrics, figures, and the best probe saved in the
`bertkit.probe.saved` format)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import POOLS
from bertkit.models.compute import Compute
from bertkit.models.folders import OFFLINE_NAME
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.options import config_dict
from bertkit.probe.records import ProbeReport

log = logging.getLogger(__name__)


def probe_sentences(cfg: Any, compute_for: Callable[[], Compute], progress: bool = False) -> ProbeReport:
    """Inputs -> per-layer sweep -> baselines -> variance -> test -> run directory. `compute_for`: the command's one
    resolution of --precision, asked where features are extracted now (a store's are made already)."""
    cfg, plan = checked_plan(cfg)
    from bertkit.probe.baselines import losing_to_baselines, run_baselines
    from bertkit.probe.search import repeat_probe, score_probe, shape_kwargs, sweep_layers
    from bertkit.scoring.metrics import load_metrics

    external = load_metrics(tuple(cfg.metrics.external_metrics))  # a --metric that cannot load stops before any work
    cache = (lambda: plan.claim().path / "features") if plan is not None else None
    check = functools.partial(check_shape_options, cfg, external)
    inputs = probe_inputs(cfg, Reading.from_options(cfg.reading), cache, check, progress, compute_for)
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
    return ProbeReport.from_json(result)


def checked_plan(cfg: Any) -> tuple[Any, Any]:
    """(`cfg` read as a saved --model records it, where features are made now; the --out plan, claimed once
    everything is valid), once the inputs were checked (before torch is imported)."""
    from bertkit.io import ownership, rundir, trail

    cfg = read_as_saved(cfg) if cfg.inputs.data else cfg  # features made now: texts read as a saved --model records it
    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None  # claimed once valid
    check_inputs(cfg, need_labels=True, models=(cfg.model or (OFFLINE_NAME if cfg.inputs.data else None),))  # no torch
    return cfg, plan


def probe_inputs(cfg: Any, reading: Reading, cache: Any, check: Callable[[Any, Any], None], progress: bool,
                 compute_for: Callable[[], Compute]) -> Any:
    """The features and labels (`ProbeInputs`): a --features store's, checked by `check` once its labels are read,
    or extracted now from --data as `reading` says (`check` runs as soon as the data is read), on the CPU in
    --precision."""
    from bertkit.probe.inputs import load_store_inputs, load_text_inputs

    if not cfg.features:
        return load_text_inputs(cfg, cache, compute_for(), reading, progress, on_labels=check)
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
    trail.write_run_config(run_dir, "probe", config_dict(cfg), "sentences", data_fingerprints=fingerprints,
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
