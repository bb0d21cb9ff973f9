"""The `eval` extra: what `engram eval` and `engram bench` need beyond the base install.

Why a check up front: a base install (`pip install sentropic-engram`) serves memory
without pytrec_eval, matplotlib or httpx2; an evaluation started without them should
say which install fixes it before any work, not fail with a traceback at the end.
"""

from __future__ import annotations

import importlib.util

import typer

#: Import names of the `eval` extra's packages (see pyproject.toml).
EVAL_MODULES = ("pytrec_eval", "matplotlib", "httpx2")


def require_eval_extra(command: str) -> None:
    """Exit 2 with the install hint when a module of the extra cannot be imported."""
    missing = []
    for name in EVAL_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        typer.echo(
            f"engram {command}: needs the eval extra ({', '.join(missing)} missing): "
            "pip install 'sentropic-engram[eval]'",
            err=True,
        )
        raise typer.Exit(2)
