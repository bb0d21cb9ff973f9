"""`engram admin export`: a scope's current records as the record JSONL `engram ingest` reads.

Each line is ``{"id", "text", "payload", "evidence", "retention"}`` (``text`` is the
primary component, for people and other tools; ``payload`` is what an import loads).
With ``--vectors`` the records' indexed passage vectors go beside it as an ``.npz``
(``vectors`` + ``offsets``, one row per passage window, aligned with the lines), which
``engram ingest OUT --vectors OUT.npz`` takes as precomputed vectors. An import is a new
operator decision: the records get the importing operator's receipts and new record ids
(bound to the exported ids), and answer the same searches.

Registered by ``service.cli`` under ``engram admin``; heavy imports happen inside the
command so ``engram --help`` stays fast. Like every admin command it runs where it is
safe: in the live server that owns the data directory (through its operator channel,
where :func:`operator_export` is contributed to the command table), or, with no server,
on an engine opened under the directory's lock.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Annotated, Any, BinaryIO, cast

import typer

from engram.models.scope import Scope
from engram.service.settings import field_help

app = typer.Typer(
    help="Export a scope's current records as record JSONL (and vectors) for `engram ingest`.",
    add_completion=False,
)


def vectors_path(out: Path) -> Path:
    """Where the vectors of an export to ``out`` go: beside it, suffix ``.npz``."""
    return out.with_suffix(".npz")


def _private(path: Path, mode: str) -> IO[Any]:
    """A file opened for writing, owner-only from the first byte (records are content)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), mode)


def write_export(engine: Any, scope: Scope, out: Path, *, vectors: bool = False) -> dict[str, Any]:
    """Write the export of ``scope`` to ``out`` (and its vectors beside it); the summary.

    Lines and vectors stream: passage rows go to a scratch file as records come, and the
    ``.npz`` is written from it memory-mapped, so a large scope never sits in memory."""
    import numpy as np

    from .readers import VectorSource

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    scratch = out.with_name(out.name + ".vectors.partial")
    offsets, dim, count = [0], 384, 0
    try:
        with _private(partial, "w") as lines, _private(scratch, "wb") if vectors else contextlib.nullcontext() as rows:
            for record in engine.operator.export_records(scope, vectors=vectors):
                primary = next(
                    c["text"]
                    for c in record.payload["components"]
                    if c["component_id"] == record.payload["primary_component_id"]
                )
                lines.write(
                    json.dumps(
                        {
                            "id": record.record_id,
                            "text": primary,
                            "payload": record.payload,
                            "evidence": record.evidence,
                            "retention": record.retention,
                        },
                        ensure_ascii=False,
                        sort_keys=True,
                    )
                    + "\n"
                )
                if rows is not None:
                    block = np.ascontiguousarray(record.vectors, dtype=np.float32)
                    dim = block.shape[1]
                    rows.write(block.tobytes())
                    offsets.append(offsets[-1] + len(block))
                count += 1
        summary: dict[str, Any] = {"scope": list(scope), "records": count, "out": str(out)}
        if vectors:
            passages = offsets[-1]
            matrix = (
                np.memmap(scratch, dtype=np.float32, mode="r", shape=(passages, dim))
                if passages
                else np.zeros((0, dim), dtype=np.float32)
            )
            target = vectors_path(out)
            with _private(target, "wb") as handle:
                VectorSource(matrix, np.asarray(offsets, dtype=np.int64)).save(cast(BinaryIO, handle))
            del matrix
            summary["vectors"] = str(target)
            summary["passages"] = passages
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        scratch.unlink(missing_ok=True)
    partial.replace(out)
    return summary


def operator_export(engine: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The operator command: ``args`` holds tenant, workspace, out (absolute) and vectors."""
    return write_export(
        engine, (str(args["tenant"]), str(args["workspace"])), Path(args["out"]), vectors=bool(args.get("vectors"))
    )


@app.command()
def export(
    tenant: Annotated[str, typer.Argument(help="Tenant of the scope to export.")],
    workspace: Annotated[str, typer.Argument(help="Workspace of the scope to export.")],
    out: Annotated[Path, typer.Argument(help="Record JSONL file to write (replaced if present).")],
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", "-d", help=field_help("data_dir"), show_default=False)
    ] = None,
    vectors: Annotated[
        bool,
        typer.Option(
            "--vectors/--no-vectors",
            help="Also write each record's indexed passage vectors to OUT with suffix .npz "
            "(for `engram ingest OUT --vectors OUT.npz`).",
        ),
    ] = False,
) -> None:
    """Write TENANT/WORKSPACE's current records to OUT as record JSONL (the store is the
    one `engram admin --database-url/--key-dir` name, as for every admin command). With a
    server running on the data directory, the server writes the files."""
    from engram.service.cli import run_operator_command

    summary = run_operator_command(
        data_dir, "export", {"tenant": tenant, "workspace": workspace, "out": str(out.resolve()), "vectors": vectors}
    )
    typer.echo(json.dumps(summary, indent=2))
