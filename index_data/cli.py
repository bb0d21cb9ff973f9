"""`engram ingest`: bulk-load a BEIR collection or a record JSONL file into one scope.

Registered by ``service.cli`` as a plugin sub-app (``app``); heavy imports (engine, torch)
happen inside the command so ``engram --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from engram.models.device import Device
from engram.service.settings import field_help

#: Refused records named on stderr as well (the summary names every one).
SHOWN_REFUSALS = 20

app = typer.Typer(
    help="Bulk-ingest a corpus (BEIR directory or record JSONL) as accepted records.",
    add_completion=False,
)


@app.command()
def ingest(
    dataset: Annotated[
        Path,
        typer.Argument(
            metavar="DATASET",
            help="BEIR directory (corpus.jsonl) or record JSONL file (an `engram admin export` file too).",
        ),
    ],
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", "-d", help=field_help("data_dir"), show_default=False)
    ] = None,
    database_url: Annotated[
        str | None, typer.Option("--database-url", help=field_help("database_url"), show_default=False)
    ] = None,
    key_dir: Annotated[Path | None, typer.Option("--key-dir", help=field_help("key_dir"), show_default=False)] = None,
    device: Annotated[Device | None, typer.Option("--device", help=field_help("device"), show_default=False)] = None,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant of the target scope.")] = "default",
    workspace: Annotated[str, typer.Option("--workspace", help="Workspace of the target scope.")] = "default",
    vectors: Annotated[
        Path | None,
        typer.Option("--vectors", help=".npy (one row per document) or .npz (vectors + offsets per passage)."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            min=1,
            help="Records per store transaction [default: 512 where the model embeds them, else 4096].",
            show_default=False,
        ),
    ] = None,
    depth: Annotated[
        int,
        typer.Option(
            "--depth",
            min=1,
            help="Batches each pipeline queue holds (written awaiting the encoder, embedded awaiting the indexes).",
        ),
    ] = 2,
    worker: Annotated[
        bool | None,
        typer.Option(
            "--worker/--no-worker",
            help="Write the batches (secret scan, digests, sealing, the store's transaction) in worker "
            "processes beside the indexing: one, or two from three cores up. Default: when there is a "
            "second core and the load is large enough to repay a worker's start.",
            show_default=False,
        ),
    ] = None,
    purpose: Annotated[str, typer.Option("--purpose", help="purpose_ref written in each payload.")] = "purpose:ingest",
    model: Annotated[
        bool, typer.Option("--model/--no-model", help="Load the embedding model (default: yes unless --vectors).")
    ] = True,
    context_turns: Annotated[
        int,
        typer.Option(
            "--context-turns",
            min=0,
            help="Attach up to N neighbouring turns on each side as context when a record is a conversation "
            "turn (id <conversation>:D<session>:<turn>); 0 = off.",
        ),
    ] = 0,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="A progress bar with records/s on stderr.")
    ] = True,
) -> None:
    """Ingest DATASET into TENANT/WORKSPACE; idempotent and resumable (rerun to finish).

    Ingest does not opt TENANT in: agents' calls are refused until `engram admin tenant enable TENANT`.
    Creates the data directory when it does not exist. The summary (JSON on stdout) names
    each refused record with its reason. Exit 0 when some record was ingested or already
    present; 1 when every record was refused, or another process holds the data
    directory; 2 for a corpus line that is not a document (the file and line named), a
    missing DATASET, or a store that cannot be opened.
    """
    import itertools

    from .worker_start import prepare_worker, uses_worker

    if uses_worker(None, worker):  # the size not known yet: it may be, and a spare core imports for it
        prepare_worker()  # the worker's imports run beside this process's

    from engram.service.cli import DataDirUse, command_settings
    from engram.service.engine import Engine
    from engram.service.store import SchemaTooNew, StoreUnavailable

    from .ingest import ingest_corpus
    from .readers import CorpusInvalid, VectorSource, count_lines, read_dataset, with_context

    if not dataset.exists():
        typer.echo(f"engram ingest: {dataset} does not exist", err=True)
        raise typer.Exit(2)
    try:  # the first document read before anything opens: a wrong file is refused at once
        documents = read_dataset(dataset)
        first = next(documents, None)
    except CorpusInvalid as exc:
        typer.echo(f"engram ingest: {exc}", err=True)
        raise typer.Exit(2) from None
    source = VectorSource.load(vectors) if vectors is not None else None
    settings = command_settings(
        use=DataDirUse.CREATES, data_dir=data_dir, database_url=database_url, key_dir=key_dir, device=device
    )
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    try:  # never a second engine beside a server (the process exit releases it on any path)
        lock = DataDirLock(settings.data_dir).acquire()
    except DirectoryHeld:
        typer.echo(
            f"engram ingest: another engram process (a server?) holds {settings.data_dir}; stop it first", err=True
        )
        raise typer.Exit(1) from None
    try:
        engine = Engine.open(
            settings.data_dir,
            load_model=model and source is None,
            store=settings.store_address(),
            key_dir=settings.key_dir,
            device=settings.device,
            model_cache=settings.model_cache_dir,
        )
    except (StoreUnavailable, SchemaTooNew) as exc:
        typer.echo(f"engram ingest: store unavailable: {exc or type(exc).__name__}", err=True)
        lock.release()
        raise typer.Exit(2) from None
    try:
        report = ingest_corpus(
            engine,
            (tenant, workspace),
            with_context(itertools.chain([first] if first is not None else [], documents), context_turns),
            vectors=source,
            batch_size=batch_size,
            depth=depth,
            progress=progress,
            purpose_ref=purpose,
            total=count_lines(dataset),
            worker=worker,
        )
        opted_in = engine.tenant_enabled(tenant)
    except CorpusInvalid as exc:  # the batches before the line are kept: rerun once it is fixed
        typer.echo(
            f"engram ingest: {exc}; the batches before it are stored (once it is fixed, a rerun skips them)",
            err=True,
        )
        raise typer.Exit(2) from None
    finally:
        engine.close()
        lock.release()
    typer.echo(json.dumps(report.as_dict(), indent=2))
    for refused in report.refused_records[:SHOWN_REFUSALS]:
        detail = f" ({refused.detail})" if refused.detail else ""
        typer.echo(f"engram ingest: refused {refused.id}: {refused.reason}{detail}", err=True)
    if len(report.refused_records) > SHOWN_REFUSALS:
        more = len(report.refused_records) - SHOWN_REFUSALS
        typer.echo(f"engram ingest: ... and {more} more refused (all in the summary's refused_records)", err=True)
    if not opted_in:  # ingest never opts a tenant in: that is the operator's own decision
        typer.echo(
            f"engram ingest: tenant {tenant!r} is not opted in, so agents' calls in its scopes are refused "
            f"(-32603) until `engram admin tenant enable {tenant}` (with the same store options)",
            err=True,
        )
    if report.seen and len(report.refused_records) == report.seen:
        typer.echo(f"engram ingest: every one of the {report.seen} records was refused", err=True)
        raise typer.Exit(1)
