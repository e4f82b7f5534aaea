"""Run directories and atomic file writes.

A run directory holds `config.json` (the resolved config, package versions, seed and data fingerprints),
`metrics.json` / `metrics.jsonl`, and the command's plots and tables. Every write goes to a temp file in the
same directory and is renamed into place, so a killed process never leaves a partial file where a complete
one should be.

Ownership (see `inspect_run_dir` / `RunDir`): bertkit writes only into a new or empty directory or one of its
own runs, marked by `.bertkit-run.json` (which command owns it). It deletes or replaces only the names its
command writes (`RUN_ENTRIES`, and below them the files each kind of folder holds: `foreign_paths`), never a
folder holding anything else, never the current directory, the home directory or `/`, never an --out that is,
holds or is inside one of the command's inputs (`check_out_not_input`). `--overwrite` builds the new output in
`OUT/.bertkit-next/` and swaps it in only once the command succeeded (`RunDir.commit`), so a failed or killed run
leaves the previous output as it was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import UserError

log = logging.getLogger(__name__)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    return str(value)


def to_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text for results: numpy scalars/arrays, paths and dataclasses included."""
    return json.dumps(obj, indent=indent, default=_json_default, ensure_ascii=False)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temp path next to `path`; on success it is fsynced and renamed over `path`, else removed."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"Cannot write {path}: it is an existing directory. Pass a file path (check --out).")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists()), None)
        reason = f"{blocker} is a file, not a directory" if blocker and not blocker.is_dir() else exc.strerror or exc
        raise UserError(
            f"Cannot write {path} ({reason}). Choose an output path (--out) in a directory you can write to."
        ) from None
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results should get the usual permissions
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, to_json(obj) + "\n")


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line (flushed and fsynced: a log of progress survives a kill)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(to_json(record, indent=None) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


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
        **extra,
    }
    path = run_dir / "config.json"
    write_json_atomic(path, record)
    return path


# ---------------------------------------------------------------- run directories: ownership, claiming, replacing

MARKER = ".bertkit-run.json"
"""Written first into every run directory bertkit creates or adopts: which command owns it."""
MARKER_FORMAT = "bertkit-run/1"
STAGING = ".bertkit-next"
"""Where an --overwrite run builds its output (a run directory of its own) until `RunDir.commit` swaps it in."""
OLD = ".bertkit-old"
"""Where `RunDir.commit` puts the previous output while it swaps; removed at the end."""
COMPLETE = ".bertkit-complete"
"""In STAGING: the new output is whole; a swap interrupted after this is finished (rolled forward) by the next run."""
STORE_FORMAT = "bertkit-store/1"  # = store.FORMAT (store imports this module, not the other way round)
SPLIT_NAMES = ("train", "dev", "test")

RUN_ENTRIES: dict[str, frozenset[str]] = {
    "tokens": frozenset({"config.json", "tokens.json", "token_lengths.png"}),
    "embed": frozenset({"manifest.json", "identity.json", "features.npy", "labels.npy", "shards", "splits.json",
                        *SPLIT_NAMES}),
    "probe": frozenset({"config.json", "metrics.json", "probe_layers.png", "confusion_matrix.png", "scatter.png",
                        "per_label_f1.png", "probe", "features"}),
    "finetune": frozenset({"config.json", "metrics.json", "metrics.jsonl", "training_table.csv", "curves.png",
                           "confusion_matrix.png", "dev_scatter.png", "dev_errors.csv", "best_dev_proba.npy", "best",
                           "final", "checkpoints"}),
    "distill": frozenset({"config.json", "metrics.json", "metrics.jsonl", "training_table.csv", "curves.png",
                          "confusion_matrix.png", "dev_scatter.png", "dev_errors.csv", "best_dev_proba.npy", "best",
                          "final", "checkpoints", "teacher_logits.npy", "teacher_logits.json", "distill_report.json",
                          "distill_report.md", "distill_report.png"}),
    "evaluate": frozenset({"config.json", "metrics.json", "predictions.csv", "confusion_matrix.png", "scatter.png",
                           "per_label_f1.png"}),
    "bench": frozenset({"config.json", "bench.json", "bench.md", "bench.png", "quality"}),
}
"""The top-level names each command writes into its run directory: the only names it ever replaces or deletes."""
NOT_COMPARED = frozenset({"out", "overwrite", "quiet", "json_output"})
"""Config fields that do not change a run's results: a re-run may change them and still be the same run."""

Compare = Callable[[Path], list[str]]
"""A command's check of a run of its own in a directory: the settings that differ (empty: the same run)."""


def is_bertkit_temp(name: str) -> bool:
    """bertkit's own hidden names: marker, staging, temp files of atomic writes, temp/old model folders."""
    return (name in (MARKER, STAGING, OLD, COMPLETE) or name.startswith((".tmp-", ".old-", ".write-test-"))
            or (name.startswith(".") and name.endswith(".tmp")))


@dataclass
class RunDir:
    """An --out directory as seen by one command: `inspect_run_dir` (read-only) says what a run would do there,
    `claim` makes it so, `commit` swaps a staged output in. Commands write only below `path`."""

    out: Path
    """The directory the user named."""
    command: str
    overwrite: bool = False
    compare: Compare | None = None
    path: Path = field(default=Path())
    """Where the command writes: `out`, or `out/.bertkit-next` when it replaces a previous run."""
    existing: bool = False
    """`path` already holds this same run: resume it, report it finished, or recompute it in place."""
    replacing: bool = False
    """`path` is the staging folder: `commit` swaps it in for the previous output once the command succeeded."""
    pending_swap: bool = False
    """An earlier `commit` was interrupted; `claim` finishes (or undoes) it before anything else."""
    claimed: bool = False

    def claim(self) -> RunDir:
        """Create/adopt the directory (marker first), finish an interrupted swap, prepare staging. Idempotent."""
        if self.claimed:
            return self
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            if self.pending_swap:
                _finish_swap(self.out, self.command)
            fresh = inspect_run_dir(self.out, self.command, overwrite=self.overwrite, compare=self.compare)
            _write_marker(self.out, self.command)
            staging = self.out / STAGING
            if not fresh.replacing:
                _remove_tree(staging, self.command)  # an interrupted --overwrite run's output: the previous one stays
            elif not fresh.existing:
                _remove_tree(staging, self.command)
                staging.mkdir()
                _write_marker(staging, self.command)
        except OSError as exc:
            raise UserError(
                f"Cannot write to --out {self.out} ({exc.strerror or exc}). Choose a directory you can write to."
            ) from None
        self.path, self.existing, self.replacing = fresh.path, fresh.existing, fresh.replacing
        self.pending_swap, self.claimed = False, True
        return self

    def commit(self) -> None:
        """Swap the staged output in for the previous one (nothing to do for a run written in place).

        Old owned entries go aside into OLD, staging is marked COMPLETE, its entries move up, OLD and staging
        are removed. A kill before COMPLETE leaves the previous output (restored by the next run); after it,
        the next run finishes the swap."""
        if not self.replacing:
            return
        out, staging, old = self.out, self.out / STAGING, self.out / OLD
        check_only_bertkit_files(out, self.command)  # again: a long run gives time to put a file into best/
        old.mkdir(exist_ok=True)
        for name in _owned_names(out, self.command):
            os.replace(out / name, old / name)
        _kill_point("runs.commit.old-aside")
        write_json_atomic(staging / COMPLETE, {"complete": True, "command": self.command})
        _kill_point("runs.commit.complete")
        _move_entries(staging, out)
        _kill_point("runs.commit.moved")
        _remove_tree(old, self.command)
        _remove_tree(staging, self.command)
        self.path, self.replacing, self.existing = out, False, True


def inspect_run_dir(out: str | Path, command: str, *, overwrite: bool = False, compare: Compare | None = None,
                    inputs: list[tuple[str, str | None]] | None = None) -> RunDir:
    """What `command` may do in --out, without changing anything; a UserError when it must not write there.

    Refused whatever --overwrite says: a file, the current/home/root directory, a directory holding anything
    bertkit did not write (at any depth), another command's run, an unreadable marker, an --out that is, holds or
    is inside one of the command's `inputs` ((flag, path) pairs, see `input_paths`). Refused without --overwrite: a
    run of this command with other settings (`compare` lists them)."""
    out = Path(out).expanduser()
    run = RunDir(out, command, overwrite, compare, path=out)
    _check_location(out, command)
    holds_run = _holds_own_run(out, command)
    check_out_not_input(out, inputs or [], command)
    if not holds_run:
        return run
    run.pending_swap = (out / OLD).is_dir() or (out / STAGING / COMPLETE).is_file()
    if run.pending_swap:
        return run  # `claim` finishes the interrupted swap, then looks again
    if overwrite:
        run.path, run.replacing = out / STAGING, True
        run.existing = _resumable(out / STAGING, command, compare)
        return run
    differences = compare(out) if compare is not None else []
    if differences:
        raise UserError(
            f"--out {out} holds a `bertkit {command}` run made with different settings:\n  "
            + "\n  ".join(differences)
            + "\nRe-run with that run's settings to reuse it, choose another --out, or pass --overwrite to replace "
            "it (the previous output stays until the new one is complete)."
        )
    run.existing = True
    return run


def _holds_own_run(out: Path, command: str) -> bool:
    """Whether --out holds output of a `command` run (or an interrupted swap of one); False: new, empty, or only
    bertkit's marker and temp files. A UserError where bertkit must not write: someone else's files (at any depth),
    another command's run."""
    if not out.is_dir():
        return False
    names = sorted(p.name for p in out.iterdir())
    content = [n for n in names if not is_bertkit_temp(n)]
    owner = _read_marker(out) or (_legacy_owner(out) if content else None)
    if owner is None:
        if names:
            raise UserError(_foreign_message(out, command, names))
        return False
    if content and owner != command:
        raise UserError(
            f"--out {out} holds a `bertkit {owner}` run; `bertkit {command}` never writes into another command's "
            f"run (not even with --overwrite). Choose another --out, e.g. --out {_suggest(out, command)}."
        )
    check_only_bertkit_files(out, owner)
    return bool(content) or (out / OLD).is_dir() or (out / STAGING / COMPLETE).is_file()


def claim_run_dir(out: str | Path, command: str, *, overwrite: bool = False, compare: Compare | None = None) -> RunDir:
    """`inspect_run_dir` + `RunDir.claim`: the directory to write into, ready."""
    return inspect_run_dir(out, command, overwrite=overwrite, compare=compare).claim()


def write_path(out: str | Path, overwrite: bool) -> Path:
    """Where a run claimed by another process writes (multi-process runs: rank 0 claims, all ranks write)."""
    out = Path(out).expanduser()
    staging = out / STAGING
    return staging if overwrite and (staging / MARKER).is_file() else out


def config_compare(config: dict[str, Any]) -> Compare:
    """`compare` for commands that recompute: the same run is the same resolved config (less NOT_COMPARED)."""

    def compare(path: Path) -> list[str]:
        record = read_run_config(path)
        return [] if record is None else config_differences(record["config"], config)

    return compare


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
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        reason = None if isinstance(record, dict) and isinstance(record.get("config"), dict) else "no `config` table"
    except (OSError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
    if reason is not None:
        raise UserError(
            f"{file} is not the config.json bertkit writes ({reason}), so bertkit cannot tell which run "
            f"{path} holds. Choose another --out, or pass --overwrite to replace that run."
        )
    return record


def _check_location(out: Path, command: str) -> None:
    """Not a file, not the current/home/root directory, and under a directory we may write to."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is an existing file, not a directory. Pass a directory path for --out.")
    resolved = out.resolve()
    for name, place in (("the current directory", _cwd()), ("your home directory", Path.home().resolve()),
                        ("the filesystem root", Path(resolved.anchor))):
        if resolved == place:
            raise UserError(
                f"--out {out} is {name}. bertkit writes each run into a directory of its own, never into the "
                f"current directory, your home directory or /. Choose a new directory, e.g. --out runs/{command}."
            )
    existing = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise UserError(f"Cannot write to --out {out} ({existing} is a file, not a directory). "
                        "Choose a directory you can write to.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"Cannot write to --out {out} (no write permission on {existing}). "
                        "Choose a directory you can write to.")


def _cwd() -> Path | None:
    try:
        return Path.cwd().resolve()
    except OSError:
        return None


def _suggest(out: Path, command: str) -> Path:
    return out.with_name(f"{out.name}-{command}") if out.name else Path("runs") / command


def check_only_bertkit_files(out: Path, command: str) -> None:
    """A UserError naming what bertkit did not write anywhere in the run directory `out` of `command` (in best/,
    checkpoints/step-N/, the staging folder, ...): a run never starts, resumes or replaces where it would have to
    delete or replace it."""
    foreign = [p.relative_to(out).as_posix() for p in foreign_paths(out, f"run:{command}")]
    if foreign:
        raise UserError(_foreign_message(out, command, foreign, own_run=True))


def _foreign_message(out: Path, command: str, names: list[str], own_run: bool = False) -> str:
    """`names`: paths relative to `out`; in a run of bertkit's own (`own_run`) at any depth."""
    shown = [n + ("/" if (out / n).is_dir() and not (out / n).is_symlink() else "") for n in names[:5]]
    more = f", and {len(names) - 5} more" if len(names) > 5 else ""
    if own_run:
        return (
            f"--out {out} holds files bertkit did not write ({', '.join(shown)}{more}) in its `bertkit {command}` "
            f"run; bertkit deletes or replaces only the files it wrote, never a folder holding anything else (not "
            f"even with --overwrite). Move them out of {out}, or choose another --out, e.g. --out "
            f"{_suggest(out, command)}."
        )
    return (
        f"--out {out} holds files bertkit did not write ({', '.join(shown)}{more}); bertkit only writes into a new "
        f"or empty directory or one of its own runs, and never deletes what it did not write (not even with "
        f"--overwrite). Choose another --out, e.g. --out {_suggest(out, command)}."
    )


def _read_marker(path: Path) -> str | None:
    """The command named by the marker in `path` (None: no marker); a UserError for an unreadable one."""
    file = path / MARKER
    if not file.exists():
        return None
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        ok = isinstance(record, dict) and record.get("format") == MARKER_FORMAT and isinstance(record.get("command"), str)
        reason = None if ok else f"not a {MARKER_FORMAT} record"
    except (OSError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
    if reason is not None:
        raise UserError(
            f"--out {path} has a {MARKER} that bertkit did not write ({reason}), so bertkit cannot tell which "
            f"command owns {path} and leaves it alone. Choose another --out, e.g. --out {_suggest(path, 'run')}."
        )
    return str(record["command"])


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _legacy_owner(path: Path) -> str | None:
    """The command that wrote a run directory made before markers existed (its config.json or store files)."""
    record = _json_or_none(path / "config.json")
    if isinstance(record, dict) and isinstance(record.get("config"), dict) and record.get("command") in RUN_ENTRIES:
        return str(record["command"])
    for base in (path, *(path / n for n in SPLIT_NAMES)):
        for name in ("manifest.json", "splits.json"):
            found = _json_or_none(base / name)
            if isinstance(found, dict) and found.get("format") == STORE_FORMAT:
                return "embed"
        identity = _json_or_none(base / "identity.json")  # an unfinished store
        if isinstance(identity, dict) and {"model", "shard_size", "data_fingerprint"} <= set(identity):
            return "embed"
    return None


def _resumable(staging: Path, command: str, compare: Compare | None) -> bool:
    """An interrupted --overwrite run of the same command and settings left its output in `staging`."""
    if not staging.is_dir() or (staging / COMPLETE).exists():
        return False
    try:
        if _read_marker(staging) != command:
            return False
        if not [p for p in staging.iterdir() if not is_bertkit_temp(p.name)]:
            return False
        return not (compare(staging) if compare is not None else [])
    except UserError:
        return False


def _write_marker(path: Path, command: str) -> None:
    """The marker, unless `path` already carries this command's (a re-run changes no byte of its run)."""
    record = _json_or_none(path / MARKER)
    if isinstance(record, dict) and record.get("format") == MARKER_FORMAT and record.get("command") == command:
        return
    from bertkit import __version__

    write_json_atomic(path / MARKER, {"format": MARKER_FORMAT, "command": command,
                                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "bertkit": __version__})


def _owned_names(path: Path, command: str) -> list[str]:
    """The entries of `path` that `command` wrote (its outputs and its temp leftovers), never anything else."""
    return sorted(p.name for p in path.iterdir()
                  if p.name in RUN_ENTRIES[command]
                  or (is_bertkit_temp(p.name) and p.name not in (MARKER, STAGING, OLD)))


def _move_entries(source: Path, target: Path) -> None:
    """Move the outputs in `source` up into `target` (bertkit's hidden names stay behind)."""
    for entry in sorted(source.iterdir()):
        if is_bertkit_temp(entry.name):
            continue
        if (target / entry.name).exists():  # an old entry not yet set aside (an interrupted swap)
            (target / OLD).mkdir(exist_ok=True)
            os.replace(target / entry.name, target / OLD / entry.name)
        os.replace(entry, target / entry.name)


def _finish_swap(out: Path, command: str) -> None:
    """Complete an interrupted `commit`: roll forward when staging was complete, else put the old output back."""
    staging, old = out / STAGING, out / OLD
    if (staging / COMPLETE).is_file():
        log.info("finishing the interrupted replacement of %s", out)
        _move_entries(staging, out)
        _remove_tree(staging, command)
    elif old.is_dir():
        log.info("restoring the previous output of %s (its replacement was interrupted)", out)
        for entry in sorted(old.iterdir()):
            if not (out / entry.name).exists():
                os.replace(entry, out / entry.name)
    _remove_tree(old, command)


def _remove_tree(path: Path, command: str) -> None:
    """Remove one of bertkit's own folders (staging, OLD): the files `command` wrote there; anything else stays
    (`inspect_run_dir` then names it)."""
    if path.is_dir() and not path.is_symlink():
        kept = remove_owned(path, f"run:{command}")
        if kept:
            log.warning("kept %s: bertkit did not write %s", path, ", ".join(map(str, kept[:5])))
    elif path.exists() or path.is_symlink():
        path.unlink()


def _kill_point(name: str) -> None:
    """A named SIGKILL point for the fault-injection tests (`bertkit.io.faults`, env BERTKIT_KILL_AT); no-op otherwise."""
    if os.environ.get("BERTKIT_KILL_AT"):
        from bertkit.io import faults

        faults.maybe_kill(name)


# ---------------------------------------------------------------- what bertkit wrote, at every depth
#
# bertkit deletes or replaces only files it wrote, and it knows their names: each folder it writes is of one kind
# (a run directory, a saved model, a checkpoint, a store, ...) whose rule says which entries are bertkit's. A model
# folder lists its files in FILE_LIST and a checkpoint in its manifest; folders made before those lists existed
# fall back to the names bertkit (and transformers / accelerate underneath) write there. Anything else - a user's
# notes in best/, a folder in checkpoints/, a run saved under best/student - is foreign: a run directory holding it
# is refused before anything is removed, and the low-level removals (`remove_owned`) leave it where it is.

FILE_LIST = ".bertkit-files.json"
"""In every model folder bertkit saves (best/, final/): the relative paths of the files it wrote there."""
FILE_LIST_FORMAT = "bertkit-files/1"
CHECKPOINT_MANIFEST = "bertkit_checkpoint.json"
"""A checkpoint's list of files (with digests); checkpoints.py writes it (it imports this module, not the reverse)."""
FILE = "file"
"""The kind of an entry that is one file bertkit wrote."""
Kind = str | frozenset
"""A folder's kind (`run:<command>`, `model`, `checkpoint`, ...), or the exact relative file paths bertkit listed."""

ENTRY_FOLDERS = {"best": "model", "final": "model", "checkpoints": "checkpoints", "shards": "shards", "train": "store",
                 "dev": "store", "test": "store", "probe": "probe", "features": "features", "quality": "quality"}
"""The kind of each folder in RUN_ENTRIES (every other entry there is a file)."""
_NAMES = {kind: re.compile(pattern) for kind, pattern in {
    "model": r"(generation_)?config\.json|bertkit_model\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors"
             r"\.index\.json|tokenizer(_config)?\.json|special_tokens_map\.json|added_tokens\.json|vocab\.(txt|json)"
             r"|merges\.txt|spiece\.model|sentencepiece\.bpe\.model|chat_template\.(jinja|json)"
             r"|(configuration|modeling|tokenization)_\w+\.py",  # what save_pretrained writes (older runs: no list)
    "checkpoint": r"trainer_state\.json|bertkit_checkpoint\.json|(model|pytorch_model|optimizer|scheduler|sampler"
                  r"|dl_state_dict)(_\d+)?\.(safetensors|bin)|(random_states|custom_checkpoint)_\d+\.pkl",  # save_state
    "store": r"manifest\.json|identity\.json|features\.npy|labels\.npy",
    "shards": r"shard-\d+\.(npy|json)",
    "probe": r"probe\.(json|safetensors)",
    "features": r"(random-)?(train|dev|test)-[a-z]+-(all|\d+(_\d+)*)\.(npy|json)",  # probe_inputs.cached_features
}.items()}
"""The files each kind of folder holds (by name; model and checkpoint folders: when they carry no list)."""
_FOLDERS = {"checkpoints": (re.compile(r"step-\d+"), lambda name: "checkpoint"),
            "store": (re.compile(r"shards"), lambda name: "shards"),
            "quality": (re.compile(r"(probe|finetune)-\d+"), lambda name: f"run:{name.rsplit('-', 1)[0]}")}
"""The sub-folders each kind of folder holds: (name pattern, kind of the sub-folder)."""


def foreign_paths(path: Path, kind: Kind) -> list[Path]:
    """Everything under `path` (a folder of `kind`) that bertkit did not write; a foreign folder is listed once."""
    found: list[Path] = []
    for entry, entry_kind in _entries(path, kind):
        if entry_kind is None:
            found.append(entry)
        elif entry_kind != FILE:
            found += foreign_paths(entry, entry_kind)
    return found


def remove_owned(path: Path, kind: Kind) -> list[Path]:
    """Remove the files bertkit wrote under `path` (a folder of `kind`), then the folders left empty; what it did
    not write stays, with the folders holding it. Returns what stayed (empty: `path` is gone)."""
    if path.is_symlink() or not path.is_dir():
        return [path] if path.exists() or path.is_symlink() else []
    kept: list[Path] = []
    for entry, entry_kind in _entries(path, kind):
        if entry_kind is None:
            kept.append(entry)
        elif entry_kind == FILE:
            entry.unlink(missing_ok=True)
        else:
            kept += remove_owned(entry, entry_kind)
    if not kept:
        try:
            path.rmdir()
        except OSError:  # something appeared in it meanwhile: it stays
            return [path]
    return kept


def write_file_list(folder: Path) -> None:
    """FILE_LIST in a folder bertkit has just written whole (a saved model): every file in it, by relative path."""
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.name != FILE_LIST and not _is_temp_file(p.name))
    write_json_atomic(folder / FILE_LIST, {"format": FILE_LIST_FORMAT, "files": files})


def _entries(folder: Path, kind: Kind) -> list[tuple[Path, Kind | None]]:
    """Each entry of `folder` with the kind bertkit wrote it as (None: bertkit did not write it)."""
    kind = _listed(folder, kind)
    found = []
    for entry in sorted(folder.iterdir()):
        is_dir = entry.is_dir()
        entry_kind = None if entry.is_symlink() else _entry_kind(kind, entry.name, is_dir)  # bertkit makes no links
        if entry_kind is not None and (entry_kind == FILE) == is_dir:
            entry_kind = None  # a folder where bertkit writes a file, or the reverse
        found.append((entry, entry_kind))
    return found


def _entry_kind(kind: Kind, name: str, is_dir: bool) -> Kind | None:
    """What an entry called `name` in a folder of `kind` is when bertkit wrote it (None: it never writes that)."""
    if _is_temp_file(name) and not is_dir:
        return FILE  # an atomic write's temp file (killed before its rename)
    if isinstance(kind, frozenset):
        inner = frozenset(p.split("/", 1)[1] for p in kind if p.startswith(f"{name}/"))
        return FILE if name in kind else inner or None
    if kind.startswith("run:"):
        return _run_entry_kind(kind.removeprefix("run:"), name)
    if is_dir and name.startswith((".tmp-", ".old-")):  # a folder being written or set aside: the kind it becomes
        name = name[len(".tmp-"):]
    pattern, folder = _NAMES.get(kind), _FOLDERS.get(kind)
    if pattern is not None and pattern.fullmatch(name):
        return FILE
    return folder[1](name) if folder is not None and folder[0].fullmatch(name) else None


def _run_entry_kind(command: str, name: str) -> Kind | None:
    """The kind of `name` in a run directory of `command`: its marker, staging, outputs and their temp folders."""
    if name in (STAGING, OLD):
        return f"run:{command}"
    if name in (MARKER, COMPLETE):
        return FILE
    entries = RUN_ENTRIES.get(command, frozenset())
    if name.startswith((".tmp-", ".old-")):  # save_model_folder's .tmp-best / .old-best
        return ENTRY_FOLDERS.get(name[len(".tmp-"):]) if name[len(".tmp-"):] in entries else None
    return ENTRY_FOLDERS.get(name, FILE) if name in entries else None


def _listed(folder: Path, kind: Kind) -> Kind:
    """A model folder or a checkpoint as the exact list of files it carries; without one, its kind (name rules)."""
    file = {"model": FILE_LIST, "checkpoint": CHECKPOINT_MANIFEST}.get(kind) if isinstance(kind, str) else None
    record = _json_or_none(folder / file) if file else None
    if not isinstance(record, dict):
        return kind
    files = record.get("files")
    if (kind == "model" and record.get("format") != FILE_LIST_FORMAT) or not isinstance(files, (list, dict)):
        return kind  # an unreadable list: the name rules of the kind decide
    return frozenset({*map(str, files), file})


def _is_temp_file(name: str) -> bool:
    """The temp file of an atomic write (`.NAME.XXXXXXXX.tmp`, see `atomic_path`)."""
    return name.startswith(".") and name.endswith(".tmp")


# ---------------------------------------------------------------- what a command reads is never inside its --out


def input_paths(cfg: Any) -> list[tuple[str, str]]:
    """(flag, value) of everything a command's config reads that may be a path: --teacher, --student, --model, each
    of bench's --models, --features, --probe, --data, --dev, --test and each --metric script. A value given under two
    names (distill's `model` is its --student or --teacher) is named by the flag the user typed.

    (--recipe is read before the config exists; inside an --out it is a file bertkit did not write, so
    `inspect_run_dir` refuses it, and an --out inside a file is refused as a path below a file.)"""
    fields = [(f"--{name}", getattr(cfg, name, None)) for name in ("teacher", "student", "model")]
    fields += [("--models", name) for name in getattr(cfg, "model_list", [])]
    fields += [(f"--{name}", getattr(cfg, name, None)) for name in ("features", "probe", "data", "dev", "test")]
    fields += [("--metric", spec.partition(":")[0]) for spec in getattr(cfg, "external_metrics", [])]
    found: dict[str, str] = {}
    for flag, value in fields:
        if isinstance(value, str) and value and value not in found:
            found[value] = flag
    return [(flag, value) for value, flag in found.items()]


def check_out_not_input(out: str | Path, inputs: list[tuple[str, str | None]], command: str,
                        suggestion: Path | None = None) -> None:
    """A UserError when --out is one of the command's inputs, inside one, or holds one (symlinks resolved): a run
    never writes over, replaces or deletes what it reads, with or without --overwrite. Values that are not existing
    paths (hub ids, split names, `minilm-offline`) have nothing to protect and are skipped."""
    path = Path(out).expanduser()
    target = path.resolve()
    for flag, value in inputs:
        source = Path(value).expanduser() if value else None
        relation = _relation(path, target, source) if source is not None and source.exists() else None
        if relation is not None:
            example = suggestion or (Path("runs") / command if relation == "is inside" else _suggest(path, command))
            raise UserError(
                f"--out {out} {relation} the {flag} {value}: `bertkit {command}` never writes over what it reads. "
                f"Choose another --out, e.g. --out {example}."
            )


def _relation(path: Path, target: Path, source: Path) -> str | None:
    """How --out (`path`, resolved: `target`) stands to an existing input: "is", "is inside", "contains" or None."""
    real = source.resolve()
    if real == target or (path.exists() and os.path.samefile(path, source)):
        return "is"
    if real in target.parents:
        return "is inside"
    return "contains" if target in real.parents else None


# ---------------------------------------------------------------- `bertkit predict --out FILE`


def check_predictions_out(out: str | Path, inputs: dict[str, str | None]) -> Path:
    """--out of `bertkit predict`: not any of its inputs (nor inside one), and not a file bertkit did not write.

    `inputs` maps flags (--data, --model, --probe, --recipe) to the paths given."""
    path = Path(out).expanduser()
    suggestion = Path(f"{path.stem or 'predictions'}.predictions.csv")  # in the current directory: outside any input
    if path.is_dir():
        raise UserError(f"Cannot write {path}: it is an existing directory. Pass a file path for --out, "
                        f"e.g. --out predictions.csv.")
    check_out_not_input(out, list(inputs.items()), "predict", suggestion)
    if path.exists() and not is_predictions_csv(path):
        raise UserError(
            f"--out {out} exists and is not a predictions file bertkit wrote (its header is not row, text, ..., "
            f"predicted, ... as predict writes it); predict only replaces its own predictions. Choose another --out, "
            f"e.g. --out {suggestion}, or move {out} away."
        )
    return path


PREDICTION_INPUT_COLUMNS = ("line", "text", "text_pair", "label")
"""What `predict.write_predictions_csv` puts between `row` and `predicted`, in this order (`text` always)."""


def is_predictions_csv(path: Path) -> bool:
    """A header `predict.write_predictions_csv` writes: `row`, the input columns, `predicted`, then the outputs of
    the problem shape (see `_prediction_outputs`)."""
    import csv

    try:
        with open(path, encoding="utf-8", newline="") as handle:
            header = next(csv.reader([handle.readline(1 << 16)]), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    if not header or header[0] != "row" or "predicted" not in header:
        return False
    at = header.index("predicted")
    inputs = header[1:at]
    in_order = [c for c in PREDICTION_INPUT_COLUMNS if c in inputs] == inputs
    return "text" in inputs and in_order and _prediction_outputs(header[at + 1:])


def _prediction_outputs(columns: list[str]) -> bool:
    """The columns after `predicted`: single-label `confidence, p_<label>...`; multi-label `[wrong_tags,]
    p_<tag>...`; regression nothing, or `abs_error` (evaluate's predictions.csv)."""
    probabilities = bool(columns) and all(c.startswith("p_") for c in columns)
    if columns[:1] in (["confidence"], ["wrong_tags"]):
        return len(columns) > 1 and all(c.startswith("p_") for c in columns[1:])
    return columns in ([], ["abs_error"]) or probabilities
