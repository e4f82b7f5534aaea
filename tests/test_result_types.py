"""Typed all the way down (issue 42): what a command's `run` returns is a dataclass whose fields are typed values,
not loose JSON. A `*Result` holds no field annotated `dict`, `Mapping` or `Any` (a report, summary or map of scores
is a small named dataclass, with a `to_json` for the JSON it always wrote); the dataclasses nested in it may hold
a mapping (what is data: metric names -> values, split names -> counts) but no `Any`-typed field and no list of
dicts. The walk reads each annotation in the module that declares it, its `if TYPE_CHECKING:` imports included."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import bertkit.commands

MAPPING = re.compile(r"\b(dict|Dict|Mapping|MutableMapping)\b")
ANY = re.compile(r"\bAny\b")
LIST_OF_DICTS = re.compile(r"\b(list|tuple|Sequence)\[\s*(dict|Dict|Mapping)\b")


def names_in_scope(module: Any) -> dict[str, Any]:
    """The module's globals plus what its `if TYPE_CHECKING:` block imports (annotations may name those)."""
    scope = dict(vars(module))
    tree = ast.parse(Path(inspect.getfile(module)).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                exec(compile(ast.Module([statement], []), "<type-checking>", "exec"), scope)  # noqa: S102
    return scope


def _without_mapping_contents(annotation: str) -> str:
    """`annotation` with what a dict/Mapping holds cut out (a nested dataclass may map names to anything JSON)."""
    out, depth, skipping = [], 0, False
    for i, char in enumerate(annotation):
        if char == "[":
            depth += 1
            if not skipping and MAPPING.search(annotation[:i].rsplit(" ", 1)[-1].rsplit("|", 1)[-1]):
                skipping, start = True, depth
                continue
        elif char == "]":
            depth -= 1
            if skipping and depth < start:
                skipping = False
                continue
        if not skipping:
            out.append(char)
    return "".join(out)


def problems_of(cls: type, top: bool, seen: set[type] | None = None) -> list[str]:
    """Each loosely typed field of `cls` and of the dataclasses its fields name, as `Class.field: annotation`."""
    seen = set() if seen is None else seen
    if cls in seen:
        return []
    seen.add(cls)
    found = []
    for f in dataclasses.fields(cls):
        # an inherited field's annotation is read where it is declared (a Result that is a family's record)
        owner = next(c for c in cls.__mro__ if f.name in vars(c).get("__annotations__", {}))
        scope = names_in_scope(sys.modules[owner.__module__])
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        loose = (MAPPING.search(annotation) or ANY.search(annotation)) if top else (
            ANY.search(_without_mapping_contents(annotation)) or LIST_OF_DICTS.search(annotation))
        if loose:
            found.append(f"{cls.__name__}.{f.name}: {annotation}")
        for dotted in re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", annotation):
            name = dotted.split(".")[0]
            if name not in scope and not hasattr(builtins, name):
                found.append(f"{cls.__name__}.{f.name}: {name} is not importable where {cls.__name__} is declared")
            nested = scope.get(name) if f.metadata.get("json", True) else None  # objects behind the JSON: not walked
            if isinstance(nested, type) and dataclasses.is_dataclass(nested):
                found += problems_of(nested, top=nested.__name__.endswith("Result"), seen=seen)
    return found


def command_results() -> list[tuple[str, type]]:
    """(command, the Result class its `run` returns) for every command module with a `run`."""
    results = []
    for info in pkgutil.iter_modules(bertkit.commands.__path__):
        module = importlib.import_module(f"bertkit.commands.{info.name}")
        run = getattr(module, "run", None)
        if run is None:
            continue
        returned = names_in_scope(module).get(str(inspect.signature(run).return_annotation))
        results.append((info.name, returned))
    return results


@pytest.mark.parametrize(("command", "result"), command_results(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_commands_result_is_typed_all_the_way_down(command, result):
    assert dataclasses.is_dataclass(result), f"commands/{command}.py: run() returns {result!r}, not a Result dataclass"
    assert result.__name__.endswith("Result") and result.__module__ == f"bertkit.commands.{command}", result
    assert problems_of(result, top=True) == []


def test_the_walk_finds_loose_fields_at_the_result_level_and_below():
    @dataclasses.dataclass
    class Inner:
        scores: dict[str, float]  # data inside a named dataclass: allowed
        threshold: Any
        rows: list[dict[str, int]]

    @dataclasses.dataclass
    class LooseResult:
        metrics: dict[str, float]
        extra: Any
        inner: Inner

    module = sys.modules[__name__]
    module.Inner = Inner  # the walk reads names in the declaring module, as for the real results
    try:
        assert problems_of(LooseResult, top=True) == [
            "LooseResult.metrics: dict[str, float]", "LooseResult.extra: Any", "Inner.threshold: Any",
            "Inner.rows: list[dict[str, int]]"]
    finally:
        delattr(module, "Inner")


def test_every_command_with_a_run_is_walked():
    walked = {command for command, _ in command_results()}
    assert {"finetune", "distill", "bench", "evaluate", "probe", "tokens", "predict", "embed", "export",
            "push"} <= walked
