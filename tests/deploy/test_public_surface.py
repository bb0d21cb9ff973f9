"""Each package declares its public surface once, in its ``__init__``, and the outer rooms
use only what is declared.

Two kinds of package: a facade (``engram.ranking``, ``engram.service.engine``, the store,
the CLI) re-exports the names other rooms may use, and every public name its namespace
holds is in ``__all__`` (as httpx keeps its own); a collection of modules
(``engram.models``, ``engram.eval``, ...) lists its modules, each imported by name. The
outer rooms (bulk ingestion, evaluation, the CLI, the HTTP app, the MCP front end, the
operator channel) reach the engine and the ranker only through their facades, never a module
inside them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    "engram." + ".".join(p.parent.relative_to(ROOT).parts)
    for room in ("models", "ranking", "service", "index_data", "eval")
    for p in (ROOT / room).rglob("__init__.py")
)
#: Rooms that call the engine and the ranker from outside, and the facades they must use.
OUTER_ROOMS = (
    "index_data",
    "eval",
    "service/cli",
    "service/http",
    "service/mcp",
    "service/operator",
    "service/console",
)
FACADES = ("engram.ranking", "engram.service.engine")


def _submodules(package) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")}


def test_the_packages_are_found() -> None:
    assert {"engram.models", "engram.ranking", "engram.service.engine", "engram.eval"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_a_package_declares_exactly_its_public_names(name: str) -> None:
    package = importlib.import_module(name)
    declared = getattr(package, "__all__", None)
    assert isinstance(declared, list), f"{name} declares no __all__"
    assert declared == sorted(set(declared), key=declared.index), f"{name}.__all__ repeats a name"
    public = {n for n, v in vars(package).items() if not n.startswith("_") and not inspect.ismodule(v)}
    public -= {"annotations", "TYPE_CHECKING"}  # `from __future__ import annotations`, typing's flag
    if public:  # a facade: exactly the names it holds
        assert set(declared) == public, (
            f"{name}: declared {sorted(set(declared) - public)}, undeclared {sorted(public - set(declared))}"
        )
    else:  # a collection of modules: exactly its modules
        assert set(declared) == _submodules(package), name


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0]
    found += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return found


def test_the_outer_rooms_use_only_the_facades_of_the_engine_and_the_ranker() -> None:
    reached_inside = [
        f"{path.relative_to(ROOT)}: {module}"
        for room in OUTER_ROOMS
        for path in sorted((ROOT / room).rglob("*.py"))
        for module in _imports(path)
        if any(module.startswith(facade + ".") for facade in FACADES)
    ]
    assert reached_inside == []


def test_the_http_room_mounts_mcp_and_mcp_never_reaches_back() -> None:
    """`service/http` imports the MCP front end to mount it; nothing in `service/mcp`
    (nor the engine below it) imports `service/http`."""
    reached_up = [
        f"{path.relative_to(ROOT)}: {module}"
        for room in ("service/mcp", "service/engine", "service/store", "models", "ranking")
        for path in sorted((ROOT / room).rglob("*.py"))
        for module in _imports(path)
        if module == "engram.service.http" or module.startswith("engram.service.http.")
    ]
    assert reached_up == []
    assert any(m.startswith("engram.service.mcp.") for m in _imports(ROOT / "service/http/app.py"))
