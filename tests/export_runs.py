"""What the export tests of every family share: an fp32 export of a model gated on a dev file, the gate's report,
and `predict --json`'s lines on a model or export, each through the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bertkit.cli import app
from bertkit.models import onnx

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def fp32_export_of(model: Path, dev: Path, out: Path) -> Path:
    """`bertkit export --quantize none` of `model`, gated on `dev`, written to `out` (asserted to succeed)."""
    result = invoke("export", "--model", model, "--out", out, "--quantize", "none", "--data", dev, "-q", "--json")
    assert result.exit_code == 0, result.output
    return out


def export_report(out: Path) -> dict:
    return json.loads((out / onnx.REPORT_FILE).read_text())


def predicted_lines(model: Path, *args) -> list[dict]:
    """`bertkit predict --model MODEL --json` with `args`: its JSON lines (asserted to succeed)."""
    result = invoke("predict", "--model", model, "--json", "-q", *args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
