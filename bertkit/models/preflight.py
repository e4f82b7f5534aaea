"""What a command checks about its inputs before it imports torch, transformers or sklearn: the data files
(--data/--dev/--test) are readable files whose header has the columns the --*-column options name
(`bertkit.data.columns.check_columns`), and a --model is `minilm-offline`, a hub id, or a local model folder as saved
(`bertkit.models.folders.check_model_folder`). The checks and their messages are the library's own; run here first,
a wrong path or column is refused in well under a second, and --out is not touched. Every command runs it, so it
lives below `commands/`, in `models/`: the lowest package that knows both model folders and data files."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bertkit.data.columns import check_columns
from bertkit.models.folders import check_model_folder

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
    for name in data_fields:
        source = getattr(cfg, name, None)
        if source:
            check_columns(cfg, str(source), need_labels)
