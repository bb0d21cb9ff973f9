"""`engram locomo-enrich`: a LoCoMo BEIR copy with LoCoMo's question categories and
session dates (:mod:`eval.locomo`), written outside the repository.

Registered by ``service.cli`` as a plugin sub-app (``app``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Enrich a LoCoMo conversation in BEIR layout with LoCoMo's own question categories "
    "(metadata.category) and session dates (metadata.valid_time), for engram eval.",
    add_completion=False,
)

#: The checkout this module runs from: LoCoMo's licence is non-commercial, so no copy of
#: its text is written inside the repository.
REPOSITORY = Path(__file__).resolve().parents[1]


@app.command()
def locomo_enrich(
    locomo: Annotated[
        list[Path],
        typer.Option(
            "--locomo",
            help="LoCoMo's locomo10.json (a list of conversations) or one conversation's JSON; repeatable.",
        ),
    ],
    beir: Annotated[
        Path,
        typer.Option("--beir", help="A LoCoMo conversation in BEIR layout, or a folder of them (locomo-dev)."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Where the enriched copy is written (outside the repository).")],
) -> None:
    """Copy BEIR into OUT, adding each turn's session date as metadata.valid_time and each
    question's LoCoMo category (single-hop, multi-hop, temporal, open-domain, adversarial)
    as metadata.category. A conversation is paired with the LoCoMo sample whose questions
    its queries are."""
    from engram.eval.locomo import EnrichError

    from .locomo import enrich, read_samples

    missing = [str(p) for p in (*locomo, beir) if not p.exists()]
    if missing:
        typer.echo(f"engram locomo-enrich: no such file or folder: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    if out.resolve().is_relative_to(REPOSITORY):
        typer.echo(f"engram locomo-enrich: {out} is inside the repository; LoCoMo's licence keeps it out", err=True)
        raise typer.Exit(2)
    try:
        written = enrich(read_samples(locomo), beir, out)
    except EnrichError as exc:
        typer.echo(f"engram locomo-enrich: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"wrote {', '.join(written)} into {out}")
