"""Local clients: `engram admin context init|mint` and `engram connect CLIENT`, which
write the claims and the config entries desktop MCP clients launch `engram serve --stdio` with."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .apps import admin, app
from .common import DataDir, DataDirUse, command_settings, echo_error, run_operator_command

context_app = typer.Typer(
    help="Contexts for MCP clients: the local stdio binding, and signed contexts for HTTP.",
    no_args_is_help=True,
)
admin.add_typer(context_app, name="context")


def _tool_list(values: list[str] | None, default: list[str]) -> list[str]:
    from engram.models.tools import TOOLS

    chosen = default if not values else [v.strip() for item in values for v in item.split(",") if v.strip()]
    unknown = sorted(set(chosen) - set(TOOLS))
    if unknown:
        echo_error(f"engram: unknown tool(s) {', '.join(unknown)}; one of {', '.join(sorted(TOOLS))}")
        raise typer.Exit(2)
    return chosen


ToolsOption = Annotated[
    list[str] | None,
    typer.Option("--tool", help="Granted tool (repeatable or comma-separated; default: all six)."),
]
ConfirmOption = Annotated[
    list[str] | None,
    typer.Option(
        "--confirm",
        help="Tool that needs a confirmation besides withdraw and forget: "
        "engram_memory_capture and/or engram_memory_request_admission (repeatable).",
    ),
]


@context_app.command("init")
def context_init(
    tenant: Annotated[str, typer.Option(help="Tenant of the local scope (opted in by this command).")] = "local",
    workspace: Annotated[str, typer.Option(help="Workspace of the local scope.")] = "default",
    principal: Annotated[
        str | None, typer.Option(help="Actor recorded for every call (default: your login name).")
    ] = None,
    agent_id: Annotated[str, typer.Option(help="Agent id recorded for every call.")] = "mcp-client",
    purpose: Annotated[str, typer.Option(help="The bound purpose: every purpose_ref must equal it.")] = "purpose:local",
    tools: ToolsOption = None,
    confirm: ConfirmOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing local context file.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Create the local scope for stdio MCP clients: opt the tenant in and write the
    long-lived binding (claims, no expiry) to <data-dir>/contexts/local.json (mode 0600),
    creating the data directory when it does not exist.

    `engram connect CLIENT` then points a desktop client at it; nothing needs re-minting.
    """
    from engram.models.errors import ContextUnavailable
    from engram.models.tools import TOOLS
    from engram.service.mcp.local_context import context_path, local_claims, write_context_file

    settings = command_settings(use=DataDirUse.CREATES, data_dir=data_dir)
    try:
        claims = local_claims(
            tenant=tenant,
            workspace=workspace,
            principal=principal,
            agent_id=agent_id,
            purpose=purpose,
            tools=_tool_list(tools, sorted(TOOLS)),
            confirm=_tool_list(confirm, []),
        )
    except ContextUnavailable as exc:
        echo_error(f"engram: invalid context ({exc.reason})")
        raise typer.Exit(2) from None
    path = context_path(settings.data_dir)
    if path.exists() and not force:
        echo_error(f"engram: {path} exists (unchanged; --force replaces it)")
    else:
        write_context_file(path, claims)
        echo_error(f"wrote {path} (mode 0600)")
    run_operator_command(settings.data_dir, "tenant-set", {"tenant": tenant, "enabled": True})
    typer.echo(str(path.resolve()))


@context_app.command("mint")
def context_mint(
    tenant: Annotated[str | None, typer.Option(help="Tenant (default: the local context's).")] = None,
    workspace: Annotated[str | None, typer.Option(help="Workspace (default: the local context's).")] = None,
    principal: Annotated[str | None, typer.Option(help="Principal (default: the local context's).")] = None,
    purpose: Annotated[str | None, typer.Option(help="Purpose (default: the local context's).")] = None,
    tools: ToolsOption = None,
    ttl: Annotated[
        int, typer.Option(min=1, max=86_400, help="Lifetime of the token in seconds (at most 24 h).")
    ] = 3600,
    deadline_ms: Annotated[int | None, typer.Option(min=1, max=600_000, help="deadline_ms claim.")] = None,
    confirm_tool: Annotated[
        str | None,
        typer.Option(
            help="Also approve ONE call of this tool (withdraw, forget, or a confirmable "
            "capture/request_admission); needs --arguments."
        ),
    ] = None,
    arguments: Annotated[
        Path | None, typer.Option(help="JSON file: the exact arguments of the call to approve.")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Print an HS256 context for the X-Engram-Context header, signed with the host secret.

    Claims default to the local context (engram admin context init); with --confirm-tool
    and --arguments it carries a confirmation bound to that tool, its target and the
    operation digest of exactly those arguments (valid 300 s, usable once within 30 s).
    """
    from engram.models.errors import ContextUnavailable
    from engram.models.tools import TOOLS
    from engram.service.mcp.host_context import load_host_secret
    from engram.service.mcp.local_context import (
        confirmation_claim,
        context_path,
        local_claims,
        mint_context,
        read_context_file,
    )

    settings = command_settings(data_dir=data_dir)
    path = context_path(settings.data_dir)
    base: dict[str, Any] = read_context_file(path) if path.exists() else {}
    if "tenant" not in base and tenant is None:
        echo_error(f"engram: no {path}: run `engram admin context init` or give --tenant")
        raise typer.Exit(2)
    try:
        secret = load_host_secret(settings.data_dir)
    except RuntimeError as exc:
        echo_error(f"engram: {exc}")
        raise typer.Exit(2) from None
    confirmation = None
    if confirm_tool is not None:
        if arguments is None:
            echo_error("engram: --confirm-tool needs --arguments")
            raise typer.Exit(2)
        try:
            confirmation = confirmation_claim(confirm_tool, json.loads(arguments.read_text()))
        except KeyError:
            echo_error(f"engram: {confirm_tool} takes no confirmation")
            raise typer.Exit(2) from None
        except ValueError as exc:
            echo_error(f"engram: {exc}")
            raise typer.Exit(2) from None
    try:
        claims = local_claims(
            tenant=tenant or base["tenant"],
            workspace=workspace or base.get("workspace", "default"),
            principal=principal or base.get("principal"),
            agent_id=base.get("agent_id", "mcp-client"),
            session=base.get("session", "local"),
            purpose=purpose or base.get("purpose", "purpose:local"),
            tools=_tool_list(tools, base.get("tools") or sorted(TOOLS)),
            confirm=base.get("confirm", []),
        )
        typer.echo(mint_context(claims, secret, ttl_s=ttl, confirmation=confirmation, deadline_ms=deadline_ms))
    except ContextUnavailable as exc:
        echo_error(f"engram: invalid context ({exc.reason})")
        raise typer.Exit(2) from None


@app.command()
def connect(
    client: Annotated[str, typer.Argument(help="claude-desktop | claude-code | cursor | vscode | inspector")],
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Merge the entry into the client's config file (other servers are kept) instead of printing it.",
        ),
    ] = False,
    name: Annotated[str, typer.Option(help="Server name in the client's config.")] = "engram",
    config_path: Annotated[
        Path | None, typer.Option(help="The client's config file (default: where the client looks).")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Print (or --write) the config entry that makes CLIENT launch `engram serve --stdio`
    on the local scope. Run `engram admin context init` first.

    Files: claude-desktop its claude_desktop_config.json; claude-code ./.mcp.json; cursor
    ~/.cursor/mcp.json; vscode ./.vscode/mcp.json; inspector ./mcp-inspector.json (use it
    with `npx @modelcontextprotocol/inspector --config mcp-inspector.json --server engram`).
    """
    from engram.service.mcp.client_config import (
        ConfigFileInvalid,
        McpClient,
        client_format,
        inspector_command,
        merge_entry,
        stdio_launch,
    )
    from engram.service.mcp.local_context import context_path

    try:
        chosen = McpClient(client)
    except ValueError:
        echo_error(f"engram: unknown client {client!r}; one of {', '.join(c.value for c in McpClient)}")
        raise typer.Exit(2) from None
    settings = command_settings(use=DataDirUse.UNUSED, data_dir=data_dir)  # the context file says what is missing
    context_file = context_path(settings.data_dir)
    if not context_file.exists():
        echo_error(f"engram: no {context_file}: run `engram admin context init` first")
        raise typer.Exit(2)
    launch = stdio_launch(_engram_command(), settings.data_dir, context_file)
    fmt = client_format(chosen)
    target = config_path or fmt.path
    entry = launch.entry(fmt)
    if not write:
        typer.echo(json.dumps({fmt.servers_key: {name: entry}}, indent=2))
        if chosen is McpClient.INSPECTOR:
            import shlex

            typer.echo("# or directly: " + shlex.join(inspector_command(launch)))
        echo_error(f"(merge into {target}, or rerun with --write)")
        return
    try:
        replaced = merge_entry(target, fmt, name, entry)
    except ConfigFileInvalid:
        echo_error(f"engram: {target} is not a JSON object with a {fmt.servers_key!r} object; left unchanged")
        raise typer.Exit(1) from None
    typer.echo(f"{'updated' if replaced else 'added'} {name!r} in {target}")


def _engram_command() -> list[str]:
    """How a client should start this same installation of engram."""
    import shutil

    invoked = Path(sys.argv[0])
    if invoked.name == "engram" and invoked.exists():
        return [str(invoked.resolve())]
    if invoked.name == "cli.py":  # python -m service.cli
        return [sys.executable, "-m", "engram.service.cli"]
    found = shutil.which("engram")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "engram.service.cli"]
