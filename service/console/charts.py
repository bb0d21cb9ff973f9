"""The console's plots as Chart.js configurations built from the pages' figures.

Why here and not in the browser: a page carries its chart as JSON data (a
`<script type="application/json">` block, which a strict CSP allows, unlike inline
script), and `static/console.js` only hands it to Chart.js. Building the series in
Python keeps the pages' figures and their plots one computation.
"""

from __future__ import annotations

from typing import Any

Chart = dict[str, Any]


def _bars(labels: list[str], series: dict[str, list[Any]], *, stacked: bool = False, title: str = "") -> Chart:
    return {
        "type": "bar",
        "labels": labels,
        "datasets": [{"label": name, "data": values} for name, values in series.items()],
        "stacked": stacked,
        "title": title,
    }


def states(rows: list[dict[str, Any]]) -> Chart:
    """Records of each scope by lifecycle state, stacked."""
    names = sorted({state for row in rows for state in row["records"]})
    return _bars(
        [f"{row['tenant']}/{row['workspace']}" for row in rows],
        {state: [row["records"].get(state, 0) for row in rows] for state in names},
        stacked=True,
        title="records by state",
    )


def lag(rows: list[dict[str, Any]]) -> Chart:
    """Each scope's projection lag (journal events not applied yet) per channel."""
    channels = sorted({channel for row in rows for channel in row["lag"]})
    return _bars(
        [f"{row['tenant']}/{row['workspace']}" for row in rows],
        {channel: [row["lag"].get(channel, 0) for row in rows] for channel in channels},
        title="projection lag (events)",
    )


def error_rate(rate: dict[str, Any]) -> Chart:
    """Each error code's calls per minute."""
    return {
        "type": "line",
        "labels": rate["minutes"],
        "datasets": [{"label": code, "data": counts} for code, counts in rate["codes"].items()],
        "stacked": False,
        "title": "errors per minute",
    }


def contributions(result: dict[str, Any]) -> Chart:
    """Each candidate's final score and the parts it is made of."""
    rows = result["contributions"]
    parts = ("lexical_score", "semantic_similarity", "fused_score", "recency", "final_score")
    return _bars(
        [row["record_id"] for row in rows],
        {part: [row.get(part) for row in rows] for part in parts},
        title="per-candidate contributions",
    )


def ndcg(evaluation: dict[str, Any]) -> Chart:
    """nDCG@10 of each channel and baseline of one collection."""
    systems = evaluation["ndcg10"]
    return _bars(list(systems), {"nDCG@10": list(systems.values())}, title=f"nDCG@10, {evaluation['dataset']}")


def latency(benchmark: dict[str, Any], path: str) -> Chart:
    """One path's latency percentiles at each size of a benchmark run."""
    return _bars(
        [str(size) for size in benchmark["sizes"]],
        dict(benchmark["latency"][path]),
        title=f"{path} latency (ms) by size",
    )


def ingest(benchmark: dict[str, Any]) -> Chart:
    """Bulk ingest rate (records per second) at each size."""
    return _bars(
        [str(size) for size in benchmark["sizes"]],
        {"records/s": benchmark["ingest_records_per_s"]},
        title="ingest rate (records/s)",
    )
