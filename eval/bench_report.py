"""Writing a bench run down: ``report.md`` and its plots, from the run's result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_plots(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [e["size"] for e in result["sizes"]]
    if not sizes:
        return []
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, label in (
        ("engine_hybrid", "engine hybrid"),
        ("engine_lexical", "engine lexical"),
        ("raw_tantivy_candidates", "tantivy alone"),
        ("raw_hnsw_candidates", "hnsw alone"),
        ("raw_exact_scan_candidates", "scan alone"),
        ("raw_encoder_query", "encoder alone"),
    ):
        for pct, style in (("p50_ms", "-o"), ("p95_ms", "--x")):
            points = [(e["size"], e["latency"][name][pct]) for e in result["sizes"] if pct in e["latency"][name]]
            ax1.plot([x for x, _ in points], [y for _, y in points], style, label=f"{label} {pct[:3]}")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("records")
    ax1.set_ylabel("ms")
    ax1.set_title("search latency vs size")
    ax1.legend(fontsize=6)
    for part in ("store_mb", "lexical_mb", "semantic_mb", "total_mb"):
        ax2.plot(sizes, [e["disk_mb"][part] for e in result["sizes"]], "-o", label=part)
    ax2.plot(
        sizes,
        [e["rss_mb"]["peak_during_ingest"] for e in result["sizes"]],
        "--",
        label="bench-process peak RSS (ingest)",
    )
    served = [
        (e["size"], e["service_memory"]["peak_mb"]) for e in result["sizes"] if "peak_mb" in e.get("service_memory", {})
    ]
    if served:
        ax2.plot(*zip(*served), "-s", label="service peak RSS (engram serve alone)")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("records")
    ax2.set_ylabel("MiB")
    ax2.set_title("disk and memory vs size")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "cost_growth.png", dpi=120)
    plt.close(fig)
    return ["cost_growth.png"]


def bench_markdown(result: dict[str, Any], plots: list[str]) -> str:
    env = result["environment"]
    lines = [
        "# Capacity benchmark",
        "",
        f"{env['cpu_count']} CPUs, encoder {env['encoder']}, {env['queries_per_size']} queries per size. "
        "Synthetic corpus: Zipfian text, 300-topic low-rank 384-d vectors (eval/corpus_gen.py). "
        "Raw engines are asked for what the engine asks of them (candidate depths below); "
        "'raw sum' = encoder + Tantivy + the vector index (usearch) p50, searched as the engine searches it "
        "(semantic: a scan of every code, or the HNSW graph, then the exact rescoring), with the query "
        "encoder the engine uses (ONNX Runtime); 'graph sum' puts the HNSW graph search in it whatever the "
        "engine does; the torch columns put the torch encoder of the same weights in the raw sum instead.",
        "",
        "| records | ingest rec/s | raw bulk indexing rec/s | ingest / raw | raw one-field rec/s | ingest / raw "
        "one-field | hybrid p50/p95/p99 ms | "
        "lexical p50/p95/p99 ms | encoder p50 | "
        "torch encoder p50 | tantivy p50 | hnsw p50 | scan p50 | semantic | raw sum | hybrid / raw sum | "
        "hybrid / graph sum | hybrid / raw sum (torch) | R@10 (engine's ef) | disk MiB | bench-process peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in result["sizes"]:
        lat = e["latency"]

        def ppp(name: str, lat: dict = lat) -> str:
            v = lat[name]
            return f"{v['p50_ms']:.1f} / {v['p95_ms']:.1f} / {v['p99_ms']:.1f}"

        rec = e["hnsw_recall"].get(f"ef{e['hnsw_recall'].get('engine_ef')}", {}).get("recall@10", "-")
        ratios = e["ratios_p50"]
        lines.append(
            f"| {e['size']:,} | {e['ingest_records_per_s']:,.0f} | "
            f"{e.get('raw_bulk_index', {}).get('records_per_s', '-')} | {e.get('ingest_over_raw_bulk_index', '-')} | "
            f"{e.get('raw_passage_index', {}).get('records_per_s', '-')} | "
            f"{e.get('ingest_over_raw_passage_index', '-')} | "
            f"{ppp('engine_hybrid')} | {ppp('engine_lexical')} | "
            f"{lat['raw_encoder_query']['p50_ms']:.1f} | {lat['raw_torch_encoder_query'].get('p50_ms', '-')} | "
            f"{lat['raw_tantivy_candidates']['p50_ms']:.2f} | "
            f"{lat['raw_hnsw_candidates']['p50_ms']:.2f} | {lat['raw_exact_scan_candidates'].get('p50_ms', '-')} | "
            f"{'scan' if e['semantic_scan'] else 'graph'} | {ratios['raw_hybrid_sum_ms']:.1f} | "
            f"{ratios['engine_hybrid_over_raw_sum']} | {ratios['engine_hybrid_over_raw_sum_graph']} | "
            f"{ratios.get('engine_hybrid_over_raw_sum_torch', '-')} | {rec} | "
            f"{e['disk_mb']['total_mb']:,.0f} | {e['rss_mb']['peak_during_ingest']:,.0f} |"
        )
    if result["sizes"]:
        depths = result["sizes"][0]["depths"]
        lines += ["", f"Candidate depths: lexical {depths['lexical']}, semantic {depths['semantic']}."]
    for e in result["sizes"]:
        if e.get("corpus_size", e["size"]) != e["size"]:
            lines += [
                "",
                f"The ingest of a {e['corpus_size']:,}-record corpus was stopped (--ingest-for) at "
                f"{e['size']:,} records: that row measures those.",
            ]
    lines += service_memory_markdown(result["sizes"])
    lines += fresh_first_calls_markdown(result.get("fresh_first_calls", []))
    enc = result.get("encoder_bound_ingest")
    if enc:
        lines += [
            "",
            f"Encoder-bound ingest (real model embeds every record): {enc['records_per_s']} records/s on "
            f"{enc['records']} {enc['source']} ({enc['mean_words']} words, {enc['passages']} passages); "
            f"the encoder alone on the same passages: {enc['raw_encoder_records_per_s']} records/s "
            f"(ingest / encoder = {enc['ingest_over_raw_encoder']}; the encoder was busy "
            f"{enc['encoder_busy_share']:.0%} of the ingest). With the same vectors precomputed "
            f"(the pipeline's ceiling): {enc['precomputed_records_per_s']} records/s.",
        ]
    for e in result["sizes"]:
        rec = e["hnsw_recall"]
        if rec.get("aligned_labels"):
            scanned = (
                " The engine searches an index of this size by scanning every code; the graph's "
                "figures are for reference."
                if e.get("semantic_scan")
                else ""
            )
            lines += [
                "",
                f"HNSW recall@10 vs exact at {e['size']:,} (usearch, the engine's index: its int8 graph walked "
                f"at each ef, the candidates rescored from the float16 rows; {e['disk_mb']['semantic_mb']:,} MiB "
                "on disk): "
                + ", ".join(
                    f"{k} {v['recall@10']} ({v['ms_per_query_batched']} ms)"
                    for k, v in rec.items()
                    if k.startswith("ef")
                )
                + "."
                + scanned,
            ]
        beside = e.get("hnswlib_beside")
        if beside:
            lines += [
                "",
                f"hnswlib over the same vectors at {e['size']:,} (M {beside['m']}, ef_construction "
                f"{beside['ef_construction']}, float32, built in {beside['build_s']} s, "
                f"{beside['index_mb']:,} MiB): "
                + ", ".join(
                    f"{k} {v['recall@10']} ({v['ms_per_query_batched']} ms)" for k, v in beside["recall"].items()
                ),
            ]
    for e in result["sizes"]:
        per = e.get("store_bytes_per_record")
        if per:
            lines += [
                "",
                f"Store bytes per record at {e['size']:,}: {per['total']:,} in all, {per['beyond_text']:,} "
                f"beyond the record's {per['text']:,} bytes of text; by table (indexes included): "
                + ", ".join(f"{name} {b:,}" for name, b in per["tables"].items()),
            ]
    load = result.get("load")
    if load:
        first = result["sizes"][0]["ratios_p50"] if result["sizes"] else {}
        for name, label, key in (
            ("single_client_search_hybrid", "SDK client", "mcp_hybrid"),
            ("bare_http_search_hybrid", "bare HTTP client", "bare_http_hybrid"),
        ):
            if f"{key}_over_raw_sum" in first:
                sample = load[name]
                lines += [
                    "",
                    f"MCP over HTTP, one {label}, hybrid search: p50 {sample['p50_ms']:.1f} ms, "
                    f"p99 {sample['p99_ms']:.1f} ms; {first[f'{key}_over_raw_sum']} x the raw engines' "
                    f"sum, {first[f'{key}_over_engine']} x the engine's own hybrid p50.",
                ]
        if load.get("bare_http_server_cpu_ms_per_search") is not None:
            lines += [
                "",
                f"Server CPU per hybrid search (the bare HTTP client's calls, every thread of the "
                f"serving process): {load['bare_http_server_cpu_ms_per_search']:.2f} ms.",
            ]
        lines += ["", "## Load run"]
        if "server_cpu_ms_per_call" in load:
            lines += [
                "",
                f"{load['clients']} MCP SDK clients (one child process) against the server (this "
                f"process): {load['throughput_calls_per_s']} calls/s. CPU per call: server "
                f"{load['server_cpu_ms_per_call']} ms, clients {load['client_cpu_ms_per_call']} ms; at that "
                f"cost this machine's {result['environment']['cpu_count']} CPUs carry at most "
                f"{load['cpu_bound_calls_per_s']} calls/s, server and clients together.",
            ]
        lines += ["", "```", json.dumps(load, indent=1), "```"]
    for plot in plots:
        lines += ["", f"![{plot}]({plot})"]
    return "\n".join(lines) + "\n"


def service_memory_markdown(sizes: list[dict[str, Any]]) -> list[str]:
    """The service-alone memory rows (``engram serve`` on each size's directory)."""
    rows = [e for e in sizes if e.get("service_memory")]
    if not rows:
        return []
    lines = [
        "",
        "The service alone (`engram serve` on the size's directory, nothing else in the process; "
        "the bench-process column above also holds the model twice, earlier sizes and the vector file): "
        "resident MiB (anonymous + file-backed) after /readyz and after the searches, and its peak.",
        "",
        "| records | ready s | RSS after ready | RSS after searches | peak RSS | searches answered |",
        "|---|---|---|---|---|---|",
    ]
    for e in rows:
        mem = e["service_memory"]
        if "skipped" in mem:
            lines.append(f"| {e['size']:,} | skipped: {mem['skipped'][:120]} | | | | |")
            continue

        def rss(at: dict[str, float]) -> str:
            return f"{at['rss_mb']:,.0f} ({at['anon_mb']:,.0f} + {at['file_mb']:,.0f})"

        searches = mem["searches"]
        lines.append(
            f"| {e['size']:,} | {mem['ready_s']} | {rss(mem['after_ready'])} | {rss(mem['after_searches'])} | "
            f"{mem['peak_mb']:,.0f} | {searches['answered']} / {searches['asked']} "
            f"({mem['searches_profile']}) |"
        )
    return lines + first_calls_markdown(rows)


FIRST_CALL_NAMES = (
    ("search", "search"),
    ("capture", "capture"),
    ("request_admission", "admission"),
    ("search_after_admission", "search after an admission"),
)


def first_calls_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """Each tool's first call after /readyz against its later ones (the same lone server)."""
    timed = [e for e in rows if e["service_memory"].get("first_calls")]
    if not timed:
        return []
    lines = [
        "",
        "First calls after /readyz (the same server, one client, one call at a time): the first call "
        "of each kind, then the median and the slowest of the later ones, ms.",
        "",
        *_first_calls_header(FIRST_CALL_NAMES),
    ]
    for e in timed:
        lines.append(f"| {e['size']:,} | " + _first_calls_cells(e["service_memory"]["first_calls"], FIRST_CALL_NAMES))
    return lines


def fresh_first_calls_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The same table on fresh data directories (:func:`eval.bench.fresh_first_calls`), with ready s."""
    if not rows:
        return []
    names = FIRST_CALL_NAMES[1:]  # no searches before the first capture there
    lines = [
        "",
        "First calls after /readyz on a fresh data directory (`engram admin tenant enable`, then "
        "`engram serve`; the empty scope is created by the first capture, the scope of 10 records was "
        "admitted through the engine before the server started; the empty case's ready s include the "
        "query encoder's export): the first call of each kind, then the median and the slowest of the "
        "later ones, ms.",
        "",
        *_first_calls_header(names, first="scope records | ready s"),
    ]
    for e in rows:
        mem = e["service_memory"]
        if "skipped" in mem:
            lines.append(f"| {e['records']} | skipped: {mem['skipped'][:120]} |" + " |" * len(names))
            continue
        lines.append(f"| {e['records']} | {mem['ready_s']} | " + _first_calls_cells(mem.get("first_calls", {}), names))
    return lines


def _first_calls_header(names: tuple[tuple[str, str], ...], first: str = "records") -> list[str]:
    return [
        "| " + first + " | " + " | ".join(f"{label}: first / later p50 / later max" for _, label in names) + " |",
        "|---" * (first.count("|") + 1) + "|" + "---|" * len(names),
    ]


def _first_calls_cells(first: dict[str, Any], names: tuple[tuple[str, str], ...]) -> str:
    return (
        " | ".join(
            f"{f['first_ms']} / {f['later_p50_ms']} / {f['later_max_ms']}" if (f := first.get(name)) else "-"
            for name, _ in names
        )
        + " |"
    )
