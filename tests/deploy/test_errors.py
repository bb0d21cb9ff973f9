"""Every exception engram raises on purpose derives from `EngramError`
(`engram.models.errors`), is defined in the module of the room that raises it, and is
named in the tree of `engram.models.errors`' docstring with that module.

Control-flow exceptions private to one module (a leading underscore) are exempt: they
never leave it.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
from pathlib import Path

from engram.models import errors

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("models", "ranking", "service", "index_data", "eval")
BUILTIN = {n for n, v in vars(builtins).items() if inspect.isclass(v) and issubclass(v, BaseException)}
#: A tree line: "├── Name   what it means (module)".
TREE_LINE = re.compile(r"── (\w+) .*\(([\w.]+)\)$", re.M)


def _bases(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


def _classes() -> dict[str, tuple[str, set[str]]]:
    """Every class of the rooms: name -> (module, base names)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    found[node.name] = (module, _bases(node))
    return found


def _exceptions(classes: dict[str, tuple[str, set[str]]]) -> set[str]:
    """The classes whose bases lead to an exception, by name."""
    known = set(BUILTIN)
    grew = True
    while grew:
        grew = False
        for name, (_, bases) in classes.items():
            if name not in known and bases & known:
                known.add(name)
                grew = True
    return known - BUILTIN


def _reaches_base(name: str, classes: dict[str, tuple[str, set[str]]]) -> bool:
    if name == "EngramError":
        return True
    return any(_reaches_base(b, classes) for b in classes.get(name, ("", set()))[1] if b in classes)


def test_every_public_exception_derives_from_the_base_and_is_in_the_tree_with_its_module() -> None:
    classes = _classes()
    tree = dict(TREE_LINE.findall(errors.__doc__ or ""))
    wrong = [
        f"{classes[name][0]}.{name}"
        for name in sorted(_exceptions(classes))
        if not name.startswith("_")
        and name != "EngramError"
        and not (_reaches_base(name, classes) and tree.get(name) == classes[name][0])
    ]
    assert wrong == []


def test_every_class_in_the_tree_is_where_the_tree_says() -> None:
    tree = TREE_LINE.findall(errors.__doc__ or "")
    assert len(tree) >= 20
    for name, module in tree:
        cls = getattr(importlib.import_module("engram." + module), name)
        assert issubclass(cls, errors.EngramError), name
        assert cls.__module__ == "engram." + module, f"{name} is defined in {cls.__module__}, not {module}"


def test_models_keeps_only_the_contracts_own() -> None:
    here = {n for n, v in vars(errors).items() if inspect.isclass(v) and issubclass(v, BaseException)}
    assert here == {"EngramError", "CanonicalizationRefused", "ContextUnavailable"}
