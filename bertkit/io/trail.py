"""Every run leaves its trail: `config.json` (the resolved config, flat, as the options are named; package versions,
machine, time and the command's extras such as seed and data fingerprints; its format `bertkit-config/2`, the family
that made it and its seal, `record_sha256`), and the check whether a directory holds the same run.

The same run: what a re-run may change is one property of an option, `RERUN_MAY_CHANGE` (it decides where or how the
run is written, launched or logged, never what it computes); every other option is compared, in a resuming run's
`resume_key` (finetune, distill), a sweep's `compared` and every other command's `config`. A config.json of an older
layout is read by `migrated_run_config`, the one place that knows them (e.g. the options its resume key left out at
their defaults are filled in with them), so a run recorded before an option existed still resumes.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io.atomic import read_json_or_none, read_json_record, to_json, write_json_atomic
from bertkit.io.ownership import move_aside
from bertkit.io.record_format import (
    FAMILY,
    SEAL,
    RecordKind,
    RecordProblem,
    checked_version,
    record_digest,
    sealed,
    upgrade,
)

CONFIG = "config.json"
RUN_RECORD = RecordKind("bertkit-config", current=2, sealed_since=2, family_since=2)
"""Layout 1 (no format: bertkit up to 0.1): no family, no seal; a resume key or a sweep's `compared` without the
options `LAYOUT_2_FILLS` while they were at those defaults; some runs' config also held `LAYOUT_1_ONLY`. Layout 2:
the family and the seal; every compared option in the key."""

RERUN_MAY_CHANGE = {
    "out": "where the run is written",
    "overwrite": "whether an earlier run there is replaced",
    "save_every": "how often a training run checkpoints for resuming",
    "save_every_minutes": "how often, by the clock, a training run checkpoints for resuming",
    "keep_checkpoints": "what a finished run keeps besides its results",
    "cuda_graphs": "how the same steps are launched on a GPU, like the device",
    "report_to": "which trackers follow the run",
    "tracking_uri": "where MLflow keeps the run",
    "project": "the project the run is filed under",
    "log_every": "how often the training numbers are logged",
    "report_seconds": "how long distill's report times each model, not what the student learns",
    "trials": "how long an Optuna sweep searches (a longer study continues the same sweep)",
}
"""The options a re-run may change and still be the same run (resumed, continued, recognised as done), with why: each
decides where or how the run is written, launched or logged, not what it computes. Every other option is compared.
(An option's own property, declared once here for every command: the declarations live in each group's module.)"""

LAYOUT_1_KEY = frozenset({
    "model", "data", "dev", "test", "data_config", "train_split", "text_column", "text_pair_column", "label_column",
    "encoding", "header", "dev_fraction", "cache_dir", "limit", "seed", "task_preset", "label_sep", "task",
    "threshold", "max_length", "truncation", "epochs", "lr", "batch_size", "grad_accum", "warmup_ratio",
    "weight_decay", "max_grad_norm", "eval_every", "early_stopping_patience", "metric_for_best", "class_weight",
    "calibrate", "freeze_encoder", "metric", "precision", "fast_forward", "compile", "trust_remote_code",
    "teacher", "student_layers", "student", "temperature", "alpha", "cos_weight", "report",
    "grid", "search", "space", "seeds", "prune"})
"""The options a layout-1 resume key (finetune, distill) or sweep `compared` always held."""
LAYOUT_2_FILLS = {"tag_scheme": "auto", "label_all_pieces": False, "stride": None, "unseen_tags": "refuse",
                  "doc_stride": None}
"""Options a layout-1 key held only away from these defaults (the tagging options, issue 46) or did not hold (--unseen-tags, issue 57; --doc-stride, issue 55): layout 2 holds them
always, so migrating a layout-1 key fills them in with these values. A step that adds an option to the compared
options names it and the default it had, here, for the next layout."""
LAYOUT_1_ONLY = frozenset({"quiet", "json_output", "preset_fill"})
"""Keys some layout-1 configs held that are no option's (the CLI's view flags, what a --task-preset filled): dropped."""

Compare = Callable[[Path], list[str]]
"""A command's check of a run of its own in a directory: the settings that differ (empty: the same run)."""


def package_versions() -> dict[str, str]:
    """Versions of what produced a result (written next to every run's metrics)."""
    from importlib.metadata import PackageNotFoundError, version

    names = ["bertkit", "torch", "transformers", "datasets", "accelerate", "scikit-learn", "numpy", "safetensors"]
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def machine_info() -> dict[str, Any]:
    """CPU model, core count and accelerator: the context every timing needs."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def write_run_config(run_dir: Path, command: str, config: dict[str, Any], family: str | None = None,
                     **extra: Any) -> Path:
    """config.json: the resolved config plus versions, machine and time, so every number traces back; sealed, of
    `family` (None: `family_of_config`)."""
    record = {
        "command": command,
        "config": config,
        "versions": package_versions(),
        "machine": machine_info(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cwd": os.getcwd(),  # what the config's relative paths were relative to (read again by `bertkit export`)
        **extra,
    }
    path = run_dir / CONFIG
    write_json_atomic(path, sealed(record, RUN_RECORD, family or family_of_config(record)))
    return path


def family_of_config(record: dict[str, Any], default: str = "sentences") -> str:
    """The family a run's record says it is of where its caller does not: words for --task tags or a word probe's
    run (its `words` section), else `default`."""
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    return "words" if config.get("task") == "tags" or isinstance(record.get("words"), dict) else default


def migrated_run_config(record: Any, family: str | None = None) -> dict[str, Any]:
    """A run's config.json in the current layout, from any layout this bertkit reads (a `RecordProblem` for one it
    cannot trust: edited since it was sealed, made by a newer bertkit, no `config` table). The only place the older
    layouts are understood. `family`: what a layout-1 record of --task auto is of (the caller's run: the same config
    and data are the same family); None: `family_of_config`'s default."""
    version = checked_version(record, RUN_RECORD)
    if not isinstance(record.get("config"), dict):
        raise RecordProblem("it has no `config` table")
    return upgrade(record, RUN_RECORD, version, {1: lambda old: _run_layout_2(old, family)})


def _run_layout_2(record: dict[str, Any], family: str | None) -> dict[str, Any]:
    """Layout 1 -> 2: its family; the keys no option has dropped; a resume key's and a sweep's compared options
    filled in with the values a layout-1 key left out (`LAYOUT_2_FILLS`)."""
    def filled(section: Any) -> Any:
        return {**LAYOUT_2_FILLS, **section} if isinstance(section, dict) else section

    config = {k: v for k, v in record["config"].items() if k not in LAYOUT_1_ONLY}
    upgraded = {**record, "config": config, FAMILY: family_of_config(record, family or "sentences")}
    if isinstance(record.get("resume_key"), dict):
        upgraded["resume_key"] = {**record["resume_key"], "config": filled(record["resume_key"].get("config"))}
    if isinstance(record.get("compared"), dict):
        upgraded["compared"] = filled(record["compared"])
    return upgraded


def config_compare(config: dict[str, Any]) -> Compare:
    """`compare` for commands that recompute: the same run is the same resolved config (less RERUN_MAY_CHANGE)."""

    def compare(path: Path) -> list[str]:
        record = read_run_config(path)
        return [] if record is None else config_differences(record["config"], config)

    return compare


def report_compare(config: dict[str, Any], report: str) -> Compare:
    """`compare` for a command whose run records its config in the file `report` (an export's export_report.json,
    under `config`, in every layout): the compared options that differ; none when the file is missing or unreadable.
    A sealed report edited since it was written is refused: it says nothing about the run."""

    def compare(path: Path) -> list[str]:
        record = read_json_or_none(Path(path) / report)
        if isinstance(record, dict) and SEAL in record and record[SEAL] != record_digest(record):
            raise UserError(f"{Path(path) / report} was edited or damaged since it was written (its content does not "
                            f"match its {SEAL}), so bertkit cannot tell which run {path} holds. Choose another --out, "
                            f"or pass --overwrite to replace that run.")
        old = record.get("config") if isinstance(record, dict) else None
        return config_differences(old, config) if isinstance(old, dict) else []

    return compare


TRAINING_STATE = ("checkpoints", "best", "final", "metrics.jsonl", "metrics.json")
"""What a training run writes after its config.json: a run holding any of them without a config.json is damaged."""


def key_compare(key: dict[str, Any], command: str = "finetune", family: str | None = None) -> Compare:
    """`compare` for runs that resume (finetune, distill): the same run is the same resume key, `{"config": ...,
    "data": {split: fingerprint}}`, as the run's config.json records it (read as `migrated_run_config` reads it,
    a layout-1 record of --task auto as of `family`). A UserError for a run that cannot be resumed safely: one that
    trained without a config.json (lost: its checkpoints would resume under any settings), one whose config.json has
    no resume key (made by an older bertkit)."""
    new = json.loads(to_json(key))

    def compare(path: Path) -> list[str]:
        record = read_run_config(path, family)
        if record is None:  # claimed, but stopped before its config was written: nothing to differ from
            state = [name for name in TRAINING_STATE if (Path(path) / name).exists()]
            if state:
                raise UserError(f"--out {path} holds a `bertkit {command}` run without its {CONFIG} (it holds "
                                f"{', '.join(state)}): bertkit cannot tell which settings it was trained with, so it "
                                f"does not resume it under new ones. {move_aside(Path(path), command)}")
            return []
        if not isinstance(record.get("resume_key"), dict):
            raise UserError(f"--out {path} holds a `bertkit {record.get('command', command)}` run made by an older "
                            f"bertkit: its {CONFIG} records no resume key, so bertkit cannot tell whether these "
                            f"settings continue it. {move_aside(Path(path), command)}")
        return key_differences(record["resume_key"], new)

    return compare


def key_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`--flag: old -> new` for each compared option of the new key (not those a re-run may change) and `split data:
    old -> new` for each fingerprint that differs. An option only the old key holds (once migrated) is one this
    bertkit no longer counts - left out of the key since, as a tagger's --truncation is: it does not change what the
    run computes."""
    changed = []
    for section in ("config", "data"):
        a, b = old.get(section, {}), new.get(section, {})
        keys = set(a) | set(b) if section == "data" else set(b) - set(RERUN_MAY_CHANGE)
        changed += [f"--{k.replace('_', '-')}: {a.get(k)!r} -> {b.get(k)!r}" if section == "config"
                    else f"{k} data: {a.get(k)} -> {b.get(k)}"
                    for k in sorted(keys) if a.get(k) != b.get(k)]
    return changed


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`--flag: old -> new` for every compared option that differs."""
    new = json.loads(to_json(new))
    keys = sorted((set(old) | set(new)) - set(RERUN_MAY_CHANGE))
    return [f"--{k.replace('_', '-')}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def read_run_config(path: Path, family: str | None = None) -> dict[str, Any] | None:
    """A run's config.json in the current layout (`migrated_run_config`; None when there is none yet); a UserError
    when it is not what bertkit writes, or was edited or damaged since it was written."""
    file = Path(path) / CONFIG
    if not file.is_file():
        return None
    record, reason = read_json_record(file, lambda r: None)
    if reason is None:
        try:
            return migrated_run_config(record, family)
        except RecordProblem as exc:
            reason = str(exc)
    raise UserError(
        f"{file} is not the config.json bertkit writes ({reason}), so bertkit cannot tell which run "
        f"{path} holds. Choose another --out, or pass --overwrite to replace that run."
    )


DATA_PATHS = ("data", "dev", "test")
"""The config keys of a run that name data files."""


def config_as_run_read_it(record: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded config (`record`: its config.json) with its data paths as the run read them: a relative one
    that does not resolve from here, but did from the folder the run was started in (its `cwd`), made absolute. Hub
    names and absolute paths stay. What `bertkit export` reads a finetune run's dev set with."""
    config, cwd = record["config"], record.get("cwd")
    if not isinstance(cwd, str):
        return config
    fixed = dict(config)
    for key in DATA_PATHS:
        value = config.get(key)
        if isinstance(value, str) and not Path(value).is_absolute() and not Path(value).exists() \
                and (Path(cwd) / value).exists():
            fixed[key] = str(Path(cwd) / value)
    return fixed
