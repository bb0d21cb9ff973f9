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
import importlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import click
import typer

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

#: Sub-commands other rooms contribute: name -> (module, help). A module that is not
#: there yet is skipped silently; one that fails to import for another reason is reported.
PLUGINS: dict[str, tuple[str, str]] = {
    "ingest": ("index_data.cli", "Bulk-ingest corpora into memory."),
    "eval": ("eval.cli", "Relevance evaluation runs and reports."),
    "bench": ("eval.bench_cli", "Capacity and latency benchmarks."),
}

#: Operator sub-commands other rooms contribute under `engram admin`, the same way.
ADMIN_PLUGINS: dict[str, tuple[str, str]] = {
    "export": ("index_data.export", "Export a scope's current records (and vectors) for `engram ingest`."),
}

DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        "-d",
        envvar="ENGRAM_DATA_DIR",
        help="Data directory (store, indexes, keys, host_secret, audit.jsonl).",
    ),
]
DEFAULT_DATA_DIR = Path("./data")
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="ENGRAM_DATABASE_URL",
        help="PostgreSQL store shared by several replicas (postgresql://user@host/db). "
        "Default: SQLite in the data directory.",
    ),
]
KeyDir = Annotated[
    Path | None,
    typer.Option(
        "--key-dir",
        envvar="ENGRAM_KEY_DIR",
        help="Directory of the key-encryption key files (default <data-dir>/keys). "
        "Every replica of one database must use the same key files.",
    ),
]


@dataclass(frozen=True)
class StoreChoice:
    """Which system of record a command opens: the data directory's SQLite file, or a
    shared PostgreSQL database with its shared key directory."""

    database_url: str | None = None
    key_dir: Path | None = None


@admin.callback()
def _admin_store(ctx: typer.Context, database_url: DatabaseUrl = None, key_dir: KeyDir = None) -> None:
    """Operator commands (never reachable from the agent path)."""
    ctx.obj = StoreChoice(database_url, key_dir)


def _store_choice() -> StoreChoice:
    """The admin group's --database-url/--key-dir for the running command."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if isinstance(ctx.obj, StoreChoice):
            return ctx.obj
        ctx = ctx.parent
    return StoreChoice()


def _err(message: str) -> None:
    typer.echo(message, err=True)


def _open_engine(
    data_dir: Path, *, load_model: bool = False, background: bool = False, store: StoreChoice | None = None,
) -> Any:
    """Open the engine; a database this release cannot read exits 2 with the reason."""
    from service.engine.engine import Engine
    from service.store import SchemaTooNew

    choice = store or _store_choice()
    try:
        return Engine.open(data_dir, load_model=load_model, background=background,
                           database_url=choice.database_url, key_dir=choice.key_dir)
    except SchemaTooNew as exc:
        _err(f"engram: {exc}")
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _engine(data_dir: Path, *, load_model: bool = False) -> Iterator[Any]:
    """An engine for one operator command, closed afterwards; contract errors exit 1."""
    from models.codes import ContractError

    engine = None
    try:
        engine = _open_engine(data_dir, load_model=load_model)
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


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on. Loopback keeps DNS-rebinding protection on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8765,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            help="Serve MCP over stdin/stdout for one scope bound at launch by ENGRAM_CONTEXT "
            "(a JWT signed with the host secret) or ENGRAM_CONTEXT_FILE (a JSON claims file).",
        ),
    ] = False,
    load_model: Annotated[
        bool, typer.Option("--model/--no-model", help="Load the embedding model (semantic channel).")
    ] = True,
    rate: Annotated[float, typer.Option(help="Per-principal calls per second (0 disables the limit).")] = 20.0,
    burst: Annotated[int, typer.Option(help="Per-principal burst size.")] = 40,
    deadline_ms: Annotated[
        int, typer.Option(help="Default per-call deadline when the context carries no deadline_ms.")
    ] = 30_000,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="Host header value to accept (repeatable, e.g. memory.internal:8765); turns "
                     "DNS-rebinding protection on for a non-loopback --host."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    database_url: DatabaseUrl = None,
    key_dir: KeyDir = None,
) -> None:
    """Serve the six memory tools over MCP (streamable HTTP at /mcp, or --stdio).

    Every HTTP call must carry the host's signed context in the X-Engram-Context header (see service/mcp/host_context.py). /healthz, /readyz and /metrics serve probes; /docs documents them.
    """
    from service.mcp.host_context import (
        ContextUnavailable,
        binding_from_env,
        create_host_secret,
        load_host_secret,
    )

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
        from service.mcp.stdio import serve_stdio

        engine = _open_engine(data_dir, load_model=load_model, store=StoreChoice(database_url, key_dir))
        try:
            serve_stdio(
                engine, binding, data_dir=data_dir, rate_per_s=rate, burst=burst, default_deadline_ms=deadline_ms
            )
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
    if host not in ("127.0.0.1", "localhost", "::1") and not allowed_host:
        _err("engram: warning: non-loopback host without --allowed-host: DNS-rebinding protection is off")

    import uvicorn

    from service.mcp.app import create_app

    # Warm up in the background: /readyz answers 503 until projections caught up.
    engine = _open_engine(data_dir, load_model=load_model, background=True,
                          store=StoreChoice(database_url, key_dir))
    application = create_app(
        engine,
        host_secret=secret,
        data_dir=data_dir,
        host=host,
        allowed_hosts=allowed_host or None,
        rate_per_s=rate,
        burst=burst,
        default_deadline_ms=deadline_ms,
        close_engine=True,
    )
    uvicorn.run(application, host=host, port=port, log_level=log_level)


# --------------------------------------------------------------------------- admin


@admin.command("host-secret")
def host_secret(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    show: Annotated[bool, typer.Option("--show", help="Also print the secret itself (handle with care).")] = False,
) -> None:
    """Create the host secret (mode 0600) if missing, and print its path.

    The host signs every call's context (HS256) with it. ENGRAM_HOST_SECRET, when set, takes precedence over the file at serve time.
    """
    from service.mcp.host_context import create_host_secret, load_host_secret

    path, created = create_host_secret(data_dir)
    typer.echo(str(path.resolve()))
    _err("created" if created else "exists (unchanged)")
    if show:
        typer.echo(load_host_secret(data_dir, environ={}).decode())


@tenant_app.command("enable")
def tenant_enable(
    tenant: Annotated[str, typer.Argument(help="Tenant id, as the host binds it in the context.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Opt TENANT in: its calls are served (tools still need per-tool grants)."""
    _set_tenant(data_dir, tenant, True)


@tenant_app.command("disable")
def tenant_disable(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Opt TENANT out: every call in its scope becomes -32603 (its data is kept)."""
    _set_tenant(data_dir, tenant, False)


@tenant_app.command("status")
def tenant_status(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Print whether TENANT is opted in."""
    with _engine(data_dir) as engine:
        typer.echo("enabled" if engine.tenant_enabled(tenant) else "disabled")


def _set_tenant(data_dir: Path, tenant: str, enabled: bool) -> None:
    with _engine(data_dir) as engine:
        engine.set_tenant_enabled(tenant, enabled)
    typer.echo(f"{tenant}: {'enabled' if enabled else 'disabled'}")


# --------------------------------------------------------------------------- operators

ModelOption = Annotated[
    bool, typer.Option("--model/--no-model", help="Load the embedding model (needed to rebuild the vector index).")
]


@admin.command("rotate-kek")
def rotate_kek(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Rotate the key-encryption key: re-wrap every data key under a fresh KEK; print its id."""
    with _engine(data_dir) as engine:
        typer.echo(engine.rotate_kek())


@admin.command("backup")
def backup(
    dest: Annotated[Path, typer.Argument(help="New directory to write the backup into (must not exist).")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Online, consistent backup of the store and keys (indexes are rebuilt on restore)."""
    with _engine(data_dir) as engine:
        typer.echo(str(engine.backup(dest)))


@admin.command("restore")
def restore(
    source: Annotated[Path, typer.Argument(help="A directory written by `engram admin backup`.")],
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", help="New, empty data directory to restore into.")],
    load_model: ModelOption = True,
) -> None:
    """Restore a backup into a new data directory, verify every journal chain, rebuild indexes."""
    from models.codes import ContractError
    from service.engine.engine import Engine

    try:
        engine = Engine.restore(source, data_dir, load_model=load_model)
    except ContractError as exc:
        _err(f"engram: {exc.code.value}: {exc.message}")
        raise typer.Exit(1) from None
    engine.close()
    typer.echo(str(data_dir))


@admin.command("verify-journal")
def verify_journal(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Verify the hash chain of every scope's journal; exit 1 if any is broken."""
    with _engine(data_dir) as engine:
        result = engine.verify_journal()
    _print_json(result)
    if not all(result.values()):
        raise typer.Exit(1)


@admin.command("rebuild-projections")
def rebuild_projections(data_dir: DataDir = DEFAULT_DATA_DIR, load_model: ModelOption = True) -> None:
    """Replay the journal into fresh lexical and vector indexes."""
    with _engine(data_dir, load_model=load_model) as engine:
        engine.rebuild_projections(lambda n: _err(f"applied {n} events"))
    typer.echo("rebuilt")


@admin.command("sweep-invalidations")
def sweep_invalidations(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Finish physical purges left pending (tombstoned records still in an index file)."""
    with _engine(data_dir) as engine:
        typer.echo(f"swept {engine.sweep_invalidations()} scope(s)")


@admin.command("history")
def history(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    subject: Annotated[str, typer.Argument(help="A record_id or candidate_id.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Print every journal event about one record or candidate (digests, never content)."""
    with _engine(data_dir) as engine:
        _print_json(engine.history((tenant, workspace), subject))


@admin.command("transition")
def transition(
    operation: Annotated[
        str, typer.Argument(help="dispute | resolve | supersede | expire | invalidate-trust")
    ],
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    record_id: Annotated[str, typer.Argument(help="The record to move.")],
    reason_ref: Annotated[str, typer.Option(help="Opaque reason reference for the journal.")] = "operator",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Move a record between non-terminal states; only accepted_current is ever disclosed."""
    from service.engine.lifecycle import OPERATOR_TRANSITIONS

    if operation not in OPERATOR_TRANSITIONS:
        _err(f"engram: unknown operation {operation!r}; one of {', '.join(OPERATOR_TRANSITIONS)}")
        raise typer.Exit(2)
    with _engine(data_dir) as engine:
        typer.echo(engine.transition((tenant, workspace), record_id, operation, reason_ref))


@admin.command("adjudicate")
def adjudicate(
    decision: Annotated[str, typer.Argument(help="accept | reject")],
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    candidate_id: Annotated[str, typer.Argument(help="A candidate held as pending_adjudication.")],
    reason_ref: Annotated[str, typer.Option(help="Opaque reason reference for the journal.")] = "operator",
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Decide a candidate the admission policy held for a human (e.g. content equal to a
    forgotten record). Its body key is destroyed either way."""
    if decision not in ("accept", "reject"):
        _err("engram: decision must be accept or reject")
        raise typer.Exit(2)
    with _engine(data_dir) as engine:
        _print_json(engine.adjudicate((tenant, workspace), candidate_id, decision, reason_ref))


@admin.command("replay-search")
def replay_search(
    tenant: Annotated[str, typer.Argument(help="Tenant id of the search.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id of the search.")],
    arguments: Annotated[Path, typer.Argument(help="JSON file: the search's arguments (without page_cursor).")],
    receipt: Annotated[Path, typer.Argument(help="JSON file: the rank_receipt it returned.")],
    data_dir: DataDir = DEFAULT_DATA_DIR,
    load_model: ModelOption = True,
) -> None:
    """Re-run a search pinned to its rank receipt and compare ordered_ids_digest.

    Exits 0 when the order matches, 1 otherwise; the output says whether the profile and
    the scope's journal were unchanged since the receipt (the conditions for a match).
    """
    from service.engine.context import CallContext

    args = json.loads(arguments.read_text())
    pinned = json.loads(receipt.read_text())
    ctx = CallContext(tenant=tenant, workspace=workspace, principal="operator", agent_id="operator",
                      session="replay", purpose=str(args.get("purpose_ref", "")))
    with _engine(data_dir, load_model=load_model) as engine:
        outcome = engine.replay_search(ctx, args, pinned)
        _print_json(outcome)
    if not outcome["match"]:
        raise typer.Exit(1)


@admin.command("expire")
def expire(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Expire every record whose retention expires_at has passed."""
    with _engine(data_dir) as engine:
        expired = engine.expire_due()
        typer.echo(f"expired {len(expired)} record(s)")


# --------------------------------------------------------------------------- plugins


def _register_plugins(parent: typer.Typer, plugins: dict[str, tuple[str, str]]) -> None:
    for name, (module_name, help_text) in plugins.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue  # not written yet
            _err(f"engram: sub-command {name!r} unavailable ({exc.name} missing)")
            continue
        sub = getattr(module, "app", None)
        if isinstance(sub, typer.Typer):
            parent.add_typer(sub, name=name, help=help_text)


_register_plugins(app, PLUGINS)
_register_plugins(admin, ADMIN_PLUGINS)


def main() -> None:  # pragma: no cover - console entry for `python -m service.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
