"""What bertkit wrote, at every depth, and what it never writes over.

Each folder bertkit writes is of one kind (a run directory, a saved model, a checkpoint, a store, ...) whose rule says
which entries are bertkit's. A model folder lists its files in FILE_LIST and a checkpoint in its manifest; folders
made before those lists existed fall back to the names bertkit (and transformers / accelerate underneath) write there.
Anything else - a user's notes in best/, a folder in checkpoints/, a run saved under best/student - is foreign: a run
directory holding it is refused before anything is removed (`bertkit.io.rundir`), and the low-level removals
(`remove_owned`) leave it where it is. An --out that is, holds or is inside one of the command's inputs is refused
too (`check_out_not_input`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io.atomic import write_json_atomic

MARKER = ".bertkit-run.json"
"""Written first into every run directory bertkit creates or adopts: which command owns it."""
MARKER_FORMAT = "bertkit-run/1"
STAGING = ".bertkit-next"
"""Where an --overwrite run builds its output (a run directory of its own) until `RunDir.commit` swaps it in."""
OLD = ".bertkit-old"
"""Where `RunDir.commit` puts the previous output while it swaps; removed at the end."""
COMPLETE = ".bertkit-complete"
"""In STAGING: the new output is whole; a swap interrupted after this is finished (rolled forward) by the next run."""
SPLIT_NAMES = ("train", "dev", "test")
"""The splits of an embed store (`OUT/train`, `OUT/dev`, `OUT/test`)."""
STORE_FORMAT = "bertkit-store/1"
"""The format of an embed store's manifest (`bertkit.features.store` writes it; run directories recognise it)."""

TRACKER_ENTRIES = ("trackers.json", "tensorboard")
"""What --report-to writes into a training run directory (`bertkit.training.tracking`)."""

RUN_ENTRIES: dict[str, frozenset[str]] = {
    "tokens": frozenset({"config.json", "tokens.json", "token_lengths.png"}),
    "embed": frozenset({"manifest.json", "identity.json", "features.npy", "labels.npy", "shards", "splits.json",
                        *SPLIT_NAMES}),
    "probe": frozenset({"config.json", "metrics.json", "probe_layers.png", "confusion_matrix.png", "scatter.png",
                        "per_label_f1.png", "probe", "features"}),
    "finetune": frozenset({"config.json", "metrics.json", "metrics.jsonl", "training_table.csv", "curves.png",
                           "confusion_matrix.png", "dev_scatter.png", "dev_errors.csv", "best_dev_proba.npy", "best",
                           "final", "checkpoints", *TRACKER_ENTRIES}),
    "distill": frozenset({"config.json", "metrics.json", "metrics.jsonl", "training_table.csv", "curves.png",
                          "confusion_matrix.png", "dev_scatter.png", "dev_errors.csv", "best_dev_proba.npy", "best",
                          "final", "checkpoints", "teacher_logits.npy", "teacher_logits.json", "distill_report.json",
                          "distill_report.md", "distill_report.png", *TRACKER_ENTRIES}),
    "evaluate": frozenset({"config.json", "metrics.json", "predictions.csv", "confusion_matrix.png", "scatter.png",
                           "per_label_f1.png"}),
    "bench": frozenset({"config.json", "bench.json", "bench.md", "bench.png", "quality"}),
    "export": frozenset({"model.onnx", "config.json", "bertkit_model.json", "export_report.json", "tokenizer.json",
                         "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt",
                         "added_tokens.json", "chat_template.jinja", "README.md"}),  # = bertkit.models.onnx.FOLDER_FILES
    "sweep": frozenset({"config.json", "trials", "best", "trials.csv", "sweep.json", "sweep.png"}),
}
"""The top-level names each command writes into its run directory: the only names it ever replaces or deletes."""


def is_bertkit_temp(name: str) -> bool:
    """bertkit's own hidden names: marker, staging, temp files of atomic writes, temp/old model folders."""
    return (name in (MARKER, STAGING, OLD, COMPLETE) or name.startswith((".tmp-", ".old-", ".write-test-"))
            or (name.startswith(".") and name.endswith(".tmp")))


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
                 "dev": "store", "test": "store", "probe": "probe", "features": "features", "quality": "quality",
                 "trials": "trials", "tensorboard": "tensorboard"}
"""The kind of each folder in RUN_ENTRIES (every other entry there is a file)."""
_NAMES = {kind: re.compile(pattern) for kind, pattern in {
    "model": r"(generation_)?config\.json|bertkit_model\.json|README\.md|model(-\d+-of-\d+)?\.safetensors|model\.safetensors"
             r"\.index\.json|tokenizer(_config)?\.json|special_tokens_map\.json|added_tokens\.json|vocab\.(txt|json)"
             r"|merges\.txt|spiece\.model|sentencepiece\.bpe\.model|chat_template\.(jinja|json)"
             r"|(configuration|modeling|tokenization)_\w+\.py",  # what save_pretrained writes (older runs: no list)
    "checkpoint": r"trainer_state\.json|bertkit_checkpoint\.json|(model|pytorch_model|optimizer|scheduler|sampler"
                  r"|dl_state_dict)(_\d+)?\.(safetensors|bin)|(random_states|custom_checkpoint)_\d+\.pkl",  # save_state
    "store": r"manifest\.json|identity\.json|features\.npy|labels\.npy",
    "shards": r"shard-\d+\.(npy|json)",
    "probe": r"probe\.(json|safetensors)",
    "features": r"(random-)?(train|dev|test)-[a-z]+-(all|\d+(_\d+)*)\.(npy|json)",  # probe_inputs.cached_features
    "tensorboard": r"events\.out\.tfevents\..+|hparams\.yml",  # SummaryWriter's files; accelerate's hparams copy
}.items()}
"""The files each kind of folder holds (by name; model and checkpoint folders: when they carry no list)."""
_FOLDERS = {"checkpoints": (re.compile(r"step-\d+"), lambda name: "checkpoint"),
            "store": (re.compile(r"shards"), lambda name: "shards"),
            "quality": (re.compile(r"(probe|finetune)-\d+"), lambda name: f"run:{name.rsplit('-', 1)[0]}"),
            "trials": (re.compile(r"\d{3,}_[\w.=+-]*"), lambda name: "run:finetune"),
            "tensorboard": (re.compile(r"\d+(\.\d+)?"), lambda name: "tensorboard")}  # hparams: time.time() folders
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
    record = read_json_or_none(folder / file) if file else None
    if not isinstance(record, dict):
        return kind
    files = record.get("files")
    if (kind == "model" and record.get("format") != FILE_LIST_FORMAT) or not isinstance(files, (list, dict)):
        return kind  # an unreadable list: the name rules of the kind decide
    return frozenset({*map(str, files), file})


def _is_temp_file(name: str) -> bool:
    """The temp file of an atomic write (`.NAME.XXXXXXXX.tmp`, see `atomic_path`)."""
    return name.startswith(".") and name.endswith(".tmp")

def read_json_or_none(path: Path) -> Any:
    """The JSON in `path`; None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def suggest_out(out: Path, command: str) -> Path:
    """The --out an error message suggests instead of `out`."""
    return out.with_name(f"{out.name}-{command}") if out.name else Path("runs") / command


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
            example = suggestion or (Path("runs") / command if relation == "is inside" else suggest_out(path, command))
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
