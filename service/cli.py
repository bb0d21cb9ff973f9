"""The `engram` command line: serve the MCP endpoint, and the operators' surface.

Why here: maintenance (host secret, tenant opt-in, key rotation, backup, restore,
expiry, projection rebuilds, history, disputes) is never an agent capability (contract
section 0); it lives on this separate, local surface, reachable only by whoever can
run commands against the data directory.

Heavy imports (the engine, torch, sentence-transformers, uvicorn) happen inside the
commands, so `engram --help` stays fast. Other rooms plug their own sub-commands in
through `PLUGINS` below: a module exposing `app: typer.Typer`, with its own heavy
imports kept inside its command functions.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import importlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from engram.models.device import Device
from engram.service.settings import LogFormat, LogLevel, field_help

app = typer.Typer(
    name="engram",
    help="Governed, multi-tenant memory for AI agents, served over MCP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
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

#: Sub-commands other rooms contribute: name -> (module, help). One whose optional
#: dependencies (the `eval` extra) are missing is reported and left out; a module of the
#: project's own that fails to import is an error.
PLUGINS: dict[str, tuple[str, str]] = {
    "ingest": ("engram.index_data.cli", "Bulk-ingest corpora into memory."),
    "eval": ("engram.eval.cli", "Relevance evaluation runs and reports."),
    "bench": ("engram.eval.bench_cli", "Capacity and latency benchmarks."),
    "bench-ann": ("engram.eval.ann_cli", "HNSW engines (hnswlib, usearch) side by side on the same vectors."),
    "fusion-fit": ("engram.eval.fusion_cli", "Fit the fusion constants on saved hits, leave one collection out."),
}

#: Operator sub-commands other rooms contribute under `engram admin`, the same way.
ADMIN_PLUGINS: dict[str, tuple[str, str]] = {
    "export": ("engram.index_data.export", "Export a scope's current records (and vectors) for `engram ingest`."),
}

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", "-d", help=field_help("data_dir"), show_default=False),
]
DatabaseUrl = Annotated[str | None, typer.Option("--database-url", help=field_help("database_url"), show_default=False)]
KeyDir = Annotated[Path | None, typer.Option("--key-dir", help=field_help("key_dir"), show_default=False)]


@dataclass(frozen=True)
class StoreChoice:
    """The admin group's --database-url/--key-dir flags (None: not given, so the
    environment, the config file or the default decides)."""

    database_url: str | None = None
    key_dir: Path | None = None


#: The admin group's --database-url/--key-dir for the command being run (set by its
#: callback before the command; one command per process).
_store_choice: contextvars.ContextVar[StoreChoice] = contextvars.ContextVar("engram_store_choice")


@admin.callback()
def _admin_store(database_url: DatabaseUrl = None, key_dir: KeyDir = None) -> None:
    """Operator commands (never reachable from the agent path)."""
    _store_choice.set(StoreChoice(database_url, key_dir))


def _err(message: str) -> None:
    typer.echo(message, err=True)


def _open_engine(
    settings: Any, *, background: bool = False, serve_replica: bool = False, seed_vectors: Path | None = None
) -> Any:
    """The engine the settings describe (data directory, store, keys, model, replica
    group); a database this release cannot read exits 2 with the reason."""
    from engram.ranking import DeviceUnavailable
    from engram.service.engine.engine import Engine
    from engram.service.settings import advertised_url
    from engram.service.store import SchemaTooNew

    try:
        return Engine.open(
            settings.data_dir,
            load_model=settings.load_model,
            background=background,
            database_url=settings.database_url,
            key_dir=settings.key_dir,
            device=settings.device,
            serve_replica=serve_replica,
            group=settings.group,
            advertise_url=advertised_url(settings) if serve_replica else None,
            seed_vectors=seed_vectors,
        )
    except (SchemaTooNew, DeviceUnavailable) as exc:
        _err(f"engram: {exc}")
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _engine(data_dir: Path | None, *, load_model: bool = False) -> Iterator[Any]:
    """An engine for one operator command, closed afterwards; contract errors exit 1."""
    from engram.models.codes import ContractError

    engine = None
    try:
        choice = _store_choice.get(StoreChoice())
        engine = _open_engine(
            _settings(
                data_dir=data_dir, load_model=load_model, database_url=choice.database_url, key_dir=choice.key_dir
            )
        )
        yield engine
    except ContractError as exc:
        _err(f"engram: {exc.code.value}: {exc.message}")
        raise typer.Exit(1) from None
    finally:
        if engine is not None:
            engine.close()


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


# --------------------------------------------------------------------------- serve


def _settings(config: Path | None = None, **flags: Any) -> Any:
    """The `Settings` for this command: flags over ENGRAM_* over the config file; bad
    values exit 2 with pydantic's explanation."""
    from pydantic import ValidationError

    from engram.service.settings import ConfigFileMissing, load_settings

    try:
        return load_settings(config, **flags)
    except ConfigFileMissing as exc:
        _err(f"engram: config file {exc} not found")
        raise typer.Exit(2) from None
    except ValidationError as exc:
        _err(f"engram: bad configuration: {exc}")
        raise typer.Exit(2) from None


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="ENGRAM_CONFIG",
        help="TOML file of settings (keys: the option names "
        "with underscores, e.g. data_dir, rate, log_format); flags and ENGRAM_* override it.",
    ),
]


@app.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help=field_help("host"), show_default=False)] = None,
    port: Annotated[int | None, typer.Option(help=field_help("port"), show_default=False)] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", "-d", help=field_help("data_dir"), show_default=False)
    ] = None,
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            help="Serve MCP over stdin/stdout for one scope bound at launch by ENGRAM_CONTEXT "
            "(a JWT signed with the host secret) or ENGRAM_CONTEXT_FILE (a JSON claims file).",
        ),
    ] = False,
    load_model: Annotated[
        bool | None, typer.Option("--model/--no-model", help=field_help("load_model"), show_default=False)
    ] = None,
    device: Annotated[
        Device | None, typer.Option(help=field_help("device"), show_default=False, case_sensitive=False)
    ] = None,
    rate: Annotated[float | None, typer.Option(help=field_help("rate"), show_default=False)] = None,
    burst: Annotated[int | None, typer.Option(help=field_help("burst"), show_default=False)] = None,
    deadline_ms: Annotated[int | None, typer.Option(help=field_help("deadline_ms"), show_default=False)] = None,
    approval_ttl_s: Annotated[int | None, typer.Option(help=field_help("approval_ttl_s"), show_default=False)] = None,
    allowed_host: Annotated[
        list[str] | None, typer.Option(help=field_help("allowed_hosts") + " Repeatable.", show_default=False)
    ] = None,
    log_level: Annotated[
        LogLevel | None, typer.Option(help=field_help("log_level"), show_default=False, case_sensitive=False)
    ] = None,
    log_format: Annotated[
        LogFormat | None, typer.Option(help=field_help("log_format"), show_default=False, case_sensitive=False)
    ] = None,
    database_url: DatabaseUrl = None,
    key_dir: KeyDir = None,
    group: Annotated[str | None, typer.Option(help=field_help("group"), show_default=False)] = None,
    advertise_url: Annotated[str | None, typer.Option(help=field_help("advertise_url"), show_default=False)] = None,
    seed_vectors: Annotated[Path | None, typer.Option(help=field_help("seed_vectors"), show_default=False)] = None,
) -> None:
    """Serve the six memory tools over MCP (streamable HTTP at /mcp, or --stdio).

    Every HTTP call must carry the host's signed context in the X-Engram-Context header (see
    service/mcp/host_context.py). /healthz, /readyz and /metrics serve probes; /docs documents them. Every
    option also comes from ENGRAM_<OPTION> or the --config file.
    """
    from engram.service.engine.seed import HEADER as SEED_HEADER
    from engram.service.logs import configure_logging
    from engram.service.mcp.host_context import (
        ContextUnavailable,
        binding_from_env,
        create_host_secret,
        load_host_secret,
    )

    settings = _settings(
        config,
        host=host,
        port=port,
        data_dir=data_dir,
        load_model=load_model,
        device=device,
        rate=rate,
        burst=burst,
        deadline_ms=deadline_ms,
        approval_ttl_s=approval_ttl_s,
        allowed_hosts=allowed_host or None,
        log_level=log_level,
        log_format=log_format,
        database_url=database_url,
        key_dir=key_dir,
        group=group,
        advertise_url=advertise_url,
        seed_vectors=seed_vectors,
    )
    configure_logging(settings.log_level, settings.log_format)
    from engram.service.store.base import DEFAULT_GROUP

    if settings.group != DEFAULT_GROUP and not settings.database_url:
        _err("engram: --group needs a shared store (--database-url): an embedded store is one process, no groups")
        raise typer.Exit(2)
    if settings.seed_vectors is not None and not (settings.seed_vectors / SEED_HEADER).is_file():
        _err(f"engram: {settings.seed_vectors} is not a seed written by `engram admin export-vectors`")
        raise typer.Exit(2)
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stdio:
        try:
            secret: bytes | None = load_host_secret(data_dir)
        except RuntimeError:
            secret = None
        try:
            binding = binding_from_env(os.environ, secret)
        except ContextUnavailable as exc:
            _err(f"engram: no trusted context for stdio ({exc.reason})")
            raise typer.Exit(2) from None
        from engram.service.mcp.stdio import serve_stdio

        with _own(data_dir):
            engine = _open_engine(settings, seed_vectors=settings.seed_vectors)
            _collect_less_once_ready(engine)
            _warn_tenants_not_opted_in(engine)
            try:
                with _operator_channel(engine, data_dir):
                    serve_stdio(engine, binding, settings)
            finally:
                engine.close()
        return

    if "ENGRAM_HOST_SECRET" not in os.environ:
        # First start on a fresh data dir: create the host secret, like the KEK.
        path, created = create_host_secret(data_dir)
        if created:
            _err(f"engram: created host secret {path} (mode 0600); hosts sign contexts with it")
    try:
        secret = load_host_secret(data_dir)
    except RuntimeError as exc:
        _err(f"engram: {exc}")
        raise typer.Exit(2) from None
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.allowed_hosts:
        _err("engram: warning: non-loopback host without --allowed-host: DNS-rebinding protection is off")

    import uvicorn

    from engram.service.mcp.app import create_app

    with _own(data_dir):
        # Warm up in the background: /readyz answers 503 until projections caught up.
        engine = _open_engine(settings, background=True, serve_replica=True, seed_vectors=settings.seed_vectors)
        _collect_less_once_ready(engine)
        _warn_tenants_not_opted_in(engine)
        application = create_app(engine, settings, host_secret=secret, close_engine=True)
        with _operator_channel(engine, data_dir):
            # log_config=None: uvicorn's loggers propagate to the handler configured above.
            uvicorn.run(
                application, host=settings.host, port=settings.port, log_config=None, log_level=settings.log_level.value
            )


def _collect_less_once_ready(engine: Any) -> None:
    """Once the engine is warm, put what is loaded by then (modules, the model, the
    index maps: the process's long-lived objects) out of the cyclic collector's reach: a
    full collection then walks only what calls made since. Walking everything paused
    every thread of the server for 50 to 100 ms at a time (eval/RESULTS.md)."""

    def freeze() -> None:
        if engine.wait_ready():
            gc.freeze()

    threading.Thread(target=freeze, name="engram-gc-freeze", daemon=True).start()


def _warn_tenants_not_opted_in(engine: Any) -> None:
    """Name, at start, each tenant whose memory is there but whose calls will be refused
    (bulk ingest and `engram bench` write scopes; opting in is a separate operator step)."""
    for tenant in engine.tenants_not_opted_in():
        _err(
            f"engram: warning: tenant {tenant!r} holds memory but is not opted in: its calls are refused "
            f"(-32603, logged as 'tenant not enabled') until `engram admin tenant enable {tenant}`"
        )


@contextlib.contextmanager
def _own(data_dir: Path) -> Iterator[None]:
    """Hold the data directory for the life of a server; exit 2 if another process does."""
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    try:
        lock = DataDirLock(data_dir).acquire()
    except DirectoryHeld:
        _err(f"engram: another engram process holds {data_dir}; one server per data directory")
        raise typer.Exit(2) from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _operator_channel(engine: Any, data_dir: Path) -> Iterator[None]:
    """The live server's operator socket (<data_dir>/operator.sock, owner-only). A data
    directory whose path is too long for a Unix socket serves without one (admin
    commands are then refused while the server runs), with a warning."""
    from engram.service.operator.channel import OperatorChannel

    try:
        channel = OperatorChannel(engine, data_dir).start()
    except ValueError as exc:
        _err(f"engram: warning: no operator channel ({exc}); stop the server to run admin commands")
        yield
        return
    try:
        yield
    finally:
        channel.close()


# --------------------------------------------------------------------------- admin


@admin.command("host-secret")
def host_secret(
    data_dir: DataDir = None,
    show: Annotated[bool, typer.Option("--show", help="Also print the secret itself (handle with care).")] = False,
) -> None:
    """Create the host secret (mode 0600) if missing, and print its path.

    The host signs every call's context (HS256) with it. ENGRAM_HOST_SECRET, when set, takes precedence over the
    file at serve time.
    """
    from engram.service.mcp.host_context import create_host_secret, load_host_secret

    data_dir = _settings(data_dir=data_dir).data_dir
    path, created = create_host_secret(data_dir)
    typer.echo(str(path.resolve()))
    _err("created" if created else "exists (unchanged)")
    if show:
        typer.echo(load_host_secret(data_dir, environ={}).decode())


@tenant_app.command("enable")
def tenant_enable(
    tenant: Annotated[str, typer.Argument(help="Tenant id, as the host binds it in the context.")],
    data_dir: DataDir = None,
) -> None:
    """Opt TENANT in: its calls are served (tools still need per-tool grants)."""
    _set_tenant(data_dir, tenant, True)


@tenant_app.command("disable")
def tenant_disable(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    data_dir: DataDir = None,
) -> None:
    """Opt TENANT out: every call in its scope becomes -32603 (its data is kept)."""
    _set_tenant(data_dir, tenant, False)


@tenant_app.command("status")
def tenant_status(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    data_dir: DataDir = None,
) -> None:
    """Print whether TENANT is opted in."""
    typer.echo(operate(data_dir, "tenant-status", {"tenant": tenant}))


def _set_tenant(data_dir: Path | None, tenant: str, enabled: bool) -> None:
    typer.echo(f"{tenant}: {operate(data_dir, 'tenant-set', {'tenant': tenant, 'enabled': enabled})}")


# --------------------------------------------------------------------------- local clients

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
        _err(f"engram: unknown tool(s) {', '.join(unknown)}; one of {', '.join(sorted(TOOLS))}")
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
    long-lived binding (claims, no expiry) to <data-dir>/contexts/local.json (mode 0600).

    `engram connect CLIENT` then points a desktop client at it; nothing needs re-minting.
    """
    from engram.models.tools import TOOLS
    from engram.service.mcp.host_context import ContextUnavailable
    from engram.service.mcp.local_context import context_path, local_claims, write_context_file

    settings = _settings(data_dir=data_dir)
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
        _err(f"engram: invalid context ({exc.reason})")
        raise typer.Exit(2) from None
    path = context_path(settings.data_dir)
    if path.exists() and not force:
        _err(f"engram: {path} exists (unchanged; --force replaces it)")
    else:
        write_context_file(path, claims)
        _err(f"wrote {path} (mode 0600)")
    operate(settings.data_dir, "tenant-set", {"tenant": tenant, "enabled": True})
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
    from engram.models.tools import TOOLS
    from engram.service.mcp.host_context import ContextUnavailable, load_host_secret
    from engram.service.mcp.local_context import (
        confirmation_claim,
        context_path,
        local_claims,
        mint_context,
        read_context_file,
    )

    settings = _settings(data_dir=data_dir)
    path = context_path(settings.data_dir)
    base: dict[str, Any] = read_context_file(path) if path.exists() else {}
    if "tenant" not in base and tenant is None:
        _err(f"engram: no {path}: run `engram admin context init` or give --tenant")
        raise typer.Exit(2)
    try:
        secret = load_host_secret(settings.data_dir)
    except RuntimeError as exc:
        _err(f"engram: {exc}")
        raise typer.Exit(2) from None
    confirmation = None
    if confirm_tool is not None:
        if arguments is None:
            _err("engram: --confirm-tool needs --arguments")
            raise typer.Exit(2)
        try:
            confirmation = confirmation_claim(confirm_tool, json.loads(arguments.read_text()))
        except KeyError:
            _err(f"engram: {confirm_tool} takes no confirmation")
            raise typer.Exit(2) from None
        except ValueError as exc:
            _err(f"engram: {exc}")
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
        _err(f"engram: invalid context ({exc.reason})")
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
        _err(f"engram: unknown client {client!r}; one of {', '.join(c.value for c in McpClient)}")
        raise typer.Exit(2) from None
    settings = _settings(data_dir=data_dir)
    context_file = context_path(settings.data_dir)
    if not context_file.exists():
        _err(f"engram: no {context_file}: run `engram admin context init` first")
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
        _err(f"(merge into {target}, or rerun with --write)")
        return
    try:
        replaced = merge_entry(target, fmt, name, entry)
    except ConfigFileInvalid:
        _err(f"engram: {target} is not a JSON object with a {fmt.servers_key!r} object; left unchanged")
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


# --------------------------------------------------------------------------- operators

ModelOption = Annotated[
    bool,
    typer.Option(
        "--model/--no-model",
        help="Load the embedding model (needed to rebuild the vector "
        "index; ignored when a live server runs the command with its own model).",
    ),
]


def operate(data_dir: Path | None, command: str, args: dict[str, Any], *, load_model: bool = False) -> Any:
    """Run an operator command where it is safe: through the live server that owns the
    data directory (its operator socket), or, when no server runs, on an engine opened
    here while holding the directory's lock. Never as a second engine beside a server."""
    from engram.service.operator.channel import ChannelAbsent, OperatorFailure, call
    from engram.service.operator.commands import run
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    directory = _settings(data_dir=data_dir).data_dir
    try:
        return call(directory, command, args)
    except ChannelAbsent:
        pass
    except OperatorFailure as exc:
        _err(f"engram: {exc.code}: {exc.message}")
        raise typer.Exit(1) from None
    try:
        with DataDirLock(directory), _engine(directory, load_model=load_model) as engine:
            return run(engine, command, args)
    except DirectoryHeld:
        _err(
            f"engram: another engram process holds {directory} and its operator channel does not answer "
            "(a server still starting, or another admin command); retry shortly, or stop it first"
        )
        raise typer.Exit(1) from None


@admin.command("rotate-kek")
def rotate_kek(data_dir: DataDir = None) -> None:
    """Rotate the key-encryption key online: a fresh KEK is active at once, every data key
    is rewrapped under it, and older KEK files go only when no key needs them; print its id."""
    typer.echo(operate(data_dir, "rotate-kek", {}))


@admin.command("backup")
def backup(
    dest: Annotated[Path, typer.Argument(help="New directory to write the backup into (must not exist).")],
    data_dir: DataDir = None,
    include_keys: Annotated[
        bool,
        typer.Option(
            "--include-keys",
            help="Also copy the key-encryption keys into the backup. Anyone holding such a "
            "backup can read every record in it, including records forgotten later: keep it offline.",
        ),
    ] = False,
) -> None:
    """Online, consistent backup of the store, policies and vectors; by default WITHOUT the
    key-encryption keys (export them on purpose with `engram admin export-kek`)."""
    if include_keys:
        _err(
            "engram: warning: this backup holds the key-encryption keys; forgotten records in it stay "
            "readable to whoever holds it"
        )
    typer.echo(operate(data_dir, "backup", {"dest": str(dest.resolve()), "include_keys": include_keys}))


@admin.command("export-kek")
def export_kek(
    dest: Annotated[Path, typer.Argument(help="New directory to write the keys into (must not exist).")],
    data_dir: DataDir = None,
) -> None:
    """Copy the key-encryption keys and the shred ledger to DEST (mode 0700), for a restore.

    Whoever holds them can open every data key still wrapped in any backup: store them apart
    from the backups, and delete copies you no longer need.
    """
    from engram.service.engine.engine import export_keys

    settings = _settings(data_dir=data_dir, key_dir=_store_choice.get(StoreChoice()).key_dir)
    key_dir = settings.key_dir or settings.data_dir / "keys"
    _err("engram: warning: these keys open every backup made while they were current")
    typer.echo(str(export_keys(key_dir, dest)))


@admin.command("restore")
def restore(
    source: Annotated[Path, typer.Argument(help="A directory written by `engram admin backup`.")],
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", help="New, empty data directory to restore into.")],
    keys: Annotated[
        Path | None,
        typer.Option(
            "--keys",
            help="Key directory to restore with: the live data directory's keys/ or an `engram admin "
            "export-kek` copy. Its shred ledger is applied, so records forgotten after the backup stay forgotten. "
            "Needed unless the backup was made with --include-keys.",
        ),
    ] = None,
    load_model: ModelOption = True,
) -> None:
    """Restore a backup into a new data directory: apply the shred ledger, verify every
    journal chain, rebuild the lexical index (vectors come from the backup)."""
    from engram.models.codes import ContractError
    from engram.service.engine.engine import Engine
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    if keys is None and not (source / "keys").is_dir():
        _err("engram: the backup holds no key-encryption keys; pass --keys <data-dir>/keys or an export-kek copy")
        raise typer.Exit(2)
    try:
        with DataDirLock(data_dir):
            engine = Engine.restore(source, data_dir, key_source=keys, load_model=load_model)
            engine.close()
    except DirectoryHeld:
        _err(f"engram: another engram process holds {data_dir}")
        raise typer.Exit(1) from None
    except ContractError as exc:
        _err(f"engram: {exc.code.value}: {exc.message}")
        raise typer.Exit(1) from None
    typer.echo(str(data_dir))


@admin.command("verify-journal")
def verify_journal(data_dir: DataDir = None) -> None:
    """Verify the hash chain of every scope's journal; exit 1 if any is broken."""
    result = operate(data_dir, "verify-journal", {})
    _print_json(result)
    if not all(result.values()):
        raise typer.Exit(1)


@admin.command("rebuild-projections")
def rebuild_projections(data_dir: DataDir = None, load_model: ModelOption = True) -> None:
    """Replay the journal into fresh lexical and vector indexes (searches answer
    PROJECTION_STALE, not an empty list, until each scope has caught up)."""
    operate(data_dir, "rebuild-projections", {}, load_model=load_model)
    typer.echo("rebuilt")


@admin.command("export-vectors")
def export_vectors(
    out: Annotated[Path, typer.Argument(help="New directory to write the vectors into (must not exist).")],
    data_dir: DataDir = None,
) -> None:
    """Write this replica's passage vectors of every scope's current records to OUT, for
    `engram serve --seed-vectors OUT` on a new replica of the same database: it embeds
    only what was admitted after the export. OUT holds derived content (mode 0700): keep
    it like a backup, and delete it once the new replicas are ready."""
    if out.exists():
        _err(f"engram: {out} exists; name a new directory")
        raise typer.Exit(2)
    _print_json(operate(data_dir, "export-vectors", {"out": str(out.resolve())}, load_model=True))


@admin.command("sweep-invalidations")
def sweep_invalidations(data_dir: DataDir = None) -> None:
    """Finish physical purges left pending (tombstoned records still in an index file)."""
    typer.echo(f"swept {operate(data_dir, 'sweep-invalidations', {})} scope(s)")


@admin.command("apply-shred-ledger")
def apply_shred_ledger(data_dir: DataDir = None) -> None:
    """Apply every entry of the key directory's shred ledger to the store: each record or
    candidate it names is tombstoned or withdrawn again, its key destroyed and its index
    bytes purged. Every open already re-applies what a restored database lacks of the
    entries that carry journal positions; run this after restoring a database whose
    ledger has entries written before entries carried them (it scans the journal of each
    scope the ledger names)."""
    typer.echo(f"re-applied {operate(data_dir, 'apply-shred-ledger', {})} forget(s) and withdrawal(s)")


@admin.command("history")
def history(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    subject: Annotated[str, typer.Argument(help="A record_id or candidate_id.")],
    data_dir: DataDir = None,
) -> None:
    """Print every journal event about one record or candidate (digests, never content)."""
    _print_json(operate(data_dir, "history", {"tenant": tenant, "workspace": workspace, "subject": subject}))


@admin.command("transition")
def transition(
    operation: Annotated[str, typer.Argument(help="dispute | resolve | supersede | expire | invalidate-trust")],
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    record_id: Annotated[str, typer.Argument(help="The record to move.")],
    reason_ref: Annotated[
        str,
        typer.Option(
            help="Opaque reason reference for the journal (scanned for secrets: the journal is never erased)."
        ),
    ] = "operator",
    data_dir: DataDir = None,
) -> None:
    """Move a record between non-terminal states; only accepted_current is ever disclosed."""
    from engram.service.engine.lifecycle import OPERATOR_TRANSITIONS

    if operation not in OPERATOR_TRANSITIONS:
        _err(f"engram: unknown operation {operation!r}; one of {', '.join(OPERATOR_TRANSITIONS)}")
        raise typer.Exit(2)
    typer.echo(
        operate(
            data_dir,
            "transition",
            {
                "operation": operation,
                "tenant": tenant,
                "workspace": workspace,
                "record_id": record_id,
                "reason_ref": reason_ref,
            },
        )
    )


@admin.command("adjudicate")
def adjudicate(
    decision: Annotated[str, typer.Argument(help="accept | reject")],
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    candidate_id: Annotated[str, typer.Argument(help="A candidate held as pending_adjudication.")],
    reason_ref: Annotated[
        str, typer.Option(help="Opaque reason reference for the journal (scanned for secrets).")
    ] = "operator",
    data_dir: DataDir = None,
) -> None:
    """Decide a candidate the admission policy held for a human (e.g. content equal to a
    forgotten record). Its body key is destroyed either way."""
    if decision not in ("accept", "reject"):
        _err("engram: decision must be accept or reject")
        raise typer.Exit(2)
    _print_json(
        operate(
            data_dir,
            "adjudicate",
            {
                "decision": decision,
                "tenant": tenant,
                "workspace": workspace,
                "candidate_id": candidate_id,
                "reason_ref": reason_ref,
            },
        )
    )


@admin.command("replay-search")
def replay_search(
    tenant: Annotated[str, typer.Argument(help="Tenant id of the search.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id of the search.")],
    arguments: Annotated[Path, typer.Argument(help="JSON file: the search's arguments (without page_cursor).")],
    receipt: Annotated[Path, typer.Argument(help="JSON file: the rank_receipt it returned.")],
    data_dir: DataDir = None,
    load_model: ModelOption = True,
) -> None:
    """Re-run a search pinned to its rank receipt and compare ordered_ids_digest.

    Exits 0 when the order matches, 1 otherwise; the output says whether the profile and
    the scope's journal were unchanged since the receipt (the conditions for a match).
    """
    outcome = operate(
        data_dir,
        "replay-search",
        {
            "tenant": tenant,
            "workspace": workspace,
            "arguments": json.loads(arguments.read_text()),
            "receipt": json.loads(receipt.read_text()),
        },
        load_model=load_model,
    )
    _print_json(outcome)
    if not outcome["match"]:
        raise typer.Exit(1)


@admin.command("replicas")
def replicas(
    retire: Annotated[
        str | None,
        typer.Option(
            help="Remove this replica id for good (a replica that will not come back), so the purges it "
            "still owed stop being pending."
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """List the replicas registered on the shared (PostgreSQL) store: id, seconds since
    the last heartbeat, live. On SQLite (no replicas) it exits 1, CAPABILITY_UNAVAILABLE."""
    with _engine(data_dir) as engine:
        if retire is not None:
            if not engine.retire_replica(retire):
                _err(f"engram: no replica {retire!r}")
                raise typer.Exit(1)
            typer.echo(f"retired {retire}")
            return
        _print_json(engine.replicas())


route_app = typer.Typer(
    help="Scopes routed to replica groups (shared PostgreSQL store only).",
    no_args_is_help=True,
)
admin.add_typer(route_app, name="route")


@route_app.command("list")
def route_list(data_dir: DataDir = None) -> None:
    """Print every routed scope: its group, and the group taking it over while it moves."""
    with _engine(data_dir) as engine:
        _print_json(engine.routes())


@route_app.command("move")
def route_move(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    group: Annotated[str, typer.Argument(help="The replica group to serve the scope from now on.")],
    project_wait_s: Annotated[
        float,
        typer.Option(help="How long to wait for the group's live replicas to project the scope (rerun to resume)."),
    ] = 300.0,
    release_wait_s: Annotated[
        float,
        typer.Option(help="How long to wait for the old group's live replicas to delete the scope's index files."),
    ] = 30.0,
    data_dir: DataDir = None,
) -> None:
    """Move a scope to GROUP: GROUP's replicas project it from the journal while the old
    group still serves, then the route flips, then the old group deletes its index files.
    Exits 1 when GROUP has no live replica or did not finish projecting in time (the move
    stays under way; rerun to resume)."""
    from engram.service.engine.routing import NoLiveReplica

    with _engine(data_dir) as engine:
        try:
            outcome = engine.move_scope(
                (tenant, workspace), group, project_wait_s=project_wait_s, release_wait_s=release_wait_s
            )
        except NoLiveReplica:
            _err(f"engram: group {group!r} has no live replica")
            raise typer.Exit(1) from None
        _print_json({"tenant": tenant, "workspace": workspace, **outcome.as_json()})
        if not outcome.flipped:
            _err(f"engram: {group!r} has not finished projecting {tenant}/{workspace}; rerun to resume")
            raise typer.Exit(1)


@admin.command("expire")
def expire(data_dir: DataDir = None) -> None:
    """Expire every record whose retention expires_at has passed."""
    typer.echo(f"expired {operate(data_dir, 'expire', {})} record(s)")


# --------------------------------------------------------------------------- plugins


def _register_plugins(parent: typer.Typer, plugins: dict[str, tuple[str, str]]) -> None:
    for name, (module_name, help_text) in plugins.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name.split(".")[0] == "engram":
                raise  # the project's own module: a broken install or rename, never skipped
            # a dependency of an optional extra (`eval`) that is not installed
            _err(f"engram: sub-command {name!r} unavailable ({exc.name} missing)")
            continue
        sub = getattr(module, "app", None)
        if not isinstance(sub, typer.Typer):
            raise TypeError(f"{module_name} has no typer `app` for `engram {name}`")
        parent.add_typer(sub, name=name, help=help_text)


_register_plugins(app, PLUGINS)
_register_plugins(admin, ADMIN_PLUGINS)


def main() -> None:  # pragma: no cover - console entry for `python -m service.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
