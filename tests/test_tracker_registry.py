"""Adding a tracker is its module and its registry line: a tracker defined here (keeping its runs in memory) and put
into `REGISTRY` is accepted by --report-to, started, logged to, continued by a resumed run, finished, recorded and
named in the summary, with no other edit to bertkit."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.errors import UserError
from bertkit.io.faults import FAIL_AFTER_STEPS_ENV, SimulatedFailure
from bertkit.training.trackers import REGISTRY, summary_lines
from bertkit.training.trackers.base import RunStart, Tracker, TrackerRun

pytestmark = pytest.mark.usefixtures("one_thread")


class MemoryTracker(Tracker):
    """A tracker whose runs are dicts: {"params", "points": [(step, key, value)], "status", "starts"}."""

    name = "memory"
    package = "pytest"
    choice = "memory"

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}

    def start(self, run: RunStart) -> TrackerRun:
        run_id = run.saved.get("id") or f"m{len(self.runs)}"
        kept = self.runs.setdefault(run_id, {"params": dict(run.hparams), "points": [], "status": None, "starts": []})
        kept["starts"].append(run.step)
        last = max((step for step, _, _ in kept["points"]), default=0)
        return TrackerRun(self, kept, {"id": run_id, "run": run.name}, done_before=last)

    def log(self, run: TrackerRun, values: Mapping[str, float], step: int) -> None:
        run.handle["points"].extend((step, key, value) for key, value in values.items())

    def finish(self, run: TrackerRun, ok: bool) -> None:
        run.handle["status"] = "finished" if ok else "failed"

    def summary_line(self, where: Mapping[str, Any]) -> str:
        return f"memory: run {where['id']}  (view: MemoryTracker.runs)"


@pytest.fixture
def memory(monkeypatch) -> MemoryTracker:
    tracker = MemoryTracker()
    monkeypatch.setitem(REGISTRY, tracker.name, tracker)  # the registry line
    return tracker


@pytest.fixture
def toy_files(write_tsv, toy_rows):
    header = ("sentence", "label")
    return write_tsv("train.tsv", toy_rows, header), write_tsv("dev.tsv", toy_rows[:20], header)


def logged_steps(kept: dict[str, Any], key: str) -> list[int]:
    return [step for step, name, _ in kept["points"] if name == key]


def test_a_registered_tracker_follows_a_run_from_the_cli(memory, tiny_bert_dir, toy_files, tmp_path):
    """40 rows, batch 8: 5 optimizer steps per epoch, 2 epochs, dev evaluated at steps 5 and 10."""
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "--model", str(tiny_bert_dir), "--data", str(toy_files[0]),
                                      "--dev", str(toy_files[1]), "--out", str(out), "--epochs", "2", "--batch-size",
                                      "8", "--precision", "fp32", "--report-to", "memory", "--log-every", "2"])
    assert result.exit_code == 0, result.output
    kept = memory.runs["m0"]
    assert kept["status"] == "finished" and kept["starts"] == [0] and kept["params"]["batch_size"] == 8
    assert logged_steps(kept, "train/loss") == [2, 4, 6, 8, 10]
    assert logged_steps(kept, "eval/accuracy") == [5, 10]
    assert json.loads((out / "metrics.json").read_text())["trackers"] == {"memory": {"id": "m0", "run": "run"}}
    assert json.loads((out / "trackers.json").read_text())["memory"] == {"id": "m0", "run": "run"}
    assert "memory: run m0  (view: MemoryTracker.runs)" in result.output


def test_a_resumed_run_continues_the_registered_trackers_run(memory, tiny_bert_dir, toy_files, tmp_path,
                                                            monkeypatch):
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(toy_files[0]), dev=str(toy_files[1]),
                            out=str(tmp_path / "run"), epochs=2, batch_size=8, save_every=3, precision="fp32",
                            report_to=("memory",), log_every=1)
    monkeypatch.setenv(FAIL_AFTER_STEPS_ENV, "4")  # steps 1-4 logged, checkpoint at 3, crash after 4
    with pytest.raises(SimulatedFailure):
        finetune(cfg, progress=False)
    assert memory.runs["m0"]["status"] == "failed"
    monkeypatch.delenv(FAIL_AFTER_STEPS_ENV)
    resumed = finetune(cfg, progress=False)
    assert resumed.restored.step == 3 and list(memory.runs) == ["m0"]  # the same tracker run, continued
    kept = memory.runs["m0"]
    assert kept["starts"] == [0, 3] and kept["status"] == "finished"
    assert logged_steps(kept, "train/loss") == list(range(1, 11))  # step 4 not logged twice


def test_report_to_takes_its_names_from_the_registry(memory):
    assert FinetuneConfig.of(data="x.tsv", out="o", report_to=("memory,tensorboard",)).tracking.trackers == (
        "memory", "tensorboard")
    with pytest.raises(UserError, match="Valid: none, tensorboard, mlflow, trackio, wandb, memory"):
        FinetuneConfig.of(data="x.tsv", out="o", report_to=("neptune",))


def test_each_built_in_tracker_says_where_the_run_is_logged():
    lines = summary_lines({
        "tensorboard": {"logdir": "r/tensorboard", "run": "r"},
        "mlflow": {"tracking_uri": "file:///m", "experiment": "toy", "run_id": "abc", "run": "r"},
        "trackio": {"project": "toy", "name": "r"},
        "wandb": {"project": "toy", "id": "x1", "run": "r", "url": None},
        "neptune": {"id": "n-1"},  # a record of a tracker this bertkit lacks
    })
    assert lines == ["tensorboard: r/tensorboard  (view: tensorboard --logdir r/tensorboard)",
                     "mlflow: run abc in experiment toy at file:///m  (view: mlflow ui --backend-store-uri file:///m)",
                     "trackio: run r in project toy  (view: trackio show)",
                     "wandb: run x1 in project toy",
                     "neptune: id n-1"]
