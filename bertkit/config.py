"""One frozen dataclass per command, plus recipe loading.

Field names are the CLI option names with dashes turned into underscores (`--text-column` -> `text_column`),
so a recipe's keys, the CLI flags and the config fields are one vocabulary. Each `__post_init__` collects
every problem and raises once, naming the flag.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bertkit.errors import UserError, raise_if_problems

DTYPES = ("auto", "fp32", "bf16", "fp16")
HEADER_MODES = ("auto", "yes", "no")
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def flag(field_name: str) -> str:
    """The CLI flag for a config field: `text_column` -> `--text-column`."""
    return "--" + field_name.replace("_", "-")


def check_positive(problems: list[str], value: int | float | None, name: str, *, allow_none: bool = True) -> None:
    """Record a problem unless `value` is > 0 (or None where allowed)."""
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        problems.append(f"{flag(name)} must be a positive number, got {value!r}.")


def check_choice(problems: list[str], value: str, name: str, choices: tuple[str, ...]) -> None:
    """Record a problem unless `value` is one of `choices`."""
    if value not in choices:
        problems.append(f"{flag(name)} must be one of {', '.join(choices)}; got {value!r}.")


@dataclass(frozen=True)
class DataOptions:
    """Where the data comes from and which columns to use; shared by every command that reads a dataset."""

    data: str | None = None
    """Training (or only) data: a .csv/.tsv/.json/.jsonl/.parquet file, or a hub dataset name."""
    dev: str | None = None
    """Dev data: a file, or a split name of the hub dataset given by --data. Omitted: a stratified split of --data."""
    test: str | None = None
    """Test data: a file, or a split name of the hub dataset."""
    data_config: str | None = None
    """Hub dataset configuration name (e.g. `sst2` for `nyu-mll/glue`)."""
    train_split: str = "train"
    """Split of the hub dataset used as training data."""
    text_column: str | None = None
    """Text column: a name, or a 0-based index for headerless files. Default: `sentence`/`text`/first column."""
    text_pair_column: str | None = None
    """Second text column for sentence-pair tasks (encoded as a true pair)."""
    label_column: str | None = None
    """Label column: a name or 0-based index. Labels may be integers or strings."""
    encoding: str = "utf-8"
    """Text encoding of local files."""
    header: str = "auto"
    """Whether local CSV/TSV files have a header row: auto, yes, no."""
    dev_fraction: float = 0.1
    """Share of --data held out (stratified) as dev when --dev is not given."""
    limit: int | None = None
    """Use only the first N rows of each split (quick runs)."""
    seed: int = 42
    """Random seed for splits, sampling and initialisation."""

    def data_problems(self) -> list[str]:
        problems: list[str] = []
        check_choice(problems, self.header, "header", HEADER_MODES)
        check_positive(problems, self.limit, "limit")
        if not 0.0 < self.dev_fraction < 1.0:
            problems.append(f"--dev-fraction must be between 0 and 1 (exclusive); got {self.dev_fraction}.")
        return problems


@dataclass(frozen=True)
class TokensConfig(DataOptions):
    """`bertkit tokens`: how a tokenizer sees a sentence, or the token-length profile of a dataset."""

    model: str = "minilm-offline"
    """Model (tokenizer) name: a hub id, a local folder, or `minilm-offline`."""
    text: str | None = None
    """A sentence to show token by token (instead of --data)."""
    text_pair: str | None = None
    """Optional second sentence, encoded as a pair with --text."""
    max_length: int = 128
    """Max length used to report truncation and padding waste."""
    batch_size: int = 32
    """Batch size used to compute dynamic-padding waste."""
    out: str | None = None
    """Run directory for the report JSON and the histogram PNG."""
    trust_remote_code: bool = False
    """Allow custom code from the model repository (off by default: it runs arbitrary code)."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.text is None) == (self.data is None):
            problems.append("Give exactly one of --text (a sentence) or --data (a dataset).")
        if self.text_pair is not None and self.text is None:
            problems.append("--text-pair needs --text.")
        check_positive(problems, self.max_length, "max_length", allow_none=False)
        check_positive(problems, self.batch_size, "batch_size", allow_none=False)
        raise_if_problems(problems)


# ---------------------------------------------------------------- recipes


def recipe_path(name_or_path: str) -> Path:
    """A recipe file: an existing path, or the name of a file in `recipes/` (with or without `.toml`)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = RECIPES_DIR / (name_or_path if name_or_path.endswith(".toml") else f"{name_or_path}.toml")
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))) or "(none found)"
    raise UserError(
        f"Recipe {name_or_path!r} not found: it is neither a file nor a recipe name. "
        f"Known recipes: {known}. Pass --recipe with a path to a .toml file or one of those names."
    )


def load_recipe(name_or_path: str, command: str, config_cls: type) -> dict[str, Any]:
    """The `[command]` table of a recipe, keys normalised to field names; unknown keys are an error."""
    path = recipe_path(name_or_path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"Recipe {path} is not valid TOML: {exc}. Fix the file or pick another recipe.") from None
    if command not in document:
        tables = ", ".join(f"[{t}]" for t in document) or "none"
        raise UserError(
            f"Recipe {path} has no [{command}] table (it has: {tables}); it is for another command. "
            f"Run `bertkit {next(iter(document), command)} --recipe {name_or_path}` or add a [{command}] table."
        )
    values = {key.replace("-", "_"): value for key, value in document[command].items()}
    valid = {f.name for f in fields(config_cls)}
    unknown = sorted(set(values) - valid)
    if unknown:
        raise UserError(
            f"Recipe {path} [{command}] has unknown keys: {', '.join(unknown)}. "
            f"Valid keys are the options of `bertkit {command}`: {', '.join(sorted(flag(v)[2:] for v in valid))}."
        )
    return values


def merge_config(config_cls: type, defaults: dict[str, Any], explicit: dict[str, Any], recipe: dict[str, Any]):
    """Build a config with precedence: explicit CLI flag > recipe value > default."""
    values = {f.name: defaults[f.name] for f in fields(config_cls) if f.name in defaults}
    values.update(recipe)
    values.update(explicit)
    try:
        return config_cls(**values)
    except TypeError as exc:  # a recipe value of the wrong shape reaches the dataclass
        raise UserError(f"Invalid configuration: {exc}. Check the recipe's value types.") from None


def config_dict(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict (for config.json in a run directory)."""
    return dataclasses.asdict(config)
