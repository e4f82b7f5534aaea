"""The experiment-tracker options of the training commands (finetune, distill, sweep): `TrackingOptions`.

Which trackers follow a run (--report-to), where MLflow keeps it (--tracking-uri), the project it is filed under and
how often the training numbers are logged. None of them changes what is computed: a re-run may add or change them
and still resume (`bertkit.training.resume.NOT_IN_RESUME_KEY`). Starting the trackers: `bertkit.training.tracking`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.config.fields import TRACKING, option

TRACKERS = ("tensorboard", "mlflow", "trackio", "wandb")
"""The trackers --report-to names (accelerate's tracker classes underneath)."""
REPORT_TO_VALUES = ("none", *TRACKERS)
TRACKING_FIELDS = frozenset({"report_to", "tracking_uri", "project", "log_every"})
"""The option names of this group (a re-run may change them and still resume, or continue a sweep)."""


@dataclass(frozen=True)
class TrackingOptions:
    """Experiment trackers: where the run's hyper-parameters, training numbers and dev metrics are logged."""

    report_to: tuple[str, ...] = option((), "Experiment tracker to log the run to (repeatable, or a comma list): "
                                        "tensorboard (OUT/tensorboard), mlflow (see --tracking-uri), trackio, wandb, "
                                        "or none (the default).", panel=TRACKING)
    tracking_uri: str | None = option(None, "MLflow tracking URI: a local folder (works offline), file:/..., or a "
                                      "server http://host:5000. Default: MLFLOW_TRACKING_URI, else MLflow's own "
                                      "default (./mlflow.db).", panel=TRACKING)
    project: str = option("bertkit", "The MLflow experiment / Trackio or W&B project the run is filed under.",
                          panel=TRACKING)
    log_every: int = option(10, "Log the training loss (mean since the last log), learning rate, gradient norm and "
                            "samples/s every N optimizer steps.", panel=TRACKING, above=0)

    @property
    def trackers(self) -> tuple[str, ...]:
        """--report-to's trackers, comma lists split, in order, without repeats or `none`."""
        names = [part.strip().lower() for value in self.report_to for part in str(value).split(",") if part.strip()]
        return tuple(name for name in dict.fromkeys(names) if name != "none")

    def data_problems(self) -> list[str]:
        """The other groups' problems (cooperative: `DataOptions.data_problems` checks the declarations), then
        this group's."""
        problems: list[str] = super().data_problems()  # type: ignore[misc]
        return problems + self.tracking_problems()

    def tracking_problems(self) -> list[str]:
        """--report-to names known trackers, `none` alone; --project is not empty; --tracking-uri only with mlflow."""
        if not all(isinstance(value, str) for value in self.report_to or ()):
            return []  # a wrong type is reported by the declarations' check
        given = [part.strip().lower() for value in self.report_to for part in value.split(",") if part.strip()]
        problems = []
        unknown = [name for name in given if name not in REPORT_TO_VALUES]
        if unknown:
            problems.append(f"--report-to {', '.join(unknown)}: not a tracker bertkit logs to. Valid: "
                            f"{', '.join(REPORT_TO_VALUES)}. Pass e.g. --report-to tensorboard.")
        elif "none" in given and len(set(given)) > 1:
            problems.append(f"--report-to none turns the trackers off, but {', '.join(self.trackers)} was also "
                            f"given. Drop --report-to none, or the others.")
        if isinstance(self.project, str) and not self.project.strip():
            problems.append("--project must name the experiment/project the run is filed under; got an empty text. "
                            "Pass e.g. --project sst2, or drop it (default: bertkit).")
        if self.tracking_uri is not None and "mlflow" not in self.trackers:
            problems.append(f"--tracking-uri {self.tracking_uri} is where MLflow keeps runs, but --report-to does not "
                            f"include mlflow. Add --report-to mlflow, or drop --tracking-uri.")
        return problems
