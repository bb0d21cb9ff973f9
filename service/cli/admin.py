"""`engram admin ...`: the operators' surface (host secret, tenants, keys, backups,
restore, projections, history, disputes, replicas, routes), never reachable through MCP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .apps import admin, tenant_app
from .common import (
    DataDir,
    DataDirUse,
    ModelOption,
    command_settings,
    contract_failure,
    echo_error,
    long_step,
    operator_engine,
    print_json,
    run_operator_command,
    store_choice,
)


@admin.command("host-secret")
def host_secret(
    data_dir: DataDir = None,
    show: Annotated[bool, typer.Option("--show", help="Also print the secret itself (handle with care).")] = False,
) -> None:
    """Create the host secret (mode 0600) if missing, and print its path; creates the data
    directory too when it does not exist.

    The host signs every call's context (HS256) with it. ENGRAM_HOST_SECRET, when set, takes precedence over the
    file at serve time.
    """
    from engram.service.mcp.host_context import create_host_secret, load_host_secret

    data_dir = command_settings(use=DataDirUse.CREATES, data_dir=data_dir).data_dir
    path, created = create_host_secret(data_dir)
    typer.echo(str(path.resolve()))
    echo_error("created" if created else "exists (unchanged)")
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
    typer.echo(run_operator_command(data_dir, "tenant-status", {"tenant": tenant}))


def _set_tenant(data_dir: Path | None, tenant: str, enabled: bool) -> None:
    typer.echo(f"{tenant}: {run_operator_command(data_dir, 'tenant-set', {'tenant': tenant, 'enabled': enabled})}")


@admin.command("rotate-kek")
def rotate_kek(data_dir: DataDir = None) -> None:
    """Rotate the key-encryption key online: a fresh KEK is active at once, every data key
    is rewrapped under it, and older KEK files go only when no key needs them; print its id."""
    typer.echo(run_operator_command(data_dir, "rotate-kek", {}))


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
        echo_error(
            "engram: warning: this backup holds the key-encryption keys; forgotten records in it stay "
            "readable to whoever holds it"
        )
    typer.echo(run_operator_command(data_dir, "backup", {"dest": str(dest.resolve()), "include_keys": include_keys}))


@admin.command("export-kek")
def export_kek(
    dest: Annotated[Path, typer.Argument(help="New directory to write the keys into (must not exist).")],
    data_dir: DataDir = None,
) -> None:
    """Copy the key-encryption keys and the shred ledger to DEST (mode 0700), for a restore.

    Whoever holds them can open every data key still wrapped in any backup: store them apart
    from the backups, and delete copies you no longer need.
    """
    from engram.service.engine import export_keys

    settings = command_settings(use=DataDirUse.UNUSED, data_dir=data_dir, key_dir=store_choice().key_dir)
    key_dir = settings.key_dir or settings.data_dir / "keys"
    if not key_dir.is_dir():
        echo_error(f"engram: key directory {key_dir} does not exist; give --data-dir or --key-dir of the store's keys")
        raise typer.Exit(2)
    echo_error("engram: warning: these keys open every backup made while they were current")
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
    """Restore a backup into a new data directory (created when it does not exist): apply
    the shred ledger, verify every journal chain, rebuild the lexical index (vectors come
    from the backup). A failed restore leaves nothing behind.

    The backup holds no host secret: the restored directory's first `engram serve` makes
    a new one, and tokens signed with the old one stop working, unless the old
    host_secret file is copied in (or ENGRAM_HOST_SECRET set) first.
    """
    from engram.models.codes import ContractError
    from engram.service.engine import restore
    from engram.service.mcp.host_context import SECRET_FILE
    from engram.service.operator.ownership import LOCK_FILE, DataDirLock, DirectoryHeld

    if keys is None and not (source / "keys").is_dir():
        echo_error("engram: the backup holds no key-encryption keys; pass --keys <data-dir>/keys or an export-kek copy")
        raise typer.Exit(2)
    settings = command_settings(use=DataDirUse.UNUSED, data_dir=data_dir)
    created = not data_dir.exists()
    if created:
        echo_error(f"engram: creating data directory {data_dir}")
    try:
        with DataDirLock(data_dir), long_step(f"restoring {source} into {data_dir}"):
            engine = restore(
                source, data_dir, key_source=keys, load_model=load_model, model_cache=settings.model_cache_dir
            )
            engine.close()
    except DirectoryHeld:
        echo_error(f"engram: another engram process holds {data_dir}")
        raise typer.Exit(1) from None
    except ContractError as exc:
        if created:  # nothing left behind: not even the directory this command made
            (data_dir / LOCK_FILE).unlink(missing_ok=True)
            data_dir.rmdir()
        echo_error(contract_failure(exc))
        raise typer.Exit(1) from None
    if not (data_dir / SECRET_FILE).exists():
        echo_error(
            f"engram: {data_dir} has no host secret (backups hold none): its first `engram serve` makes a new "
            "one and host tokens signed with the old one stop working; to keep them, copy the old data "
            "directory's host_secret into it (mode 0600) or set ENGRAM_HOST_SECRET before serving"
        )
    typer.echo(str(data_dir))


@admin.command("verify-journal")
def verify_journal(data_dir: DataDir = None) -> None:
    """Verify the hash chain of every scope's journal; exit 1 if any is broken."""
    result = run_operator_command(data_dir, "verify-journal", {})
    print_json(result)
    if not all(result.values()):
        raise typer.Exit(1)


@admin.command("rebuild-projections")
def rebuild_projections(data_dir: DataDir = None, load_model: ModelOption = True) -> None:
    """Replay the journal into fresh lexical and vector indexes (searches answer
    PROJECTION_STALE, not an empty list, until each scope has caught up)."""
    run_operator_command(data_dir, "rebuild-projections", {}, load_model=load_model)
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
        echo_error(f"engram: {out} exists; name a new directory")
        raise typer.Exit(2)
    print_json(run_operator_command(data_dir, "export-vectors", {"out": str(out.resolve())}, load_model=True))


@admin.command("sweep-invalidations")
def sweep_invalidations(data_dir: DataDir = None) -> None:
    """Finish physical purges left pending (tombstoned records still in an index file)."""
    typer.echo(f"swept {run_operator_command(data_dir, 'sweep-invalidations', {})} scope(s)")


@admin.command("apply-shred-ledger")
def apply_shred_ledger(data_dir: DataDir = None) -> None:
    """Apply every entry of the key directory's shred ledger to the store: each record or
    candidate it names is tombstoned or withdrawn again, its key destroyed and its index
    bytes purged. Every open already re-applies what a restored database lacks of the
    entries that carry journal positions; run this after restoring a database whose
    ledger has entries written before entries carried them (it scans the journal of each
    scope the ledger names)."""
    typer.echo(f"re-applied {run_operator_command(data_dir, 'apply-shred-ledger', {})} forget(s) and withdrawal(s)")


@admin.command("history")
def history(
    tenant: Annotated[str, typer.Argument(help="Tenant id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace id.")],
    subject: Annotated[str, typer.Argument(help="A record_id or candidate_id.")],
    data_dir: DataDir = None,
) -> None:
    """Print every journal event about one record or candidate (digests, never content)."""
    print_json(
        run_operator_command(data_dir, "history", {"tenant": tenant, "workspace": workspace, "subject": subject})
    )


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
    from engram.service.engine import OPERATOR_TRANSITIONS

    if operation not in OPERATOR_TRANSITIONS:
        echo_error(f"engram: unknown operation {operation!r}; one of {', '.join(OPERATOR_TRANSITIONS)}")
        raise typer.Exit(2)
    typer.echo(
        run_operator_command(
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
        echo_error("engram: decision must be accept or reject")
        raise typer.Exit(2)
    print_json(
        run_operator_command(
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
    outcome = run_operator_command(
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
    print_json(outcome)
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
    with operator_engine(data_dir) as engine:
        if retire is not None:
            if not engine.operator.retire_replica(retire):
                echo_error(f"engram: no replica {retire!r}")
                raise typer.Exit(1)
            typer.echo(f"retired {retire}")
            return
        print_json(engine.operator.replicas())


route_app = typer.Typer(
    help="Scopes routed to replica groups (shared PostgreSQL store only).",
    no_args_is_help=True,
)
admin.add_typer(route_app, name="route")


@route_app.command("list")
def route_list(data_dir: DataDir = None) -> None:
    """Print every routed scope: its group, and the group taking it over while it moves."""
    with operator_engine(data_dir) as engine:
        print_json(engine.operator.routes())


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
    from engram.service.engine import NoLiveReplica

    with operator_engine(data_dir) as engine:
        try:
            outcome = engine.operator.move_scope(
                (tenant, workspace), group, project_wait_s=project_wait_s, release_wait_s=release_wait_s
            )
        except NoLiveReplica:
            echo_error(f"engram: group {group!r} has no live replica")
            raise typer.Exit(1) from None
        print_json({"tenant": tenant, "workspace": workspace, **outcome.as_json()})
        if not outcome.flipped:
            echo_error(f"engram: {group!r} has not finished projecting {tenant}/{workspace}; rerun to resume")
            raise typer.Exit(1)


@admin.command("expire")
def expire(data_dir: DataDir = None) -> None:
    """Expire every record whose retention expires_at has passed."""
    typer.echo(f"expired {run_operator_command(data_dir, 'expire', {})} record(s)")


@admin.command("console-link")
def console_link(data_dir: DataDir = None) -> None:
    """Print a one-time login link to the operator console of the live server.

    Only the server that owns the data directory can mint it (through its operator
    socket), and only when it serves a console (`engram serve --console-port PORT`). The
    link works once, for a few minutes (--console-link-ttl-s); it sets a session cookie.
    """
    from engram.service.console.listener import LINK_COMMAND
    from engram.service.operator.channel import ChannelAbsent, OperatorFailure, call

    directory = command_settings(data_dir=data_dir).data_dir
    try:
        link = call(directory, LINK_COMMAND, {})
    except ChannelAbsent:
        echo_error(
            f"engram: no live server owns {directory}; the console runs inside `engram serve --console-port PORT`"
        )
        raise typer.Exit(1) from None
    except OperatorFailure as exc:
        if exc.code == "UNKNOWN_COMMAND":
            echo_error("engram: the live server serves no console; restart it with --console-port PORT")
        else:
            echo_error(f"engram: {exc.code}: {exc.message}")
        raise typer.Exit(1) from None
    typer.echo(link["url"])
    echo_error(f"engram: works once, within {link['expires_in_s']} s")
