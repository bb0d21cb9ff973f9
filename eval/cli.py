"""`engram eval`: relevance of the service's own search path on a BEIR collection.

Registered by ``service.cli`` as a plugin sub-app (``app``). Heavy imports (engine, torch,
pytrec_eval, matplotlib) happen inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Relevance evaluation (nDCG@10, recall@100, MRR@10) through engram_memory_search.",
    add_completion=False,
)


@app.command()
def eval_command(
    dataset: Annotated[
        Path, typer.Option("--dataset", help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/test.tsv).")
    ],
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            "-d",
            help="Root of the per-collection engine directories (the embedding cache); default: "
            "<ENGRAM_DATA_DIR, else the user's data directory>/eval.",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Output directory (default ./eval-out/<dataset>).")] = None,
    channels: Annotated[
        str,
        typer.Option(
            "--channels",
            help="Comma-separated: lexical,semantic,hybrid. With hybrid, naive RRF (k 60) of the same two "
            "channel lists also runs, as the baseline hybrid is tested against.",
        ),
    ] = "lexical,semantic,hybrid",
    split: Annotated[str, typer.Option("--split", help="Judge with qrels/<SPLIT>.tsv.")] = "test",
    context_turns: Annotated[
        int,
        typer.Option(
            "--context-turns",
            min=0,
            help="Ingest conversation turns with up to N neighbouring turns as context (own scope); 0 = off.",
        ),
    ] = 0,
    vectors: Annotated[
        Path | None,
        typer.Option(
            "--vectors", help="Precomputed passage vectors (.npz, as engram ingest --vectors) for the ingested texts."
        ),
    ] = None,
    save_hits: Annotated[
        bool,
        typer.Option(
            "--save-hits",
            help="Also write hits.json.gz: each judged query's lexical and semantic hits as fusion "
            "receives them (the input of engram fusion-fit).",
        ),
    ] = False,
    raw_anchors: Annotated[
        bool,
        typer.Option(
            "--raw-anchors",
            help="Also run exact MiniLM alone over title + text and the RRF (k 60) of its top 100 "
            "with raw BM25's (the data READMEs' anchors), and test hybrid against that RRF query by "
            "query (embeds every document once more). Raw BM25 and the FTS5 keyword peer run always.",
        ),
    ] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Ingest DATASET (or reuse it), run every judged query, write report.json/.md, full TREC
    run files (run.<channel>.trec, every rank returned) and plots. Each report carries a
    paired randomisation test of hybrid against each channel and against naive RRF. Queries
    that carry metadata.category in queries.jsonl are also reported per category (nDCG@10
    and recall@10 per run, the same paired tests within the category)."""
    from rich.console import Console

    from .extra import require_eval_extra

    require_eval_extra("eval")
    from .relevance import run_relevance
    from .report import markdown, write_outputs

    console = Console(stderr=True)
    if not (dataset / "corpus.jsonl").exists():
        typer.echo(f"engram eval: {dataset} is not a BEIR directory", err=True)
        raise typer.Exit(2)
    out = out or Path("./eval-out") / dataset.name
    if data_dir is None:
        from engram.service.settings import load_settings

        data_dir = load_settings().data_dir / "eval"
    chosen = [c.strip() for c in channels.split(",") if c.strip()]
    # One engine directory per collection: BM25 statistics are index-wide across scopes,
    # so collections sharing a lexical index would score each other's term counts.
    if not (dataset / "qrels" / f"{split}.tsv").exists():
        typer.echo(f"engram eval: {dataset} has no qrels/{split}.tsv", err=True)
        raise typer.Exit(2)
    report, details = run_relevance(
        dataset,
        data_dir / dataset.name,
        channels=chosen,
        progress=progress,
        split=split,
        context_turns=context_turns,
        vectors=vectors,
        save_hits=save_hits,
        raw_anchors=raw_anchors,
        log=lambda m: console.print(m, markup=False, highlight=False),
    )
    write_outputs(out, report, details)
    console.print(markdown(report), markup=False, highlight=False)
    console.print(f"wrote {out}/report.json, per_query.json, report.md and plots")
    typer.echo(json.dumps(report["channels"]))
