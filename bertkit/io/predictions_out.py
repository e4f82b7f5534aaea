"""`bertkit predict --out FILE`: never one of its inputs, never a file bertkit did not write (only its own
predictions CSVs, of every problem shape, are replaced)."""

from __future__ import annotations

from pathlib import Path

from bertkit.errors import UserError
from bertkit.io.ownership import check_out_not_input


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
