"""The `engram` command groups (typer apps) and the table of sub-commands other rooms
contribute; the command modules register themselves on these groups."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="engram",
    help="Governed, multi-tenant memory for AI agents, served over MCP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Plain click help (no rich panels): option help wraps to the terminal's width, as
    # wide as it allows, and flags show no value type.
    rich_markup_mode=None,
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


@app.callback()
def _prepare_process() -> None:
    """Before any sub-command: the process-wide settings of the native libraries
    (`engram.ranking.native.prepare_process`)."""
    from engram.ranking import prepare_process

    prepare_process()


#: Sub-commands other rooms contribute: name -> (module, help). One whose optional
#: dependencies (the `eval` extra) are missing is reported and left out; a module of the
#: project's own that fails to import is an error.
PLUGINS: dict[str, tuple[str, str]] = {
    "ingest": ("engram.index_data.cli", "Bulk-ingest corpora into memory."),
    "eval": ("engram.eval.cli", "Relevance evaluation runs and reports."),
    "bench": ("engram.eval.bench_cli", "Capacity and latency benchmarks."),
    "bench-ann": ("engram.eval.ann_cli", "HNSW engines (hnswlib, usearch) side by side on the same vectors."),
    "fusion-fit": ("engram.eval.fusion_cli", "Fit the fusion constants on saved hits, leave one collection out."),
    "locomo-enrich": ("engram.eval.locomo_cli", "LoCoMo in BEIR layout with its question categories and dates."),
}

#: Operator sub-commands other rooms contribute under `engram admin`, the same way.
ADMIN_PLUGINS: dict[str, tuple[str, str]] = {
    "export": ("engram.index_data.export", "Export a scope's current records (and vectors) for `engram ingest`."),
}
