"""`bertkit predict --out FILE`: never one of its inputs, never a file bertkit did not write.

Whose a file is comes from a record, never from its header: beside every predictions CSV it writes, predict keeps
`.NAME.bertkit-record.json` with the size and sha256 of the bytes it wrote (written before the CSV is renamed into
place, so a kill leaves a record that still vouches for the file there). It replaces --out only when that record
vouches for the bytes --out holds; a CSV with predict's header and no record (someone's, or one an older bertkit
wrote) stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io.atomic import read_json_record, write_json_atomic
from bertkit.io.ownership import check_out_not_input
from bertkit.io.record import file_digest

RECORD_FORMAT = "bertkit-predictions/1"


def check_predictions_out(out: str | Path, inputs: dict[str, str | None]) -> Path:
    """--out of `bertkit predict`: not any of its inputs (nor inside one), and not a file bertkit did not write.

    `inputs` maps flags (--data, --model, --probe, --recipe) to the paths given."""
    path = Path(out).expanduser()
    suggestion = Path(f"{path.stem or 'predictions'}.predictions.csv")  # in the current directory: outside any input
    if path.is_dir():
        raise UserError(f"Cannot write {path}: it is an existing directory. Pass a file path for --out, "
                        f"e.g. --out predictions.csv.")
    check_out_not_input(out, list(inputs.items()), "predict", suggestion)
    why = _not_ours(path)
    if why is not None:
        raise UserError(
            f"--out {out} exists and is not a predictions file bertkit wrote ({why}); predict replaces only a file "
            f"whose record ({record_path(path).name}) says it wrote those very bytes. Choose another --out, e.g. "
            f"--out {suggestion}, or move {out} away."
        )
    return path


def record_path(path: Path) -> Path:
    """The record beside a predictions CSV: what predict wrote there."""
    return path.with_name(f".{path.name}.bertkit-record.json")


def vouch(path: Path) -> Callable[[tuple[int, str]], None]:
    """What `atomic_path` calls with the new bytes' digest before renaming them over `path`: the record then lists
    them, and the bytes `path` holds now when they are bertkit's (a kill before the rename leaves those)."""

    def write(digest: tuple[int, str]) -> None:
        versions = [v for v in _recorded(path) if path.is_file() and v == list(file_digest(path))]
        write_json_atomic(record_path(path), {"format": RECORD_FORMAT, "file": path.name,
                                              "versions": [*versions, list(digest)]})

    return write


def _not_ours(path: Path) -> str | None:
    """Why predict may not replace `path` (None: it may). A record beside it that is not one predict writes is not
    replaced either."""
    side = record_path(path)
    if (side.exists() or side.is_symlink()) and _read_record(side) is None:
        return f"{side.name} beside it is not a record bertkit wrote"
    if not (path.exists() or path.is_symlink()):
        return None
    if path.is_symlink() or not path.is_file():
        return "it is not a plain file"
    if not side.exists():
        looks = " though its header is predict's: an older bertkit kept none" if is_predictions_csv(path) else ""
        return f"bertkit has no record of writing it{looks}"
    return None if list(file_digest(path)) in _recorded(path) else "its bytes changed since bertkit wrote it"


def _recorded(path: Path) -> list[list[Any]]:
    """The [size, sha256] pairs the record beside `path` vouches for (empty: none)."""
    found = _read_record(record_path(path))
    return found["versions"] if found is not None else []


def _read_record(side: Path) -> dict[str, Any] | None:
    if side.is_symlink():
        return None
    found, reason = read_json_record(side, _record_problem)
    return found if reason is None else None


def _record_problem(found: Any) -> str | None:
    ok = (isinstance(found, dict) and found.get("format") == RECORD_FORMAT and isinstance(found.get("versions"), list)
          and all(isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) and isinstance(v[1], str)
                  and len(v[1]) == 64 for v in found["versions"]))
    return None if ok else f"not a {RECORD_FORMAT} record"


PREDICTION_INPUT_COLUMNS = ("line", "text", "text_pair", "label")
"""What `predict.write_predictions_csv` puts between `row` and `predicted`, in this order (`text` always)."""


def is_predictions_csv(path: Path) -> bool:
    """A header `predict.write_predictions_csv` writes: `row`, the input columns, `predicted`, then the outputs of
    the problem shape (see `_prediction_outputs`). Only for a message: a header makes nobody's file bertkit's."""
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
