"""Network faults between a replica and PostgreSQL, through a fault-injecting proxy.

Replica `a` (the real `engram serve --database-url`) reaches the database only through
:class:`fault_proxy.FaultProxy` on loopback; replica `b` reaches it directly. Each
fault (late answers, dropped connections, a half-open partition, a commit cut after or
before the server received it, a partition that leaves a transaction open with its
scope lock) must give: answers that are a success or a retriable code, never an empty
success and never a hang (every call has a client timeout far above its deadline);
retries with the same idempotency key that resolve to exactly one effect; no
acknowledged mutation lost; and a replica that recovers without a restart once the
network heals (its pool reconnects, its LISTEN connection comes back).

`a` runs with `--database-timeout-ms 2000` and `--deadline-ms 6000`, so a partition
costs seconds, not the defaults' tens of seconds. ENGRAM_NETFAULT_CYCLES sets the
fault cycles of the storm (CI: 6).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fault_proxy import FaultProxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rel_support import (
    FIGURES,
    PURPOSE,
    ROOT,
    SECRET,
    ReplicaProcess,
    call,
    capture_args,
    claims,
    code,
    confirmation,
    env_int,
    key,
    unique_token,
    value,
)

from engram.models.codes import RETRIABLE
from engram.models.host_token import mint_token
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH

MODE = "auto"
DATABASE_TIMEOUT_MS = 2000
DEADLINE_MS = 6000
RETRIABLE_CODES = {c.value for c in RETRIABLE}
#: A hang guard, far above any deadline: a call not back by then failed the test.
CLIENT_TIMEOUT_S = 60.0
#: How long a retry loop may take to reach a clear outcome once the network healed.
SETTLE_S = 90.0
CYCLES = env_int("ENGRAM_NETFAULT_CYCLES", 6)


class Net:
    """The database, the proxy, replica `a` behind it and replica `b` beside it."""

    def __init__(self, cluster: Any, root: Path) -> None:
        self.url = cluster.create_database("netfaults")
        self.proxy = FaultProxy(str(cluster.root / f".s.PGSQL.{cluster.port}")).start()
        dbname = conninfo_to_dict(self.url)["dbname"]
        behind_proxy = make_conninfo(
            "",
            host="127.0.0.1",
            port=self.proxy.port,
            dbname=dbname,
            user=cluster.role,
            sslmode="disable",
            application_name="replica-a",
        )
        keys = root / "keys"
        (root / "operator").mkdir(exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "engram.service.cli", "admin", "--database-url", self.url, "--key-dir", str(keys)]
            + ["tenant", "enable", "acme", "--data-dir", str(root / "operator")],
            check=True,
            capture_output=True,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        bounds = ("--database-timeout-ms", str(DATABASE_TIMEOUT_MS), "--deadline-ms", str(DEADLINE_MS))
        self.a = ReplicaProcess("a", root, behind_proxy, keys, *bounds)
        self.b = ReplicaProcess("b", root, self.url, keys, *bounds)

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def listening(self) -> list[Any]:
        """Backend start times of replica a's LISTEN sessions."""
        rows = self.sql(
            "SELECT backend_start FROM pg_stat_activity WHERE application_name = 'replica-a'"
            " AND query LIKE 'LISTEN%%' AND state = 'idle'"
        )
        return [r[0] for r in rows]

    def close(self) -> None:
        for replica in (self.a, self.b):
            replica.stop()
        self.proxy.close()


@pytest.fixture(scope="module")
def net(postgres_cluster, tmp_path_factory: pytest.TempPathFactory):
    running = Net(postgres_cluster, tmp_path_factory.mktemp("netfaults"))
    try:
        running.a.launch()
        running.b.launch()
        running.a.wait_ready()
        running.b.wait_ready()
        yield running
    finally:
        running.close()


@pytest.fixture
def workspace() -> str:
    """A workspace of the test's own, so counts in the database are its alone."""
    return "net-" + uuid.uuid4().hex[:10]


def token(workspace: str, **extra: Any) -> str:
    return mint_token(claims(workspace=workspace, **extra), SECRET, ttl_s=3600)


def ask(replica: ReplicaProcess, tool: str, args: dict[str, Any], tok: str) -> dict[str, Any]:
    """One call; it must come back (as an envelope) well before the hang guard."""
    return asyncio.run(asyncio.wait_for(call(replica.url, tok, MODE, tool, args), CLIENT_TIMEOUT_S))


def retriable(env: dict[str, Any]) -> bool:
    """A failure the caller retries; any other failure fails the test here."""
    if env["ok"]:
        return False
    assert code(env) in RETRIABLE_CODES and env["error"]["retriable"] is True, env
    return True


def settle(replica: ReplicaProcess, tool: str, args: dict[str, Any], tok: str, met: Counter[str]) -> dict[str, Any]:
    """Retry with the same key and arguments until a clear outcome (counting the
    retriable codes met on the way); that outcome."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        env = ask(replica, tool, args, tok)
        if not retriable(env):
            return env
        met[code(env)] += 1
        assert time.monotonic() < deadline, f"{tool} still {code(env)} after {SETTLE_S} s of a healed network"
        time.sleep(0.2)


def search_ids(replica: ReplicaProcess, query: str, tok: str) -> list[str]:
    env = settle(replica, SEARCH, {"query": query, "purpose_ref": PURPOSE, "limit": 50}, tok, Counter())
    return [p["record"]["record_id"] for p in value(env)["records"]]


def admit(replica: ReplicaProcess, text: str, tok: str, met: Counter[str]) -> str:
    """Capture and admit `text` (each retried to a clear outcome); the record id."""
    cap = value(settle(replica, CAPTURE, capture_args(text), tok, met))
    adm = value(
        settle(replica, REQUEST_ADMISSION, {"candidate_id": cap["candidate_id"], "idempotency_key": key()}, tok, met)
    )
    assert adm["outcome"]["status"] == "accepted", adm
    return adm["outcome"]["record_id"]


def counts(net: Net, workspace: str) -> dict[str, int]:
    """Effects in the database for the workspace: candidates, records, idempotency keys."""
    return {
        table: net.sql(f"SELECT count(*) FROM {table} WHERE tenant='acme' AND workspace=%s", (workspace,))[0][0]
        for table in ("candidates", "records", "idempotency")
    }


# --------------------------------------------------------------------------------- the store alone


@pytest.fixture
def store_behind_proxy(net: Net):
    """A PostgresStore of the test's own, reaching the database through the proxy."""
    from engram.service.store.postgres import PostgresStore

    store = PostgresStore(net.a.database_url, timeout_ms=DATABASE_TIMEOUT_MS)
    try:
        yield store
    finally:
        net.proxy.heal()
        store.close()


def test_store_connections_dropped_while_idle_cost_no_call(net: Net, store_behind_proxy: Any) -> None:
    store = store_behind_proxy
    held = []
    for _ in range(4):  # four connections sit idle in the pool afterwards
        held.append(store.transaction())
        held[-1].__enter__()
    for tx in reversed(held):
        tx.__exit__(None, None, None)
    net.proxy.drop()
    for _ in range(6):  # each dead one is found at its first statement and replaced
        assert isinstance(store.scopes(), list)


def test_store_waits_are_bounded_on_a_half_open_network(net: Net, store_behind_proxy: Any) -> None:
    from engram.service.store.base import StoreUnavailable

    store = store_behind_proxy
    assert store.wait_for_journal(0.1) is not None  # the listener connects
    net.proxy.black_hole()
    with pytest.raises(StoreUnavailable):
        store.scopes()  # an answer that never comes: cut at the bound
    with pytest.raises(StoreUnavailable):
        with store.transaction():  # no connection to be had: the pool's checkout is bounded too
            pass
    guard = time.monotonic() + SETTLE_S
    while store._listener.connection is not None:  # a silent listener is probed and dropped
        assert time.monotonic() < guard, "the listener outlived a partition"
        store.wait_for_journal(0.1)
    net.proxy.heal()
    assert isinstance(store.scopes(), list)
    store.wait_for_journal(0.1)
    assert store._listener.connection is not None


# --------------------------------------------------------------------------------- faults


def test_late_answers_are_a_success_or_retriable(net: Net, workspace: str) -> None:
    tok, met = token(workspace), Counter[str]()
    word = unique_token()
    net.proxy.delay(0.02)
    try:
        rid = admit(net.a, f"Delayed note about {word}.", tok, met)
        assert search_ids(net.a, word, tok) == [rid]
    finally:
        net.proxy.heal()
    assert search_ids(net.b, word, tok) == [rid]
    assert counts(net, workspace) == {"candidates": 1, "records": 1, "idempotency": 2}


def test_dropped_connections_are_replaced(net: Net, workspace: str) -> None:
    tok, met = token(workspace), Counter[str]()
    made = []
    for n in range(4):
        net.proxy.drop()  # every pooled connection and the listener, between calls
        made.append(admit(net.a, f"Dropped note {n} {unique_token()}.", tok, met))
    for rid in made:
        assert value(settle(net.b, GET, {"record_id": rid, "purpose_ref": PURPOSE}, tok, Counter()))
    assert counts(net, workspace) == {"candidates": 4, "records": 4, "idempotency": 8}
    # The pool checks a connection before lending it: a drop between calls costs no call.
    assert not met, met


def test_half_open_partition_answers_retriable_then_heals(net: Net, workspace: str) -> None:
    tok, met = token(workspace), Counter[str]()
    before = admit(net.a, f"Before the partition {unique_token()}.", tok, met)
    listening_before = net.listening()
    assert listening_before, "replica a listens for journal events"
    word = unique_token()
    cap_args = capture_args(f"Captured into a partition {word}.")
    net.proxy.black_hole()
    try:
        answers = {
            CAPTURE: ask(net.a, CAPTURE, cap_args, tok),
            SEARCH: ask(net.a, SEARCH, {"query": word, "purpose_ref": PURPOSE}, tok),
            GET: ask(net.a, GET, {"record_id": before, "purpose_ref": PURPOSE}, tok),
        }
        for tool, env in answers.items():  # back, with a retriable code: never a hang, never an empty success
            assert retriable(env), (tool, env)
        # The other replica, on its own network, is not held up.
        other = admit(net.b, f"Written beside the partition {unique_token()}.", tok, Counter())
    finally:
        net.proxy.heal()
    captured = value(settle(net.a, CAPTURE, cap_args, tok, met))
    assert captured["status"] in ("committed_pending", "duplicate_exact")
    adm_args = {"candidate_id": captured["candidate_id"], "idempotency_key": key()}
    rid = value(settle(net.a, REQUEST_ADMISSION, adm_args, tok, met))["outcome"]["record_id"]
    assert search_ids(net.a, word, tok) == [rid]
    assert value(settle(net.a, GET, {"record_id": other, "purpose_ref": PURPOSE}, tok, Counter()))
    assert counts(net, workspace) == {"candidates": 3, "records": 3, "idempotency": 6}
    # Its LISTEN connection came back on its own: a new session, started after the heal.
    guard = time.monotonic() + SETTLE_S
    while not [s for s in net.listening() if s not in listening_before]:
        assert time.monotonic() < guard, "replica a did not listen again after the partition healed"
        time.sleep(0.2)


@pytest.mark.parametrize("forwarded", [True, False], ids=["server-committed", "server-never-saw-it"])
def test_commit_cut_resolves_to_one_effect(net: Net, workspace: str, forwarded: bool) -> None:
    tok, met = token(workspace), Counter[str]()
    word = unique_token()
    cap_args = capture_args(f"Cut commit note {word}.")
    net.proxy.cut_commit(forwarded=forwarded)
    first = ask(net.a, CAPTURE, cap_args, tok)
    assert code(first) == "MUTATION_OUTCOME_UNKNOWN", first
    cap = value(settle(net.a, CAPTURE, cap_args, tok, met))
    assert cap["status"] == ("duplicate_exact" if forwarded else "committed_pending")

    adm_args = {"candidate_id": cap["candidate_id"], "idempotency_key": key()}
    net.proxy.cut_commit(forwarded=forwarded)
    assert code(ask(net.a, REQUEST_ADMISSION, adm_args, tok)) == "MUTATION_OUTCOME_UNKNOWN"
    adm = value(settle(net.a, REQUEST_ADMISSION, adm_args, tok, met))
    assert adm["outcome"]["status"] == "accepted" and adm["replayed"] is forwarded
    rid = adm["outcome"]["record_id"]

    forget_args = {"record_id": rid, "idempotency_key": key(), "reason_ref": "reason:cut"}
    forget_tok = token(workspace, confirmation=confirmation(FORGET, forget_args, rid))
    net.proxy.cut_commit(forwarded=forwarded)
    assert code(ask(net.a, FORGET, forget_args, forget_tok)) == "MUTATION_OUTCOME_UNKNOWN"
    forgotten = value(settle(net.a, FORGET, forget_args, forget_tok, met))
    assert forgotten["replayed"] is forwarded
    assert search_ids(net.a, word, tok) == [] and search_ids(net.b, word, tok) == []
    assert net.proxy.commits_cut >= 3
    assert counts(net, workspace) == {"candidates": 1, "records": 1, "idempotency": 3}


@pytest.mark.parametrize("tool", [REQUEST_ADMISSION, FORGET])
def test_partition_right_after_a_commit_is_outcome_unknown(net: Net, workspace: str, tool: str) -> None:
    """The commit landed and its answer arrived; the work after it (projecting the
    admitted record, purging the forgotten one) meets the partition: the caller is told
    the outcome is unknown, not that the store was unavailable, and the retry replays."""
    tok, met = token(workspace), Counter[str]()
    cap = value(settle(net.a, CAPTURE, capture_args(f"After commit {unique_token()}."), tok, met))
    args: dict[str, Any] = {"candidate_id": cap["candidate_id"], "idempotency_key": key()}
    if tool == FORGET:
        rid = value(settle(net.a, REQUEST_ADMISSION, args, tok, met))["outcome"]["record_id"]
        args = {"record_id": rid, "idempotency_key": key(), "reason_ref": "reason:after-commit"}
        tok = token(workspace, confirmation=confirmation(FORGET, args, rid))
    net.proxy.partition_after_commit()
    try:
        assert code(ask(net.a, tool, args, tok)) == "MUTATION_OUTCOME_UNKNOWN"
    finally:
        net.proxy.heal()
    assert value(settle(net.a, tool, args, tok, met))["replayed"] is True
    assert counts(net, workspace)["records"] == 1


def test_partition_mid_commit_releases_the_scope_lock(net: Net, workspace: str) -> None:
    """Replica a is cut off holding its transaction open (the scope's write lock taken,
    COMMIT never delivered): the server ends that session after the idle-in-transaction
    timeout, so replica b's writes to the same scope go through; a's retry commits once."""
    tok, met = token(workspace), Counter[str]()
    cap_args = capture_args(f"Held commit {unique_token()}.")
    net.proxy.hold_commit()
    try:
        assert code(ask(net.a, CAPTURE, cap_args, tok)) == "MUTATION_OUTCOME_UNKNOWN"
        beside = value(settle(net.b, CAPTURE, capture_args(f"Beside {unique_token()}."), tok, met))
        assert beside["status"] == "committed_pending"
    finally:
        net.proxy.heal()
    assert value(settle(net.a, CAPTURE, cap_args, tok, met))["status"] == "committed_pending"  # never committed
    assert counts(net, workspace) == {"candidates": 2, "records": 0, "idempotency": 2}


# --------------------------------------------------------------------------------- storm


def test_fault_storm_loses_no_acknowledged_mutation(net: Net, workspace: str) -> None:
    """Two clients capture and admit through replica a while the proxy cycles through
    every fault; each operation is retried with its key to a clear outcome."""
    tok = token(workspace)
    acknowledged: list[str] = []
    met: Counter[str] = Counter()
    calls = Counter[str]()
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def client(n: int) -> None:
        try:
            for i in itertools.count():
                if stop.is_set():
                    return
                seen = Counter[str]()
                rid = admit(net.a, f"Storm {n}-{i} {unique_token()}.", tok, seen)
                with lock:
                    acknowledged.append(rid)
                    met.update(seen)
                    calls["admissions"] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    faults = [
        lambda: net.proxy.delay(0.05),
        net.proxy.drop,
        net.proxy.black_hole,
        lambda: net.proxy.cut_commit(forwarded=True),
        lambda: net.proxy.cut_commit(forwarded=False),
        net.proxy.hold_commit,
    ]
    threads = [threading.Thread(target=client, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        for cycle in range(CYCLES):
            faults[cycle % len(faults)]()
            time.sleep(2.5)
            net.proxy.heal()
            time.sleep(0.5)
    finally:
        net.proxy.heal()
        stop.set()
        for t in threads:
            t.join(timeout=SETTLE_S * 3)
    assert not failures, failures
    assert acknowledged, "the clients made progress between faults"
    lost = [
        rid
        for rid in acknowledged
        for replica in (net.a, net.b)
        if not settle(replica, GET, {"record_id": rid, "purpose_ref": PURPOSE}, tok, Counter())["ok"]
    ]
    assert lost == []
    # Exactly one effect per operation: one candidate per capture key, one record per admission.
    assert counts(net, workspace) == {
        "candidates": len(acknowledged),
        "records": len(acknowledged),
        "idempotency": 2 * len(acknowledged),
    }
    FIGURES["network fault cycles survived"] += CYCLES
    FIGURES["network fault storm admissions acknowledged"] += len(acknowledged)
    FIGURES["network fault storm acknowledged mutations lost"] += len(lost)
    FIGURES["network fault storm retriable answers"] += sum(met.values())
