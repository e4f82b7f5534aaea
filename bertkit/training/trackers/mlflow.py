"""--report-to mlflow: a run in MLflow experiment --project, in the store --tracking-uri names (a plain folder works
offline). Before the run, a store that cannot work is refused (a database store without SQLAlchemy, a folder inside
--out); a resumed run continues the recorded MLflow run when the store is the same, skipping the steps at or below
each metric's last logged one."""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.training.trackers.base import RunStart, Tracker, TrackerRun, TrackingPlan

log = logging.getLogger(__name__)

SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
"""MLflow stores that need SQLAlchemy."""


def mlflow_uri(plan: TrackingPlan) -> str | None:
    """The MLflow tracking URI: --tracking-uri (a plain folder becomes its file: URI), else MLFLOW_TRACKING_URI;
    None: MLflow's own default."""
    uri = plan.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
    if uri is None or "://" in uri or uri.startswith("file:"):
        return uri
    return Path(uri).expanduser().resolve().as_uri()  # a folder (file store)


class MLflow(Tracker):
    name = "mlflow"
    choice = "mlflow (see --tracking-uri)"  # type: ignore[assignment]

    def check(self, plan: TrackingPlan) -> None:
        """Refuse a store that needs SQLAlchemy without it, or one inside --out (the run directory holds only
        bertkit's files)."""
        uri = mlflow_uri(plan)
        if uri is None:
            import mlflow

            uri = mlflow.get_tracking_uri()
        given = f"--tracking-uri {plan.tracking_uri}" if plan.tracking_uri else f"MLflow's store {uri}"
        if uri.split(":", 1)[0].split("+", 1)[0] in SQL_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
            raise UserError(f"{given} is a database store, which needs the sqlalchemy package (not installed). Pass "
                            f"--tracking-uri with a local folder (e.g. --tracking-uri mlruns, works offline) or an "
                            f"MLflow server (http://host:5000), or install it: pip install sqlalchemy.")
        folder = _file_store(uri)
        out = Path(plan.out or "").expanduser().resolve()
        if folder is not None and (folder == out or out in folder.parents):
            raise UserError(f"--tracking-uri {plan.tracking_uri or uri} is inside --out {plan.out}: a run directory "
                            f"holds only the files bertkit writes, so the next run would refuse it. Pass a folder "
                            f"outside it, e.g. --tracking-uri {out.parent / 'mlruns'}.")

    def start(self, run: RunStart) -> TrackerRun:
        """The recorded MLflow run again when the tracking URI is the same (and the run still there), else a new one
        named after the run directory, with the hyper-parameters as its params."""
        handle, uri, run_id = _started_run(run)
        if run_id is None:
            handle.store_init_configuration(dict(run.hparams))
        info = handle.active_run.info
        where = {"tracking_uri": uri, "experiment": run.plan.project, "experiment_id": info.experiment_id,
                 "run_id": info.run_id, "run": run.name}
        return TrackerRun(self, handle, where, done=_last_steps(run_id) if run_id is not None else {})

    def finish(self, run: TrackerRun, ok: bool) -> None:
        import mlflow

        mlflow.end_run(status="FINISHED" if ok else "FAILED")

    def summary_line(self, where: Mapping[str, Any]) -> str:
        return (f"mlflow: run {where['run_id']} in experiment {where['experiment']} at {where['tracking_uri']}"
                f"  (view: mlflow ui --backend-store-uri {where['tracking_uri']})")


def _started_run(run: RunStart) -> tuple[Any, str, str | None]:
    """(accelerate's MLflowTracker started, the tracking URI, the continued MLflow run's id or None); whatever the
    store says is one UserError naming the option."""
    import mlflow
    from accelerate.tracking import MLflowTracker

    uri = mlflow_uri(run.plan)
    try:
        if uri is not None:
            if uri.startswith("file:"):
                os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 refuses a folder store without it
            mlflow.set_tracking_uri(uri)
        uri = mlflow.get_tracking_uri()
        run_id = run.saved.get("run_id") if run.saved.get("tracking_uri") == uri else None
        if run_id is not None and not _run_exists(run_id):
            log.warning("the MLflow run %s of this run directory is gone from %s: a new MLflow run starts", run_id, uri)
            run_id = None
        handle = MLflowTracker(experiment_name=run.plan.project, run_id=run_id, run_name=run.name)
        handle.start()
    except Exception as exc:  # noqa: BLE001 - whatever the store says, one message naming the option
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"MLflow could not start a run at {uri or 'its default store'} ({first}). Pass "
                        f"--tracking-uri with a local folder (e.g. --tracking-uri mlruns, works offline), file:/abs/path "
                        f"or an MLflow server (http://host:5000), then re-run: the run resumes.") from None
    return handle, uri, run_id


def _file_store(uri: str) -> Path | None:
    """The folder of a file: URI (None for other stores)."""
    if not uri.startswith("file:"):
        return None
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(uri).path)).resolve()


def _run_exists(run_id: str) -> bool:
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient().get_run(run_id).info.lifecycle_stage != "deleted"
    except Exception:  # noqa: BLE001 - not found
        return False


def _last_steps(run_id: str) -> dict[str, int]:
    """Each metric's last logged step in an MLflow run (what a resumed run must not log again)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    keys = client.get_run(run_id).data.metrics
    return {key: max((m.step for m in client.get_metric_history(run_id, key)), default=0) for key in keys}


TRACKER = MLflow()
