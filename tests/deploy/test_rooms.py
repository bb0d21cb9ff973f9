"""Who may import whom (DESIGN.md, CONTRIBUTING.md "Rooms"), enforced.

Why an AST walk rather than import-linter: the rules are one table here, read beside
the DESIGN they restate; every import counts, the ones inside functions too (the CLI's
plugins keep their heavy imports there, and those are the ones that drift); and it
needs no dependency or configuration file of its own. import-linter's layers contract
would say the same in more words and miss nothing this does not.
"""

from __future__ import annotations

import ast
import re
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Configuration every room above the engine reads (typed settings, logging).
CONFIG = {"service.settings", "service.logs"}
#: The service's edges: front ends and operator surfaces above the engine.
EDGES = {"service.mcp", "service.http", "service.console", "service.operator", "service.cli", "service.cli_reference"}
BELOW_EDGES = {"models", "ranking", "service.store", "service.secrets", "service.engine"} | CONFIG
#: Each room and the rooms it may import (itself always).
ALLOWED: dict[str, set[str]] = {
    "models": set(),
    "ranking": {"models"},
    "service.store": {"models"},
    "service.secrets": {"models"},
    "service.engine": {"models", "ranking", "service.store", "service.secrets"},
    "service.settings": {"models", "service.store"},
    "service.logs": {"service.settings"},
    **{edge: BELOW_EDGES | EDGES for edge in EDGES},
    "index_data": BELOW_EDGES | EDGES,
    # Evaluation drives the service as a host would (its tokens: models.host_token), never
    # through the MCP front end's modules.
    "eval": (BELOW_EDGES | EDGES | {"index_data"}) - {"service.mcp"},
}
#: A room entered by one door: the only names other rooms import from it (never the
#: package itself, nor a module inside). The engine asks the secret scan one thing.
ENTRIES = {"service.secrets": {"scan"}}
#: Rooms above reach these only through the package's facade (its ``__init__``), never
#: a module inside: what a plugin may use of the CLI is what ``engram.service.cli``
#: declares.
FACADE_ONLY = {"service.cli": {"index_data", "eval"}}


def _room(module: str) -> str | None:
    """The room of a dotted module of the project (None: not ours)."""
    parts = module.split(".")
    if parts[0] != "engram" or len(parts) < 2:
        return None
    if parts[1] == "service":
        return "service." + parts[2] if len(parts) > 2 else "service"
    return parts[1]


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("engram", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    return _imports_in(path.read_text(), package)


def _imports_in(text: str, package: str) -> list[tuple[int, str]]:
    return sorted({(line, module) for line, module, _ in _names_in(text, package)})


def _names_in(text: str, package: str) -> list[tuple[int, str, str | None]]:
    """(line, absolute module, name imported from it: None for ``import module``)."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module:
                module = node.module
            else:
                continue
            found += [(node.lineno, module, alias.name) for alias in node.names]
    return found


def _names(path: Path) -> list[tuple[int, str, str | None]]:
    module = _module_of(path)
    return _names_in(path.read_text(), module if path.name == "__init__.py" else module.rsplit(".", 1)[0])


def _sources() -> list[Path]:
    return sorted(
        p for top in ("models", "ranking", "service", "index_data", "eval") for p in (ROOT / top).rglob("*.py")
    )


def test_every_room_is_in_the_table() -> None:
    rooms = {_room(_module_of(p)) for p in _sources()}
    assert rooms - {"service"} <= set(ALLOWED), sorted(rooms - set(ALLOWED))


def test_each_room_imports_only_the_rooms_below_it() -> None:
    wrong = []
    for path in _sources():
        source = _room(_module_of(path))
        if source == "service":  # the service package's own __init__ lists its rooms
            continue
        for line, module in _imports(path):
            target = _room(module)
            if target is None or target == source:
                continue
            if target not in ALLOWED.get(source or "", set()):
                wrong.append(f"{path.relative_to(ROOT)}:{line} {source} -> {module}")
    assert wrong == []


def test_the_rooms_above_use_the_cli_through_its_facade() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} {module}"
        for path in _sources()
        for line, module in _imports(path)
        for room, users in FACADE_ONLY.items()
        if _room(_module_of(path)) in users and module.startswith(f"engram.{room}.")
    ]
    assert wrong == []


def _outside_the_entry(module: str, name: str | None, room: str, entry: set[str]) -> bool:
    package = f"engram.{room}"
    if module == package:
        return name not in entry
    whole = f"{module}.{name}" if name is not None else module
    return module.startswith(package + ".") or whole == package or whole.startswith(package + ".")


def test_a_room_with_one_entry_is_entered_only_there() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} {module} {name or ''}"
        for path in _sources()
        for line, module, name in _names(path)
        for room, entry in ENTRIES.items()
        if _room(_module_of(path)) != room and _outside_the_entry(module, name, room, entry)
    ]
    assert wrong == []


def test_the_entry_rule_sees_every_other_door() -> None:
    entry = ENTRIES["service.secrets"]
    text = (
        "from engram.service.secrets import scan\n"
        "from engram.service.secrets import SecretRefused\n"
        "from engram.service import secrets\n"
        "from engram.service.secrets.scanner import find_secret\n"
        "import engram.service.secrets.rules\n"
    )
    found = [_outside_the_entry(m, n, "service.secrets", entry) for _, m, n in _names_in(text, "engram.service.engine")]
    assert found == [False, True, True, True, True]


def test_the_walk_sees_imports_in_functions_and_relative_ones() -> None:
    text = "def f():\n    from engram.eval import report\n    from ..cli import common\n"
    found = [m for _, m in _imports_in(text, "engram.service.engine")]
    assert found == ["engram.eval", "engram.service.cli"]
    assert not {_room(m) for m in found} & ALLOWED["service.engine"]


def test_the_service_names_no_room_above_it_even_as_a_string() -> None:
    """The commands of index_data/ and eval/ reach `engram` through entry points, never
    a table of module names inside service/."""
    above = re.compile(r"\bengram\.(?:index_data|eval)\b")
    wrong = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "service").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and above.search(node.value)
    ]
    assert wrong == []


def test_every_registered_command_is_on_the_command_line() -> None:
    from typer.main import get_command

    from engram.service.cli import app
    from engram.service.cli.apps import ADMIN_COMMANDS, COMMANDS
    from engram.service.operator.commands import known

    cli = get_command(app)
    admin = cli.commands["admin"]  # type: ignore[attr-defined]
    commands = {e.name for e in entry_points(group=COMMANDS)}
    admin_commands = {e.name for e in entry_points(group=ADMIN_COMMANDS)}
    assert {"ingest", "eval", "bench"} <= commands <= set(cli.commands)  # type: ignore[attr-defined]
    assert "export" in admin_commands and admin_commands <= set(admin.commands)
    assert known("export") and not known("no-such-command")
