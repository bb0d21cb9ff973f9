"""`engram bench`: capacity and latency benchmark on synthetic corpora.

Registered by ``service.cli`` as a plugin sub-app (``app``); heavy imports inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Capacity benchmark: ingest rate, search latency, raw engines, RSS, disk, HNSW recall, load.",
    add_completion=False,
)


@app.command()
def bench(
    sizes: Annotated[str, typer.Option("--sizes", help="Comma-separated corpus sizes.")] = "10000,100000",
    out: Annotated[Path, typer.Option("--out", help="Output directory (bench.json, report.md, plots).")] = Path(
        "./bench-out"
    ),
    work: Annotated[Path | None, typer.Option("--work", help="Scratch directory for data (default OUT/work).")] = None,
    queries: Annotated[
        int, typer.Option("--queries", min=10, help="Search queries timed per size (synthetic, drawn like the corpus).")
    ] = 200,
    clients: Annotated[int, typer.Option("--clients", min=1, help="Concurrent MCP clients in the load run.")] = 8,
    calls: Annotated[
        int,
        typer.Option(
            "--calls", min=1, help="Client steps in the load run, in all (a capture step also requests admission)."
        ),
    ] = 400,
    load: Annotated[bool, typer.Option("--load/--no-load", help="Run the MCP-over-HTTP load run.")] = True,
    with_console: Annotated[
        bool,
        typer.Option(
            "--console/--no-console",
            help="Run the load run again with the operator console served and polled as an open page polls "
            "it, then once more without (bench.json: load, load_with_console, load_again).",
        ),
    ] = False,
    encoder_sample: Annotated[
        int,
        typer.Option(
            "--encoder-sample",
            min=0,
            help="Records of real text ingested with the real model, against the encoder alone (0 skips).",
        ),
    ] = 256,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", min=1, help="Records per ingest transaction (default: size/20, 1,000 to 20,000)."),
    ] = None,
    keep: Annotated[bool, typer.Option("--keep/--no-keep", help="Keep the scratch data.")] = False,
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse/--no-reuse",
            help="Measure again on sizes already ingested in the scratch directory (implies --keep).",
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume/--no-resume",
            help="Continue an ingest that a stopped run left in the scratch directory, from the chunk of the corpus "
            "where the records it stored end; the ingest rate is this run's (implies --keep).",
        ),
    ] = False,
    ingest_for: Annotated[
        float | None,
        typer.Option(
            "--ingest-for",
            min=0,
            metavar="MINUTES",
            help="Stop feeding each size's ingest after this many minutes: what was stored is indexed, checkpointed "
            "and measured as that size (reported as stopped_at), and a later --resume continues it with nothing to "
            "embed again. For a corpus larger than one sitting (implies --keep).",
        ),
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bars while ingesting.")] = True,
    hnswlib_up_to: Annotated[
        int,
        typer.Option(
            "--hnswlib-up-to",
            min=0,
            help="At sizes up to this, also build hnswlib (the engine before usearch) over the same vectors and report "
            "its recall@10, ms and bytes beside the engine's index (0: never; needs the eval extra).",
        ),
    ] = 100_000,
    raw_bulk: Annotated[
        bool,
        typer.Option(
            "--raw-bulk/--no-raw-bulk",
            help="After each size's ingest, have the raw engines (Tantivy, usearch) index the same batches alone and "
            "report the ingest's rate against theirs. Skip it on a very large size: it takes about as long again.",
        ),
    ] = True,
    service_searches: Annotated[
        int,
        typer.Option(
            "--service-searches",
            min=0,
            help="After each size, start `engram serve` alone on its directory and report that process's resident "
            "memory after ready, after this many searches, and its peak (0: skip).",
        ),
    ] = 100,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh/--no-fresh",
            help="Also time each tool's first call after /readyz on fresh data directories (a new user's: an empty "
            "scope, and a scope of 10 records) against the next ones.",
        ),
    ] = True,
    soak: Annotated[
        float,
        typer.Option(
            "--soak",
            min=0,
            help="Instead of the capacity run: a soak of this many seconds. The first size is ingested, "
            "`engram serve` started on it alone, and --clients hosts drive mixed load (searches, gets, captures "
            "with their admissions, forgets): memory and open files at the start and end, p50/p99 per window, "
            "errors that are not retriable codes, every acknowledged admission read back (OUT/soak.json, "
            "OUT/soak.md). 0: no soak.",
        ),
    ] = 0.0,
    soak_window: Annotated[
        float, typer.Option("--soak-window", min=1, help="Seconds per latency window of the soak.")
    ] = 300.0,
    soak_forgets: Annotated[
        bool,
        typer.Option(
            "--soak-forgets/--no-soak-forgets",
            help="Whether the soak's clients forget; without, the same mix less its forgets (what forgets cost).",
        ),
    ] = True,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="ENGRAM_DATABASE_URL",
            help="Also compare stores at the first size: ingest rate and hybrid p50/p99 on SQLite, and on this "
            "PostgreSQL database with one replica and with two; with --load, also the load run against "
            "`engram serve --workers` 1 and 2 on it (OUT/stores.json). Use an empty database for each run: its "
            "key files stay in the scratch directory.",
        ),
    ] = None,
    worker_counts: Annotated[
        str | None,
        typer.Option(
            "--worker-counts",
            help="With --database-url and the load run: the `engram serve --workers N` servers started in turn, "
            "comma-separated N [default: 1,2,2,1].",
            show_default=False,
        ),
    ] = None,
    client_processes: Annotated[
        int,
        typer.Option(
            "--client-processes",
            min=1,
            help="Processes the --workers load run's clients are split over (one process tops out at one core: "
            "on a machine of many cores, give many workers several).",
        ),
    ] = 1,
) -> None:
    """Run the benchmark for each size and write OUT/bench.json, OUT/report.md, OUT/cost_growth.png."""
    import shutil

    from rich.console import Console

    from .extra import require_eval_extra

    require_eval_extra("bench")
    from .bench import run_bench

    console = Console(stderr=True)
    size_list = [int(s.replace("_", "")) for s in sizes.split(",") if s.strip()]
    counts = _counts(worker_counts) if worker_counts else None
    scratch = work or out / "work"
    say = lambda m: console.print(m, markup=False, highlight=False)  # noqa: E731
    if soak:
        from .soak import run_soak

        try:
            run_soak(
                size_list[0],
                out,
                scratch,
                seconds=soak,
                window_s=soak_window,
                forgets=soak_forgets,
                clients=clients,
                batch_size=batch_size,
                progress=progress,
                say=say,
            )
        finally:
            if not keep:
                shutil.rmtree(scratch, ignore_errors=True)
        console.print((out / "soak.md").read_text(), markup=False)
        return
    try:
        result = run_bench(
            size_list,
            out,
            scratch,
            queries=queries,
            clients=clients,
            calls=calls,
            encoder_sample=encoder_sample,
            batch_size=batch_size,
            progress=progress,
            load=load,
            reuse=reuse,
            hnswlib_up_to=hnswlib_up_to,
            raw_bulk=raw_bulk,
            service_searches=service_searches,
            fresh=fresh,
            say=say,
            resume=resume,
            ingest_minutes=ingest_for,
            console=with_console,
        )
        if database_url:
            import json

            from engram.ranking import MiniLMEncoder

            from .replica_bench import WorkersLoad, replica_bench

            encoder = MiniLMEncoder(scratch / "models")
            stores = replica_bench(
                size_list[0],
                scratch,
                encoder,
                database_url,
                queries=queries,
                batch_size=batch_size,
                say=say,
                workers_load=WorkersLoad(
                    clients,
                    calls,
                    scratch / "models",
                    **({"worker_counts": counts} if counts else {}),
                    client_processes=client_processes,
                )
                if load
                else None,
            )
            stores["loadavg"] = result["environment"]["loadavg_at_start"]
            (out / "stores.json").write_text(json.dumps(stores, indent=2) + "\n")
    finally:
        if not (keep or reuse or resume or ingest_for is not None):
            shutil.rmtree(scratch, ignore_errors=True)
    console.print((out / "report.md").read_text() if (out / "report.md").exists() else "no report", markup=False)


def _counts(text: str) -> tuple[int, ...]:
    """``--worker-counts``: comma-separated positive integers."""
    try:
        counts = tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise typer.BadParameter(f"expected comma-separated worker counts such as 1,2,2,1, got {text!r}")
    return counts
