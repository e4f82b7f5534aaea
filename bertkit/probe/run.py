"""The whole `bertkit probe` run: inputs (a store, or features extracted from text: `bertkit.probe.inputs`) ->
per-layer sweep (`bertkit.probe.sweep`, fits from `bertkit.probe.fit`) -> baselines -> repeated fits -> test ->
the run directory (config, metrics, figures, and the best probe saved in the `bertkit.probe.saved` format),
written through `runs`/`plots`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import UserError
from bertkit.probe.baselines import BASELINE_NAMES, run_baselines
from bertkit.probe.inputs import ProbeInputs, load_store_inputs, load_text_inputs
from bertkit.probe.saved import save_probe
from bertkit.probe.sweep import (
    Cell,
    Sweep,
    predicted_ids,
    repeat_probe,
    score_probe,
    shape_kwargs,
    sweep_layers,
)

log = logging.getLogger(__name__)


def run_probe(cfg: Any, progress: bool = False) -> dict[str, Any]:
    """`bertkit probe`: inputs -> per-layer sweep -> baselines -> variance -> test -> run directory. Returns the
    results (what metrics.json holds)."""
    from bertkit.config.commands import config_dict
    from bertkit.io import ownership, rundir, trail
    from bertkit.scoring.metrics import load_metrics

    # --out is looked at now (read-only) and claimed once the data and model are validated
    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None
    external = load_metrics(tuple(cfg.external_metrics))  # a --metric that cannot load stops before any work
    cache = (lambda: plan.claim().path / "features") if plan is not None else None
    check = functools.partial(check_shape_options, cfg, external)
    inputs = load_store_inputs(cfg) if cfg.features else load_text_inputs(cfg, cache, progress, on_labels=check)
    if cfg.features:  # a store's features are made already: checked once its labels are read
        check(inputs.label_map)
    run_dir = plan.claim() if plan is not None else None
    cache = run_dir.path / "features" if run_dir is not None else None
    names = [str(x) for x in inputs.label_map.labels]
    kwargs, metric = shape_kwargs(cfg, inputs.label_map.task)
    say = (lambda msg: log.info(msg)) if progress else None
    sweep = sweep_layers(inputs.train, inputs.y_train, inputs.dev, inputs.y_dev, layer_names=inputs.layer_names,
                         label_names=names, progress=say, metric=metric, threshold=cfg.threshold, **kwargs)
    best = sweep.best
    result: dict[str, Any] = {
        "model": inputs.feature_meta.get("model"), "revision": inputs.feature_meta.get("revision"),
        "source": inputs.source, "features": cfg.features, "dtype": inputs.feature_meta.get("dtype"),
        "rows": {"train": len(inputs.y_train), "dev": len(inputs.y_dev),
                 **({"test": len(inputs.y_test)} if inputs.y_test is not None else {})},
        "labels": names, "probe": {k: v for k, v in kwargs.items()},
        "sweep": sweep.rows(),
        "best": {"pool": best.pool, "layer": best.layer_name, "hidden_state": inputs.layer_indices[best.layer],
                 "C": best.fit.C, "dev": best.metrics, "accuracy_ci95": list(best.ci)},
        "notes": inputs.notes,
    }
    if "task" in kwargs:  # regression / tags: the shape, its interval, ridge alpha or tag threshold
        result["task"] = kwargs["task"]
        result["best"].update({f"{metric}_ci95": result["best"].pop("accuracy_ci95")},
                              **{k: v for k, v in best.row().items() if k in ("alpha", "threshold")})
    if cfg.baselines:
        result["baselines"] = run_baselines(cfg, inputs, best, names, cache, progress)
    if cfg.repeats:
        result["repeats"] = repeat_probe(inputs.train[best.pool][:, best.layer], inputs.y_train,
                                         inputs.dev[best.pool][:, best.layer], inputs.y_dev, repeats=cfg.repeats,
                                         label_names=names, threshold=cfg.threshold, **kwargs)
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
    return result


def check_shape_options(cfg: Any, external: Sequence[Any], labels: Any) -> None:
    """Once the labels (`data.LabelMap`: the problem shape) are read, before any model work: warnings for options
    the shape ignores (a built-in --metric it lacks, --threshold), and every --metric module tried on a synthetic
    input of the shape (a failure stops here)."""
    from bertkit.scoring.metrics import check_external
    from bertkit.scoring.shapes import inapplicable_options

    for note in inapplicable_options(labels.task, len(labels.labels), cfg.metric_list, cfg.threshold):
        log.warning("%s", note)
    check_external(external, labels.task, len(labels.labels))


def requested_metrics_or_failure(cfg: Any, result: dict[str, Any], best: Cell, inputs: ProbeInputs,
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


def add_requested_metrics(cfg: Any, best_result: dict[str, Any], best: Cell, inputs: ProbeInputs,
                          external: Sequence[Any]) -> None:
    """The --metric scores of the best cell: each evaluate module on its dev (and test) predictions, as label ids
    against the true ids (as `bertkit evaluate` passes them), and the names asked for under `requested`."""
    from bertkit.scoring.metrics import add_requested

    if not cfg.metric_list:
        return
    add_requested(best_result["dev"], cfg.metric_list, external, best.pred, inputs.y_dev)
    if "test" in best_result and inputs.test is not None and inputs.y_test is not None:
        test_pred = predicted_ids(best.fit, inputs.test[best.pool][:, best.layer])
        add_requested(best_result["test"], cfg.metric_list, external, test_pred, inputs.y_test)


def write_probe_run(run_dir: Path, cfg: Any, inputs: ProbeInputs, sweep: Sweep, result: dict[str, Any],
                    final_dir: Path | None = None) -> dict[str, str]:
    """config.json, metrics.json, the layer-curve and confusion-matrix PNGs and the saved probe (probe/), written
    into `run_dir`; the paths reported are those in `final_dir` (where a staged run ends up)."""
    from bertkit import plots
    from bertkit.config.commands import config_dict
    from bertkit.io import atomic, trail

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
    figure_key, figure = best_cell_figure(run_dir, best, inputs.y_dev)
    index = inputs.layer_indices[best.layer]
    meta = {**inputs.feature_meta, "pool": best.pool, "layers": str(index) if index is not None else inputs.feature_meta["layers"],
            "layer_name": best.layer_name, f"dev_{sweep.metric}": best.metrics[sweep.metric]}
    save_probe(run_dir / "probe", best.fit, inputs.label_map, meta)
    final = final_dir or run_dir
    outputs = {"config": str(final / "config.json"), "metrics": str(final / "metrics.json"),
               "layer_curve": str(final / curve.name), figure_key: str(final / figure.name),
               "probe": str(final / "probe")}
    atomic.write_json_atomic(run_dir / "metrics.json", {**result, "outputs": outputs})
    return outputs


def best_cell_figure(run_dir: Path, best: Cell, y_dev: np.ndarray) -> tuple[str, Path]:
    """(outputs key, path) of the best cell's dev figure: confusion matrix, true-vs-predicted scatter (numbers) or
    per-tag F1 bars (tags)."""
    from bertkit import plots

    title = f"{best.pool} {best.layer_name}"
    if best.fit.task == "regression":
        return "scatter", plots.regression_scatter(y_dev, best.pred, run_dir / "scatter.png", f"Dev — {title}")
    if best.fit.task == "multi_label":
        return "per_label_f1", plots.per_label_f1(best.metrics["per_label"], run_dir / "per_label_f1.png",
                                                  f"Dev per-tag F1 — {title}")
    return "confusion_matrix", plots.confusion_matrix(best.metrics["confusion_matrix"], best.metrics["labels"],
                                                      run_dir / "confusion_matrix.png", f"Dev confusion — {title}")
