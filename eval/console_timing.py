"""How long the console's reads take on a large store and a large audit log.

Why: each console page must answer within its budget however big the store and the
audit log grow, and only a store of that size shows it. This grows one scope of the
synthetic capacity corpus (`eval/corpus_gen.py`, lexical only, no model; one record in
ten carries a retention that ends within the console's expiry horizon, so the
expiring count has rows to count), and times the server-side read behind each page
(`service/console/surface.py`, `service/console/audit_trail.py`; median of 5, template
rendering not included). The audit log is written in the audit writer's own line
format, at the size asked. Each figure is "wall ms (CPU ms)".

    python -m engram.eval.console_timing grow DIR 1000000
    python -m engram.eval.console_timing pages DIR [--database-url URL]
    python -m engram.eval.console_timing audit DIR 16 256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SCOPE = ("bench", "main")
#: Records a batch commits; a grown store holds a multiple of it, and grows on from there.
BATCH = 5000
#: One record in this many expires within the console's horizon.
EXPIRING_EVERY = 10
#: Tools and codes of the synthetic audit lines, in rough proportion to a serving log.
TOOLS = ("engram_memory_search",) * 6 + ("engram_memory_get",) * 3 + ("engram_memory_capture",)
CODES = ("ok",) * 97 + ("NOT_FOUND", "RATE_LIMITED", "INVALID_SCHEMA")
#: The pace of the synthetic audit log's calls (16 MiB: about 11 hours of them).
SECONDS_BETWEEN_CALLS = 1.0


def median_ms(read: Callable[[], Any], runs: int = 5) -> str:
    """The median wall time of ``runs`` reads, and their median CPU time in brackets
    (on a machine shared with other work, the CPU time is the steadier figure)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        read()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return f"{statistics.median(wall):.1f} ({statistics.median(cpu):.1f})"


def _records(size: int, first: int) -> Iterator[Any]:
    from dataclasses import replace

    from engram.eval.corpus_gen import CorpusSpec, SyntheticCorpus

    corpus = SyntheticCorpus(CorpusSpec(size=size, dim=384, topics=300))
    soon = time.time() + 24 * 3600
    for n, record in enumerate(corpus.records(chunk=BATCH, first=first), start=first):
        if n % EXPIRING_EVERY == 0:  # within the next 1 to 6 days, a second apart
            expires = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(soon + n % (5 * 24 * 3600)))
            record = replace(record, retention={"derivative_rule": "make-ineligible", "expires_at": expires})
        yield record


def grow(data_dir: Path, size: int, database_url: str | None) -> None:
    """Ingest the corpus into ``data_dir`` until the scope holds ``size`` records."""
    from engram.index_data.ingest import ingest_corpus
    from engram.service.engine import Engine
    from engram.service.store import StoreAddress

    engine = Engine.open(data_dir, load_model=False, store=StoreAddress.resolve(data_dir, database_url))
    try:
        held = sum(engine.scope_stats(SCOPE)[0].counts.records.values()) if engine.scope_stats(SCOPE) else 0
        start = time.perf_counter()
        records = _records(size, held)
        # The synthetic text holds no secret: the scan would only slow the load.
        ingest_corpus(engine, SCOPE, records, batch_size=BATCH, progress=False, total=size - held, scan_secrets=False)
        print(json.dumps({"records": size, "ingested": size - held, "seconds": round(time.perf_counter() - start)}))
    finally:
        engine.close()


def pages(data_dir: Path, database_url: str | None) -> None:
    """The read behind each store page, at the store's size."""
    from engram.service.console import surface
    from engram.service.engine import Engine
    from engram.service.store import StoreAddress

    engine = Engine.open(data_dir, load_model=False, store=StoreAddress.resolve(data_dir, database_url))
    try:
        reads = {
            "overview": lambda: surface.overview(engine, time.time()),
            "scopes": lambda: surface.scopes(engine),
            "scope": lambda: surface.scope(engine, *SCOPE),
            "replicas": lambda: surface.replicas(engine),
        }
        row: dict[str, Any] = {name: median_ms(read) for name, read in reads.items()}
        view = surface.overview(engine, time.time())
        row.update(
            store=engine.operator.store_kind,
            records=sum(view["records_by_state"].values()),
            expiring=view["expiring_count"],
            load=os.getloadavg()[0],
        )
        print(json.dumps(row))
    finally:
        engine.close()


def write_audit_log(path: Path, mib: int) -> int:
    """An audit log of about ``mib`` MiB in the writer's line format; its line count."""
    from engram.service.console.audit_trail import AUDIT_FIELDS  # the audit line's, as the console reads it

    lines, size, n = [], 0, 0
    start = time.time() - 30 * 24 * 3600
    with open(path, "wb") as out:
        while size < mib << 20:
            stamp = time.gmtime(start + n * SECONDS_BETWEEN_CALLS)
            tool, code = TOOLS[n % len(TOOLS)], CODES[(n * 7) % len(CODES)]
            values = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S", stamp) + f".{n % 1000:03d}Z",
                "auditId": f"aud_{n:012x}",
                "tool": tool,
                "tenant": f"tenant{n % 5}",
                "workspace": "main",
                "principal": "agent",
                "code": code,
                "arguments_digest": "sha256:" + f"{n:064x}",
                "response_digest": "sha256:" + f"{n + 1:064x}",
                "receipt_digest": "sha256:" + f"{n + 2:064x}" if tool == TOOLS[0] and code == "ok" else None,
                "latency_ms": 12.345,
            }
            line = json.dumps({name: values[name] for name in AUDIT_FIELDS}, separators=(",", ":")).encode() + b"\n"
            lines.append(line)
            size, n = size + len(line), n + 1
            if len(lines) == 10_000:
                out.write(b"".join(lines))
                lines = []
        out.write(b"".join(lines))
    return n


def audit(data_dir: Path, sizes: list[int]) -> None:
    """The audit and receipts pages' reads over logs of each size (MiB), the sizes in
    turn for each read, so that a change in the machine's load falls on all of them."""
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = {mib: data_dir / f"audit-{mib}.jsonl" for mib in sizes}
    rows: dict[int, dict[str, Any]] = {
        mib: {"MiB": mib, "lines": write_audit_log(path, mib)} for mib, path in paths.items()
    }
    try:
        for name in _audit_reads(paths[sizes[0]]):
            for mib, path in paths.items():
                rows[mib][name] = median_ms(_audit_reads(path)[name])
    finally:
        for path in paths.values():
            path.unlink()
    for row in rows.values():
        print(json.dumps({**row, "load": os.getloadavg()[0]}))


def _audit_reads(path: Path) -> dict[str, Callable[[], Any]]:
    from datetime import datetime, timedelta

    from engram.service.console import audit_trail
    from engram.service.console.audit_trail import AuditFilter

    first = audit_trail.audit(path, AuditFilter())
    newest = datetime.strptime(first["lines"][0]["time"][:16], "%Y-%m-%dT%H:%M")
    hour_ago = (newest - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    return {
        "unfiltered": lambda: audit_trail.audit(path, AuditFilter()),
        "next page": lambda: audit_trail.audit(path, AuditFilter(), before=first["older"]),
        "by code": lambda: audit_trail.audit(path, AuditFilter(code="RATE_LIMITED")),
        "matching nothing": lambda: audit_trail.audit(path, AuditFilter(tool=TOOLS[-1], tenant="tenant3")),
        "until an hour before": lambda: audit_trail.audit(path, AuditFilter(until=hour_ago)),
        "recent searches": lambda: audit_trail.recent_searches(path),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("grow", "pages", "audit"))
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("sizes", type=int, nargs="*", help="grow: records; audit: MiB of log")
    parser.add_argument("--database-url")
    args = parser.parse_args()
    if args.what == "grow":
        grow(args.data_dir, args.sizes[0], args.database_url)
    elif args.what == "pages":
        pages(args.data_dir, args.database_url)
    else:
        audit(args.data_dir, args.sizes)


if __name__ == "__main__":  # the ingest's writer processes re-import this module
    main()
