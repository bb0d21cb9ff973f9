"""The `engram` command line: serve the MCP endpoint, and the operators' surface.

Why here: maintenance (host secret, tenant opt-in, key rotation, backup, restore,
expiry, projection rebuilds, history, disputes) is never an agent capability (contract
section 0); it lives on this separate, local surface, reachable only by whoever can
run commands against the data directory.

Heavy imports (the engine, torch, sentence-transformers, uvicorn) happen inside the
commands, so `engram --help` stays fast. Other rooms plug their own sub-commands in
through the package's entry points (`engram.commands`, `engram.admin_commands` in
pyproject.toml): each a `typer.Typer` with its heavy imports inside its command
functions.
"""

from __future__ import annotations

import importlib.metadata

import typer

# isort: off
# Each module registers its commands on the groups; `engram --help` lists them in this order.
from . import serve  # noqa: F401
from . import clients  # noqa: F401
from . import admin  # noqa: F401

# isort: on
from . import apps, common
from .apps import app
from .common import DataDirUse, command_settings, run_operator_command

__all__ = ["DataDirUse", "app", "command_settings", "main", "run_operator_command"]


def _register_plugins(parent: typer.Typer, group: str) -> None:
    """The sub-commands other rooms register under the entry-point ``group`` (a typer
    `app` each), in name order. One whose optional dependencies (the `eval` extra) are
    missing is reported and left out; a module of the project's own that fails to
    import is an error."""
    for entry in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
        try:
            sub = entry.load()
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name.split(".")[0] == "engram":
                raise  # the project's own module: a broken install or rename, never skipped
            # a dependency of an optional extra (`eval`) that is not installed
            common.echo_error(f"engram: sub-command {entry.name!r} unavailable ({exc.name} missing)")
            continue
        if not isinstance(sub, typer.Typer):
            raise TypeError(f"{entry.value} is not a typer app for `engram {entry.name}`")
        help_text = sub.info.help if isinstance(sub.info.help, str) else None
        if len(sub.registered_commands) == 1 and sub.registered_callback is None and not sub.registered_groups:
            command = sub.registered_commands[0]  # one command: `engram NAME ARGS`, no sub-command in its usage
            command.name, command.short_help = entry.name, help_text
            parent.registered_commands.append(command)
        else:
            parent.add_typer(sub, name=entry.name, help=help_text)


_register_plugins(app, apps.COMMANDS)
_register_plugins(apps.admin, apps.ADMIN_COMMANDS)


def main() -> None:  # pragma: no cover - console entry for `python -m engram.service.cli`
    app()
