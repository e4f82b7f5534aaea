"""Recipes: TOML files whose `[command]` table holds option values (keys = the CLI option names), packaged here in
`bertkit/recipes/`; found by name or path, checked against the command's option fields, listed and described (what
`bertkit recipes list|show` prints). They live below `commands/` because the CLI, predict (--out is never a recipe)
and bench (a --recipe in --quality-args) all read them.

On the command line a recipe's values become the options' defaults (Typer's `default_map`, `cli/app.py`), so a
flag given wins over the recipe, and the recipe over the field's default.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.options import alias_map, all_fields, check_value, flag
from bertkit.options import option_fields as _option_fields

RECIPES_DIR = Path(__file__).resolve().parent  # the packaged *.toml beside this reader: a wheel install has them


def option_fields(config_cls: type) -> set[str]:
    """Names of the config fields that are CLI options (and valid recipe keys)."""
    return {f.name for f in _option_fields(config_cls)}


def check_values(config_cls: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """Every value type-checked against `config_cls` (see `options.check_value`); all problems in one UserError."""
    by_name = {f.name: f for f in all_fields(config_cls)}
    checked, problems = {}, []
    for name, value in values.items():
        try:
            checked[name] = check_value(by_name[name], value)
        except TypeError as exc:
            problems.append(f"{flag(name)[2:]} {exc}")
    if problems:
        raise UserError(f"{where}: {'; '.join(problems)}. Fix the value{'s' if len(problems) > 1 else ''} "
                        f"(a command-line flag overrides a recipe value).")
    return checked


RECIPE_FIX = "Pass --recipe with a path to a .toml file or one of those names"
"""How to fix an unknown recipe given to --recipe (`recipes show` names its own fix)."""


def recipe_path(name_or_path: str, fix: str = RECIPE_FIX) -> Path:
    """A recipe file: an existing path, or the name of a file in `recipes/` (with or without `.toml`); else a
    UserError naming the known recipes and `fix`."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = RECIPES_DIR / (name_or_path if name_or_path.endswith(".toml") else f"{name_or_path}.toml")
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))) or "(none found)"
    raise UserError(
        f"Unknown recipe {name_or_path!r}: not found as a file, nor among the packaged recipes. "
        f"Known recipes: {known}. {fix} (`bertkit recipes list` says what each one does)."
    )


def missing_table(path: Path, name_or_path: str, command: str, document: dict[str, Any]) -> str:
    """Why a recipe without a `[command]` table cannot run it: keys at the top level belong in that table (the
    fix names them); another command's table means the recipe is for that command."""
    tables = [name for name, value in document.items() if isinstance(value, dict)]
    loose = [name for name, value in document.items() if not isinstance(value, dict)]
    if loose:
        return (f"Recipe {path} has options at the top level ({', '.join(loose)}) and no [{command}] table: a "
                f"recipe's options sit under the command they are for. Put a [{command}] line above them.")
    if not tables:
        return f"Recipe {path} holds no options. Add a [{command}] table with the options of `bertkit {command}`."
    return (f"Recipe {path} has no [{command}] table (it has: {', '.join(f'[{t}]' for t in tables)}); it is for "
            f"another command. Run `bertkit {tables[0]} --recipe {name_or_path}` or add a [{command}] table.")


def load_recipe(name_or_path: str, command: str, config_cls: type) -> dict[str, Any]:
    """The `[command]` table of a recipe, keys normalised to field names; unknown keys are an error."""
    path = recipe_path(name_or_path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"Recipe {path} is not valid TOML: {exc}. Fix the file or pick another recipe.") from None
    if not isinstance(document.get(command), dict):
        raise UserError(missing_table(path, name_or_path, command, document))
    aliases = alias_map(config_cls)  # an option's older name (e.g. dtype for precision) is still a valid key
    values = {aliases.get(k, k): value for k, value in ((key.replace("-", "_"), v) for key, v in document[command].items())}
    valid = option_fields(config_cls)
    unknown = sorted(set(values) - valid)
    if unknown:
        raise UserError(
            f"Recipe {path} [{command}] has unknown keys: {', '.join(unknown)}. "
            f"Valid keys are the options of `bertkit {command}`: {', '.join(sorted(flag(v)[2:] for v in valid))}."
        )
    values = {k: _next_to_recipe(v, path.parent) if k in INPUT_KEYS else v for k, v in values.items()}
    return check_values(config_cls, values, f"Recipe {path} [{command}] has a value of the wrong type")


INPUT_KEYS = frozenset({"data", "dev", "test", "features", "probe", "model", "teacher", "student", "metric"})
"""Recipe keys naming files or folders to read: a relative one is looked up next to the recipe first."""


def _next_to_recipe(value: Any, folder: Path) -> Any:
    """A relative path that exists next to the recipe, made absolute, so a recipe finds its data from any current
    folder (a packaged recipe names the packaged demo data as `../resources/demo/...`). Anything else - a hub name,
    a split name (`validation`), a path that exists only from the current folder - is left as written."""
    if isinstance(value, list):
        return [_next_to_recipe(v, folder) for v in value]
    if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
        return value
    beside = folder / value
    return str(beside.resolve()) if beside.exists() else value


@dataclass(frozen=True)
class RecipeInfo:
    """One recipe file: its name, the commands it configures, and its header comment."""

    name: str
    path: Path
    commands: tuple[str, ...]
    summary: str
    result: str


def describe_recipe(path: Path) -> RecipeInfo:
    """Name, tables and header comment of a recipe (`# Result:` line = the measured result)."""
    text = path.read_text(encoding="utf-8")
    paragraphs = _comment_paragraphs(text)
    result = next((p.split(":", 1)[1].strip() for p in paragraphs if p.lower().startswith("result:")), "")
    first = next((p for p in paragraphs if not p.lower().startswith(ENTRY_KEYS)), "")
    summary = _first_sentence(first)
    try:
        tables = tuple(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"Recipe {path} is not valid TOML: {exc}.") from None
    return RecipeInfo(path.stem, path, tables, summary, result)


ENTRY_KEYS = ("result:", "run:", "$")
"""Header comment lines that start an entry of their own; other lines continue the entry above."""


def _comment_paragraphs(text: str) -> list[str]:
    """The header comment's entries, each with its continuation lines joined: an entry ends at a blank comment
    line or where a line starts with one of ENTRY_KEYS ("# Run: ...", "# Result: ...")."""
    entries: list[str] = [""]
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        stripped = line[1:].strip()
        if not stripped or stripped.lower().startswith(ENTRY_KEYS):
            entries.append(stripped)
        else:
            entries[-1] = f"{entries[-1]} {stripped}".strip()
    return [e for e in entries if e]


def _first_sentence(paragraph: str) -> str:
    """Up to the end of the first sentence (". " followed by a capital), whole."""
    for i in range(len(paragraph) - 2):
        if paragraph[i] == "." and paragraph[i + 1] == " " and paragraph[i + 2].isupper():
            return paragraph[: i + 1]
    return paragraph


def list_recipes() -> list[RecipeInfo]:
    """Every recipe shipped in recipes/, sorted by name."""
    return [describe_recipe(p) for p in sorted(RECIPES_DIR.glob("*.toml"))]
