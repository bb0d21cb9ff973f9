"""The `engram` command groups (typer apps) and the entry-point groups under which other
rooms contribute sub-commands; the command modules register themselves on these groups."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="engram",
    help="Governed, multi-tenant memory for AI agents, served over MCP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Plain click help (no rich panels): option help wraps to the terminal's width, as
    # wide as it allows, and flags show no value type.
    rich_markup_mode=None,
)
admin = typer.Typer(
    help="Operator commands (never reachable from the agent path). --database-url and "
    "--key-dir (or their ENGRAM_ variables) select the store every admin command opens.",
    no_args_is_help=True,
)
tenant_app = typer.Typer(
    help="Opt a tenant in or out of memory (disabled by default).",
    no_args_is_help=True,
)
app.add_typer(admin, name="admin")
admin.add_typer(tenant_app, name="tenant")


@app.callback()
def _prepare_process() -> None:
    """Before any sub-command: the process-wide settings of the native libraries
    (`engram.ranking.native.prepare_process`)."""
    from engram.ranking import prepare_process

    prepare_process()


#: The entry-point groups other rooms register sub-commands under (pyproject.toml),
#: each a `typer.Typer`: top-level commands, and operator commands under `engram admin`.
COMMANDS = "engram.commands"
ADMIN_COMMANDS = "engram.admin_commands"
