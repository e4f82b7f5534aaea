"""The metric options of the commands that score predictions (`MetricOptions`: --metric), --metric-for-best's rule
and the loss weighting choices: scoring owns what its metric names mean."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from bertkit.options import RUN, option
from bertkit.scoring.table import SHAPE, SPAN_METRICS

BEST_METRICS = tuple(dict.fromkeys([*(name for shape in SHAPE.values() for name in shape.scored()), *SPAN_METRICS]))
"""The built-in metrics (scikit-learn/scipy, offline; `bertkit.scoring.metrics`); any other --metric is an evaluate module."""
METRIC_FOR_BEST_HELP = (
    f"Dev metric that picks the best checkpoint: a built-in one ({', '.join(SHAPE['single_label'].scored())}), or a "
    f"--metric evaluate module or one of its scores. Regression: {', '.join(SHAPE['regression'].metrics)}; "
    f"multi-label: {', '.join(SHAPE['multi_label'].metrics)}; questions on passages: {', '.join(SPAN_METRICS)}. "
    f"Default: {SHAPE['single_label'].headline} ({SHAPE['regression'].headline} / {SHAPE['multi_label'].headline} / "
    f"f1 for those), or the --task-preset's official metric.")
CLASS_WEIGHTS = ("none", "balanced")
CALIBRATIONS = ("none", "temperature")
"""--calibrate's values (the first is the default): temperature scaling, `bertkit.scoring.calibration`."""


@dataclass(frozen=True)
class MetricOptions:
    """Extra metrics: built-in names, or `evaluate` modules (hub names, cached or online; local metric scripts)."""

    metric: tuple[str, ...] = option((), "A metric to report (repeatable, or a comma list): a built-in name, or an "
                                     "evaluate module: a hub name (matthews_correlation, glue:mrpc) from the hub or "
                                     "the local evaluate cache, or a local metric script (.py or its folder).",
                                     panel=RUN)

    @property
    def metric_list(self) -> list[str]:
        """--metric values, comma lists split, in order, without repeats."""
        names = [part.strip() for value in self.metric for part in str(value).split(",") if part.strip()]
        return list(dict.fromkeys(names))

    @property
    def external_metrics(self) -> list[str]:
        """The --metric values that are evaluate modules (not built-in names)."""
        return [name for name in self.metric_list if name not in BEST_METRICS]


def metric_for_best_problems(name: str | None, external: list[str]) -> list[str]:
    """--metric-for-best must be a built-in metric, or name a --metric evaluate module (or one of its scores,
    `NAME/score`): a module is loaded before training starts, so a missing one stops the run at once. (Whether the
    data's problem shape has it is checked once the data is read, before training: `objectives.best_metric`.)"""
    if name is None or name in BEST_METRICS or name in external:
        return []
    stems = {Path(spec.partition(":")[0]).stem: spec for spec in external}
    if name in stems or name.partition("/")[0] in stems:
        return []
    close = difflib.get_close_matches(name, BEST_METRICS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return [f"--metric-for-best {name!r} is not a built-in metric{hint} ({', '.join(BEST_METRICS)}) nor one of the "
            f"--metric evaluate modules ({', '.join(external) or 'none given'}). To pick the best checkpoint by an "
            f"evaluate module, also pass it: --metric {name} --metric-for-best {name}."]
