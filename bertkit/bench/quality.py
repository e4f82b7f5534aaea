"""`bench --quality`: each model scored by the probe or finetune command's own function, in this process, with
the same data settings for every model.

`--quality-args` is read with the quality command's option declarations (the config fields its CLI flags come
from; `config/quality_args.py`), and each command's config is built - and so validated - before any benchmark
runs. The score is the command's primary dev metric: the probe's best cell's dev accuracy (the metric its layer
sweep picks the best cell by), fine-tuning's --metric-for-best at its best evaluation.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config.commands import QUALITY_CONFIGS, FinetuneConfig, ProbeConfig
from bertkit.config.fields import flag
from bertkit.config.quality_args import parse_quality_args
from bertkit.data.options import DataOptions
from bertkit.errors import UserError

log = logging.getLogger(__name__)

PROBE_METRIC = "accuracy"
"""The dev metric `probe.run_probe`'s layer sweep picks its best cell by."""
SHARED_FIELDS = (*(f.name for f in dataclasses.fields(DataOptions)), "max_length")
"""bench options every quality run gets from bench itself: the data settings and the truncation length."""
EACH_MODEL = "(set for each model)"
"""--model and --out of the plan's config: replaced per model by `measure_quality`."""


@dataclass(frozen=True)
class QualityPlan:
    """One --quality command: its validated config (model and out set per model) and the --quality-args given."""

    kind: str
    config: Any
    extra: tuple[str, ...] = ()


def plan_quality(cfg: Any) -> list[QualityPlan]:
    """The --quality commands of a BenchConfig, their configs built (so every value checked) before benchmarking."""
    extra = tuple(shlex.split(cfg.quality_args or ""))
    return [QualityPlan(kind, quality_config(kind, cfg, extra), extra) for kind in cfg.quality_kinds]


def quality_config(kind: str, cfg: Any, extra: tuple[str, ...]) -> Any:
    """`kind`'s config: a --recipe in --quality-args < bench's data settings < the other --quality-args."""
    config_cls = QUALITY_CONFIGS[kind]
    recipe, values = parse_quality_args(kind, config_cls, extra)
    # unset (None) bench options leave a recipe's value alone, as omitted flags did on the command line
    shared = {name: getattr(cfg, name) for name in SHARED_FIELDS if getattr(cfg, name) is not None}
    try:
        config = config_cls(**{**recipe, **shared, "model": EACH_MODEL, "out": EACH_MODEL, **values})
    except UserError as exc:
        raise UserError(f"--quality {kind} with --quality-args {cfg.quality_args!r}: {exc}") from None
    if kind == "finetune" and config.metric_for_best == "loss":
        raise UserError("--quality-args --metric-for-best loss: the quality score is compared as a share of the "
                        "baseline's (higher is better), which a loss is not. Pick accuracy, f1 or mcc.")
    return config


# ---------------------------------------------------------------- running


def measure_quality(plan: QualityPlan, models: dict[str, str], out_dir: Path) -> dict[str, dict[str, Any]]:
    """Run `plan`'s command for each model (label -> hub id or folder); model i writes into `out_dir/<kind>-<i>`.

    A model whose run fails gets status "failed" and the message; the other models and the benchmark go on.
    """
    out = {}
    for i, (label, source) in enumerate(models.items()):
        config = dataclasses.replace(plan.config, model=source, out=str(out_dir / f"{plan.kind}-{i}"))
        record: dict[str, Any] = {"command": command_line(plan, config)}
        log.info("quality (%s): %s", plan.kind, record["command"])
        try:
            metric, score = SCORERS[plan.kind](config)
        except UserError as exc:
            out[label] = {**record, "status": "failed", "message": str(exc)[:500]}
            continue
        except Exception as exc:  # a crash in one model's run must not lose the benchmark already measured
            log.exception("quality (%s) of %s failed", plan.kind, label)
            out[label] = {**record, "status": "failed", "message": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        out[label] = {**record, "status": "ok", "metric": metric, "score": score}
    return out


def command_line(plan: QualityPlan, config: Any) -> str:
    """The `bertkit <kind> ...` command that runs the same as this in-process run (for the report)."""
    args = ["bertkit", plan.kind, "--model", config.model]
    for name in SHARED_FIELDS:
        value = getattr(config, name)
        if value is not None:
            args += [flag(name), str(value)]
    return shlex.join([*args, "--out", config.out, *plan.extra])


def probe_score(config: ProbeConfig) -> tuple[str, float]:
    """`bertkit probe`'s best cell: (where in its results, dev accuracy)."""
    from bertkit.probe.run import run_probe

    result = run_probe(config, progress=False)
    return f"best.dev.{PROBE_METRIC}", float(result["best"]["dev"][PROBE_METRIC])


def finetune_score(config: FinetuneConfig) -> tuple[str, float]:
    """`bertkit finetune`'s best evaluation: (where in its metrics, its --metric-for-best value)."""
    from bertkit.training.finetune import finetune

    metrics = finetune(config, progress=False).metrics
    name = metrics["best_metric_name"]
    return f"best_dev.{name}", float(metrics["best_dev"][name])


SCORERS = {"probe": probe_score, "finetune": finetune_score}
