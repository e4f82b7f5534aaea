"""The house stays clean: no import cycle inside bertkit (imports in functions and TYPE_CHECKING blocks count),
sub-packages along the data flow, few top-level modules, small modules and functions, and every `alias.name` a
module uses on an imported bertkit module exists there (a split that left a caller behind fails here, not in a
user's run)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "bertkit"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
"""The training loop's stages may run longer than the ~40 lines of DESIGN.md; nothing else comes near."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "resources" not in p.parts}


def imported_modules(name: str, path: Path) -> set[str]:
    """Every bertkit module `name` imports, wherever the import statement sits."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(anchor + ([node.module] if node.module else []))
            targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in MODULES:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name and not (path.name == "__init__.py" and target.startswith(name + ".")):
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_bertkit():
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    assert cycles(graph) == [], "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles(graph))


COMMAND_TABLE = "bertkit.commands.registry"
"""The table from command name to module (the CLI and bench's --quality run commands by name through it)."""


def command_crossings(modules: dict[str, Path]) -> list[str]:
    """`A imports B` for each module A of bertkit.commands importing another, B (at the top or inside a function);
    the package itself (nothing but a docstring) and the command table are not commands."""
    commands = {n for n in MODULES if n.startswith("bertkit.commands.") and n != COMMAND_TABLE}
    return [f"{name} imports {target}" for name, path in sorted(modules.items())
            for target in sorted(imported_modules(name, path)) if target in commands]


def test_command_crossings_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "bench.py"
    module.write_text("from bertkit.commands import registry\n\n\ndef run():\n"
                      "    from bertkit.commands import probe\n    from bertkit.commands.predict import run\n")
    assert command_crossings({"bertkit.commands.bench": module}) == [
        "bertkit.commands.bench imports bertkit.commands.predict", "bertkit.commands.bench imports bertkit.commands.probe"]


def test_no_command_module_imports_another():
    """DESIGN.md: what two commands share lives below commands/ (a saved model or probe read in models/ or probe/,
    outputs in scoring/, reports in measure/), so a command can change without breaking another."""
    modules = {n: p for n, p in MODULES.items() if n.startswith("bertkit.commands")}
    assert command_crossings(modules) == []


def test_commands_holds_the_commands_and_their_table():
    """Every module of bertkit.commands is a command the table names (a helper two commands share lives below)."""
    from bertkit.commands.registry import COMMANDS

    modules = {n.rsplit(".", 1)[1] for n in MODULES if n.startswith("bertkit.commands.") and n != COMMAND_TABLE}
    assert modules == set(COMMANDS)


RESOLVED_BELOW_COMMANDS: dict[str, str] = {}
"""Where the library still resolves --device/--precision itself, and why: nowhere (a sweep's command hands its
trials a resolver; `finetune` and `load_for_inference` take the resolved `Compute`). A problem family
(`bertkit.families`) is a command's family-specific part: it resolves Compute for the command, once."""


def test_compute_is_resolved_by_the_commands():
    """DESIGN.md: a command resolves Compute once and passes it down; the library takes the resolved one."""
    resolving = {name for name, path in MODULES.items() if not name.startswith(("bertkit.commands", "bertkit.families"))
                 and any(isinstance(node, ast.Attribute) and node.attr == "resolve" and isinstance(node.value, ast.Name)
                         and node.value.id == "Compute" for node in ast.walk(ast.parse(path.read_text("utf-8"))))}
    assert resolving - {"bertkit.models.compute"} == set(RESOLVED_BELOW_COMMANDS)


def package_of(module: str) -> str:
    """The node of the package graph a module belongs to: its sub-package, or itself for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_cycle_between_packages():
    """Packages along the data flow: no package imports one that imports it back, by any path (imports inside
    functions and TYPE_CHECKING blocks count; the package `bertkit` itself and `__main__` are not nodes)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name in ("bertkit", "bertkit.__main__"):
            continue
        src = package_of(name)
        targets = {package_of(t) for t in imported_modules(name, path) if t not in ("bertkit", "bertkit.__main__")}
        graph.setdefault(src, set()).update(targets - {src})
    for targets in list(graph.values()):
        for t in targets:
            graph.setdefault(t, set())
    assert cycles(graph) == [], "package cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles(graph))


HEAVY = {"torch", "transformers", "sklearn", "datasets", "accelerate", "numpy", "pandas", "scipy", "matplotlib",
         "evaluate", "onnx", "onnxruntime", "pyarrow", "tokenizers", "safetensors", "huggingface_hub", "optuna"}
"""Third-party packages slow (or optional) enough to import only where used: a bertkit import inside a function is
for a module that pulls one of these in, never to dodge a cycle."""


def top_level_imports(path: Path) -> list[str]:
    """What a module imports when it is imported (its body, try/if blocks; not TYPE_CHECKING, not functions)."""
    found: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for n in ast.walk(node):
            if isinstance(n, ast.Import):
                found += [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                found += [n.module] + [f"{n.module}.{a.name}" for a in n.names]
    return found


def containing(target: str) -> str:
    while target and target not in MODULES:
        target = target.rsplit(".", 1)[0] if "." in target else ""
    return target


def heavy_reason(module: str, seen: frozenset[str] = frozenset()) -> str | None:
    """The heavy package importing `module` pulls in (through bertkit modules it imports), or None."""
    for target in top_level_imports(MODULES[module]):
        root = target.split(".")[0]
        if root in HEAVY:
            return root
        inner = containing(target) if root == "bertkit" else ""
        parts = inner.split(".")
        for step in (".".join(parts[:i]) for i in range(2, len(parts) + 1)):  # packages' __init__ run too
            if step in MODULES and step != module and step not in seen:
                reason = heavy_reason(step, seen | {module})
                if reason:
                    return f"{step} -> {reason}"
    return None


def test_heavy_reason_follows_bertkit_imports():
    assert heavy_reason("bertkit.models.loading") == "torch"
    assert heavy_reason("bertkit.errors") is None


def test_a_bertkit_import_inside_a_function_is_for_a_heavy_module():
    light = []
    for name, path in MODULES.items():
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                inner = [containing(t) for t in targets if t.split(".")[0] == "bertkit"]
                module = max(inner, key=len) if inner else ""
                if module and not heavy_reason(module):
                    light.append(f"{name}:{node.lineno} ({fn.name}) imports {module}")
    assert light == [], "import these at the top of the module (they are light):\n" + "\n".join(light)


def test_sub_packages_and_few_top_level_modules():
    packages = [d for d in PACKAGE.iterdir() if (d / "__init__.py").is_file() and d.name != "resources"]
    top = [p for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(packages) >= 6, packages
    assert len(top) <= 8, sorted(p.name for p in top)


def test_no_module_over_the_limit():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > MAX_MODULE_LINES} == {}


def test_no_function_over_the_limit():
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []


def module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to bertkit modules: `from bertkit.x import y [as z]` where x.y is a module,
    `import bertkit.x.y as z`."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bertkit") and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    aliases[alias.asname] = alias.name
    return aliases


USERS = {**{name: path for name, path in MODULES.items()},
         **{f"tests/{p.name}": p for p in sorted(PACKAGE.parent.glob("tests/*.py"))},
         **{f"benchmarks/{p.name}": p for p in sorted(PACKAGE.parent.glob("benchmarks/*.py"))}}


@pytest.mark.parametrize("name", sorted(USERS))
def test_every_attribute_used_on_an_imported_module_exists(name):
    """`data.load_splits(...)` where `data` is an imported bertkit module: `load_splits` must be defined there
    (bertkit's modules, the tests and the benchmarks)."""
    tree = ast.parse(USERS[name].read_text(encoding="utf-8"))
    rebound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    rebound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
                for a in [*n.posonlyargs, *n.args, *n.kwonlyargs]}
    missing = []
    for local, target in module_aliases(tree).items():
        if local in rebound:  # also a variable somewhere in the file: its attributes are not the module's
            continue
        module = importlib.import_module(target)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == local
                    and not hasattr(module, node.attr)):
                missing.append(f"line {node.lineno}: {local}.{node.attr} ({target} has no {node.attr})")
    assert missing == []
