"""Scope routes in the PostgreSQL store: the schema step that adopts existing scopes,
one winner when replicas race to claim a scope, the move's two steps, and purges owed
only by the replicas of the groups holding the scope."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
from engine_support import accept, context, open_engine, search_ids
from typer.testing import CliRunner

from engram.service.cli import app
from engram.service.engine.records import scope_key
from engram.service.store.base import DEFAULT_GROUP, Route
from engram.service.store.postgres import POSTGRES_MIGRATIONS, PostgresStore

SCOPE = ("acme", "ws1")
OTHER = ("acme", "ws2")


def _append(store: PostgresStore, scope: tuple[str, str]) -> None:
    with store.transaction() as tx:
        tx.append_event(scope, "note", "subject", {"n": 1}, "2026-01-01T00:00:00Z")


def test_scopes_held_before_routes_stay_with_the_default_group(database_url: str) -> None:
    store = PostgresStore(database_url)
    _append(store, SCOPE)
    store.close()
    with psycopg.connect(database_url, autocommit=True) as conn:  # back to the schema before routes
        conn.execute("DELETE FROM schema_migrations WHERE version >= 5")
        conn.execute("DROP INDEX records_state, candidates_state")
        conn.execute("DROP TABLE scope_routes, route_acks")
        conn.execute("ALTER TABLE replicas DROP COLUMN replica_group, DROP COLUMN advertise_url")
    store = PostgresStore(database_url)
    try:
        assert store.schema_version() == len(POSTGRES_MIGRATIONS)
        assert store.deployment.route(SCOPE) == Route(DEFAULT_GROUP, None, 1)
        assert store.deployment.route(OTHER) is None
    finally:
        store.close()


def test_racing_claims_agree_on_one_group(database_url: str) -> None:
    store = PostgresStore(database_url)
    try:
        groups = [f"g{i}" for i in range(6)]
        results: list[Route | None] = [None] * len(groups)
        barrier = threading.Barrier(len(groups))

        def claim(i: int) -> None:
            barrier.wait()
            results[i] = store.deployment.claim_route(SCOPE, groups[i])

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(groups))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(results)) == 1 and results[0] is not None and results[0].group in groups
        assert store.deployment.route(SCOPE) == results[0]
    finally:
        store.close()


def test_a_move_projects_first_then_flips(database_url: str) -> None:
    store = PostgresStore(database_url)
    try:
        assert store.deployment.begin_move(OTHER, "beta") == Route("beta", None, 1)  # no route yet: routed at once
        store.deployment.claim_route(SCOPE, "alpha")
        moving = store.deployment.begin_move(SCOPE, "beta")
        assert moving == Route("alpha", "beta", 2)
        assert store.deployment.begin_move(SCOPE, "beta") == moving  # rerun: the same move, resumed
        assert store.deployment.finish_move(SCOPE, "gamma") == moving  # not the move under way: unchanged
        assert store.deployment.finish_move(SCOPE, "beta") == Route("beta", None, 3)
        store.deployment.ack_route(SCOPE, "r1", 2)
        store.deployment.ack_route(SCOPE, "r2", 3)
        store.deployment.ack_route(SCOPE, "r2", 1)  # an older acknowledgement never goes back
        assert store.deployment.route_acks(SCOPE, 3) == {"r2"} and store.deployment.route_acks(SCOPE, 2) == {"r1", "r2"}
        assert dict(store.deployment.routes()) == {SCOPE: Route("beta", None, 3), OTHER: Route("beta", None, 1)}
    finally:
        store.close()


def test_purges_are_owed_by_the_holding_groups_only(database_url: str) -> None:
    store = PostgresStore(database_url)
    try:
        for replica_id, group in (("a1", "alpha"), ("a2", "alpha"), ("b1", "beta")):
            store.deployment.heartbeat(replica_id, 10_000, group, f"http://{replica_id}:1")
        store.deployment.claim_route(SCOPE, "alpha")
        with store.transaction() as tx:
            tx.add_pending_purge(SCOPE, "rec1")
        assert store.deployment.live_holders(SCOPE, 0) == ["a1", "a2"]
        assert store.deployment.live_holders(("acme", "unrouted"), 0) == ["a1", "a2", "b1"]
        assert store.deployment.purges_awaiting("b1") == {}
        assert store.deployment.purges_awaiting("a1") == {SCOPE: ["rec1"]}
        assert [m.replica_id for m in store.deployment.group_members("alpha", 0)] == ["a1", "a2"]
        assert store.deployment.group_members("alpha", 20_000) == []  # none heartbeat since then
        store.deployment.ack_purges(SCOPE, ["rec1"], "a1")
        assert store.deployment.settle_purges(SCOPE, ["rec1"], ["a1", "a2"]) == ["rec1"]  # a2 still owes it
        store.deployment.begin_move(SCOPE, "beta")  # during a move the target group holds it too
        assert store.deployment.live_holders(SCOPE, 0) == ["a1", "a2", "b1"]
        store.deployment.ack_purges(SCOPE, ["rec1"], "a2")
        assert store.deployment.settle_purges(SCOPE, ["rec1"], ["a1", "a2", "b1"]) == ["rec1"]  # b1 owes it now
        store.deployment.ack_purges(SCOPE, ["rec1"], "b1")
        assert store.deployment.settle_purges(SCOPE, ["rec1"], ["a1", "a2", "b1"]) == []
        assert store.pending_purges() == {}
    finally:
        store.close()


def test_a_group_needs_a_shared_store(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app,
        ["serve", "--no-model", "--group", "alpha", "--data-dir", str(tmp_path / "d")],
        env={"ENGRAM_DATABASE_URL": ""},
    )
    assert out.exit_code == 2 and "--group needs a shared store" in out.output


def test_an_unclaimed_scope_is_warm_on_the_default_group_at_ready(tmp_path: Path, database_url: str) -> None:
    """A scope written by an engine that serves no calls (bulk ingest, an operator
    command) has no route yet: the replicas of the default group project it during
    warm-up, so their first search is served from a current index; a replica of
    another group leaves it alone until the scope is routed there."""
    ctx = context(workspace="unclaimed")
    writer = open_engine(tmp_path / "writer", database_url=database_url, key_dir=tmp_path / "keys")
    try:
        writer.operator.set_tenant_enabled(ctx.tenant, True)
        rid = accept(writer, ctx, "The night ferry calls at the island twice a week.")
    finally:
        writer.close()
    key = scope_key(ctx.scope)
    default = open_engine(tmp_path / "d", database_url=database_url, key_dir=tmp_path / "keys", serve_replica=True)
    other = open_engine(
        tmp_path / "o", database_url=database_url, key_dir=tmp_path / "keys", serve_replica=True, group="beta"
    )
    try:
        head = default.deps.store.scope_cursor(ctx.scope)
        assert default.deps.store.deployment.route(ctx.scope) is None
        assert set(default.deps.ranker.projection_cursor(key).values()) == {head}
        assert set(other.deps.ranker.projection_cursor(key).values()) == {0}
        assert search_ids(default, ctx, "night ferry island") == [rid]
    finally:
        default.close()
        other.close()
