"""The saved-model record, `bertkit_model.json`: what a folder bertkit saved (best/, final/, an export folder) needs
besides its weights (the step it was saved at; for tags and numbers the task; for tags the decision threshold; the
reading, compute and, for an export, its `onnx` section), the size and sha256 of every file the folder held when it
was saved (weights, config, tokenizer files: `files`), its format (`bertkit-model/2`), the problem family that made
it (`family`: a tagger and its export are `words`, a question-answering model `spans`, the rest `sentences`) and the
sha256 of the record itself (`record_sha256`, `bertkit.io.record_format`). Written by training's model saves and the
ONNX export, read by every loader, both through here: a record edited or damaged since it was written is refused
(`read_model_info`), and `verify_model_folder` refuses a folder whose files are not the ones recorded before anything
loads them. Records of an older layout are read by `migrated_model_record`, the one place that knows them."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from bertkit.data.labels import SPANS_TASK, TAGS_TASK
from bertkit.data.tagscheme import TagScheme, scheme_of_labels
from bertkit.encoding.reading import Reading, read_as_recorded
from bertkit.errors import UserError
from bertkit.io import atomic, digests
from bertkit.io.record_format import (
    FAMILY,
    FORMAT,
    SEAL,
    RecordKind,
    RecordProblem,
    checked_version,
    sealed,
    upgrade,
)

log = logging.getLogger(__name__)

MODEL_INFO = "bertkit_model.json"
MODEL_RECORD = RecordKind("bertkit-model", current=2, sealed_since=2, family_since=2)
"""Layout 1 (`bertkit-model/1`, or no format at all): no family, no seal; maybe no reading, and an export maybe no
compute. Layout 2: the family and the seal (`migrated_model_record` reads 1 as 2)."""
LOADABLE_SUFFIXES = (".safetensors", ".onnx")
LOADABLE_NAMES = frozenset({"config.json", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                            "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json",
                            "spiece.model", "sentencepiece.bpe.model", "spm.model"})
"""Files a loader reads from a model folder: one the record does not list would be read unverified, so it is refused."""


TOKENIZER_CONFIG = "tokenizer_config.json"
TRUNCATION_SIDES = {"head": "right", "tail": "left", "head+tail": "right"}
"""transformers' `truncation_side` for each --truncation. head+tail (keep both ends) has no transformers
equivalent: a plain `pipeline()` keeps the head (right-side truncation), which bertkit's head+tail starts with."""


def write_model_info(folder: str | Path, info: dict[str, Any], family: str | None = None) -> None:
    """`info` as the folder's bertkit_model.json (written atomically, sealed: `record_format.sealed`), with the record
    of every file the folder holds now: callers save the weights, config and tokenizer first (a card or report written
    after is not recorded). `family`: the problem family that made the model (None: the one `info` names, else the
    one its task says, `family_of_task`). The reading `info` records is also written where plain transformers reads it
    (`write_tokenizer_reading`), before the files are digested."""
    folder = Path(folder)
    reading = Reading.from_json(info.get("reading"))
    if reading is not None:
        write_tokenizer_reading(folder, reading)
    names = [p.name for p in folder.iterdir() if p.is_file() and p.name != MODEL_INFO and not p.name.startswith(".")]
    family = family or info.get(FAMILY) or family_of_task(info.get("task"))
    record = {k: v for k, v in info.items() if k not in ("files", FORMAT, FAMILY, SEAL)}
    atomic.write_json_atomic(folder / MODEL_INFO, sealed({**record, "files": digests.folder_records(folder, names)},
                                                         MODEL_RECORD, family))


def family_of_task(task: Any) -> str:
    """The family of a model trained for `task` (its record's `task`): a tagger's is words, a question-answering
    model's spans, any other sentences."""
    return {TAGS_TASK: "words", SPANS_TASK: "spans"}.get(task, "sentences")


def write_tokenizer_reading(folder: Path, reading: Reading) -> None:
    """The folder's tokenizer_config.json with `model_max_length` = the recorded window and `truncation_side` as
    `TRUNCATION_SIDES` says, so a `transformers.pipeline()` script reads the model as bertkit does. A folder without
    that file (no tokenizer saved) is left as it is."""
    file = folder / TOKENIZER_CONFIG
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(config, dict):
        side = TRUNCATION_SIDES.get(reading.truncation, "right")
        atomic.write_json_atomic(file, {**config, "model_max_length": reading.max_length, "truncation_side": side})


def declares_reading(folder: str | Path) -> bool:
    """Whether bertkit wrote the folder's reading into its tokenizer_config.json (`write_tokenizer_reading`): its
    `model_max_length` is then the window the model was trained at, not a limit of the model."""
    return Reading.from_json(read_model_info(Path(folder).expanduser()).get("reading")) is not None


def foreign_note(folder: str | Path) -> str | None:
    """One line for a local model folder bertkit did not save (no bertkit_model.json): read as its own config says,
    its files unverified; None for a folder bertkit saved, or a hub name."""
    path = Path(folder).expanduser()
    if not path.is_dir() or (path / MODEL_INFO).is_file():
        return None
    return (f"{path} was not made by bertkit: read with the settings of its config.json (max length, truncation: "
            f"bertkit's defaults unless given), its files not verified against a record")


def warn_if_foreign(folder: str | Path) -> None:
    """Log `foreign_note` (once per read) for a folder bertkit did not save."""
    note = foreign_note(folder)
    if note is not None:
        log.warning("%s", note)


def read_model_info(folder: str | Path) -> dict[str, Any]:
    """The folder's bertkit_model.json in the current layout (`migrated_model_record`); {} for a folder bertkit did
    not write (no such file, or not a JSON object). A record edited or damaged since it was written (its seal), or made
    by a newer bertkit, is a UserError naming it: nothing reads a value from it."""
    path = Path(folder)
    try:
        info = json.loads((path / MODEL_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(info, dict):
        return {}
    try:
        return migrated_model_record(info)
    except RecordProblem as exc:
        raise _mismatch(path, f"{MODEL_INFO}: {exc}") from None


def migrated_model_record(record: dict[str, Any]) -> dict[str, Any]:
    """A bertkit_model.json in the current layout, from any layout this bertkit reads (a `RecordProblem` for one it
    cannot trust). The only place the older layouts are understood: layout 1 gets its family from its task (`tags`:
    words, else sentences); one saved before readings were recorded gets `reading` null (read with the options and
    their defaults, `read_as_saved` says so); an export saved before its compute was recorded gets the CPU and the
    precision of its weights (its onnx section's `quantized`)."""
    return upgrade(record, MODEL_RECORD, checked_version(record, MODEL_RECORD), {1: _model_layout_2})


def _model_layout_2(record: dict[str, Any]) -> dict[str, Any]:
    """Layout 1 -> 2: the family, and the keys layout 2 always holds."""
    onnx = record.get("onnx")
    compute = record.get("compute")
    if isinstance(onnx, dict) and compute is None:
        compute = {"device": "cpu", "precision": "int8" if onnx.get("quantized") == "int8" else "fp32"}  # a Compute
    return {**record, FAMILY: family_of_task(record.get("task")), "reading": record.get("reading"),
            **({"compute": compute} if compute is not None else {})}


def saved_reading(folder: str | Path) -> Reading | None:
    """How the model in `folder` read texts when it was saved (its `reading` record): None for a folder bertkit did
    not save (a hub id, the packaged encoder) or one saved before bertkit recorded it: the options' defaults apply."""
    info = read_model_info(Path(folder).expanduser())
    if info.get("reading") is None:
        return None
    problems = Reading.record_problems(info["reading"])
    if problems:  # a flag the user never gave would otherwise be blamed for the record's value
        raise UserError(f"{Path(folder) / MODEL_INFO} is damaged: {'; '.join(problems)} (bertkit records a valid "
                        f"reading in every folder it saves). Restore the folder from where it was saved, or save "
                        f"the model again with `bertkit finetune`.")
    return Reading.from_record(info["reading"])


def read_as_saved(cfg: Any, model: str | None = None) -> Any:
    """`cfg` with its reading options resolved against the record of `model` (default: its --model;
    `saved_reading`): every command that reads text with a model (tokens, embed, probe, finetune, distill's teacher,
    sweep, evaluate, export, predict, bench) reads texts as the model was trained to; a model bertkit did not save (a
    hub id) reads with the options and the defaults (--max-length 128), and so does one saved before bertkit recorded
    its reading, with a note unless --max-length is given."""
    model = model if model is not None else getattr(cfg, "model", None)
    recorded = saved_reading(model) if model else None
    if recorded is None and model and _reading_unrecorded(model) and getattr(
            getattr(cfg, "reading", cfg), "max_length", None) is None:
        log.warning("The model %s was saved before bertkit recorded how it reads texts: read with --max-length %d "
                    "(pass --max-length to match its training)", model, Reading.from_options(cfg).max_length)
    return read_as_recorded(cfg, recorded, f"The model {model}")


def _reading_unrecorded(model: str) -> bool:
    """Whether `model` is a folder bertkit saved without a reading (a record made before readings were recorded)."""
    info = read_model_info(Path(model).expanduser())
    return bool(info) and info.get("reading") is None


def saved_temperature(model_dir: str) -> float | None:
    """The temperature a fine-tuned folder's record says to divide its logits by (`finetune --calibrate temperature`:
    `calibration` in bertkit_model.json); None when it records none, or something that is not a positive number
    (also a hub id or the packaged encoder)."""
    record = read_model_info(Path(model_dir).expanduser()).get("calibration")
    value = record.get("temperature") if isinstance(record, dict) and record.get("method") == "temperature" else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def add_model_info(folder: str | Path, entries: dict[str, Any]) -> None:
    """The folder's bertkit_model.json with `entries` added (its files' record and seal written again: the same
    files, the same family)."""
    info = {k: v for k, v in read_model_info(Path(folder)).items() if k not in ("files", FORMAT, SEAL)}
    write_model_info(folder, {**info, **entries})


def is_tagger(model_dir: str | Path) -> bool:
    """Whether the folder holds a tagging model: one bertkit saved (its record's task is `tags`), or a plain
    transformers folder (no record) whose config.json names a token classifier."""
    folder = Path(model_dir).expanduser()
    info = read_model_info(folder)
    if info:
        return info.get("task") == TAGS_TASK
    return any(str(a).endswith("ForTokenClassification") for a in foreign_config(folder).get("architectures") or [])


def foreign_config(folder: Path) -> dict[str, Any]:
    """The config.json of a local folder bertkit did not save, read as JSON ({} where there is none)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def is_question_answerer(model_dir: str | Path) -> bool:
    """Whether the folder holds a question-answering model: the record of a folder bertkit saved says task (or family)
    `spans`; a folder bertkit did not save is one when its config.json's architectures end in ForQuestionAnswering (a
    hub id: not known here)."""
    path = Path(model_dir).expanduser()
    info = read_model_info(path)
    if info:
        return SPANS_TASK in (info.get("task"), info.get("family"))
    architectures = foreign_config(path).get("architectures")
    return isinstance(architectures, list) and any(str(a).endswith("ForQuestionAnswering") for a in architectures)


def saved_question_answering(model_dir: str | Path) -> tuple[str | None, int | None, float | None]:
    """(the SQuAD version, the longest question in tokens, the no-answer threshold) a question-answering folder's
    record says (`spans` and `threshold` in bertkit_model.json; None where it says nothing: a folder bertkit did not
    save, or a v1.1 model's threshold)."""
    info = read_model_info(Path(model_dir).expanduser())
    record = info.get("spans") if isinstance(info.get("spans"), dict) else {}
    version = record.get("version") if record.get("version") in ("1.1", "2.0") else None
    length, threshold = record.get("max_question_length"), info.get("threshold")
    length_ok = isinstance(length, int) and not isinstance(length, bool) and length > 0
    number = isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and math.isfinite(threshold)
    return version, length if length_ok else None, float(threshold) if number else None


def saved_tag_scheme(model_dir: str | Path) -> TagScheme:
    """The tag scheme a tagging model records (`tag_scheme`): how its tags name entities (plain tags: none); a plain
    transformers token classifier's, as its labels name it (`scheme_of_labels` of its config's id2label)."""
    folder = Path(model_dir).expanduser()
    info = read_model_info(folder)
    record = info.get("tag_scheme")
    if isinstance(record, dict):
        return TagScheme.from_json(record)
    labels = (foreign_config(folder).get("id2label") or {}).values() if not info else ()
    return TagScheme.read_as(scheme_of_labels(str(label) for label in labels)) if labels else TagScheme()


def saved_threshold(model_dir: str) -> float | list[float]:
    """The multi-label decision threshold saved with a fine-tuned folder (bertkit_model.json), else 0.5 (what a
    sigmoid head means without one: also a hub id or the packaged encoder, which have no such file)."""
    saved = read_model_info(Path(model_dir).expanduser()).get("threshold", 0.5)
    return saved if isinstance(saved, (int, float, list)) else 0.5


# ---------------------------------------------------------------- verified on read


def verify_model_folder(folder: str | Path) -> None:
    """A UserError unless every file recorded in the folder's bertkit_model.json is there with its recorded size and
    sha256, and no weights or tokenizer file it does not list sits beside them (`record_problems`)."""
    problems = record_problems(Path(folder))
    if problems:
        raise _mismatch(Path(folder), "; ".join(problems))


def record_problems(folder: Path) -> list[str]:
    """`file: why` for each way the folder differs from its record (empty: it is as saved). A folder bertkit did not
    save (no record file) is not checked; a record edited since it was written (its seal) is damaged, and so is one
    without the digests of the files (bertkit writes them into every one, and one that lacks them could vouch for any
    bytes)."""
    file = folder / MODEL_INFO
    if not file.is_file():
        return []
    try:
        info = migrated_model_record(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # RecordProblem included: edited, damaged, newer
        return [f"{MODEL_INFO}: {exc if isinstance(exc, RecordProblem) else f'not valid JSON ({exc})'}"]
    records = info.get("files")
    if records is None:
        return [f"{MODEL_INFO}: it records no size and sha256 of the folder's files (damaged: bertkit records them "
                f"in every folder it saves)"]
    if not isinstance(records, dict) or not all(digests.is_record(r) for r in records.values()):
        return [f"{MODEL_INFO}: no valid record of the folder's files"]
    problems = [f"{name}: {why}" for name, why in digests.records_problems(folder, records)]
    return problems + [f"{name}: not in the record (added after the folder was saved)"
                       for name in _unrecorded(folder, records)]


def _unrecorded(folder: Path, records: dict[str, Any]) -> list[str]:
    """Files a loader would read that the record does not list."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in records
                  and (p.name in LOADABLE_NAMES or p.suffix in LOADABLE_SUFFIXES))


def _mismatch(folder: Path, detail: str) -> UserError:
    return UserError(
        f"Model folder {folder} is not the one bertkit saved: {detail}. Its {MODEL_INFO} records the size and sha256 "
        f"of each file as saved, and bertkit does not run a model whose files differ. Copy the folder again from "
        f"where it was saved, or re-run the command that wrote it (e.g. `bertkit finetune ... --out RUN`, "
        f"`bertkit export ... --out DIR`), then pass that folder."
    )

