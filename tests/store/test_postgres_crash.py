"""kill -9 of PostgreSQL itself mid-storm: every mutation the engine acknowledged is
there after the server restarts, calls during the outage fail with the contract's
retriable codes (never a silent success), and the engine recovers without a restart.

A call may also ride the outage out: a statement that finds its pooled connection dead
before it started runs on a fresh one, which waits (up to the store's bound) for the
server to come back, so a short outage can pass without any call failing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from engine_support import (  # noqa: E402
    GET,
    PURPOSE,
    ContractError,
    ErrorCode,
    admit,
    capture,
    context,
    open_engine,
)

OUTAGE_CODES = {ErrorCode.STORE_UNAVAILABLE, ErrorCode.MUTATION_OUTCOME_UNKNOWN}


def test_kill_9_of_postgres_mid_storm_loses_no_acknowledged_mutation(
    postgres_cluster, database_url: str, tmp_path: Path
) -> None:
    engine = open_engine(tmp_path / "replica", database_url=database_url)
    engine.operator.set_tenant_enabled("acme", True)
    ctx = context()
    acknowledged: list[str] = []
    codes: list[ErrorCode] = []
    stop = threading.Event()

    def storm(worker: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                _, cap = capture(engine, ctx, f"Storm {worker} item {i} about the ledger.")
                out = admit(engine, ctx, cap["candidate_id"])
            except ContractError as exc:
                codes.append(exc.code)
                time.sleep(0.05)
                continue
            if out["outcome"]["status"] == "accepted":
                acknowledged.append(out["outcome"]["record_id"])

    threads = [threading.Thread(target=storm, args=(w,)) for w in range(3)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.5)
        before = len(acknowledged)
        postgres_cluster.kill_server()
        time.sleep(1.0)
        postgres_cluster.start_server()
        deadline = time.monotonic() + 30
        while len(acknowledged) < before + 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(60)
        assert before > 0 and len(acknowledged) >= before + 5, "the storm resumed after the restart"
        assert set(codes) <= OUTAGE_CODES | {ErrorCode.NOT_FOUND}, codes
        for rid in acknowledged:
            assert engine.execute(GET, ctx, {"record_id": rid, "purpose_ref": PURPOSE})["record"]["record_id"] == rid
        assert all(engine.operator.verify_journal().values())
    finally:
        stop.set()
        engine.close()
