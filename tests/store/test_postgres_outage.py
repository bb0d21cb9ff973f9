"""No database server at all: every store call answers StoreUnavailable within one
`database_timeout_ms` (the first waits the bound, later ones do not wait it again),
the store says it is unreachable, and it serves again by itself once a server
accepts connections, counting the outage and the reconnection.

A server of its own (stopped and started here), so the session's shared one stays up."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from postgres_support import PostgresCluster
from prometheus_client.parser import text_string_to_metric_families

from engram.service.mcp.metrics import Metrics
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


def _scraped(store: PostgresStore) -> dict[str, float]:
    """The store's connectivity as /metrics exposes it: sample name -> value."""
    text = Metrics(store_connectivity=store.connectivity_state).render().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("engram_store_")
        for sample in family.samples
    }


def test_calls_fail_within_one_bound_while_no_server_answers_and_resume(server: PostgresCluster) -> None:
    store = PostgresStore(server.create_database(), timeout_ms=BOUND_MS)
    try:
        assert store.scopes() == []
        first = store.connectivity_state()
        assert first.reachable and first.server is not None and first.outages == 0

        server.kill_server()
        assert _unavailable(store)  # waited the bound: nothing accepts a connection
        down = store.connectivity_state()
        assert not down.reachable and down.outages == 1
        assert _scraped(store)["engram_store_reachable"] == 0

        # Several statements of one call (a route lookup, the tenant check, a read):
        # together within one bound, where each used to wait a bound of its own.
        started = time.monotonic()
        assert all(_unavailable(store) for _ in range(5))
        assert time.monotonic() - started < BOUND_MS / 1000
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
