"""`engram fusion-fit`: fit the hybrid profile's fusion constants, leave one collection out.

Registered by ``service.cli`` as a plugin sub-app (``app``); heavy imports inside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Fit the fusion constants on saved hits, leave one collection out.",
    invoke_without_command=True,
    no_args_is_help=True,
    add_completion=False,
    context_settings={"allow_interspersed_args": True},
)


@app.callback(invoke_without_command=True)
def fusion_fit(
    hits: Annotated[
        list[Path],
        typer.Option(
            "--hits",
            help="A hits.json.gz written by engram eval --save-hits; repeat once per collection "
            "(a collection and its +ctxN ingest are held out together).",
        ),
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Write fit.json and fit.md into this directory (default: print only).")
    ] = None,
    step: Annotated[
        float,
        typer.Option(
            "--step", min=0.01, max=0.25, help="Spacing of the fixed lexical weights each query is scored at."
        ),
    ] = 0.05,
) -> None:
    """Fit lexical_norm_power, base_lexical_weight and confidence_gain of the hybrid profile with
    leave-one-collection-out validation, and print each held-out collection's nDCG@10 beside the
    current profile's."""
    from .extra import require_eval_extra

    require_eval_extra("fusion-fit")
    from .fusion_fit import fit, load_hits, markdown

    missing = [str(p) for p in hits if not p.is_file()]
    if missing:
        typer.echo(f"engram fusion-fit: no such hits file: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    report = fit([load_hits(p) for p in hits], step=step)
    text = markdown(report)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "fit.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "fit.md").write_text(text)
    typer.echo(text)
