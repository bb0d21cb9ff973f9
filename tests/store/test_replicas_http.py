"""Three `engram serve` processes on one PostgreSQL database, driven over MCP/HTTP:
read-your-writes across replicas, an idempotency key raced over all three, a
confirmation ref reused on another replica, a page cursor that walks three replicas,
forget purging every replica's index files, and kill -9 of a replica mid-storm with
every acknowledged mutation found afterwards (and the replica back, caught up).

The replicas run the real CLI (`engram serve --database-url ... --key-dir ...`,
lexical-only with --no-model), share the host secret through ENGRAM_HOST_SECRET, and
keep their own data directories for their indexes.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rel_support import (  # noqa: E402
    PURPOSE,
    SECRET,
    ReplicaProcess,
    accept_on,
    capture_args,
    claims,
    code,
    enable_tenant,
    key,
    run_on,
    scan_dir,
    search_ids,
    unique_token,
    value,
)

from engram.models.host_token import mint_token  # noqa: E402
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION  # noqa: E402
from engram.service.engine.gates import operation_digest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODE = "auto"


@pytest.fixture(scope="module")
def cluster(postgres_cluster, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("replicas")
    url = postgres_cluster.create_database("replicas")
    keys = root / "keys"
    enable_tenant(url, keys, root / "operator")
    replicas = [ReplicaProcess(name, root, url, keys).launch() for name in ("a", "b", "c")]
    try:
        for r in replicas:
            r.wait_ready()
        yield replicas
    finally:
        for r in replicas:
            r.stop()


def run(replica: ReplicaProcess, tool: str, args: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    return run_on(replica, tool, args, token)


def confirmed(tool: str, args: dict[str, Any], target: str, ref: str) -> str:
    approved = int(time.time() * 1000) - 200
    return mint_token(
        claims(
            confirmation={
                "ref": ref,
                "capability": tool,
                "target": target,
                "operation_digest": operation_digest(tool, args),
                "approved_at": approved,
                "expires_at": approved + 60_000,
            }
        ),
        SECRET,
        ttl_s=3600,
    )


def test_read_your_writes_across_replicas(cluster) -> None:
    a, b, c = cluster
    for writer, readers in ((a, (b, c)), (b, (c, a)), (c, (a, b))):
        word = unique_token()
        rid = accept_on(writer, f"Replica note about {word} in the ledger.")
        for reader in readers:  # right after the acknowledgement, on another replica
            assert search_ids(reader, word)[0] == [rid]
            assert value(run(reader, GET, {"record_id": rid, "purpose_ref": PURPOSE}))["record"]["record_id"] == rid


def test_one_idempotency_key_raced_over_three_replicas(cluster) -> None:
    args = capture_args(f"Raced capture {unique_token()}.")
    results: list[Any] = [None] * 9
    barrier = threading.Barrier(9)

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = run(cluster[i % 3], CAPTURE, args)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [value(r) for r in results]
    assert sorted(o["status"] for o in outs) == ["committed_pending"] + ["duplicate_exact"] * 8
    assert len({o["candidate_id"] for o in outs}) == 1


def test_confirmation_ref_spent_on_one_replica_fails_on_another(cluster) -> None:
    a, b, _ = cluster
    first, second = accept_on(a, f"Ref one {unique_token()}."), accept_on(a, f"Ref two {unique_token()}.")
    ref = "conf-" + uuid.uuid4().hex
    args1 = {"record_id": first, "idempotency_key": key("fgt"), "reason_ref": "reason:x"}
    args2 = {"record_id": second, "idempotency_key": key("fgt"), "reason_ref": "reason:x"}
    assert run(a, FORGET, args1, confirmed(FORGET, args1, first, ref))["ok"] is True
    assert code(run(b, FORGET, args2, confirmed(FORGET, args2, second, ref))) == "gate_failed"


def test_page_cursor_walks_three_replicas(cluster) -> None:
    a, b, c = cluster
    word = unique_token()
    made = {accept_on(cluster[i % 3], f"Paged note {i} about {word} {'x ' * i}") for i in range(7)}
    seen: list[str] = []
    ids, cursor = search_ids(a, word, limit=3)
    seen += ids
    for replica in (b, c):
        assert cursor is not None
        ids, cursor = search_ids(replica, word, limit=3, page_cursor=cursor)
        seen += ids
    assert cursor is None
    assert len(seen) == len(set(seen)) == 7 and set(seen) == made


def test_forget_purges_every_replica(cluster) -> None:
    a, b, c = cluster
    words = [unique_token() for _ in range(4)]
    cap = value(
        run(
            a,
            CAPTURE,
            capture_args(
                f"Shred test decision {words[0]} about {words[1]} storage",
                extra_text=f"context mentions {words[2]} and {words[3]}",
            ),
        )
    )
    adm = value(run(a, REQUEST_ADMISSION, {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}))
    rid = adm["outcome"]["record_id"]
    for r in cluster:
        assert search_ids(r, words[0])[0] == [rid]
        assert scan_dir(r.data_dir / "index", words), "control: the scanner sees the record's words"
    args = {"record_id": rid, "idempotency_key": key("fgt"), "reason_ref": "reason:x"}
    out = value(run(b, FORGET, args, confirmed(FORGET, args, rid, "conf-" + uuid.uuid4().hex)))
    assert out["projection_invalidation"] == "complete"
    for r in cluster:  # gone from every replica's answers and index files
        assert search_ids(r, words[0])[0] == []
        assert scan_dir(r.data_dir / "index", words) == {}
    # every registered replica acknowledged: nothing stays pending, no acknowledgement lingers
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(a.database_url) as conn:
            left = [
                conn.execute(f"SELECT count(*) FROM {table} WHERE record_id=%s", (rid,)).fetchone()[0]
                for table in ("pending_purges", "purge_acks")
            ]
        if left == [0, 0] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert left == [0, 0]


def test_kill_9_of_a_replica_mid_storm_loses_no_acknowledged_mutation(cluster) -> None:
    a, b, c = cluster
    word = unique_token()
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def storm(replica: ReplicaProcess, n: int) -> None:
        for i in range(n):
            if stop.is_set():
                return
            try:
                rid = accept_on(replica, f"Storm {replica.name} {i} {word}.")
            except Exception:  # noqa: BLE001 - a call cut by the kill was never acknowledged
                continue
            with lock:
                acknowledged.append(rid)

    threads = [threading.Thread(target=storm, args=(r, 6)) for r in cluster]
    for t in threads:
        t.start()
    time.sleep(1.0)
    c.kill()
    for t in threads:
        t.join(timeout=120)
    assert len(acknowledged) >= 8
    for rid in acknowledged:
        for r in (a, b):
            assert value(run(r, GET, {"record_id": rid, "purpose_ref": PURPOSE}))["record"]["record_id"] == rid
    found, cursor = search_ids(a, word, limit=50)
    assert set(acknowledged) <= set(found)
    # the killed replica comes back on its own data directory and catches up
    c.start()
    assert set(acknowledged) <= set(search_ids(c, word, limit=50)[0])
