"""What `bertkit export` asks of a problem family: an `Exporter` of one kind (a classifier's logits, an encoder's
pooled features, a tagger's per-piece logits), which reads its gate data, says how the export reads texts, and gates
the export against the PyTorch fp32 model. The command does the rest, the same for every kind: the folder, the card,
the report, the refusal when the gate fails."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.io import atomic, trail
from bertkit.models.export_gate import GateReport
from bertkit.models.folders import resolve_model_name
from bertkit.options import all_fields, build, replaced, value
from bertkit.training.options import DistillOptions, FinetuneOptions

log = logging.getLogger(__name__)

RUN_CONFIGS = {"finetune": FinetuneOptions, "distill": DistillOptions}
"""The commands whose run folders hold a model an export may take its gate data (the run's dev set) from."""


class Exporter:
    """One kind of export (`kind`): the options it ignores (`ignores`: warned about, set back), and its parts of the
    run - gate data read before torch where it can be (`checked_data`), the reading the export records, the pooling
    baked into the graph, the gate data, notes on it, and the gate."""

    kind: ClassVar[str] = ""
    ignores: ClassVar[tuple[str, ...]] = ()
    table_fields: ClassVar[tuple[str, ...]] = ()
    """The data options checked as tables before torch is imported (rows of text: --data)."""
    what: ClassVar[str] = ""
    """What is exported, for the warning about an ignored option ("a classifier (its graph ends in the trained
    head)")."""

    def checked_data(self, cfg: Any) -> Any:
        """The gate data, read and checked before torch is imported where the kind can (None: later, `gate_data`)."""
        return None

    def reading(self, cfg: Any) -> Reading:
        """How the export reads texts (recorded in its folder for predict and embed)."""
        return Reading.from_options(cfg.reading)

    def pooling(self, cfg: Any, model: Any) -> Any:
        """The pooling baked into the graph (None: no pooling, the graph ends in logits)."""
        return None

    def gate_data(self, cfg: Any, model: Any, checked: Any) -> Any:
        """What the PyTorch model and the export both run on (`checked`: `checked_data`'s)."""
        return checked

    def notes(self, cfg: Any, model: Any, tokenizer: Any, reading: Reading, dataset: Any) -> list[str]:
        """What to say about the gate data before the export is built (a refusal raises)."""
        return []

    def features_fn(self, model: Any, spec: Any) -> Any:
        """batch -> (a batch -> pooled features function) where the graph ends in pooled features (None: it does
        not)."""
        return None

    def gate(self, cfg: Any, model: Any, exported: Any, tokenizer: Any, dataset: Any, spec: Any,
             reading: Reading) -> GateReport:
        """The gate's statistics and whether it passed."""
        raise NotImplementedError


def applicable_config(cfg: Any, exporter: Exporter, other: dict[str, str]) -> Any:
    """`cfg` with the options `exporter`'s kind ignores back at their defaults, after one warning for each one given,
    so the record and the card's Reproduce line hold only what made the export. `other`: option -> the kinds of
    export it is an option of (for the warning)."""
    defaults = {f.name: f.default for f in all_fields(type(cfg)) if f.name in exporter.ignores}
    given = {name: value(cfg, name) for name in exporter.ignores if value(cfg, name) != defaults[name]}
    for name, asked in given.items():
        flag = f"--{name.replace('_', '-')}" + ("" if isinstance(asked, bool) else f" {asked}")
        log.warning("%s does not apply to the export of %s and is ignored (it is an option of --kind %s exports). "
                    "Drop it.", flag, exporter.what, other.get(name, "features"))
    return replaced(cfg, **{name: defaults[name] for name in given}) if given else cfg


def run_dev_set(cfg: Any, read: Any, unit: str, example: str) -> Any:
    """The dev set of the `bertkit finetune`/`distill` run holding --model (RUN/best or RUN/final), as `read(config,
    command)` reads it from the run's recorded config; `unit` and `example` name its rows in messages."""
    folder = Path(resolve_model_name(cfg.model or ""))
    record = atomic.read_json_or_none(folder.parent / "config.json") if folder.is_dir() else None
    command = record.get("command") if isinstance(record, dict) else None
    fix = (f"Pass --data with rows to compare the PyTorch and the exported model on (labelled rows also give the "
           f"metric before and after), e.g. `bertkit export --model {cfg.model} --data {example} --out {cfg.out}`.")
    if command not in RUN_CONFIGS or not isinstance(record.get("config"), dict):
        raise UserError(f"No gate data: --data is not given and {cfg.model} is not a model saved by `bertkit "
                        f"finetune` (whose dev set would be used). {fix}")
    try:
        dev = read(trail.config_as_run_read_it(record), command)
    except (TypeError, UserError) as exc:
        raise UserError(f"Could not read the dev set of the {command} run {folder.parent} ({str(exc)[:200]}). "
                        f"{fix}") from None
    if dev is None:
        raise UserError(f"The {command} run {folder.parent} has no dev set. {fix}")
    log.info("gate data: the dev set of %s (%d %s)", folder.parent, len(dev), unit)
    return dev


def run_config(config: dict[str, Any], command: str) -> Any:
    """The config of the run that recorded `config` (an older record may hold more options: left out)."""
    known = {f.name for f in all_fields(RUN_CONFIGS[command])}
    return build(RUN_CONFIGS[command], {k: v for k, v in config.items() if k in known})
