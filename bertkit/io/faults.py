"""Fault injection for the reliability tests: make this process SIGKILL itself at a named point, or make a
write fail as on a full disk.

Never active in normal use. The environment variable ``BERTKIT_KILL_AT`` lists kill points, comma-separated;
``POINT@N`` fires on the N-th time the point is reached in this process (default: the first)::

    BERTKIT_KILL_AT=embed.shard.before_rename@2     # explicit point: code calls kill_point("...")
    BERTKIT_KILL_AT=replace:shard-00001.npy          # just before os.replace(tmp, dst) with dst named like the glob
    BERTKIT_KILL_AT=replaced:shard-00000.npy         # just after that rename (the file is complete and in place)
    BERTKIT_KILL_AT=save:optimizer*.bin              # just before torch.save() writes a file named like the glob
    BERTKIT_KILL_AT=partial:.shard-00001.npy.*       # np.save() to a file named like the glob writes half, then dies
    BERTKIT_KILL_AT=optimizer.step@1                 # right after the first optimizer step (any torch optimizer)
    BERTKIT_KILL_AT=enospc:optimizer.bin@2           # the 2nd write of a file named like the glob fails: disk full

``BERTKIT_KILL_SIGNAL=TERM`` makes every kill a SIGTERM instead (the orderly stop a scheduler or `kill` sends): the
CLI then ends the command as on Ctrl-C (exit 143), and the test sees what it says.

``enospc:GLOB`` does not kill: the write of a matching file fails the way a full disk makes it fail, after part of
the file is on disk. Python writes (`open` for writing, which `np.save`, JSON and `np.lib.format.open_memmap` use)
and `os.posix_fallocate` raise ``OSError(ENOSPC)``; `safetensors` saves raise its ``SafetensorError`` ("No space
left on device"); `torch.save` raises torch's ``RuntimeError: [enforce fail at inline_container.cc:...]``.

The kill is ``os.kill(os.getpid(), SIGKILL)``: no exception handlers, ``finally`` blocks or atexit hooks run,
exactly like the OOM killer or a pulled plug. `install_from_env` (called by the CLI at start-up) wires the
generic points (os.replace, torch.save, optimizer steps); explicit points need a ``kill_point("name")`` call in
the code, e.g. in `store.StoreWriter.write_shard` and `checkpoint_folders.put_in_place`; counted points (`fail_point`)
fail after the N-th optimizer step or shard.
"""

from __future__ import annotations

import errno
import fnmatch
import io
import os
import signal
from collections import Counter
from typing import Any

_ORIGINAL_OPEN = io.open
ENV = "BERTKIT_KILL_AT"
_hits: Counter[str] = Counter()
_installed: set[str] = set()
_undo: list[Any] = []
"""Callables that undo what `install_from_env` installed, for `uninstall`."""


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


KILL_SIGNAL_ENV = "BERTKIT_KILL_SIGNAL"
"""TERM: a kill point sends SIGTERM to this process instead of SIGKILL."""


def _die() -> None:
    term = os.environ.get(KILL_SIGNAL_ENV, "").upper() in {"TERM", "SIGTERM"}
    os.kill(os.getpid(), signal.SIGTERM if term else signal.SIGKILL)


def maybe_kill(point: str) -> None:
    """SIGKILL this process if `point` is listed in BERTKIT_KILL_AT and this is its N-th hit."""
    if _due(point):
        _die()


def kill_point(name: str) -> None:
    """A named SIGKILL point for the fault-injection tests (env BERTKIT_KILL_AT); a no-op otherwise."""
    if os.environ.get(ENV):
        maybe_kill(name)


def _due(point: str) -> bool:
    """Count a hit of `point`; True when this is the hit BERTKIT_KILL_AT asks to die at."""
    points = kill_points()
    if point not in points:
        return False
    _hits[point] += 1
    return _hits[point] == points[point]


# ---------------------------------------------------------------- counted failure points (steps, shards)

FAIL_AFTER_STEPS_ENV = "BERTKIT_FAIL_AFTER_STEPS"
"""N: `finetune` fails right after optimizer step N (a RuntimeError, or SIGKILL with FAIL_MODE=kill)."""
FAIL_MODE_ENV = "BERTKIT_FAIL_MODE"
FAIL_AFTER_SHARDS_ENV = "BERTKIT_FAIL_AFTER_SHARDS"
"""k: `embed` fails right after this process wrote its k-th shard (RuntimeError, or SIGKILL with FAIL_SIGNAL=KILL)."""
FAIL_SIGNAL_ENV = "BERTKIT_FAIL_SIGNAL"
COUNTED = {"finetune.step": (FAIL_AFTER_STEPS_ENV, FAIL_MODE_ENV), "embed.shard": (FAIL_AFTER_SHARDS_ENV, FAIL_SIGNAL_ENV)}
"""Counted points -> (env var holding the count, env var that turns the failure into a SIGKILL)."""


class SimulatedFailure(RuntimeError):
    """The failure a counted point raises (a crash the run must resume from cleanly)."""


def fail_point(name: str, count: int) -> None:
    """A counted point: fail when `count` (the step or shard just finished) reaches the number its env var gives.

    `BERTKIT_KILL_AT=finetune.step@N` kills at the same place; the counted variables are the short forms the test
    suites use. Inactive (one dict lookup) unless a variable is set.
    """
    count_env, mode_env = COUNTED[name]
    value = os.environ.get(count_env, "")
    if value.isdigit() and count >= int(value) > 0:
        if os.environ.get(mode_env, "").lower() in {"kill", "sigkill"}:
            _die()
        raise SimulatedFailure(f"{count_env}={value}: injected failure after {name} {count} (test hook)")
    if os.environ.get(ENV):
        maybe_kill(name)


def _maybe_kill_file(prefix: str, path: Any) -> None:
    point = _matching_point(prefix, path)
    if point is not None:
        maybe_kill(point)


def install_from_env() -> bool:
    """Wire the generic points of the kinds BERTKIT_KILL_AT names (each kind once); whether any is listed."""
    points = kill_points()
    if not points:
        return False
    kinds = {p.partition(":")[0] for p in points}
    if kinds & {"replace", "replaced"}:
        _install_once("replace", _install_replace)
    if "partial" in kinds:
        _install_once("partial", _install_partial_np_save)
    if "save" in kinds:
        _install_once("save", _install_torch_save)
    if "enospc" in kinds:
        _install_once("enospc", _install_enospc)
    if "optimizer.step" in points:
        _install_once("optimizer.step", _install_optimizer_step)
    return True


def uninstall() -> None:
    """Undo `install_from_env` and forget the hit counts (tests that inject faults in-process call this)."""
    while _undo:
        _undo.pop()()
    _installed.clear()
    _hits.clear()


def _install_once(kind: str, install: Any) -> None:
    if kind not in _installed:
        _installed.add(kind)
        install()


def _patch(owner: Any, name: str, value: Any) -> None:
    """setattr(owner, name, value), undone by `uninstall`."""
    original = getattr(owner, name)
    _undo.append(lambda: setattr(owner, name, original))
    setattr(owner, name, value)


def _install_replace() -> None:
    original_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        _maybe_kill_file("replace", dst)
        original_replace(src, dst, *args, **kwargs)
        _maybe_kill_file("replaced", dst)

    _patch(os, "replace", replace)


def _install_torch_save() -> None:
    import torch

    original_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)):
            _maybe_kill_file("save", f)
        return original_save(obj, f, *args, **kwargs)

    _patch(torch, "save", save)


def _install_optimizer_step() -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda *_: maybe_kill("optimizer.step"))
    _undo.append(handle.remove)


def _install_partial_np_save() -> None:
    """np.save into a matching file writes only the first half of its bytes (flushed to disk), then SIGKILL."""
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

    _patch(np, "save", save)


def _matching_point(prefix: str, path: Any) -> str | None:
    """The listed `prefix:glob` point whose glob matches the file name of `path`, if any."""
    name = os.path.basename(os.fspath(path))
    for point in kill_points():
        kind, _, pattern = point.partition(":")
        if kind == prefix and pattern and fnmatch.fnmatch(name, pattern):
            return point
    return None


# ---------------------------------------------------------------- enospc: writes fail as on a full disk


def _no_space(name: Any) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device (injected by BERTKIT_KILL_AT)", os.fspath(name))


class _FullDiskFile:
    """A file opened for writing whose first write puts half of its bytes on disk and then raises ENOSPC."""

    def __init__(self, handle: Any, name: Any):
        self._handle, self._name = handle, name

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B") if not isinstance(data, str) else data
        self._handle.write(view[: len(view) // 2])
        self._handle.flush()
        raise _no_space(self._name)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self) -> _FullDiskFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.close()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._handle, attr)


def _install_enospc() -> None:
    """Python writes, posix_fallocate, safetensors and torch.save of matching files fail as on a full disk."""
    import builtins

    original_open = io.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = original_open(file, mode, *args, **kwargs)
        writing = any(c in mode for c in "wax+")
        if writing and isinstance(file, (str, bytes, os.PathLike)) and _enospc_due(file):
            return _FullDiskFile(handle, file)
        return handle

    _patch(io, "open", open_)
    _patch(builtins, "open", open_)
    if hasattr(os, "posix_fallocate"):
        original_fallocate = os.posix_fallocate

        def posix_fallocate(fd: int, offset: int, length: int) -> None:
            name = _fd_name(fd)
            if name is not None and _enospc_due(name):
                raise _no_space(name)
            original_fallocate(fd, offset, length)

        _patch(os, "posix_fallocate", posix_fallocate)
    _install_enospc_torch_save()
    _install_enospc_safetensors()


def _enospc_due(path: Any) -> bool:
    point = _matching_point("enospc", os.fsdecode(path) if isinstance(path, bytes) else path)
    return point is not None and _due(point)


def _fd_name(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _write_half(path: Any, data: bytes) -> None:
    with _ORIGINAL_OPEN(path, "wb") as handle:  # not the patched `open`: this write is the fault itself
        handle.write(data[: len(data) // 2])


def _install_enospc_torch_save() -> None:
    import torch

    original_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and _enospc_due(f):
            buffer = io.BytesIO()
            original_save(obj, buffer, *args, **kwargs)
            _write_half(f, buffer.getvalue())
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4480 vs 4352 "
                               "(injected by BERTKIT_KILL_AT)")
        return original_save(obj, f, *args, **kwargs)

    _patch(torch, "save", save)


def _install_enospc_safetensors() -> None:
    """safetensors.torch.save_file and the copies accelerate and transformers imported under another name."""
    import importlib

    import safetensors.torch
    from safetensors import SafetensorError

    original_save_file = safetensors.torch.save_file

    def save_file(tensors: Any, filename: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> None:
        if _enospc_due(filename):
            _write_half(filename, safetensors.torch.save(tensors, metadata=metadata))
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28) "
                                  "(injected by BERTKIT_KILL_AT)")
        original_save_file(tensors, filename, metadata, *args, **kwargs)

    _patch(safetensors.torch, "save_file", save_file)
    for module_name in ("accelerate.utils.other", "transformers.modeling_utils"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if getattr(module, "safe_save_file", None) is original_save_file:
            _patch(module, "safe_save_file", save_file)
