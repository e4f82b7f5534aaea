"""`bench --quality`: each model's score from the probe or finetune command, run with the same data settings.

Each command runs as `python -m bertkit probe|finetune ... --json`; the score is the dev accuracy its JSON reports.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def quality_data_args(cfg: Any) -> list[str]:
    """The data flags every quality command gets, identical for every model."""
    args: list[str] = []
    for name in ("data", "dev", "test", "data_config", "text_column", "text_pair_column", "label_column", "limit"):
        value = getattr(cfg, name)
        if value is not None:
            args += ["--" + name.replace("_", "-"), str(value)]
    args += ["--encoding", cfg.encoding, "--header", cfg.header, "--seed", str(cfg.seed),
             "--max-length", str(cfg.max_length)]
    return args



def quality_command(kind: str, model: str, data_args: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`python -m bertkit probe|finetune --model M <data args> <extra> --json --quiet`."""
    return [sys.executable, "-m", "bertkit", kind, "--model", model, *data_args, *extra, "--json", "--quiet"]


def command_available(kind: str, runner: Callable[..., Any] = subprocess.run) -> bool:
    """Whether this install has `bertkit <kind>` (quality columns degrade gracefully when not)."""
    done = runner([sys.executable, "-m", "bertkit", kind, "--help"], capture_output=True, text=True, check=False)
    return done.returncode == 0


def find_score(result: Any) -> tuple[str, float] | None:
    """The headline dev score in a command's JSON: (path, value), preferring dev accuracy."""
    found: list[tuple[str, float]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and path.split(".")[-1] == "accuracy":
            found.append((path, float(node)))

    walk(result, "")
    if not found:
        return None

    def rank(item: tuple[str, float]) -> tuple[bool, bool, bool, bool]:
        path = item[0].lower()
        return ("test" in path, "train" in path, "best" not in path, "dev" not in path)

    return sorted(found, key=rank)[0]


def measure_quality(
    kind: str, models: dict[str, str], data_args: Sequence[str], extra: Sequence[str],
    runner: Callable[..., Any] = subprocess.run, out_dir: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Run `bertkit <kind> --json` for each model with identical data args; the score each reports.

    With `out_dir`, model i's run directory is `out_dir/<kind>-<i>` (fine-tuning needs one; a re-run resumes).
    """
    if not command_available(kind, runner):
        message = f"`bertkit {kind}` is not available in this install; quality column '{kind}' skipped."
        return {label: {"status": "unavailable", "message": message} for label in models}
    out = {}
    for i, (label, source) in enumerate(models.items()):
        run_args = ["--out", str(out_dir / f"{kind}-{i}")] if out_dir is not None else []
        command = quality_command(kind, source, data_args, [*run_args, *extra])
        log.info("quality (%s): %s", kind, shlex.join(command[1:]))
        done = runner(command, capture_output=True, text=True, check=False, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        record: dict[str, Any] = {"command": shlex.join(["bertkit", *command[3:]])}
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-3:]
            out[label] = {**record, "status": "failed", "message": " ".join(tail)[:500]}
            continue
        try:
            parsed = json.loads(done.stdout)
        except json.JSONDecodeError:
            out[label] = {**record, "status": "failed", "message": "output was not JSON"}
            continue
        score = find_score(parsed)
        if score is None:
            out[label] = {**record, "status": "failed", "message": "no accuracy in the JSON output"}
        else:
            out[label] = {**record, "status": "ok", "metric": score[0], "score": score[1]}
    return out
