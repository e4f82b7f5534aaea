"""Fault injection for the reliability tests: make this process SIGKILL itself at a named point.

Never active in normal use. The environment variable ``BERTKIT_KILL_AT`` lists kill points, comma-separated;
``POINT@N`` fires on the N-th time the point is reached in this process (default: the first)::

    BERTKIT_KILL_AT=embed.shard.before_rename@2     # explicit point: code calls maybe_kill("...")
    BERTKIT_KILL_AT=replace:shard-00001.npy          # just before os.replace(tmp, dst) with dst named like the glob
    BERTKIT_KILL_AT=replaced:shard-00000.npy         # just after that rename (the file is complete and in place)
    BERTKIT_KILL_AT=save:optimizer*.bin              # just before torch.save() writes a file named like the glob
    BERTKIT_KILL_AT=partial:.shard-00001.npy.*       # np.save() to a file named like the glob writes half, then dies
    BERTKIT_KILL_AT=optimizer.step@1                 # right after the first optimizer step (any torch optimizer)

The kill is ``os.kill(os.getpid(), SIGKILL)``: no exception handlers, ``finally`` blocks or atexit hooks run,
exactly like the OOM killer or a pulled plug. `install_from_env` (called by the CLI at start-up) wires the
generic points (os.replace, torch.save, optimizer steps); explicit points need a ``maybe_kill("name")`` call in
the code, e.g. in `store.StoreWriter.write_shard` and `finetune.save_checkpoint`.
"""

from __future__ import annotations

import fnmatch
import os
import signal
from collections import Counter
from typing import Any

ENV = "BERTKIT_KILL_AT"
_hits: Counter[str] = Counter()
_installed = False


def kill_points() -> dict[str, int]:
    """{point: N} from BERTKIT_KILL_AT (empty when unset)."""
    points: dict[str, int] = {}
    for item in os.environ.get(ENV, "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, count = item.rpartition("@") if "@" in item else (item, "", "1")
        points[name] = int(count) if count.isdigit() and int(count) > 0 else 1
    return points


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_kill(point: str) -> None:
    """SIGKILL this process if `point` is listed in BERTKIT_KILL_AT and this is its N-th hit."""
    if _due(point):
        _die()


def _due(point: str) -> bool:
    """Count a hit of `point`; True when this is the hit BERTKIT_KILL_AT asks to die at."""
    points = kill_points()
    if point not in points:
        return False
    _hits[point] += 1
    return _hits[point] == points[point]


def _maybe_kill_file(prefix: str, path: Any) -> None:
    point = _matching_point(prefix, path)
    if point is not None:
        maybe_kill(point)


def install_from_env() -> bool:
    """Wire the generic kill points when BERTKIT_KILL_AT is set; returns whether anything was installed."""
    global _installed
    points = kill_points()
    if not points or _installed:
        return _installed
    _installed = True
    kinds = {p.partition(":")[0] for p in points}
    if kinds & {"replace", "replaced"}:
        original_replace = os.replace

        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            _maybe_kill_file("replace", dst)
            original_replace(src, dst, *args, **kwargs)
            _maybe_kill_file("replaced", dst)

        os.replace = replace  # type: ignore[assignment]
    if "partial" in kinds:
        _install_partial_np_save()
    if "save" in kinds:
        import torch

        original_save = torch.save

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(f, (str, os.PathLike)):
                _maybe_kill_file("save", f)
            return original_save(obj, f, *args, **kwargs)

        torch.save = save  # type: ignore[assignment]
    if "optimizer.step" in points:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(lambda *_: maybe_kill("optimizer.step"))
    return True


def _install_partial_np_save() -> None:
    """np.save into a matching file writes only the first half of its bytes (flushed to disk), then SIGKILL."""
    import io

    import numpy as np

    original_save = np.save

    def save(file: Any, arr: Any, *args: Any, **kwargs: Any) -> None:
        name = getattr(file, "name", file)
        point = _matching_point("partial", name) if isinstance(name, (str, os.PathLike)) else None
        if point is not None and _due(point):
            buffer = io.BytesIO()
            original_save(buffer, arr, *args, **kwargs)
            data = buffer.getvalue()
            handle = file if hasattr(file, "write") else open(file, "wb")  # noqa: SIM115
            handle.write(data[: len(data) // 2])
            handle.flush()
            os.fsync(handle.fileno())
            _die()
        original_save(file, arr, *args, **kwargs)

    np.save = save  # type: ignore[assignment]


def _matching_point(prefix: str, path: Any) -> str | None:
    """The listed `prefix:glob` point whose glob matches the file name of `path`, if any."""
    name = os.path.basename(os.fspath(path))
    for point in kill_points():
        kind, _, pattern = point.partition(":")
        if kind == prefix and pattern and fnmatch.fnmatch(name, pattern):
            return point
    return None
