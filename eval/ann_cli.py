"""`engram bench-ann`: hnswlib against usearch on the same vectors (see :mod:`eval.ann_compare`).

Registered by ``service.cli`` as a plugin sub-app (``app``); heavy imports inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="HNSW engines (hnswlib, usearch) side by side on the same vectors.",
    invoke_without_command=True,
    add_completion=False,
)


def _ints(text: str) -> list[int]:
    return [int(s.replace("_", "")) for s in text.split(",") if s.strip()]


@app.callback(invoke_without_command=True)
def bench_ann(
    sizes: Annotated[
        str,
        typer.Option(
            "--sizes", help="Comma-separated synthetic set sizes (eval/corpus_gen.py vectors); empty for none."
        ),
    ] = "100000",
    real: Annotated[
        list[Path],
        typer.Option(
            "--real",
            help="Precomputed .npz vector files (as for `engram eval --vectors`), concatenated into one "
            "'real' set with all their queries; repeatable.",
        ),
    ] = [],  # noqa: B006
    m: Annotated[str, typer.Option("--m", help="Comma-separated graph connectivities (M) to build.")] = "16,32",
    ef: Annotated[
        str, typer.Option("--ef", help="Comma-separated search expansions (ef) to query each index at.")
    ] = "64,128,256",
    dtypes: Annotated[
        str, typer.Option("--dtypes", help="Comma-separated usearch storage types (f32, f16, i8); hnswlib stores f32.")
    ] = "f32,f16,i8",
    ef_construction: Annotated[
        int, typer.Option("--ef-construction", min=8, help="Insertion expansion for every build.")
    ] = 200,
    queries: Annotated[
        int,
        typer.Option(
            "--queries", min=10, help="Queries per synthetic set (the real set uses every query of its files)."
        ),
    ] = 500,
    hnswlib: Annotated[
        bool,
        typer.Option(
            "--hnswlib/--no-hnswlib",
            help="Build hnswlib indexes beside usearch's (--no-hnswlib: usearch alone, e.g. at sizes where "
            "an hnswlib build takes too long).",
        ),
    ] = True,
    threads: Annotated[
        int, typer.Option("--threads", min=0, help="Build threads (0: every CPU this process may use).")
    ] = 0,
    out: Annotated[Path, typer.Option("--out", help="Output directory (ann.json, ann.md).")] = Path("./bench-ann"),
) -> None:
    """Build each index in its own child process and write OUT/ann.json and OUT/ann.md."""
    from .ann_compare import default_threads, markdown, run

    rows = run(
        _ints(sizes),
        list(real),
        _ints(m),
        _ints(ef),
        [d.strip() for d in dtypes.split(",") if d.strip()],
        ef_construction,
        queries,
        out,
        threads or default_threads(),
        say=lambda s: typer.echo(s, err=True),
        hnswlib=hnswlib,
    )
    typer.echo(markdown(rows))
