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


@pytest.fixture(scope="module")
def outputs(tiny_bert_dir, tiny_distilbert_dir, tmp_path_factory) -> dict[str, tuple[Any, list[Path]]]:
    """{command: (its --json output, the JSON files it wrote)} for every command but push, on tiny models."""
    root = tmp_path_factory.mktemp("results")
    good, bad = ["great", "lovely", "superb", "fine"], ["awful", "boring", "dull", "bad"]
    rows = [row for i in range(16) for row in ((f"a {good[i % 4]} film {i}", "pos"), (f"an {bad[i % 4]} film {i}", "neg"))]
    data = root / "train.tsv"
    data.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    tiny, common = str(tiny_bert_dir), ["--epochs", "1", "--batch-size", "8", "--lr", "5e-3", "--precision", "fp32"]
    made: dict[str, tuple[Any, Path | None]] = {}
    made["tokens"] = (invoke_json("tokens", "--model", tiny, "--data", data, "--out", root / "tokens"), root / "tokens")
    made["tokens --text"] = (invoke_json("tokens", "--model", tiny, "--text", "a film"), None)
    made["finetune"] = (invoke_json("finetune", "--model", tiny, "--data", data, "--out", root / "ft", *common),
                        root / "ft")
    best = root / "ft" / "best"
    made["evaluate"] = (invoke_json("evaluate", "--model", best, "--data", data, "--out", root / "eval"), root / "eval")
    made["predict"] = (invoke_json("predict", "--model", best, "--data", data), None)
    made["export"] = (invoke_json("export", "--model", best, "--data", data, "--quantize", "none", "--out",
                                  root / "export"), root / "export")
    made["embed"] = (invoke_json("embed", "--model", tiny, "--data", data, "--dev", data, "--out", root / "store"),
                     root / "store")
    made["probe --features"] = (invoke_json("probe", "--features", root / "store", "--out", root / "probe-store",
                                            "--repeats", "2"), root / "probe-store")
    made["probe --data"] = (invoke_json("probe", "--model", tiny, "--data", data, "--out", root / "probe-data",
                                        "--no-baselines"), root / "probe-data")
    made["distill"] = (invoke_json("distill", "--teacher", best, "--data", data, "--out", root / "distill",
                                   "--student-layers", "1", *common), root / "distill")
    made["sweep"] = (invoke_json("sweep", "--model", tiny, "--data", data, "--out", root / "sweep", "--grid",
                                 "lr=5e-3", *common), root / "sweep")
    made["bench"] = (invoke_json("bench", "--models", f"{tiny_distilbert_dir},{tiny}", "--data", data, "--out",
                                 root / "bench", "--min-iters", "1", "--min-seconds", "0", "--warmup", "0", "--rounds",
                                 "2", "--batch-sizes", "2", "--train-batch-size", "2", "--limit", "6",
                                 "--max-length", "16"), root / "bench")
    made["recipes list"] = (invoke_json("recipes", "list", quiet=False), None)
    return {name: (printed, sorted(folder.rglob("*.json")) if folder else []) for name, (printed, folder) in made.items()}


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
    for result in (printed, written):
        assert isinstance(result["precision"], float) and 0.0 <= result["precision"] <= 1.0
        assert result["dtype"] == "fp32"
