"""Experiment trackers (--report-to) through accelerate's tracker classes: TensorBoard, MLflow, Trackio, W&B.

`check_trackers` runs before anything is claimed or trained (a tracker whose package is missing, or an MLflow store
that cannot work, is one UserError). `started_trackers` runs after the checkpoint is restored: on the main process it
starts each tracker - continuing the tracker run recorded in OUT/trackers.json when there is one (`recorded_runs`,
read once the run directory is claimed) - and logs the hyper-parameters of a new tracker run; every process gets a
`RunTrackers` (the loss mean is a collective). The loop calls `RunTrackers.step_done` after each optimizer step and `RunTrackers.evaluated` after each dev
evaluation; everything is logged at step = the global optimizer step:

    train/loss (mean since the last log), train/learning_rate, train/grad_norm, train/samples_per_second,
    train/epoch every --log-every steps; eval/<metric> for every numeric dev metric (eval/loss included).

A resumed run logs no step twice: TensorBoard's writer purges the events after the restored step (purge_step),
MLflow skips steps at or below each metric's last logged step, W&B and Trackio skip the steps their resumed run
already has. accelerate's `end_training` is never called (it destroys the process group sweeps still need).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import atomic, library_files, record
from bertkit.training.loop import Session, TrainState
from bertkit.training.options import FinetuneOptions

log = logging.getLogger(__name__)

RECORD = "trackers.json"
"""In the run directory: which tracker runs follow it (MLflow run id and URI, W&B id, Trackio project/name)."""
RECORD_FORMAT = "bertkit-trackers/1"
TENSORBOARD = "tensorboard"
"""The run directory's folder of TensorBoard event files."""
PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "trackio": "trackio", "wandb": "wandb"}
"""The package (import name = pip name) each tracker needs."""
SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
"""MLflow stores that need SQLAlchemy."""


# ---------------------------------------------------------------- before the run


def check_trackers(cfg: FinetuneOptions) -> None:
    """Refuse, before anything is claimed or trained, a tracker that cannot start: its package missing, or an MLflow
    store that needs SQLAlchemy without it, or one inside --out (the run directory holds only bertkit's files)."""
    for name in cfg.tracking.trackers:
        package = PACKAGES[name]
        if importlib.util.find_spec(package) is None:
            raise UserError(f"--report-to {name} needs the {package} package, which is not installed. Install the "
                            f"trackers with: pip install 'bertkit[track]'  (or: pip install {package}), or drop "
                            f"--report-to {name}.")
    if "mlflow" in cfg.tracking.trackers:
        _check_mlflow_store(cfg)


def mlflow_uri(cfg: FinetuneOptions) -> str | None:
    """The MLflow tracking URI: --tracking-uri (a plain folder becomes its file: URI), else MLFLOW_TRACKING_URI;
    None: MLflow's own default."""
    uri = cfg.tracking.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
    if uri is None or "://" in uri or uri.startswith("file:"):
        return uri
    return Path(uri).expanduser().resolve().as_uri()  # a folder (file store)


def _check_mlflow_store(cfg: FinetuneOptions) -> None:
    uri = mlflow_uri(cfg)
    if uri is None:
        import mlflow

        uri = mlflow.get_tracking_uri()
    given = f"--tracking-uri {cfg.tracking.tracking_uri}" if cfg.tracking.tracking_uri else f"MLflow's store {uri}"
    if uri.split(":", 1)[0].split("+", 1)[0] in SQL_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
        raise UserError(f"{given} is a database store, which needs the sqlalchemy package (not installed). Pass "
                        f"--tracking-uri with a local folder (e.g. --tracking-uri mlruns, works offline) or an MLflow "
                        f"server (http://host:5000), or install it: pip install sqlalchemy.")
    folder = _file_store(uri)
    out = Path(cfg.output.out or "").expanduser().resolve()
    if folder is not None and (folder == out or out in folder.parents):
        raise UserError(f"--tracking-uri {cfg.tracking.tracking_uri or uri} is inside --out {cfg.output.out}: a run "
                        f"directory holds only the files bertkit writes, so the next run would refuse it. Pass a "
                        f"folder outside it, e.g. --tracking-uri {out.parent / 'mlruns'}.")


def _file_store(uri: str) -> Path | None:
    """The folder of a file: URI (None for other stores)."""
    if not uri.startswith("file:"):
        return None
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(uri).path)).resolve()


# ---------------------------------------------------------------- the run's trackers


@dataclass
class Backend:
    """One started tracker and the steps its run already has (skipped: a resumed run logs no step twice)."""

    name: str
    tracker: Any
    done: dict[str, int] = field(default_factory=dict)
    """metric key -> its last logged step (MLflow)."""
    done_before: int = 0
    """Every step up to this one is logged already (W&B, Trackio); 0: none."""
    finished: bool = False
    folder: Path | None = None
    """The folder in the run directory the tracker's library writes (TensorBoard): its files are recorded as the
    library makes them (`library_files`), with their digests once it is closed."""

    def new_values(self, values: dict[str, float], step: int) -> dict[str, float]:
        return {k: v for k, v in values.items() if step > max(self.done.get(k, 0), self.done_before)}


@dataclass
class RunTrackers:
    """The trackers following one run: started ones on the main process, none elsewhere (every process takes part
    in the loss mean of a log step)."""

    cfg: FinetuneOptions
    backends: list[Backend]
    where: dict[str, Any]
    """Where the run is logged, per tracker (metrics.json "trackers")."""
    grad_norm: float | None = None
    """The gradient norm of the last optimizer step (before clipping), when it was computed."""
    rows: int = 0
    since: float = field(default_factory=time.perf_counter)

    def due(self, step: int) -> bool:
        """Whether optimizer step `step` is a log step."""
        return step % self.cfg.tracking.log_every == 0

    def step_done(self, session: Session, state: TrainState, logged: dict[str, float] | None, batch_rows: int) -> None:
        """After an optimizer step; on a log step (`logged`: the loop's mean training loss and learning rate since
        the last one), log the training numbers."""
        self.rows += batch_rows
        if logged is None:
            return
        now = time.perf_counter()
        values = {"train/loss": logged["train_loss"], "train/learning_rate": logged["lr"],
                  "train/samples_per_second": self.rows / max(now - self.since, 1e-9),
                  "train/epoch": state.epoch + state.step_in_epoch / max(session.steps_per_epoch, 1)}
        if self.grad_norm is not None:
            values["train/grad_norm"] = self.grad_norm
        self.rows, self.since, self.grad_norm = 0, now, None
        self.log(values, state.global_step)

    def evaluated(self, record: dict[str, Any]) -> None:
        """After a dev evaluation: every numeric dev metric of its record as eval/<name>."""
        values = {f"eval/{k[len('dev_'):]}": float(v) for k, v in record.items()
                  if k.startswith("dev_") and isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v)}
        self.log(values, int(record["step"]))

    def log(self, values: dict[str, float], step: int) -> None:
        for backend in self.backends:
            new = backend.new_values(values, step)
            if new:
                backend.tracker.log(new, step=step)

    def finish(self, ok: bool) -> None:
        """Close every tracker run (once; `ok`: the training finished). A tracker that fails to close is logged:
        the run's own outputs are what matter."""
        for backend in self.backends:
            if backend.finished:
                continue
            backend.finished = True
            try:
                _finish(backend, ok)
            except Exception as exc:  # noqa: BLE001 - a tracker's own failure never loses the run
                log.warning("could not close the %s run: %s", backend.name, exc)


def recorded_runs(session: Session) -> dict[str, Any]:
    """What the run directory's trackers.json records of the tracker runs following this run (a resumed run continues
    them), read once the run directory is claimed: {} without --report-to, on the other processes, or for a new run."""
    if not session.cfg.tracking.trackers or not session.accelerator.is_main_process:
        return {}
    saved = atomic.read_json_or_none(session.out / RECORD)
    return saved if isinstance(saved, dict) and saved.get("format") == RECORD_FORMAT else {}


def started_trackers(session: Session, state: TrainState, fingerprints: dict[str, str],
                     saved: dict[str, Any]) -> RunTrackers | None:
    """The run's trackers (None without --report-to), started on the main process after the restore, continuing the
    tracker runs `saved` records (`recorded_runs`)."""
    cfg = session.cfg
    if not cfg.tracking.trackers:
        return None
    if not session.accelerator.is_main_process:
        return RunTrackers(cfg, [], {})
    hparams = hyper_parameters(session.config_record, fingerprints)
    name = Path(session.run.out).name
    backends, where = [], {}
    try:
        for tracker in cfg.tracking.trackers:
            backend, where[tracker] = _started(tracker, session, state, name, saved.get(tracker) or {}, hparams)
            backends.append(backend)
    except BaseException:
        RunTrackers(cfg, backends, where).finish(ok=False)
        session.run.abandon()  # a refused start leaves --out as it was (a new run's config.json, metrics.jsonl)
        raise
    atomic.write_json_atomic(session.out / RECORD, {**saved, "format": RECORD_FORMAT, **where})
    return RunTrackers(cfg, backends, where)


def _started(tracker: str, session: Session, state: TrainState, name: str, saved: dict[str, Any],
             hparams: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """One tracker started; whatever its library raises while starting (no login, no network, an API it changed)
    is one UserError naming the option. The run directory is claimed but nothing is trained: a re-run resumes."""
    try:
        return STARTERS[tracker](session, state, name, saved, hparams)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the tracker libraries raise many types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        hint = {"wandb": " (log in with `wandb login`, or set WANDB_MODE=offline to log locally)",
                "trackio": " (Trackio logs locally by default; check TRACKIO_DIR and the space/server settings)"}
        raise UserError(f"--report-to {tracker} could not start its run: {type(exc).__name__}: {first}. Fix that"
                        f"{hint.get(tracker, '')}, or drop --report-to {tracker}, then re-run the same command: "
                        f"the run resumes.") from None


def hyper_parameters(config: dict[str, Any], fingerprints: dict[str, str]) -> dict[str, Any]:
    """The run's recorded options (config.json's `config`) as tracker parameters (scalars; lists joined by commas;
    None as "none") and the data fingerprints."""
    values: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        values[key] = "none" if value is None else value
    return {**values, **{f"data_fingerprint_{split}": fp for split, fp in fingerprints.items()}}


# ---------------------------------------------------------------- each tracker


def _tensorboard(session: Session, state: TrainState, name: str, saved: dict[str, Any],
                 hparams: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """Event files in OUT/tensorboard; a re-run's writer purges the events after the restored step."""
    from accelerate.tracking import TensorBoardTracker

    folder = session.out / TENSORBOARD
    earlier = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
    record.make_dirs(folder)
    before = library_files.listing(folder)
    tracker = TensorBoardTracker(TENSORBOARD, session.out, **({"purge_step": state.global_step + 1} if earlier else {}))
    tracker.start()
    if not saved:
        tracker.store_init_configuration(hparams)
    library_files.note_new(folder, before)  # the writer names its event files itself: recorded once it made them
    return (Backend("tensorboard", tracker, folder=folder),
            {"logdir": str(Path(session.run.out) / TENSORBOARD), "run": name})


def _mlflow(session: Session, state: TrainState, name: str, saved: dict[str, Any],
            hparams: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """A run in MLflow experiment --project; the recorded one again when the tracking URI is the same."""
    import mlflow
    from accelerate.tracking import MLflowTracker

    cfg = session.cfg
    uri = mlflow_uri(cfg)
    try:
        if uri is not None:
            if uri.startswith("file:"):
                os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 refuses a folder store without it
            mlflow.set_tracking_uri(uri)
        uri = mlflow.get_tracking_uri()
        run_id = saved.get("run_id") if saved.get("tracking_uri") == uri else None
        if run_id is not None and not _mlflow_run_exists(run_id):
            log.warning("the MLflow run %s of this run directory is gone from %s: a new MLflow run starts", run_id, uri)
            run_id = None
        tracker = MLflowTracker(experiment_name=cfg.tracking.project, run_id=run_id, run_name=name)
        tracker.start()
    except Exception as exc:  # noqa: BLE001 - whatever the store says, one message naming the option
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"MLflow could not start a run at {uri or 'its default store'} ({first}). Pass "
                        f"--tracking-uri with a local folder (e.g. --tracking-uri mlruns, works offline), file:/abs/path "
                        f"or an MLflow server (http://host:5000), then re-run: the run resumes.") from None
    backend = Backend("mlflow", tracker)
    if run_id is None:
        tracker.store_init_configuration(hparams)
    else:
        backend.done = _mlflow_last_steps(run_id)
    info = tracker.active_run.info
    return backend, {"tracking_uri": uri, "experiment": cfg.tracking.project, "experiment_id": info.experiment_id,
                     "run_id": info.run_id, "run": name}


def _mlflow_run_exists(run_id: str) -> bool:
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient().get_run(run_id).info.lifecycle_stage != "deleted"
    except Exception:  # noqa: BLE001 - not found
        return False


def _mlflow_last_steps(run_id: str) -> dict[str, int]:
    """Each metric's last logged step in an MLflow run (what a resumed run must not log again)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    keys = client.get_run(run_id).data.metrics
    return {key: max((m.step for m in client.get_metric_history(run_id, key)), default=0) for key in keys}


def _wandb(session: Session, state: TrainState, name: str, saved: dict[str, Any],
           hparams: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """A W&B run in --project named after the run directory; the recorded id again (resume="allow")."""
    from accelerate.tracking import WandBTracker

    run_id = saved.get("id") or secrets.token_hex(4)  # W&B run ids: short lowercase letters and digits
    tracker = WandBTracker(session.cfg.tracking.project, name=name, id=run_id, resume="allow", config=hparams)
    tracker.start()
    backend = Backend("wandb", tracker, done_before=max(int(getattr(tracker.run, "step", 0) or 0) - 1, 0))
    return backend, {"project": session.cfg.tracking.project, "id": run_id, "run": name,
                     "url": getattr(tracker.run, "url", None)}


def _trackio(session: Session, state: TrainState, name: str, saved: dict[str, Any],
             hparams: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """A Trackio run in --project named after the run directory; the recorded one again (resume="allow")."""
    from accelerate.tracking import TrackioTracker

    project, run_name = saved.get("project", session.cfg.tracking.project), saved.get("name", name)
    tracker = TrackioTracker(project, name=run_name, resume="allow" if saved else "never", config=hparams)
    tracker.start()
    next_step = int(getattr(tracker.run, "_next_step", 0) or 0)  # trackio: the resumed run's last step + 1
    return Backend("trackio", tracker, done_before=max(next_step - 1, 0)), {"project": project, "name": run_name}


STARTERS = {"tensorboard": _tensorboard, "mlflow": _mlflow, "trackio": _trackio, "wandb": _wandb}


def _finish(backend: Backend, ok: bool) -> None:
    if backend.name == "mlflow":
        import mlflow

        mlflow.end_run(status="FINISHED" if ok else "FAILED")
    elif backend.name == "wandb":
        backend.tracker.run.finish(exit_code=0 if ok else 1)
    else:
        backend.tracker.finish()
    if backend.folder is not None:
        library_files.seal_open(backend.folder)

