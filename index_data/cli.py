"""`engram ingest`: bulk-load a BEIR collection or a record JSONL file into one scope.

Registered by ``service.cli`` as a plugin sub-app (``app``); heavy imports (engine, torch)
happen inside the command so ``engram --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    help="Bulk-ingest a corpus (BEIR directory or record JSONL) as accepted records.",
    invoke_without_command=True,
    no_args_is_help=True,
    add_completion=False,
    # A group that is really one command: let options follow the positional argument.
    context_settings={"allow_interspersed_args": True},
)


@app.callback(invoke_without_command=True)
def ingest(
    dataset: Annotated[Path, typer.Argument(help="BEIR directory (corpus.jsonl) or record JSONL file.")],
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", envvar="ENGRAM_DATA_DIR",
                                           help="Engine data directory.")] = Path("./data"),
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant of the target scope.")] = "default",
    workspace: Annotated[str, typer.Option("--workspace", help="Workspace of the target scope.")] = "default",
    vectors: Annotated[Optional[Path], typer.Option(
        "--vectors", help=".npy (one row per document) or .npz (vectors + offsets per passage).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Records per store transaction.")] = 512,
    purpose: Annotated[str, typer.Option("--purpose", help="purpose_ref written in each payload.")] = "purpose:ingest",
    model: Annotated[bool, typer.Option("--model/--no-model",
                                        help="Load the embedding model (default: yes unless --vectors).")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Ingest DATASET into TENANT/WORKSPACE; idempotent and resumable (rerun to finish)."""
    from service.engine.engine import Engine
    from service.operator.ownership import DataDirLock, DirectoryHeld

    from .ingest import ingest_corpus
    from .readers import VectorSource, count_lines, read_dataset

    if not dataset.exists():
        typer.echo(f"engram ingest: {dataset} does not exist", err=True)
        raise typer.Exit(2)
    source = VectorSource.load(vectors) if vectors is not None else None
    try:
        lock = DataDirLock(data_dir).acquire()  # never a second engine beside a server
    except DirectoryHeld:
        typer.echo(f"engram ingest: another engram process (a server?) holds {data_dir}; stop it first", err=True)
        raise typer.Exit(1) from None
    try:
        engine = Engine.open(data_dir, load_model=model and source is None)
        try:
            report = ingest_corpus(
                engine, (tenant, workspace), read_dataset(dataset), vectors=source,
                batch_size=batch_size, progress=progress, purpose_ref=purpose, total=count_lines(dataset),
            )
        finally:
            engine.close()
    finally:
        lock.release()
    typer.echo(json.dumps(report.as_dict(), indent=2))
