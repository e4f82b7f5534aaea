"""--report-to: TensorBoard event files and MLflow runs of tiny fine-tunes, read back with each tool's own reader;
a killed and resumed run logs exactly the steps of an uninterrupted one; missing packages; the default writes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.sweep import SweepConfig
from bertkit.commands.sweep import run as sweep
from bertkit.errors import UserError
from bertkit.io import ownership, record
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV, SimulatedFailure
from bertkit.training.resume import resume_key

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


def make_cfg(model: Path, files: tuple[Path, Path], out: Path, **overrides) -> FinetuneConfig:
    """A tiny run: 40 rows, batch 8 -> 5 optimizer steps per epoch, 2 epochs, dev evaluated at steps 5 and 10."""
    values = dict(model=str(model), data=str(files[0]), dev=str(files[1]), out=str(out), epochs=2, lr=5e-3,
                  batch_size=8, save_every=None, precision="fp32")
    return FinetuneConfig.of(**{**values, **overrides})


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a TensorBoard log folder: [(step, value), ...], as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_history(uri: str, run_id: str) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str], str]:
    """(metric -> [(step, value)], params, status) of an MLflow run, through MLflow's client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    history = {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in run.data.metrics}
    return history, run.data.params, run.info.status


def steps(points: list[tuple[int, float]]) -> list[int]:
    return [step for step, _ in points]


def test_tensorboard_holds_train_loss_at_log_steps_and_dev_metrics_at_evaluations(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "run"
    result = finetune(make_cfg(tiny_bert_dir, toy_files, out, report_to=("tensorboard",), log_every=2), progress=False)
    logged = scalars(out / "tensorboard")
    assert steps(logged["train/loss"]) == [2, 4, 6, 8, 10]
    for key in ("train/learning_rate", "train/grad_norm", "train/samples_per_second", "train/epoch"):
        assert steps(logged[key]) == [2, 4, 6, 8, 10], key
    assert [v for _, v in logged["train/epoch"]] == pytest.approx([0.4, 0.8, 1.2, 1.6, 2.0])
    history = result.metrics["history"]
    assert logged["eval/accuracy"] == [(h["step"], pytest.approx(h["dev_accuracy"])) for h in history]
    assert logged["eval/loss"] == [(h["step"], pytest.approx(h["dev_loss"])) for h in history]
    assert steps(logged["eval/mcc"]) == [5, 10]
    assert list((out / "tensorboard").glob("*/hparams.yml"))  # the hyper-parameters (accelerate's copy)
    assert result.metrics["trackers"]["tensorboard"]["logdir"] == str(out / "tensorboard")
    assert ownership.unowned(out) == []  # every tracker file is one bertkit recorded writing
    tensorboard = record.Record.at(out).entry("tensorboard")
    assert tensorboard is not None and tensorboard.kind == record.DIR  # sealed once the writer closed: files listed
    events = next((out / "tensorboard").glob("events.out.tfevents.*"))
    assert record.Record.at(out).entry(f"tensorboard/{events.name}").kind == record.FILE
    again = finetune(make_cfg(tiny_bert_dir, toy_files, out, log_every=5), progress=False)  # options not in the key
    assert again.already_finished


def test_mlflow_to_a_local_folder_keeps_params_and_metric_history(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out, store = tmp_path / "run", tmp_path / "mlruns"
    cfg = make_cfg(tiny_bert_dir, toy_files, out, report_to=("mlflow",), tracking_uri=str(store), log_every=5,
                   project="toy")
    result = finetune(cfg, progress=False)
    where = result.metrics["trackers"]["mlflow"]
    assert where["tracking_uri"] == store.resolve().as_uri() and where["experiment"] == "toy"
    assert json.loads((out / "trackers.json").read_text())["mlflow"]["run_id"] == where["run_id"]
    history, params, status = mlflow_history(where["tracking_uri"], where["run_id"])
    assert status == "FINISHED"
    assert params["lr"] == "0.005" and params["batch_size"] == "8" and params["model"] == str(tiny_bert_dir)
    assert params["data_fingerprint_train"] == json.loads((out / "config.json").read_text())["resume_key"]["data"]["train"]
    assert steps(history["train/loss"]) == [5, 10]
    assert history["eval/accuracy"] == [(h["step"], pytest.approx(h["dev_accuracy"]))
                                        for h in result.metrics["history"]]


def test_a_killed_and_resumed_run_logs_the_steps_of_an_uninterrupted_one(tiny_bert_dir, toy_files, tmp_path,
                                                                          monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = tmp_path / "mlruns"
    both = dict(report_to=("tensorboard,mlflow",), tracking_uri=str(store), log_every=1)
    finetune(make_cfg(tiny_bert_dir, toy_files, tmp_path / "whole", **both), progress=False)
    cfg = make_cfg(tiny_bert_dir, toy_files, tmp_path / "cut", save_every=3, **both)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "4")  # steps 1-4 logged, checkpoint at 3, crash after 4
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    first = json.loads((tmp_path / "cut" / "trackers.json").read_text())["mlflow"]["run_id"]
    assert mlflow_history(store.as_uri(), first)[2] == "FAILED"
    monkeypatch.delenv(FAIL_AFTER_STEPS_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3
    whole_tb, cut_tb = scalars(tmp_path / "whole" / "tensorboard"), scalars(tmp_path / "cut" / "tensorboard")
    assert steps(cut_tb["train/loss"]) == steps(whole_tb["train/loss"]) == list(range(1, 11))
    assert steps(cut_tb["eval/loss"]) == [5, 10]
    # exact resume: the loss logged at every step, also the one logged twice (4), is the uninterrupted run's
    assert [v for _, v in cut_tb["train/loss"]] == pytest.approx([v for _, v in whole_tb["train/loss"]], rel=1e-5)
    assert resumed.metrics["trackers"]["mlflow"]["run_id"] == first  # the same MLflow run continues
    whole = json.loads((tmp_path / "whole" / "trackers.json").read_text())["mlflow"]["run_id"]
    cut_ml, whole_ml = mlflow_history(store.as_uri(), first), mlflow_history(store.as_uri(), whole)
    assert cut_ml[2] == "FINISHED"
    assert {k: steps(v) for k, v in cut_ml[0].items()} == {k: steps(v) for k, v in whole_ml[0].items()}
    assert steps(cut_ml[0]["train/loss"]) == list(range(1, 11)) and steps(cut_ml[0]["eval/accuracy"]) == [5, 10]


def test_a_sweep_logs_each_trial_as_its_own_run(tiny_bert_dir, toy_files, tmp_path):
    cfg = SweepConfig.of(model=str(tiny_bert_dir), data=str(toy_files[0]), dev=str(toy_files[1]), out=str(tmp_path / "s"),
                      epochs=1, batch_size=8, save_every=None, precision="fp32", grid=("lr=1e-3,5e-3",),
                      report_to=("tensorboard",), log_every=5)
    sweep(cfg, progress=False)
    trials = sorted((tmp_path / "s" / "trials").iterdir())
    assert len(trials) == 2
    for trial in trials:
        assert steps(scalars(trial / "tensorboard")["train/loss"]) == [5]
        assert json.loads((trial / "metrics.json").read_text())["trackers"]["tensorboard"]["run"] == trial.name
    assert ownership.unowned(tmp_path / "s") == []
    sweep(cfg, progress=False)  # a re-run of the finished sweep is not refused


@pytest.mark.parametrize("tracker, package", [("wandb", "wandb"), ("tensorboard", "tensorboard"),
                                              ("mlflow", "mlflow")])
def test_a_tracker_that_is_not_installed_stops_the_run_before_anything_is_written(tiny_bert_dir, toy_files, tmp_path,
                                                                                  monkeypatch, tracker, package):
    monkeypatch.setitem(sys.modules, package, None)  # importlib.util.find_spec -> None: as if not installed
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_files[0]),
                                      "--dev", str(toy_files[1]), "--out", str(out), "--report-to", tracker, "--quiet"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"--report-to {tracker} needs the {package} package" in text and "pip install 'bertkit[track]'" in text
    assert not out.exists()


def test_a_tracker_that_fails_to_start_is_one_message_and_the_rerun_resumes(tiny_bert_dir, toy_files, tmp_path,
                                                                          monkeypatch):
    """Whatever a tracker library raises while starting (no login, an API it changed) is exit 2 naming the option,
    before any step is trained; once it starts, the same command runs the run through."""
    from bertkit.training.trackers import REGISTRY

    def broken(*args, **kwargs):
        raise AttributeError("module 'wandb.util' has no attribute 'generate_id'")

    monkeypatch.setattr(REGISTRY["tensorboard"], "start", broken)
    out = tmp_path / "run"
    argv = ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_files[0]), "--dev", str(toy_files[1]),
            "--out", str(out), "--report-to", "tensorboard", "--quiet"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--report-to tensorboard could not start its run: AttributeError" in text and "resumes" in text
    assert not out.exists()  # a refused start leaves nothing: no config.json, no metrics.jsonl, no --out
    monkeypatch.undo()
    assert CliRunner().invoke(app, argv).exit_code == 0
    assert json.loads((out / "metrics.json").read_text())["trackers"]["tensorboard"]


def test_tracker_options_are_checked_and_stay_out_of_the_resume_key(tmp_path):
    cfg = FinetuneConfig.of(data="x.tsv", out="o", report_to=("tensorboard,MLflow", "tensorboard"))
    assert cfg.tracking.trackers == ("tensorboard", "mlflow")
    assert FinetuneConfig.of(data="x.tsv", out="o", report_to=("none",)).tracking.trackers == ()
    with pytest.raises(UserError, match="--report-to neptune: not a tracker.*Valid: none, tensorboard"):
        FinetuneConfig.of(data="x.tsv", out="o", report_to=("neptune",))
    with pytest.raises(UserError, match="--tracking-uri .* does not include mlflow"):
        FinetuneConfig.of(data="x.tsv", out="o", tracking_uri="mlruns")
    with pytest.raises(UserError, match="--log-every"):
        FinetuneConfig.of(data="x.tsv", out="o", log_every=0)
    plain = FinetuneConfig.of(data="x.tsv", out="o")
    tracked = FinetuneConfig.of(data="x.tsv", out="o", report_to=("mlflow",), tracking_uri="m", project="p", log_every=3)
    assert resume_key(plain, {"train": "a"}) == resume_key(tracked, {"train": "a"})


def test_an_mlflow_folder_inside_out_is_refused_before_the_run(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(UserError, match="--tracking-uri .* is inside --out"):
        finetune(make_cfg(tiny_bert_dir, toy_files, out, report_to=("mlflow",), tracking_uri=str(out / "mlruns")),
                 progress=False)
    assert not out.exists()


def test_by_default_no_tracker_writes_anything(tiny_bert_dir, toy_files, tmp_path):
    out = tmp_path / "run"
    result = finetune(make_cfg(tiny_bert_dir, toy_files, out, epochs=1), progress=False)
    assert result.metrics["trackers"] == {}
    assert not (out / "tensorboard").exists() and not (out / "trackers.json").exists()
    assert not (tmp_path / "mlruns").exists() and not Path("mlflow.db").exists()


def test_the_cli_takes_report_to_and_says_where_the_run_is_logged(tiny_bert_dir, toy_files, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out, store = tmp_path / "run", tmp_path / "mlruns"
    result = CliRunner().invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_files[0]),
                                      "--dev", str(toy_files[1]), "--out", str(out), "--epochs", "1", "--batch-size",
                                      "8", "--precision", "fp32", "--report-to", "tensorboard", "--report-to", "mlflow",
                                      "--tracking-uri", str(store), "--log-every", "5", "--quiet"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"tensorboard --logdir {out / 'tensorboard'}" in text
    assert f"mlflow ui --backend-store-uri {store.resolve().as_uri()}" in text
    assert steps(scalars(out / "tensorboard")["train/loss"]) == [5]


def test_a_database_store_without_sqlalchemy_is_refused_before_the_run(tiny_bert_dir, toy_files, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # mlflow-skinny does not bring it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    out = tmp_path / "run"
    with pytest.raises(UserError, match="database store, which needs the sqlalchemy package.*--tracking-uri mlruns"):
        finetune(make_cfg(tiny_bert_dir, toy_files, out, report_to=("mlflow",)), progress=False)
    assert not out.exists()


@pytest.mark.parametrize("where", ["empty-folder", "overwrite", "nested-new-folder"])
def test_a_tracker_that_fails_to_start_leaves_the_folder_as_it_was(tiny_bert_dir, toy_files, tmp_path, monkeypatch,
                                                                    where):
    """A refused start takes back what its claim made: files in a folder it found empty (the folder stays), the
    staging folder of an --overwrite run (the previous run stays byte for byte), folders it created."""
    from bertkit.training.trackers import REGISTRY

    out = tmp_path / "runs" / "a" / "run" if where == "nested-new-folder" else tmp_path / "run"
    argv = ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_files[0]), "--dev", str(toy_files[1]),
            "--out", str(out), "--epochs", "1", "--quiet"]
    if where == "empty-folder":
        out.mkdir()
    elif where == "overwrite":
        assert CliRunner().invoke(app, argv).exit_code == 0
    before = {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    dirs = sorted(p for p in tmp_path.rglob("*") if p.is_dir())

    def broken(*args, **kwargs):
        raise RuntimeError("no connection to the tracking server")

    monkeypatch.setattr(REGISTRY["tensorboard"], "start", broken)
    result = CliRunner().invoke(app, [*argv, "--report-to", "tensorboard", *(["--overwrite"] if where == "overwrite"
                                                                                 else [])])
    assert result.exit_code == 2 and "--report-to tensorboard could not start its run" in result.output
    after = {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert after == before and sorted(p for p in tmp_path.rglob("*") if p.is_dir()) == dirs
