"""The `engram` command line: serve the MCP endpoint, and the operators' surface.

Why here: maintenance (host secret, tenant opt-in, key rotation, backup, restore,
expiry, projection rebuilds, history, disputes) is never an agent capability (contract
section 0); it lives on this separate, local surface, reachable only by whoever can
run commands against the data directory.

Heavy imports (the engine, torch, sentence-transformers, uvicorn) happen inside the
commands, so `engram --help` stays fast. Other rooms plug their own sub-commands in
through `PLUGINS` in `apps.py`: a module exposing `app: typer.Typer`, with its own heavy
imports kept inside its command functions.
"""

from __future__ import annotations

import importlib

import typer

# isort: off
# Each module registers its commands on the groups; `engram --help` lists them in this order.
from . import serve  # noqa: F401
from . import clients  # noqa: F401
from . import admin  # noqa: F401

# isort: on
from . import apps, common
from .apps import app
from .common import run_operator_command

__all__ = ["app", "main", "run_operator_command"]


def _register_plugins(parent: typer.Typer, plugins: dict[str, tuple[str, str]]) -> None:
    for name, (module_name, help_text) in plugins.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name.split(".")[0] == "engram":
                raise  # the project's own module: a broken install or rename, never skipped
            # a dependency of an optional extra (`eval`) that is not installed
            common.echo_error(f"engram: sub-command {name!r} unavailable ({exc.name} missing)")
            continue
        sub = getattr(module, "app", None)
        if not isinstance(sub, typer.Typer):
            raise TypeError(f"{module_name} has no typer `app` for `engram {name}`")
        parent.add_typer(sub, name=name, help=help_text)


_register_plugins(app, apps.PLUGINS)
_register_plugins(apps.admin, apps.ADMIN_PLUGINS)


def main() -> None:  # pragma: no cover - console entry for `python -m engram.service.cli`
    app()
