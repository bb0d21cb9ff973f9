"""The PostgreSQL store on a real server: migrations, and the guarantees two replicas
(here two engines in one process, each with its own data directory and pool, sharing
the database and the key directory) rely on: exactly-once idempotency, single-use
confirmation refs, and a gap-free, chained journal cursor per scope under concurrency."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from engine_support import (  # noqa: E402
    CAPTURE,
    FORGET,
    PURPOSE,
    REQUEST_ADMISSION,
    SEARCH,
    ContractError,
    ErrorCode,
    accept,
    capture,
    capture_args,
    confirmed,
    context,
    forget_args,
    open_engine,
)
from test_migrations import (  # noqa: E402
    check_migrated_journal,
    check_migrated_record,
    write_step3_database,
)

from engram.service.store.migrations import SchemaTooNew  # noqa: E402
from engram.service.store.postgres import POSTGRES_MIGRATIONS, PostgresStore  # noqa: E402


def run_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except ContractError as exc:
            results[i] = exc.code
        except Exception as exc:  # surfaced by the assertions
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.fixture
def replicas(tmp_path: Path, database_url: str):
    """Two engines on one database and one key directory."""
    keys = tmp_path / "keys"
    first = open_engine(tmp_path / "a", database_url=database_url, key_dir=keys)
    second = open_engine(tmp_path / "b", database_url=database_url, key_dir=keys)
    first.operator.set_tenant_enabled("acme", True)
    yield first, second
    first.close()
    second.close()


def test_schema_is_versioned_and_a_newer_one_refused(database_url: str) -> None:
    store = PostgresStore(database_url)
    assert store.schema_version() == len(POSTGRES_MIGRATIONS)
    store.close()
    PostgresStore(database_url).close()  # reopening applies nothing twice
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (%s, 'future', now())", (len(POSTGRES_MIGRATIONS) + 1,))
    with pytest.raises(SchemaTooNew, match="newer than this release"):
        PostgresStore(database_url)


def test_a_batch_larger_than_one_round_trip_lands_whole(database_url: str) -> None:
    """Executemany runs in slices (each one bounded wait): every row of a batch of
    several slices lands, once."""
    from engram.service.store.postgres import MANY_ROWS

    rows = [(f"k{n:05d}", bytes([n % 256]) * 8, "kek-a") for n in range(2 * MANY_ROWS + 7)]
    store = PostgresStore(database_url)
    try:
        with store.transaction() as tx:
            tx.put_keys(rows)
        assert sorted(store.all_wrapped_keys()) == rows
        store.rewrap_keys([(key_id, wrapped[::-1] + b"!", "kek-b") for key_id, wrapped, _ in rows])
        assert {kek for _, _, kek in store.all_wrapped_keys()} == {"kek-b"}
    finally:
        store.close()


def test_a_batch_with_one_row_that_breaks_a_key_lands_not_at_all(database_url: str) -> None:
    """A batch's rows are copied in slices; a row that repeats a key fails the whole
    transaction, and no row of the batch lands, the slices before it included."""
    from engram.service.store import StoreUnavailable
    from engram.service.store.postgres import MANY_ROWS

    store = PostgresStore(database_url)
    try:
        with store.transaction() as tx:
            tx.put_keys([("k-held", b"held", "kek-a")])
        rows = [(f"k{n:05d}", b"w", "kek-a") for n in range(MANY_ROWS + 5)] + [("k-held", b"again", "kek-a")]
        with pytest.raises(StoreUnavailable):
            with store.transaction() as tx:
                tx.put_keys(rows)
        assert store.all_wrapped_keys() == [("k-held", b"held", "kek-a")]
    finally:
        store.close()


def test_one_idempotency_key_raced_across_replicas_commits_once(replicas) -> None:
    a, b = replicas
    ctx = context()
    args = capture_args("Racing one capture over two replicas.")
    results = run_threads([(lambda e=e: e.execute(CAPTURE, ctx, args)) for e in (a, b) * 4])
    assert all(isinstance(r, dict) for r in results), results
    assert sorted(r["status"] for r in results) == ["committed_pending"] + ["duplicate_exact"] * 7
    assert len({r["candidate_id"] for r in results}) == 1
    assert sum(1 for e in a.deps.store.events(ctx.scope) if e.kind == "candidate_captured") == 1


def test_admission_raced_across_replicas_accepts_once(replicas) -> None:
    a, b = replicas
    ctx = context()
    _, cap = capture(a, ctx, "Racing admissions over two replicas.")
    results = run_threads(
        [
            (
                lambda e=e, i=i: e.execute(
                    REQUEST_ADMISSION,
                    ctx,
                    {"candidate_id": cap["candidate_id"], "idempotency_key": f"idem-key-adm-race-{i:04d}"},
                )
            )
            for i, e in enumerate((a, b) * 3)
        ]
    )
    accepted = [r for r in results if isinstance(r, dict)]
    assert len(accepted) == 1 and accepted[0]["outcome"]["status"] == "accepted", results
    assert sorted(str(r) for r in results if not isinstance(r, dict)) == ["ALREADY_TERMINAL"] * 5


def test_confirmation_ref_spent_on_one_replica_is_spent_on_the_other(replicas) -> None:
    a, b = replicas
    ctx = context()
    first, second = accept(a, ctx, "First record to forget."), accept(a, ctx, "Second record to forget.")
    args1, args2 = forget_args(first), forget_args(second)
    assert a.execute(FORGET, confirmed(ctx, FORGET, first, args1, ref="ref-shared"), args1)["receipt"]
    with pytest.raises(ContractError) as info:
        b.execute(FORGET, confirmed(ctx, FORGET, second, args2, ref="ref-shared"), args2)
    assert info.value.code is ErrorCode.GATE_FAILED
    # and the race: one ref offered to both replicas at once is honoured once
    third, fourth = accept(a, ctx, "Third record."), accept(a, ctx, "Fourth record.")
    args3, args4 = forget_args(third), forget_args(fourth)
    results = run_threads(
        [
            lambda: a.execute(FORGET, confirmed(ctx, FORGET, third, args3, ref="ref-raced"), args3),
            lambda: b.execute(FORGET, confirmed(ctx, FORGET, fourth, args4, ref="ref-raced"), args4),
        ]
    )
    assert sum(isinstance(r, dict) for r in results) == 1, results
    assert [r for r in results if not isinstance(r, dict)] == [ErrorCode.GATE_FAILED]


def test_journal_cursor_is_gap_free_under_concurrent_appends(database_url: str) -> None:
    stores = [PostgresStore(database_url), PostgresStore(database_url)]
    scope = ("acme", "main")

    def append(store: PostgresStore, n: int) -> list[int]:
        cursors = []
        for i in range(n):
            with store.transaction() as tx:
                cursors.append(tx.append_event(scope, "probe", f"s{i}", {"i": i}, "2026-01-01T00:00:00.000Z").cursor)
        return cursors

    results = run_threads([lambda s=s: append(s, 25) for s in stores * 3])
    try:
        assert all(isinstance(r, list) for r in results), results
        cursors = sorted(c for r in results for c in r)
        assert cursors == list(range(1, 151))
        assert stores[0].scope_cursor(scope) == 150
        assert stores[1].verify_chain(scope)
    finally:
        for s in stores:
            s.close()


def test_admin_commands_reach_the_database_named_by_database_url(database_url: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from engram.service.cli import app

    (tmp_path / "operator").mkdir()
    out = CliRunner().invoke(
        app,
        [
            "admin",
            "--database-url",
            database_url,
            "--key-dir",
            str(tmp_path / "keys"),
            "tenant",
            "enable",
            "acme",
            "--data-dir",
            str(tmp_path / "operator"),
        ],
    )
    assert out.exit_code == 0, out.output
    store = PostgresStore(database_url)
    try:
        assert store.tenant_enabled("acme")
    finally:
        store.close()
    assert not (tmp_path / "operator" / "engram.db").exists()  # nothing went to SQLite


def test_admin_replicas_lists_and_retires_a_replica_gone_for_good(database_url: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from engram.service.cli import app

    keys = tmp_path / "keys"
    serving = open_engine(tmp_path / "r1", database_url=database_url, key_dir=keys, serve_replica=True)
    gone = open_engine(tmp_path / "r2", database_url=database_url, key_dir=keys, serve_replica=True)
    gone_id = gone.deps.replica.replica_id
    gone.close()  # never comes back; its last heartbeat a minute ago
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE replicas SET heartbeat_ms = heartbeat_ms - 60000 WHERE replica_id=%s", (gone_id,))
    serving.operator.set_tenant_enabled("acme", True)
    ctx = context()
    rid = accept(serving, ctx, "A record forgotten while a replica is gone.")
    args = forget_args(rid)
    out = serving.execute(FORGET, confirmed(ctx, FORGET, rid, args), args)
    assert out["projection_invalidation"] == "complete"  # the gone replica is not live
    assert serving.deps.store.pending_purges() == {ctx.scope: [rid]}  # ... but it still owes the purge
    serving.close()

    base = ["admin", "--database-url", database_url, "--key-dir", str(keys)]
    (tmp_path / "op").mkdir()
    listed = CliRunner().invoke(app, [*base, "replicas", "--data-dir", str(tmp_path / "op")])
    assert listed.exit_code == 0, listed.output
    assert gone_id in listed.output and '"live"' in listed.output
    retired = CliRunner().invoke(app, [*base, "replicas", "--retire", gone_id, "--data-dir", str(tmp_path / "op")])
    assert retired.exit_code == 0, retired.output
    store = PostgresStore(database_url)
    try:
        assert gone_id not in [e.replica_id for e in store.deployment.replica_entries()]
        assert store.pending_purges() == {}  # the only replica that owed it is retired
    finally:
        store.close()


def test_journal_of_an_older_release_migrates(database_url: str) -> None:
    """A database at step 3 (JSON text bodies, digests as text, stored links) migrates to
    the compact journal: old events read back unchanged, chains verify, new ones chain on."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = write_step3_database(conn, POSTGRES_MIGRATIONS, "%s", "TIMESTAMPTZ")
    store = PostgresStore(database_url)
    try:
        assert store.schema_version() == len(POSTGRES_MIGRATIONS)
        check_migrated_journal(store, rows)
        check_migrated_record(store)
    finally:
        store.close()
    with psycopg.connect(database_url, autocommit=True) as conn:
        lengths = conn.execute(
            "SELECT octet_length(event_id), octet_length(event_digest), prev_digest FROM journal"
        ).fetchall()
    assert lengths == [(16, 32, None)] * (len(rows) + 1)


def _walk(first: Any, rest: Any, ctx: Any, query: str) -> list[str]:
    """Every record id of a search paged 2 at a time: page one on ``first``, the rest on ``rest``."""
    args = {"query": query, "purpose_ref": PURPOSE, "limit": 2}
    out = first.execute(SEARCH, ctx, args)
    ids = [r["record"]["record_id"] for r in out["records"]]
    while "next_page_cursor" in out:
        out = rest.execute(SEARCH, ctx, {**args, "page_cursor": out["next_page_cursor"]})
        ids += [r["record"]["record_id"] for r in out["records"]]
    return ids


def test_a_page_cursor_works_on_the_other_replica_while_its_snapshot_is_still_being_stored(
    replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = replicas
    ctx = context()
    wanted = sorted(accept(a, ctx, f"Paging note {i} about the walrus ledger.") for i in range(7))
    store = a.deps.store
    real = store.put_snapshot
    release, stored = threading.Event(), threading.Event()

    def held_put(*args: Any) -> None:  # the real write, once the test lets it through
        release.wait(10)
        real(*args)
        stored.set()

    monkeypatch.setattr(store, "put_snapshot", held_put)
    first = a.execute(SEARCH, ctx, {"query": "walrus ledger", "purpose_ref": PURPOSE, "limit": 2})
    assert not stored.is_set()  # answered while its snapshot was not stored yet
    threading.Timer(0.2, release.set).start()  # ... and stored while the other replica waits for it
    ids = [r["record"]["record_id"] for r in first["records"]]
    out = first
    while "next_page_cursor" in out:  # the other replica waits for the snapshot, then pages
        out = b.execute(
            SEARCH,
            ctx,
            {"query": "walrus ledger", "purpose_ref": PURPOSE, "limit": 2, "page_cursor": out["next_page_cursor"]},
        )
        ids += [r["record"]["record_id"] for r in out["records"]]
    assert sorted(ids) == wanted and len(ids) == 7  # no repeat, no gap
    # The replica that ranked pages from its own copy, even while the store is unreachable.
    monkeypatch.setattr(store, "snapshot", lambda snapshot_id: pytest.fail("read its own snapshot back"))
    assert sorted(_walk(a, a, ctx, "walrus ledger")) == wanted


def test_a_snapshot_the_store_never_got_is_stale_on_the_other_replica(
    replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = replicas
    ctx = context()
    for i in range(5):
        accept(a, ctx, f"Lost snapshot note {i} about the narwhal queue.")

    def failing_put(*args: Any) -> None:
        raise psycopg.OperationalError("the store is down")

    monkeypatch.setattr(a.deps.store, "put_snapshot", failing_put)
    first = a.execute(SEARCH, ctx, {"query": "narwhal queue", "purpose_ref": PURPOSE, "limit": 2})
    with pytest.raises(ContractError) as info:
        b.execute(
            SEARCH,
            ctx,
            {"query": "narwhal queue", "purpose_ref": PURPOSE, "limit": 2, "page_cursor": first["next_page_cursor"]},
        )
    assert info.value.code is ErrorCode.STALE_PAGE


def test_each_statement_is_planned_for_its_own_parameters(database_url: str) -> None:
    """psycopg prepares a statement run five times; the server then plans it once for
    any parameters unless told otherwise, and a plan made while a table was small kept
    scanning the whole table for each ``= ANY(ids)`` as it grew (a bulk load's batch
    check took seconds). Every execution is planned for its own ids."""
    store = PostgresStore(database_url)
    try:
        for n in range(12):
            with store.transaction() as tx:
                tx.present_records(("acme", "plans"), [f"mem_{n}_{i}" for i in range(50)])
        with store.transaction() as tx:
            plans = tx.conn.execute(  # type: ignore[attr-defined]
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE 'SELECT record_id FROM records WHERE%'"
            ).fetchall()
    finally:
        store.close()
    assert plans, "the statement was prepared on the connection"
    assert all(generic == 0 and custom > 0 for generic, custom in plans), plans
