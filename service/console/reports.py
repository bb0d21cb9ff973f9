"""The reports `engram eval` and `engram bench` wrote, reduced to what the console plots.

Why: both commands leave JSON beside their markdown (`report.json` per collection,
`bench.json` per run), readable only by opening the files. The operator names the
directories holding them (`console_reports`); each report found under them becomes
series for a chart: nDCG@10 per channel and baseline with the paired tests, latency
percentiles per path and size, the ratios to the raw engines, and the ingest rate.
These files hold figures only, never memory content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EVAL_FILE = "report.json"
BENCH_FILE = "bench.json"
#: How deep below a named directory reports are looked for.
MAX_DEPTH = 3
PERCENTILES = ("p50_ms", "p95_ms", "p99_ms")


def _found(root: Path, name: str) -> list[Path]:
    return sorted(p for p in root.rglob(name) if len(p.relative_to(root).parts) <= MAX_DEPTH + 1)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _evaluation(path: Path, report: dict[str, Any]) -> dict[str, Any]:
    systems = {**report.get("channels", {}), **report.get("baselines", {})}
    return {
        "path": str(path),
        "dataset": str(report.get("dataset", path.parent.name)),
        "queries": report.get("queries"),
        "ndcg10": {name: metrics.get("ndcg@10") for name, metrics in systems.items() if isinstance(metrics, dict)},
        "significance": report.get("significance", {}),
    }


def _benchmark(path: Path, report: dict[str, Any]) -> dict[str, Any]:
    sizes = [s for s in report.get("sizes", []) if isinstance(s, dict)]
    paths = sorted({name for s in sizes for name in s.get("latency", {})})
    return {
        "path": str(path),
        "sizes": [s.get("size") for s in sizes],
        "latency": {
            name: {p: [s.get("latency", {}).get(name, {}).get(p) for s in sizes] for p in PERCENTILES} for name in paths
        },
        "ratios_p50": [s.get("ratios_p50", {}) for s in sizes],
        "ingest_records_per_s": [s.get("ingest_records_per_s") for s in sizes],
    }


def reports(roots: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Every evaluation and benchmark report under ``roots``, in path order."""
    evaluations, benchmarks = [], []
    for root in roots:
        for path in _found(Path(root), EVAL_FILE):
            if (report := _load(path)) is not None and "channels" in report:
                evaluations.append(_evaluation(path, report))
        for path in _found(Path(root), BENCH_FILE):
            if (report := _load(path)) is not None and "sizes" in report:
                benchmarks.append(_benchmark(path, report))
    return {"evaluations": evaluations, "benchmarks": benchmarks}
