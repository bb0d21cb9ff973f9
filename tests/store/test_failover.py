"""Two `engram serve` replicas on a pg_auto_failover formation (monitor, primary,
synchronous standby; eval/formation.py), on its multi-host URL, driven over MCP/HTTP
by several clients capturing, admitting and forgetting while the formation loses its
primary, switches over, and loses both nodes.

What must hold through each event: every answer is ok or a retriable outage code
(STORE_UNAVAILABLE, MUTATION_OUTCOME_UNKNOWN), a mutation answered so is retried with
its idempotency key until it is acknowledged and resolves to one effect, every
acknowledged admission is readable through both replicas and none is duplicated,
every acknowledged forget is NOT_FOUND and out of search, and both replicas write
again without a restart. Forgets acknowledged before the event stay forgotten on the
new primary, read from its tables: no body and no wrapped data key left, the purge
acknowledgements given before kept and every purge owed done by both replicas, and
the shred ledger naming each forget, its positioned entries naming tombstones the new
primary's journal holds. One formation for the module (about 50 s to start here).
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rel_support import (
    PURPOSE,
    ReplicaProcess,
    SyncDriver,
    capture_args,
    confirmed_token,
    ctx_token,
    enable_tenant,
    key,
    run_on,
    unique_token,
)

from engram.eval.client_storm import OK, ClientStorm
from engram.eval.formation import Formation
from engram.models.codes import ErrorCode
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH
from engram.service.engine.sealing import shred_digest, shred_entries
from engram.service.store.journal import read_digest

# A formation and two servers, about three minutes here: started once, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("failover-formation")]

TIMEOUT_MS = 2000
OUTAGE = {ErrorCode.STORE_UNAVAILABLE.value, ErrorCode.MUTATION_OUTCOME_UNKNOWN.value}
#: How long a mutation answered with an outage code is retried before the test gives up on it.
SETTLE_S = 90.0


@pytest.fixture(scope="module")
def formation() -> Iterator[Formation]:
    reason = Formation.available()
    if reason is not None:
        if os.environ.get("ENGRAM_REQUIRE_FORMATION"):
            pytest.fail(reason)
        pytest.skip(reason)
    started = Formation().start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The replicas' shared key directory: KEKs and the shred ledger."""
    return tmp_path_factory.mktemp("failover-keys") / "keys"


@pytest.fixture(scope="module")
def replicas(
    formation: Formation, key_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ReplicaProcess]]:
    root = tmp_path_factory.mktemp("failover")
    url, keys = formation.url(), key_dir
    enable_tenant(url, keys, root / "operator")
    timeout = ("--database-timeout-ms", str(TIMEOUT_MS))
    started = [ReplicaProcess(name, root, url, keys, *timeout).launch() for name in ("a", "b")]
    try:
        for r in started:
            r.wait_ready()
        yield started
    finally:
        for r in started:
            r.stop()


@dataclass
class Storm:
    """Clients mutating through both replicas until stopped (eval/client_storm.py records
    every answer); what each acknowledged."""

    replicas: list[ReplicaProcess]
    word: str = field(default_factory=unique_token)
    accepted: dict[str, str] = field(default_factory=dict)  # record id -> the word only its text holds
    forgotten: list[str] = field(default_factory=list)
    retried: set[str] = field(default_factory=set)  # keys of mutations acknowledged only on a retry
    #: Forgets acknowledged before the event, and the purge acknowledgements (record id,
    #: replica id) the primary then held for them.
    forgotten_before: list[str] = field(default_factory=list)
    acked_before: set[tuple[str, str]] = field(default_factory=set)
    unsettled: list[str] = field(default_factory=list)
    _mine: dict[int, list[str]] = field(default_factory=dict)  # client -> its records not yet forgotten
    clients: ClientStorm = field(init=False)

    def __post_init__(self) -> None:
        self.clients = ClientStorm(len(self.replicas), self._step, clients=3)

    @property
    def codes(self) -> Counter[str]:
        return self.clients.outcomes

    def start(self) -> Storm:
        self.clients.start()
        return self

    def stop(self) -> None:
        self.clients.stop(join_s=SETTLE_S + 60)

    def wait(self, until: Any, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not until() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert until(), f"the storm did not get there: {self.codes}"

    def served_since(self, at: float) -> bool:
        """Both replicas acknowledged a mutation sent after `at`."""
        return self.clients.served_since(at)

    def _settle(self, first: int, tool: str, args: dict[str, Any], confirmed: bool = False) -> dict[str, Any] | None:
        """The acknowledged answer of one mutation: retried with the same arguments (its
        idempotency key) through the replicas in turn while it answers an outage code;
        a confirmed one with a fresh human confirmation each time, as a host asks again
        once the first has aged past its use-within window."""
        deadline = time.monotonic() + SETTLE_S
        attempt = 0
        while True:
            which = (first + attempt) % len(self.replicas)
            token = confirmed_token(tool, args, args["record_id"]) if confirmed else None
            code, value = self.clients.call(which, functools.partial(_answer, self.replicas[which], tool, args, token))
            if code == OK:
                if attempt > 0:
                    with self.clients.lock:
                        self.retried.add(args["idempotency_key"])
                return value
            if code not in OUTAGE or time.monotonic() > deadline:
                with self.clients.lock:
                    self.unsettled.append(f"{tool}: {code}")
                return None
            attempt += 1
            time.sleep(0.2)

    def _step(self, n: int, i: int) -> None:
        """Client `n`'s `i`th turn: capture and admit a note; every third turn, forget
        one of its own records."""
        mine = self._mine.setdefault(n, [])
        own = unique_token()
        cap = self._settle(n + i, CAPTURE, capture_args(f"Failover storm {n} {i} {self.word} {own}."))
        if cap is None:
            return
        admission = {"candidate_id": cap["candidate_id"], "idempotency_key": key()}
        out = self._settle(n + i + 1, REQUEST_ADMISSION, admission)
        if out is None or out["outcome"]["status"] != "accepted":
            return
        rid = out["outcome"]["record_id"]
        with self.clients.lock:
            self.accepted[rid] = own
        mine.append(rid)
        if i % 3 == 0:  # forget one of this client's records
            victim = mine.pop(0)
            args = {"record_id": victim, "idempotency_key": key("fgt"), "reason_ref": "reason:failover"}
            if self._settle(n + i, FORGET, args, confirmed=True) is not None:
                with self.clients.lock:
                    self.forgotten.append(victim)

    def mark_event(self, formation: Formation) -> None:
        """Note the forgets acknowledged so far and the purge acknowledgements the
        primary holds for them, just before the event."""
        with self.clients.lock:
            self.forgotten_before = list(self.forgotten)
        with psycopg.connect(formation.url(), connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT record_id, replica_id FROM purge_acks WHERE record_id = ANY(%s)", (self.forgotten_before,)
            ).fetchall()
        self.acked_before = {(r[0], r[1]) for r in rows}

    def check(self, formation: Formation, key_dir: Path) -> None:
        """Every answer was ok or retriable and settled; what was acknowledged holds on
        both replicas, once each; what was forgotten stays so on the primary."""
        assert not self.unsettled, self.unsettled
        assert set(self.codes) <= {"ok"} | OUTAGE, self.codes
        kept = [rid for rid in self.accepted if rid not in set(self.forgotten)]
        assert kept and self.forgotten
        for replica in self.replicas:  # one client session a replica: a connection per read cost 6 times as much
            with SyncDriver(replica.url, ctx_token()) as session:
                for rid in kept:
                    env = _envelope(session, GET, {"record_id": rid, "purpose_ref": PURPOSE})
                    assert env["ok"] and env["output"]["value"]["record"]["record_id"] == rid, env
                for rid in self.forgotten:
                    env = _envelope(session, GET, {"record_id": rid, "purpose_ref": PURPOSE})
                    assert not env["ok"] and env["error"]["code"] == ErrorCode.NOT_FOUND.value, env
                for rid in self.forgotten:
                    env = _envelope(session, SEARCH, {"query": self.accepted[rid], "purpose_ref": PURPOSE})
                    assert env["ok"] and env["output"]["value"]["records"] == [], env
        with psycopg.connect(formation.url(), connect_timeout=5) as conn:
            twice = conn.execute(
                "SELECT payload_digest FROM records GROUP BY tenant, workspace, payload_digest HAVING count(*) > 1"
            ).fetchall()
            live = {r[0] for r in conn.execute("SELECT record_id FROM records WHERE state = 'accepted_current'")}
        assert twice == [], "an admission took effect twice"
        assert set(kept) <= live and not live & set(self.forgotten)
        self._check_forgets_kept(formation, key_dir)

    def _check_forgets_kept(self, formation: Formation, key_dir: Path) -> None:
        """Read from the primary's tables and the key directory: each acknowledged forget
        left no body and no wrapped key, kept the purge acknowledgements given before the
        event, had its purge done by every replica, and is in the shred ledger with its
        tombstone in the primary's journal."""
        forgotten = list(self.forgotten)
        with psycopg.connect(formation.url(), connect_timeout=5) as conn:
            bodies = conn.execute(
                "SELECT record_id FROM records WHERE record_id = ANY(%s)"
                " AND (key_id IS NOT NULL OR sealed IS NOT NULL)",
                (forgotten,),
            ).fetchall()
            # Data keys wrap only candidate and record bodies: one neither references is a
            # forgotten body's key that was not destroyed.
            orphans = conn.execute(
                "SELECT key_id FROM keys k WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.key_id = k.key_id)"
                " AND NOT EXISTS (SELECT 1 FROM candidates c WHERE c.key_id = k.key_id)"
            ).fetchall()
            acks = {(r[0], r[1]) for r in conn.execute("SELECT record_id, replica_id FROM purge_acks")}
            pending = {r[0] for r in conn.execute("SELECT record_id FROM pending_purges")}
            scopes = {
                r[2]: (r[0], r[1])
                for r in conn.execute(
                    "SELECT tenant, workspace, record_id FROM records WHERE record_id = ANY(%s)", (forgotten,)
                )
            }
            tombstones = {
                (int(r[0]), read_digest(r[1])): r[2]
                for r in conn.execute(
                    "SELECT cursor, event_digest, subject FROM journal WHERE kind = 'record_tombstoned'"
                    " AND subject = ANY(%s)",
                    (forgotten,),
                )
            }
        assert bodies == [], "a forgotten record kept its body"
        assert orphans == [], "a forgotten record's wrapped data key outlived its forget"
        # An acknowledgement given before the event is kept while its purge is pending
        # (once every replica acknowledged, the purge and its acknowledgements go together).
        assert {a for a in self.acked_before if a[0] in pending} <= acks
        self._wait_purged(formation)
        ledger: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for entry in shred_entries(key_dir):
            if entry["kind"] == "record":
                ledger.setdefault((entry["scope"], entry["subject"]), []).append(entry)
        for rid in forgotten:
            entries = ledger.get((shred_digest(list(scopes[rid])), shred_digest(rid)), [])
            assert entries, f"{rid}: no shred entry"
            ended = [tuple(e["ended"]) for e in entries if "ended" in e]
            # Positions are written once the commit returned; a forget acknowledged only
            # by its retry (its first try's commit cut by the failover, or its answer)
            # writes them when the retry answers, from the stored result or a new commit.
            assert ended, f"{rid}: acknowledged, but its shred entry names no journal position"
            for cursor, event_digest in ended:
                assert tombstones.get((int(cursor), event_digest)) == rid, f"{rid}: its tombstone is not in the journal"

    def _wait_purged(self, formation: Formation, timeout_s: float = 60) -> None:
        """Every registered replica acknowledged (or settled) the purge of each forgotten record."""
        deadline = time.monotonic() + timeout_s
        while True:
            with psycopg.connect(formation.url(), connect_timeout=5) as conn:
                owed = conn.execute(
                    "SELECT p.record_id, r.replica_id FROM pending_purges p CROSS JOIN replicas r"
                    " WHERE p.record_id = ANY(%s) AND NOT EXISTS (SELECT 1 FROM purge_acks a"
                    " WHERE a.tenant = p.tenant AND a.workspace = p.workspace AND a.record_id = p.record_id"
                    " AND a.replica_id = r.replica_id)",
                    (list(self.forgotten),),
                ).fetchall()
            if not owed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert owed == [], f"purges owed after the event: {owed}"


def _envelope(session: SyncDriver, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    kind, env = session.call("auto", tool, args)
    assert kind == "envelope", env
    return dict(env)


def _answer(replica: ReplicaProcess, tool: str, args: dict[str, Any], token: str | None) -> tuple[str, Any]:
    """One call through `replica`: ("ok", its value) or (its error code, None)."""
    env = run_on(replica, tool, args, token)
    return (OK, env["output"]["value"]) if env["ok"] else (env["error"]["code"], None)


def _store_metrics(replica: ReplicaProcess) -> tuple[dict[str, float], set[str]]:
    """The replica's store connectivity from its /metrics: sample -> value, and the server it names."""
    text = httpx.get(f"http://127.0.0.1:{replica.port}/metrics", timeout=30).text
    samples = [
        sample
        for family in text_string_to_metric_families(text)
        if family.name.startswith("engram_store_")
        for sample in family.samples
    ]
    return {s.name: s.value for s in samples}, {s.labels["server"] for s in samples if "server" in s.labels}


def _storm_through(replicas: list[ReplicaProcess], formation: Formation, event: Any) -> Storm:
    """Run the storm, do `event` once it is under way (forgets acknowledged before it),
    then keep it going until both replicas wrote again; the storm, stopped."""
    storm = Storm(replicas).start()
    try:
        storm.wait(lambda: len(storm.accepted) >= 6 and len(storm.forgotten) >= 2)
        storm.mark_event(formation)
        at = time.monotonic()
        event()
        storm.wait(lambda: storm.served_since(at) and len(storm.forgotten) >= 2)
        mark = time.monotonic()
        storm.wait(lambda: storm.served_since(mark))  # and once more, after the event settled
    finally:
        storm.stop()
    return storm


def test_primary_lost_mid_storm(formation: Formation, replicas: list[ReplicaProcess], key_dir: Path) -> None:
    before = formation.primary()
    assert before is not None
    storm = _storm_through(replicas, formation, before.stop)  # the node's keeper and postgres, SIGKILLed
    storm.check(formation, key_dir)
    after = formation.primary()
    assert after is not None and after is not before
    assert storm.retried and storm.codes[ErrorCode.STORE_UNAVAILABLE.value] > 0  # the outage was seen
    for replica in replicas:  # each saw the primary change, and says so on /metrics
        scraped, server = _store_metrics(replica)
        assert scraped["engram_store_primary_changes_total"] >= 1 and scraped["engram_store_reachable"] == 1
        assert server == {after.address}
    before.run()  # the old primary rejoins as the standby
    formation.wait_settled()


def test_planned_switchover_mid_storm(formation: Formation, replicas: list[ReplicaProcess], key_dir: Path) -> None:
    before = formation.primary()
    storm = _storm_through(replicas, formation, formation.switchover)
    storm.check(formation, key_dir)
    assert formation.primary() not in (None, before)
    formation.wait_settled()


def test_both_nodes_down_then_one_back(formation: Formation, replicas: list[ReplicaProcess], key_dir: Path) -> None:
    primary = formation.primary()
    assert primary is not None
    others = [n for n in formation.nodes if n is not primary]
    outages = {r.name: _store_metrics(r)[0]["engram_store_outages_total"] for r in replicas}
    for node in (*others, primary):
        node.stop()
    for replica in replicas:  # no server: a retriable answer, every time, at the first attempt
        for _ in range(3):
            env = run_on(replica, CAPTURE, capture_args(f"Nowhere to go {unique_token()}."))
            assert not env["ok"] and env["error"]["code"] in OUTAGE, env
        # The store counts one outage for all three calls and says it is unreachable:
        # the state in which its later statements take what the pool holds or fail at
        # once, so a call waits one bound, not one per store step (the checkouts are
        # read in tests/store/test_postgres_outage.py).
        scraped, _ = _store_metrics(replica)
        assert scraped["engram_store_reachable"] == 0
        assert scraped["engram_store_outages_total"] == outages[replica.name] + 1
    primary.run()
    storm = Storm(replicas).start()
    try:
        storm.wait(lambda: len(storm.accepted) >= 4 and storm.served_since(0.0) and len(storm.forgotten) >= 1)
    finally:
        storm.stop()
    storm.check(formation, key_dir)
    for node in others:
        node.run()
