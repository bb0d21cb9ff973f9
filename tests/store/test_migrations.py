"""Versioned schema: a fresh database is at the latest step, an old one is adopted, and
a database a newer release migrated is refused with a clear error (store and CLI)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engram.service.store.journal import event_digest
from engram.service.store.migrations import Migration, SchemaTooNew, pending
from engram.service.store.sqlite import SQLITE_MIGRATIONS, SqliteStore


def test_fresh_database_is_at_latest_step(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "engram.db")
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
    finally:
        store.close()
    # reopening applies nothing twice
    store = SqliteStore(tmp_path / "engram.db")
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
    finally:
        store.close()


def test_pre_versioning_database_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    conn = sqlite3.connect(path)
    for statement in SQLITE_MIGRATIONS[0].statements:
        conn.execute(statement)
    conn.execute("INSERT INTO tenants VALUES ('acme', 1, 'then')")
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
        assert store.tenant_enabled("acme")
    finally:
        store.close()


def _newer(path: Path) -> None:
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 'later')", (len(SQLITE_MIGRATIONS) + 1,))
    conn.commit()
    conn.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    _newer(path)
    with pytest.raises(SchemaTooNew) as info:
        SqliteStore(path)
    assert "newer than this release" in str(info.value)


def test_cli_refuses_newer_schema_with_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _newer(data / "engram.db")
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(Path.cwd()))}
    env.pop("ENGRAM_DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "engram.service.cli", "admin", "tenant", "status", "acme", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "newer than this release" in proc.stderr


def test_steps_must_be_ordered() -> None:
    steps = (Migration(1, "a", ()), Migration(3, "c", ()))
    with pytest.raises(ValueError):
        pending(0, steps)
    assert [m.version for m in pending(1, (Migration(1, "a", ()), Migration(2, "b", ())))] == [2]


# -- step 4: compact journal rows ------------------------------------------------------------

SCOPE = ("acme", "ops")
OLD_EVENTS = [
    ("candidate_captured", "cand_one", {"payload_digest": "sha256:" + "1" * 64, "principal": "alice"}),
    (
        "record_accepted",
        "mem_one",
        {"candidate_id": "cand_one", "record_digest": "sha256:" + "2" * 64, "trust": "asserted"},
    ),
    (
        "record_tombstoned",
        "mem_one",
        {"reason_ref": "reason:obsolete", "principal": "alice", "from_state": "accepted_current"},
    ),
]


def old_journal_rows(events=OLD_EVENTS, scope=SCOPE) -> list[tuple]:
    """Journal rows as a release before step 4 wrote them: JSON text bodies, digests as
    text, each row naming its predecessor's digest."""
    rows, prev = [], None
    for cursor, (kind, subject, body) in enumerate(events, 1):
        at = f"2026-01-01T00:00:0{cursor}.000Z"
        event_id = f"evt_{cursor:032x}"
        digest_ = event_digest(scope, cursor, event_id, kind, subject, body, prev, at)
        rows.append((*scope, cursor, event_id, kind, subject, json.dumps(body, sort_keys=True), digest_, prev, at))
        prev = digest_
    return rows


OLD_RECORD = (
    *SCOPE,
    "mem_one",
    "tombstoned",
    "sha256:" + "2" * 64,
    "sha256:" + "3" * 64,
    None,
    None,
    1000,
    None,
    None,
    2,
    "2026-01-01T00:00:02.000Z",
    "cand_one",
)


def check_migrated_record(store) -> None:
    """A record row of an older release reads back the same and is found by its payload."""
    (row,) = store.records(SCOPE, ["mem_one"]).values()
    assert (row.record_digest, row.payload_digest, row.state) == (OLD_RECORD[4], OLD_RECORD[5], "tombstoned")
    with store.reader() as tx:
        assert tx.tombstoned_payload(SCOPE, OLD_RECORD[5])
        assert not tx.tombstoned_payload(SCOPE, "sha256:" + "4" * 64)


def check_migrated_journal(store, rows: list[tuple]) -> None:
    """The old events read back unchanged, the chain verifies, and a new event chains on."""
    assert store.verify_chain(SCOPE)
    events = list(store.events(SCOPE))
    assert [(e.cursor, e.event_id, e.kind, e.subject, e.body, e.event_digest, e.recorded_at) for e in events] == [
        (r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[9]) for r in rows
    ]
    with store.transaction() as tx:
        tx.append_event(SCOPE, "record_state_changed", "mem_one", {"operation": "expire"}, "2026-01-02T00:00:00.000Z")
    assert store.verify_chain(SCOPE) and store.scope_cursor(SCOPE) == len(rows) + 1


def write_step3_database(conn, steps, mark: str, applied_at_type: str) -> list[tuple]:
    """Bring an empty database (SQLite or PostgreSQL, through ``conn.execute`` with
    ``mark`` placeholders) to step 3 as an older release left it: its journal rows (which
    it returns), the scope head, one key and one record. What step 4 then migrates."""
    marks = lambda n: ",".join([mark] * n)  # noqa: E731
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        f" applied_at {applied_at_type} NOT NULL)"
    )
    for step in steps[:3]:
        for statement in step.statements:
            conn.execute(statement)
        conn.execute(
            f"INSERT INTO schema_migrations VALUES ({marks(3)})", (step.version, step.name, "2026-01-01T00:00:00Z")
        )
    rows = old_journal_rows()
    for row in rows:
        conn.execute(f"INSERT INTO journal VALUES ({marks(10)})", row)
    conn.execute(f"INSERT INTO scopes VALUES ({marks(4)})", (*SCOPE, len(rows), rows[-1][7]))
    conn.execute(f"INSERT INTO keys VALUES ({marks(3)})", ("key_one", b"wrapped bytes", "kek-1"))
    conn.execute(f"INSERT INTO records VALUES ({marks(14)})", OLD_RECORD)
    return rows


def test_journal_rows_of_an_older_release_are_compacted(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    conn = sqlite3.connect(path)
    conn.create_function("engram_idempotency_key_digest", 1, lambda key: key)
    rows = write_step3_database(conn, SQLITE_MIGRATIONS, "?", "TEXT")
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
        check_migrated_journal(store, rows)
        assert store.wrapped_key("key_one") == (b"wrapped bytes", "kek-1")  # the keys table, rebuilt
        check_migrated_record(store)
    finally:
        store.close()
    conn = sqlite3.connect(path)
    kinds = conn.execute(
        "SELECT DISTINCT typeof(body), typeof(event_id), typeof(event_digest), typeof(prev_digest) FROM journal"
    ).fetchall()
    sizes = conn.execute(
        "SELECT length(body), length(event_digest) FROM journal WHERE cursor <= ? ORDER BY cursor", (len(rows),)
    ).fetchall()
    conn.close()
    assert kinds == [("blob", "blob", "blob", "null")]  # rewritten in place, in the compact form
    conn = sqlite3.connect(path)
    assert "WITHOUT ROWID" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'keys'").fetchone()[0]
    conn.close()
    assert all(body < len(r[6]) and digest_ == 32 for (body, digest_), r in zip(sizes, rows))


# -- step 5: state and expiry indexes -------------------------------------------------------


def _plan(path: Path, sql: str, params: tuple) -> str:
    conn = sqlite3.connect(path)
    try:
        return " | ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()


def test_state_counts_and_expiry_read_indexes_not_every_row(tmp_path: Path) -> None:
    """What a metrics scrape and `engram admin expire` ask of the store is answered from
    an index: a scan of the record table (sealed bodies and all) took minutes at
    millions of records."""
    from engram.service.store.statements import DUE_FOR_EXPIRY, LIVE_MORE_THAN, STATE_COUNTS

    path = tmp_path / "engram.db"
    SqliteStore(path).close()
    for table in ("records", "candidates"):
        plan = _plan(path, STATE_COUNTS.format(table), SCOPE)
        assert f"COVERING INDEX {table}_state" in plan, plan
    # search (is the scope empty?) and forget (purge inline or in the background?)
    assert "COVERING INDEX records_state" in _plan(path, LIVE_MORE_THAN, (*SCOPE, 1))
    plan = _plan(path, DUE_FOR_EXPIRY, (1,))
    assert plan.startswith("SEARCH records USING INDEX records_expiry"), plan


def test_a_database_before_step_5_gains_the_indexes_keeping_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    conn = sqlite3.connect(path)
    for migration in SQLITE_MIGRATIONS[:4]:
        for statement in migration.statements:
            if "engram_" not in statement:  # the rewrite steps' functions are the store's
                conn.execute(statement)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT)")
    conn.executemany(
        "INSERT INTO schema_migrations VALUES (?, ?, 'then')", [(m.version, m.name) for m in SQLITE_MIGRATIONS[:4]]
    )
    conn.executemany(
        "INSERT INTO records (tenant, workspace, record_id, state, record_digest, payload_digest,"
        " valid_from_ms, accepted_cursor, accepted_at) VALUES (?, ?, ?, ?, 'd', 'p', 0, 1, 'then')",
        [(*SCOPE, f"mem_{n}", "accepted_current" if n % 3 else "tombstoned") for n in range(9)],
    )
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(SQLITE_MIGRATIONS)
        assert store.state_counts(SCOPE).records == {"accepted_current": 6, "tombstoned": 3}
        assert [store.live_more_than(SCOPE, n) for n in (0, 5, 6)] == [True, True, False]
    finally:
        store.close()
    conn = sqlite3.connect(path)
    indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert {"records_state", "candidates_state", "records_expiry"} <= indexes
