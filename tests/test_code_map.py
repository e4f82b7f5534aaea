"""docs/code-map.md names only what exists: every file it names is in the project, every class or settings object
(CamelCase) is defined in bertkit, every `package/module.name` is defined in that module, and every `Class.method`
is defined in that class. The map is prose a person writes; this keeps it from outliving the code it describes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAP = (ROOT / "docs" / "code-map.md").read_text(encoding="utf-8")
PACKAGES = {p.name for p in (ROOT / "bertkit").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
NOT_CODE = {"DistilBERT", "MiniLM", "BERT", "GitHub", "TensorBoard", "MLflow", "PyTorch", "ONNX"}
"""CamelCase words in the map that are names of things, not of code."""


def definitions() -> dict[str, dict[str, set[str]]]:
    """module path (`features/settings`) -> top-level name -> the names defined in it (a class's methods and
    attributes; empty for functions and assignments)."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in (ROOT / "bertkit").rglob("*.py"):
        module = path.relative_to(ROOT / "bertkit").with_suffix("").as_posix()
        names: dict[str, set[str]] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names[node.name] = set()
            elif isinstance(node, ast.ClassDef):
                names[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                names[node.name] |= {t.id for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                                     if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        names[target.id] = set()
        found[module] = names
    return found


DEFINED = definitions()
EVERYWHERE = {name: members for names in DEFINED.values() for name, members in names.items()}


def test_every_file_the_map_names_exists():
    files = {p.name for folder in ("bertkit", "tests", "benchmarks") for p in (ROOT / folder).rglob("*") if p.is_file()}
    assert sorted(name for name in set(re.findall(r"\b([a-z_0-9]+\.py)\b", MAP)) if name not in files) == []


def test_every_class_the_map_names_is_defined():
    camel = set(re.findall(r"\b([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)\b", MAP)) - NOT_CODE
    assert sorted(name for name in camel if name not in EVERYWHERE) == []


@pytest.mark.parametrize("module, name", sorted({(m, n) for m, n in re.findall(r"\b([a-z_]+/[a-z_]+)\.([A-Za-z_]\w*)\b", MAP)
                                                 if m.split("/")[0] in PACKAGES and n != "py"}))
def test_every_module_name_the_map_names_is_defined_there(module, name):
    assert module in DEFINED, f"docs/code-map.md names bertkit/{module}.py, which does not exist"
    assert name in DEFINED[module], f"docs/code-map.md names {module}.{name}, which bertkit/{module}.py does not define"


@pytest.mark.parametrize("owner, member", sorted(set(re.findall(r"\b([A-Z][A-Za-z0-9]+)\.([a-z_]\w*)\b", MAP))))
def test_every_method_the_map_names_is_defined_in_its_class(owner, member):
    if owner in NOT_CODE:
        return
    assert owner in EVERYWHERE, f"docs/code-map.md names {owner}, which bertkit does not define"
    assert member in EVERYWHERE[owner], f"docs/code-map.md names {owner}.{member}, which {owner} does not define"
