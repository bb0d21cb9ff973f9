"""Every exception engram raises on purpose derives from `EngramError`
(`engram.models.errors`) and is named in the tree of that module's docstring; all live
there but `ContractError`, which the tree places beside the codes it carries.

Control-flow exceptions private to one module (a leading underscore) are exempt: they
never leave it.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

from engram.models import errors

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("models", "ranking", "service", "index_data", "eval")


def _bases(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))}


def test_every_public_exception_derives_from_the_base_and_is_in_the_tree() -> None:
    ours = {n for n, v in vars(errors).items() if inspect.isclass(v) and issubclass(v, BaseException)}
    builtin = {n for n, v in vars(builtins).items() if inspect.isclass(v) and issubclass(v, BaseException)}
    stray = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        for room in ROOMS
        for path in sorted((ROOT / room).rglob("*.py"))
        if path != Path(errors.__file__).resolve()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")
        and _bases(node) & (ours | builtin)
        and (not _bases(node) & ours or f"── {node.name} " not in (errors.__doc__ or ""))
    ]
    assert stray == []


def test_every_error_derives_from_the_base_and_is_in_the_tree() -> None:
    classes = [v for v in vars(errors).values() if inspect.isclass(v) and issubclass(v, BaseException)]
    tree = errors.__doc__ or ""
    for cls in classes:
        if cls is errors.EngramError:
            continue
        assert issubclass(cls, errors.EngramError), cls.__name__
        assert f"── {cls.__name__} " in tree, f"{cls.__name__} is missing from the tree in the docstring"
