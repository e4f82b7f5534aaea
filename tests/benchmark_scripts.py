"""The benchmark scripts (benchmarks/*.py; not a package) imported as modules by the tests of their pieces."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """benchmarks/NAME.py as a module (the scripts it imports from benchmarks/ found too)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
