"""Every run leaves its trail: `config.json` (the resolved config, package versions, machine, time and the
command's extras such as seed and data fingerprints), and the check whether a directory holds the same run.
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

NOT_COMPARED = frozenset({"out", "overwrite", "quiet", "json_output", "preset_fill"})
"""Config fields that do not change a run's results: a re-run may change them and still be the same run.
(`preset_fill`, which options a --task-preset set, is derived from the options: tokens and bench runs recorded it
in their config.json before the options were nested groups; it is no longer recorded.)"""

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


def write_run_config(run_dir: Path, command: str, config: dict[str, Any], **extra: Any) -> Path:
    """config.json: the resolved config plus versions, machine and time, so every number traces back."""
    record = {
        "command": command,
        "config": config,
        "versions": package_versions(),
        "machine": machine_info(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cwd": os.getcwd(),  # what the config's relative paths were relative to (read again by `bertkit export`)
        **extra,
    }
    path = run_dir / "config.json"
    write_json_atomic(path, record)
    return path


def config_compare(config: dict[str, Any]) -> Compare:
    """`compare` for commands that recompute: the same run is the same resolved config (less NOT_COMPARED)."""

    def compare(path: Path) -> list[str]:
        record = read_run_config(path)
        return [] if record is None else config_differences(record["config"], config)

    return compare


def report_compare(config: dict[str, Any], report: str) -> Compare:
    """`compare` for a command whose run records its config in the file `report` (an export's export_report.json,
    under `config`): the compared options that differ; none when the file is missing or unreadable."""

    def compare(path: Path) -> list[str]:
        record = read_json_or_none(Path(path) / report)
        old = record.get("config") if isinstance(record, dict) else None
        return config_differences(old, config) if isinstance(old, dict) else []

    return compare


def key_compare(key: dict[str, Any]) -> Compare:
    """`compare` for runs that resume (finetune, distill): the same run is the same resume key, `{"config": ...,
    "data": {split: fingerprint}}`, as the run's config.json records it."""
    new = json.loads(to_json(key))

    def compare(path: Path) -> list[str]:
        record = read_run_config(path)
        if record is None:  # claimed, but stopped before its config was written: nothing to differ from
            return []
        return key_differences(record.get("resume_key") or {}, new)

    return compare


def key_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`--flag: old -> new` for each option of the new key and `split data: old -> new` for each fingerprint that
    differs. An option only the old key holds is one this bertkit no longer counts (left out of the key since, as a
    tagger's --truncation is): it does not change what the run computes."""
    changed = []
    for section in ("config", "data"):
        a, b = old.get(section, {}), new.get(section, {})
        keys = set(b) if section == "config" else set(a) | set(b)
        changed += [f"--{k.replace('_', '-')}: {a.get(k)!r} -> {b.get(k)!r}" if section == "config"
                    else f"{k} data: {a.get(k)} -> {b.get(k)}"
                    for k in sorted(keys) if a.get(k) != b.get(k)]
    return changed


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`--flag: old -> new` for every compared option that differs."""
    new = json.loads(to_json(new))
    keys = sorted((set(old) | set(new)) - NOT_COMPARED)
    return [f"--{k.replace('_', '-')}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def read_run_config(path: Path) -> dict[str, Any] | None:
    """A run's config.json (None when there is none yet); a UserError when it is not what bertkit writes."""
    file = Path(path) / "config.json"
    if not file.is_file():
        return None
    record, reason = read_json_record(file, lambda r: None if isinstance(r, dict) and isinstance(r.get("config"), dict)
                                      else "no `config` table")
    if reason is not None:
        raise UserError(
            f"{file} is not the config.json bertkit writes ({reason}), so bertkit cannot tell which run "
            f"{path} holds. Choose another --out, or pass --overwrite to replace that run."
        )
    return record


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
