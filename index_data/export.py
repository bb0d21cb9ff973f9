"""`engram admin export`: a scope's current records as the record JSONL `engram ingest` reads.

Each line is ``{"id", "text", "payload", "evidence", "retention"}`` (``text`` is the
primary component, for people and other tools; ``payload`` is what an import loads).
With ``--vectors`` the records' indexed passage vectors go beside it as an ``.npz``
(``vectors`` + ``offsets``, one row per passage window, aligned with the lines), which
``engram ingest OUT --vectors OUT.npz`` takes as precomputed vectors. An import is a new
operator decision: the records get the importing operator's receipts and new record ids
(bound to the exported ids), and answer the same searches.

Registered by ``service.cli`` under ``engram admin``; heavy imports happen inside the
command so ``engram --help`` stays fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Export a scope's current records as record JSONL (and vectors) for `engram ingest`.",
    invoke_without_command=True,
    no_args_is_help=True,
    add_completion=False,
    context_settings={"allow_interspersed_args": True},
)


def vectors_path(out: Path) -> Path:
    """Where the vectors of an export to ``out`` go: beside it, suffix ``.npz``."""
    return out.with_suffix(".npz")


def write_export(engine: Any, scope: tuple[str, str], out: Path, *, vectors: bool = False) -> dict[str, Any]:
    """Write the export of ``scope`` to ``out`` (and its vectors beside it); the summary."""
    import numpy as np

    from .readers import VectorSource

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[np.ndarray] = []
    offsets = [0]
    partial = out.with_name(out.name + ".partial")
    # Records are content: owner-only from the first byte, like the data directory.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count = _write_lines(engine, scope, fd, rows, offsets, vectors)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    summary: dict[str, Any] = {"scope": list(scope), "records": count, "out": str(out)}
    if vectors:
        dim = rows[0].shape[1] if rows else 384
        matrix = np.vstack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
        target = vectors_path(out)
        VectorSource(matrix, np.asarray(offsets, dtype=np.int64)).save(target)
        os.chmod(target, 0o600)
        summary["vectors"] = str(target)
        summary["passages"] = int(len(matrix))
    partial.replace(out)
    return summary


def _write_lines(engine: Any, scope: tuple[str, str], fd: int, rows: list[Any], offsets: list[int],
                 vectors: bool) -> int:
    count = 0
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        for record in engine.export_records(scope, vectors=vectors):
            primary = next(c["text"] for c in record.payload["components"]
                           if c["component_id"] == record.payload["primary_component_id"])
            handle.write(json.dumps({"id": record.record_id, "text": primary, "payload": record.payload,
                                     "evidence": record.evidence, "retention": record.retention},
                                    ensure_ascii=False, sort_keys=True) + "\n")
            if vectors:
                rows.append(record.vectors)
                offsets.append(offsets[-1] + len(record.vectors))
            count += 1
    return count


@app.callback(invoke_without_command=True)
def export(
    tenant: Annotated[str, typer.Argument(help="Tenant of the scope to export.")],
    workspace: Annotated[str, typer.Argument(help="Workspace of the scope to export.")],
    out: Annotated[Path, typer.Argument(help="Record JSONL file to write (replaced if present).")],
    data_dir: Annotated[Path, typer.Option("--data-dir", "-d", envvar="ENGRAM_DATA_DIR",
                                           help="Engine data directory.")] = Path("./data"),
    vectors: Annotated[bool, typer.Option(
        "--vectors/--no-vectors",
        help="Also write each record's indexed passage vectors to OUT with suffix .npz "
             "(for `engram ingest OUT --vectors OUT.npz`).")] = False,
) -> None:
    """Write TENANT/WORKSPACE's current records to OUT as record JSONL."""
    from models.codes import ContractError
    from service.engine.engine import Engine
    from service.operator.ownership import DataDirLock, DirectoryHeld

    if not data_dir.is_dir():
        typer.echo(f"engram admin export: {data_dir} is not a data directory", err=True)
        raise typer.Exit(2)
    try:
        lock = DataDirLock(data_dir).acquire()  # never a second engine beside a server
    except DirectoryHeld:
        typer.echo(f"engram admin export: another engram process (a server?) holds {data_dir}; stop it first",
                   err=True)
        raise typer.Exit(1) from None
    engine = Engine.open(data_dir, load_model=False)
    try:
        summary = write_export(engine, (tenant, workspace), out, vectors=vectors)
    except ContractError as exc:
        typer.echo(f"engram admin export: {exc.code.value}: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.close()
        lock.release()
    typer.echo(json.dumps(summary, indent=2))
