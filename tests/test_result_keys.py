"""Results never share a key between a metric and a setting (issue 36): in every command's --json output and every
JSON file it writes, an object that holds metric values holds no setting under a metric's name. (`evaluate` used to
report the compute precision as `"precision": "fp32"`, over the macro precision, in its table, --json and
metrics.json.) `push` is the one command not run here: it needs the hub, and its result holds no metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.scoring.table import BUILT_IN

runner = CliRunner()
METRICS = frozenset({*BUILT_IN, "loss"})
"""Every built-in metric name: a key with one of these names, where metrics are, is that metric."""
pytestmark = pytest.mark.usefixtures("one_thread")


def is_metric_value(value: Any) -> bool:
    """A score (or null: undefined), or scores of one metric (mean/std, an interval, per-fold values)."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return True
    if isinstance(value, dict):
        return all(is_metric_value(v) for v in value.values())
    return isinstance(value, list) and all(is_metric_value(v) for v in value)


def collisions(value: Any, where: str = "$") -> list[str]:
    """`path = value` of each metric-named key holding a setting, in an object that holds metric values."""
    found = []
    if isinstance(value, dict):
        if any(k in METRICS and is_metric_value(v) and v is not None for k, v in value.items()):
            found += [f"{where}.{k} = {v!r}" for k, v in value.items() if k in METRICS and not is_metric_value(v)]
        for key, item in value.items():
            found += collisions(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += collisions(item, f"{where}[{i}]")
    return found


def test_the_check_finds_a_setting_under_a_metrics_name_and_nothing_in_settings_alone():
    assert collisions({"accuracy": 0.9, "precision": "fp32", "f1": 0.8}) == ["$.precision = 'fp32'"]
    assert collisions({"best": {"dev": {"mcc": 0.1, "recall": True}}}) == ["$.best.dev.recall = True"]
    assert collisions({"config": {"precision": "auto", "lr": 1e-3}, "accuracy": {"mean": 0.9, "std": 0.01}}) == []
    assert collisions([{"pearson": None, "mse": 0.2, "accuracy_ci95": [0.1, 0.2]}]) == []


def invoke_json(*argv: Any, quiet: bool = True) -> Any:
    result = runner.invoke(app, [str(a) for a in argv] + ["--json"] + (["--quiet"] if quiet else []),
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = result.stdout.strip()
    return json.loads(text) if text.startswith(("{", "[")) else None


class Outputs:
    """Each command run once on tiny models when a test first asks for it (a command that fails fails its own test
    only): `outputs[command]` is (its --json output, the JSON files it wrote)."""

    def __init__(self, root: Path, tiny: str, distil: str) -> None:
        self.root, self.tiny, self.distil, self.made = root, tiny, distil, {}
        good, bad = ["great", "lovely", "superb", "fine"], ["awful", "boring", "dull", "bad"]
        rows = [r for i in range(16) for r in ((f"a {good[i % 4]} film {i}", "pos"), (f"an {bad[i % 4]} film {i}", "neg"))]
        self.data = root / "train.tsv"
        self.data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")

    def __getitem__(self, command: str) -> tuple[Any, list[Path]]:
        if command not in self.made:
            printed, folder = getattr(self, "_" + command.replace(" --", "_").replace(" ", "_"))()
            self.made[command] = (printed, sorted(folder.rglob("*.json")) if folder else [])
        return self.made[command]

    def _run(self, name: str, *argv: Any, quiet: bool = True) -> tuple[Any, Path]:
        return invoke_json(*argv, "--out", self.root / name, quiet=quiet), self.root / name

    def best(self) -> Path:
        self["finetune"]
        return self.root / "finetune" / "best"

    TRAIN = ("--epochs", "1", "--batch-size", "8", "--lr", "5e-3", "--precision", "fp32")

    def _tokens(self):
        return self._run("tokens", "tokens", "--model", self.tiny, "--data", self.data)

    def _tokens_text(self):
        return invoke_json("tokens", "--model", self.tiny, "--text", "a film"), None

    def _finetune(self):
        return self._run("finetune", "finetune", "--model", self.tiny, "--data", self.data, *self.TRAIN)

    def _evaluate(self):
        return self._run("evaluate", "evaluate", "--model", self.best(), "--data", self.data)

    def _predict(self):
        return invoke_json("predict", "--model", self.best(), "--data", self.data), None

    def _export(self):
        return self._run("export", "export", "--model", self.best(), "--data", self.data, "--quantize", "none")

    def _embed(self):
        return self._run("embed", "embed", "--model", self.tiny, "--data", self.data, "--dev", self.data)

    def _probe_features(self):
        self["embed"]
        return self._run("probe-store", "probe", "--features", self.root / "embed", "--repeats", "2")

    def _probe_data(self):
        return self._run("probe-data", "probe", "--model", self.tiny, "--data", self.data, "--no-baselines")

    def _distill(self):
        return self._run("distill", "distill", "--teacher", self.best(), "--data", self.data, "--student-layers", "1",
                         "--report-seconds", "0", *self.TRAIN)

    def _sweep(self):
        return self._run("sweep", "sweep", "--model", self.tiny, "--data", self.data, "--grid", "lr=5e-3", *self.TRAIN)

    def _bench(self):
        return self._run("bench", "bench", "--models", f"{self.distil},{self.tiny}", "--data", self.data,
                         "--min-iters", "1", "--min-seconds", "0", "--warmup", "0", "--rounds", "2", "--batch-sizes",
                         "2", "--train-batch-size", "2", "--limit", "6", "--max-length", "16")

    def _recipes_list(self):
        return invoke_json("recipes", "list", quiet=False), None


@pytest.fixture(scope="module")
def outputs(tiny_bert_dir, tiny_distilbert_dir, tmp_path_factory) -> Outputs:
    return Outputs(tmp_path_factory.mktemp("results"), str(tiny_bert_dir), str(tiny_distilbert_dir))


COMMANDS = ["tokens", "tokens --text", "finetune", "evaluate", "predict", "export", "embed", "probe --features",
            "probe --data", "distill", "sweep", "bench", "recipes list"]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_metric_shares_its_key_with_a_setting(outputs, command):
    printed, files = outputs[command]
    assert printed is not None, f"`bertkit {command} --json` printed no JSON"
    found = [f"--json {c}" for c in collisions(printed)]
    for file in files:
        found += [f"{file.name} {c}" for c in collisions(json.loads(file.read_text(encoding="utf-8")))]
    assert not found, f"`bertkit {command}`: settings under a metric's name:\n" + "\n".join(found)


def test_evaluate_reports_the_precision_metric_and_the_compute_precision_apart(outputs):
    printed, files = outputs["evaluate"]
    written = json.loads(next(f for f in files if f.name == "metrics.json").read_text())
    for result in (printed, written):  # the metrics and the settings apart: the compute precision is `dtype`
        assert isinstance(result["metrics"]["precision"], float) and 0.0 <= result["metrics"]["precision"] <= 1.0
        assert result["dtype"] in ("fp32", "bf16") and "dtype" not in result["metrics"]
