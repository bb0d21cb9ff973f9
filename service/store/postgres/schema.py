"""The PostgreSQL schema: its migration steps, applied once when the first replica
opens the database (replicas starting together wait on one advisory lock)."""

from __future__ import annotations

from typing import Any

from ..base import DEFAULT_GROUP
from ..migrations import VERSION_TABLE, Migration, pending
from .connection import Database

POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial",
        (
            "CREATE TABLE IF NOT EXISTS tenants ("
            "tenant TEXT PRIMARY KEY, enabled BOOLEAN NOT NULL, changed_at TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS scopes ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, cursor BIGINT NOT NULL, "
            "head_digest TEXT, PRIMARY KEY (tenant, workspace))",
            "CREATE TABLE IF NOT EXISTS journal ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, cursor BIGINT NOT NULL, "
            "event_id TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, "
            "event_digest TEXT NOT NULL, prev_digest TEXT, recorded_at TEXT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, cursor))",
            "CREATE TABLE IF NOT EXISTS keys (key_id TEXT PRIMARY KEY, wrapped BYTEA NOT NULL, kek_id TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS candidates ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, candidate_id TEXT NOT NULL, "
            "state TEXT NOT NULL, key_id TEXT, sealed BYTEA, record_digest TEXT NOT NULL, "
            "payload_digest TEXT NOT NULL, principal TEXT NOT NULL, created_cursor BIGINT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, candidate_id))",
            "CREATE TABLE IF NOT EXISTS records ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, record_id TEXT NOT NULL, "
            "state TEXT NOT NULL, record_digest TEXT NOT NULL, payload_digest TEXT NOT NULL, "
            "key_id TEXT, sealed BYTEA, valid_from_ms BIGINT NOT NULL, valid_to_ms BIGINT, "
            "expires_at_ms BIGINT, accepted_cursor BIGINT NOT NULL, accepted_at TEXT NOT NULL, "
            "candidate_id TEXT, PRIMARY KEY (tenant, workspace, record_id))",
            "CREATE INDEX IF NOT EXISTS records_payload ON records (tenant, workspace, payload_digest)",
            "CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_at_ms) WHERE state = 'accepted_current'",
            "CREATE INDEX IF NOT EXISTS records_scope_expiry ON records (tenant, workspace, expires_at_ms)"
            " WHERE state = 'accepted_current' AND expires_at_ms IS NOT NULL",
            "CREATE TABLE IF NOT EXISTS idempotency ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, principal TEXT NOT NULL, key TEXT NOT NULL, "
            "tool TEXT NOT NULL, intent TEXT NOT NULL, response TEXT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, principal, key))",
            "CREATE TABLE IF NOT EXISTS pending_purges ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, record_id TEXT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, record_id))",
            "CREATE TABLE IF NOT EXISTS confirmations (ref TEXT PRIMARY KEY, used_at_ms BIGINT NOT NULL)",
        ),
    ),
    # Receipts kept once, referenced by digest from record bodies (Transaction.put_receipt).
    Migration(2, "receipts", ("CREATE TABLE IF NOT EXISTS receipts (digest TEXT PRIMARY KEY, body TEXT NOT NULL)",)),
    # The replica registry, per-replica purge acknowledgements, shared paging state.
    Migration(
        3,
        "replicas",
        (
            "CREATE TABLE replicas (replica_id TEXT PRIMARY KEY, heartbeat_ms BIGINT NOT NULL,"
            " registered_ms BIGINT NOT NULL)",
            "CREATE TABLE purge_acks (tenant TEXT NOT NULL, workspace TEXT NOT NULL, record_id TEXT NOT NULL,"
            " replica_id TEXT NOT NULL, PRIMARY KEY (tenant, workspace, record_id, replica_id))",
            "CREATE TABLE snapshots (snapshot_id TEXT PRIMARY KEY, body TEXT NOT NULL, created_ms BIGINT NOT NULL)",
            "CREATE INDEX snapshots_created ON snapshots (created_ms)",
            "CREATE TABLE secrets (name TEXT PRIMARY KEY, material BYTEA NOT NULL)",
        ),
    ),
    # Compact journal rows (journal.py): packed bodies, raw event ids and digests, no stored copy
    # of the predecessor's digest. Bodies written before stay JSON (as UTF-8 bytes) and
    # read as such; digests (records' too) become their raw bytes; every chain still verifies.
    Migration(
        4,
        "compact journal and record digests",
        (
            "ALTER TABLE journal ALTER COLUMN body TYPE BYTEA USING convert_to(body, 'UTF8')",
            "ALTER TABLE journal ALTER COLUMN event_digest TYPE BYTEA USING decode(substr(event_digest, 8), 'hex')",
            "ALTER TABLE journal ALTER COLUMN event_id TYPE BYTEA USING CASE WHEN event_id ~ '^evt_[0-9a-f]{32}$'"
            " THEN decode(substr(event_id, 5), 'hex') ELSE convert_to(event_id, 'UTF8') END",
            "UPDATE journal SET prev_digest = NULL WHERE prev_digest IS NOT NULL",
            "ALTER TABLE records ALTER COLUMN record_digest TYPE BYTEA USING decode(substr(record_digest, 8), 'hex')",
            "ALTER TABLE records ALTER COLUMN payload_digest TYPE BYTEA USING decode(substr(payload_digest, 8), 'hex')",
        ),
    ),
    # Scopes routed to replica groups: each replica's group and the URL peers forward to;
    # each scope's group (and the group taking it over during a move); replicas'
    # acknowledgements of route changes. Every scope already here stays with the
    # default group, the group of every replica started before groups existed.
    Migration(
        5,
        "scope routes",
        (
            f"ALTER TABLE replicas ADD COLUMN replica_group TEXT NOT NULL DEFAULT '{DEFAULT_GROUP}'",
            "ALTER TABLE replicas ADD COLUMN advertise_url TEXT",
            "CREATE TABLE scope_routes (tenant TEXT NOT NULL, workspace TEXT NOT NULL, replica_group TEXT NOT NULL,"
            " moving_to TEXT, version BIGINT NOT NULL, PRIMARY KEY (tenant, workspace))",
            "CREATE TABLE route_acks (tenant TEXT NOT NULL, workspace TEXT NOT NULL, replica_id TEXT NOT NULL,"
            " version BIGINT NOT NULL, PRIMARY KEY (tenant, workspace, replica_id))",
            f"INSERT INTO scope_routes SELECT tenant, workspace, '{DEFAULT_GROUP}', NULL, 1 FROM scopes",
        ),
    ),
    # Per-scope state counts (metrics scrapes, stats) read an index, not every row.
    Migration(
        6,
        "state indexes",
        (
            "CREATE INDEX IF NOT EXISTS records_state ON records (tenant, workspace, state)",
            "CREATE INDEX IF NOT EXISTS candidates_state ON candidates (tenant, workspace, state)",
        ),
    ),
)

# One advisory-lock key space for migrations (scope locks hash the scope into another).
_MIGRATION_LOCK = 0x656E6772616D  # "engram"


def migrate(db: Database) -> None:
    """Apply missing steps under an advisory lock, so replicas starting together
    migrate once."""
    with db.transaction() as conn, conn.unbounded():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
        )
        applied: Any = conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}").fetchone()
        for step in pending(int(applied[0]), POSTGRES_MIGRATIONS):
            for statement in step.statements:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (%s,%s,now())", (step.version, step.name))


def schema_version(db: Database) -> int:
    return int(db.rows(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}")[0][0])
