"""What a command checks about its inputs before it imports torch, transformers or sklearn: the data files
(--data/--dev/--test) are readable files whose header has the columns the --*-column options name
(`bertkit.data.columns.check_columns`), and a --model is `minilm-offline`, a hub id, or a local model folder as saved
(`bertkit.models.folders.check_model_folder`). The checks and their messages are the library's own; run here first,
a wrong path or column is refused in well under a second, and --out is not touched. Every command runs it, so it
lives below `commands/`, in `models/`: the lowest package that knows both model folders and data files.

`checked_as_saved` is a training command's whole preflight in one call: the checks above, the config read as its
--model records, --out looked at, and --max-length against the model's own files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bertkit.data.columns import check_data_files
from bertkit.io import ownership, rundir
from bertkit.models.folders import check_model_folder, resolve_model_name
from bertkit.models.limits import SavedLimits, check_length_accepted, saved_limits
from bertkit.models.metadata import read_as_saved
from bertkit.options import holder

DATA_FIELDS = ("data", "dev", "test")
"""The options that name data to read (a file, or a hub dataset / split)."""


def check_inputs(cfg: Any, *, need_labels: bool, models: Iterable[str | None] = (),
                 data_fields: Iterable[str] = DATA_FIELDS) -> None:
    """Refuse, as the command's library would later, a --model (`models`, checked in order) that is not as saved, then
    a local data file of `data_fields` that is missing or lacks a named column (`need_labels`: the command needs a
    label column, so a file without one found by default is refused too). A hub dataset or hub model id is left to
    the library (it needs the network)."""
    for model in models:
        if model:
            check_model_folder(model)
    data_fields = tuple(data_fields)
    if data_fields:
        check_data_files(holder(cfg, "data"), data_fields, need_labels)  # the config's data group


def checked_as_saved(cfg: Any, command: str, data_fields: Iterable[str] = DATA_FIELDS) -> Any:
    """`cfg` read as its --model records how it reads texts (`metadata.read_as_saved`: the run config records the
    reading it trains with; the --model's, else 128/head), once what a training command refuses before torch is
    imported was checked, each as the library would later refuse it: the --model as saved and its record, the data
    files (labels needed), --out (someone else's files, another command's run, an input inside it: before the data is
    read or a learning rate chosen; the run's own settings are compared once its data is fingerprinted), and last
    --max-length against the model's own files (the folder's problem is the one a user meets first). `data_fields`:
    the data options checked as tables (none for tagged data, which its own reader checks)."""
    if cfg.model:
        check_model_folder(cfg.model)
    cfg = read_as_saved(cfg)
    check_data_files(cfg.inputs, data_fields, need_labels=True)  # a training run's config: its groups by name
    if cfg.output.out:
        rundir.inspect_run_dir(cfg.output.out, command, overwrite=cfg.output.overwrite,
                               inputs=ownership.input_paths(cfg))
    check_model_limits(cfg.model, max_length=cfg.reading.max_length)
    return cfg


def saved_model_limits(model: str | None) -> SavedLimits | None:
    """The limits a local model folder (or `minilm-offline`) states in its files, read without torch; None for a hub
    id, no model, or a folder without a readable config.json (left to the loader, which says what is wrong)."""
    if not model:
        return None
    folder = Path(resolve_model_name(model))
    return saved_limits(folder) if folder.is_dir() else None


def check_model_limits(model: str | None, *, max_length: int | None = None) -> None:
    """Refuse --max-length above the input `model` accepts, as its own files state it, before any data is read or
    cached (the refusal then leaves no cache entry and no --out); the message is the loader's (`models.limits`).
    None: --max-length not given (as recorded: checked once it is resolved)."""
    limits = saved_model_limits(model)
    if limits is not None and max_length is not None:
        check_length_accepted(max_length, limits.length, str(model))
