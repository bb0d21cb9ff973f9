"""No database server at all: every store call answers StoreUnavailable within one
`database_timeout_ms` (the first waits the bound, later ones do not wait it again),
the store says it is unreachable, and it serves again by itself once a server
accepts connections, counting the outage and the reconnection. What each checkout
asked of the pool is recorded, so the test reads which ones waited the bound instead
of timing the calls (the machine's load cannot change what it sees).

A server of its own (stopped and started here), so the session's shared one stays up."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from engine_support import CAPTURE, ContractError, ErrorCode, capture_args, context, open_engine
from postgres_support import PostgresCluster
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool import PoolTimeout

from engram.service.http.metrics import Metrics
from engram.service.store.base import StoreUnavailable
from engram.service.store.postgres import PostgresStore

BOUND_MS = 2000


@pytest.fixture
def server() -> Iterator[PostgresCluster]:
    reason = PostgresCluster.available()
    if reason is not None:
        pytest.skip(reason)
    cluster = PostgresCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _unavailable(store: PostgresStore) -> bool:
    try:
        store.scopes()
    except StoreUnavailable:
        return True
    return False


@dataclass(frozen=True)
class Checkout:
    """One connection the store asked its pool for: the wait it allowed (None: the
    pool's own timeout, the bound), when it began and ended (monotonic), and whether
    the pool gave none in that time."""

    timeout: float | None
    began: float
    ended: float
    timed_out: bool

    @property
    def waited_the_bound(self) -> bool:
        return self.timeout is None and self.timed_out


def _record_checkouts(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[Checkout]:
    """Every checkout of the store's real pool from now on, in order."""
    pool: Any = store.db._pool  # the seam the bound is enforced at
    getconn = pool.getconn
    seen: list[Checkout] = []

    def recording(timeout: float | None = None) -> Any:
        began = time.monotonic()
        try:
            conn = getconn(timeout=timeout)
        except PoolTimeout:
            seen.append(Checkout(timeout, began, time.monotonic(), timed_out=True))
            raise
        seen.append(Checkout(timeout, began, time.monotonic(), timed_out=False))
        return conn

    monkeypatch.setattr(pool, "getconn", recording)
    return seen


def _scraped(store: PostgresStore) -> dict[str, float]:
    """The store's connectivity as /metrics exposes it: sample name -> value."""
    text = Metrics(store_connectivity=store.connectivity_state).render().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("engram_store_")
        for sample in family.samples
    }


def test_calls_fail_within_one_bound_while_no_server_answers_and_resume(
    server: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(server.create_database(), timeout_ms=BOUND_MS)
    try:
        assert store.scopes() == []
        first = store.connectivity_state()
        assert first.reachable and first.server is not None and first.outages == 0
        assert store.db._pool.timeout == BOUND_MS / 1000  # a checkout waits the bound at most

        checkouts = _record_checkouts(store, monkeypatch)
        server.kill_server()
        assert _unavailable(store)  # nothing accepts a connection
        assert [c.waited_the_bound for c in checkouts].count(True) == 1  # it waited the bound, once
        down = store.connectivity_state()
        assert not down.reachable and down.outages == 1
        assert _scraped(store)["engram_store_reachable"] == 0

        # Several statements of one call (a route lookup, the tenant check, a read):
        # together within one bound, where each used to wait a bound of its own. A
        # checkout waits the bound again only once a bound has passed since the last
        # one that did (so the pool may connect to a server that came back): never two
        # such waits back to back. A slow machine only spaces them further apart.
        statements = len(checkouts)
        assert all(_unavailable(store) for _ in range(5))
        assert len(checkouts) >= statements + 5
        waits = [c for c in checkouts if c.waited_the_bound]
        for before, after in zip(waits, waits[1:]):
            assert after.began - before.ended >= BOUND_MS / 1000, checkouts
        assert store.connectivity_state().outages == 1  # one outage, not one per call

        server.start_server()
        deadline = time.monotonic() + 60
        while _unavailable(store) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.scopes() == []
        back = store.connectivity_state()
        assert back.reachable and back.reconnects == 1 and back.server == first.server
        assert back.primary_changes == 0  # the same server came back
        scraped = _scraped(store)
        assert scraped["engram_store_reachable"] == 1
        assert scraped["engram_store_outages_total"] == 1 and scraped["engram_store_reconnects_total"] == 1
    finally:
        store.close()


def _set_sync_standby(server: PostgresCluster, names: str | None) -> None:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        if names is None:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        else:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        conn.execute("SELECT pg_reload_conf()")


def _cancel_sync_waits(server: PostgresCluster) -> int:
    """Cancel every backend's wait for its synchronous standby: each such commit is then
    visible on this server, replicated or not (what a manager or an operator releasing
    stuck commits does). How many there were."""
    with psycopg.connect(server.url(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        ).fetchall()
    return len(rows)


def test_a_replay_is_acknowledged_only_once_the_standby_has_it(server: PostgresCluster, tmp_path: Path) -> None:
    """A commit whose wait for the synchronous standby was cancelled is visible on the
    primary without being on the standby. A retry that replays it must wait for the
    standby too, or it acknowledges what a failover would lose."""
    engine = open_engine(tmp_path / "replica", database_url=server.create_database(), database_timeout_ms=BOUND_MS)
    try:
        engine.operator.set_tenant_enabled("acme", True)
        ctx = context()
        args = capture_args(f"Waits for its standby {uuid.uuid4().hex}.")
        _set_sync_standby(server, "engram_absent_standby")
        with pytest.raises(ContractError) as first:
            engine.execute(CAPTURE, ctx, args)
        assert first.value.code is ErrorCode.MUTATION_OUTCOME_UNKNOWN
        assert _cancel_sync_waits(server) == 1  # now visible here, on no standby

        with pytest.raises(ContractError) as retry:  # the replay waits for the standby as well
            engine.execute(CAPTURE, ctx, args)
        assert retry.value.code is ErrorCode.MUTATION_OUTCOME_UNKNOWN

        _cancel_sync_waits(server)
        _set_sync_standby(server, None)  # the standby requirement gone: the retry is acknowledged
        replayed = engine.execute(CAPTURE, ctx, args)
        assert replayed["status"] == "duplicate_exact"  # the first attempt had committed
        assert sum(engine.deps.store.state_counts(ctx.scope).candidates.values()) == 1  # one effect
    finally:
        engine.close()
