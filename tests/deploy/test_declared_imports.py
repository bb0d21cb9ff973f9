"""Every third-party package the code imports is declared in pyproject.toml.

The service's rooms may import only the base dependencies and the `eval` extra (eval
and bench code); the tests may also import the `test` extra. An import satisfied only
because something else pulled the package in breaks on a fresh install.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("models", "ranking", "service", "index_data", "eval")
LOCAL = {"engram", "tests", "conftest"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*groups: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for group in groups:
        requirements += project["optional-dependencies"][group]
    return {_normal(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in requirements}


def _imported(folders: list[Path]) -> dict[str, str]:
    """Top-level third-party module -> one file importing it."""
    found: dict[str, str] = {}
    helpers = {p.stem for p in (ROOT / "tests").rglob("*.py")}  # test helpers imported by bare name
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in LOCAL or top in helpers or top == "__future__":
                        continue
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _undeclared(imported: dict[str, str], declared: set[str]) -> list[str]:
    owners = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(imported.items()):
        dists = {_normal(d) for d in owners.get(module, [module])}
        if not dists & declared:
            missing.append(f"{module} ({where}; distribution {', '.join(sorted(dists))})")
    return missing


def test_service_imports_are_declared():
    imported = _imported([ROOT / room for room in ROOMS])
    assert not _undeclared(imported, _declared("eval")), _undeclared(imported, _declared("eval"))


def test_test_imports_are_declared():
    imported = _imported([ROOT / "tests"])
    declared = _declared("eval", "test")
    assert not _undeclared(imported, declared), _undeclared(imported, declared)
