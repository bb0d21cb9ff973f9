"""PostgreSQL store: the system of record that several `engram serve` replicas share.

Same protocol and semantics as the SQLite store (`Store`), over psycopg 3 and a pool of
bounded connections (:mod:`.connection`), plus what a shared store adds
(`SharedStore`): journal wake-ups (:mod:`.notifications`), paging snapshots and secrets
every replica reads alike, and the shared deployment's tables as their own object
(:attr:`PostgresStore.deployment`, :mod:`.deployment`).

- `reader()` is a REPEATABLE READ, READ ONLY transaction bound to the calling thread;
  store-level reads made on that thread inside it use the same snapshot.
- `purge_freed_pages` vacuums the tables that held destroyed bytes (wrapped keys, sealed
  bodies), so their dead tuples leave the heap. Like any WAL, PostgreSQL's keeps the old
  row image until the segment is recycled; that image is a data key wrapped under the
  KEK, which never lives in the database (README, scale-out).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from .. import rows as decoded
from .. import statements as S
from ..base import (
    DEFAULT_DATABASE_TIMEOUT_MS,
    BackupUnsupported,
    JournalEvent,
    RecordRow,
    Scope,
    StateCounts,
    StoreUnavailable,
)
from ..connectivity import ConnectivityState
from ..journal import StoredEvent, chain_intact, read_digest
from ..rows import JOURNAL_COLUMNS, RECORD_WITH_KEY
from ..statements import pyformat
from .connection import POOL_SIZE, Database, execute_many
from .deployment import PostgresDeployment
from .notifications import JournalListener
from .schema import migrate, schema_version
from .transaction import PostgresTransaction


class PostgresStore:
    """The shared store at a `postgresql://` URL (schema migrated on open); no wait on
    the database lasts longer than ``timeout_ms`` (see :mod:`.connection`)."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS) -> None:
        self.db = Database(url, pool_size=pool_size, timeout_ms=timeout_ms)
        self.deployment = PostgresDeployment(self.db)
        self._listener = JournalListener(self.db)
        migrate(self.db)

    def connectivity_state(self) -> ConnectivityState:
        return self.db.connectivity_state()

    def schema_version(self) -> int:
        return schema_version(self.db)

    @contextmanager
    def transaction(self) -> Iterator[PostgresTransaction]:
        """BEGIN ... COMMIT on a pooled connection; writers serialise per scope.

        Store-level reads made on this thread inside the block use the same connection:
        a writer holding a scope lock never waits for a second pooled connection."""
        with self.db.transaction() as conn:
            yield PostgresTransaction(conn, writing=True)

    @contextmanager
    def reader(self) -> Iterator[PostgresTransaction]:
        """One REPEATABLE READ snapshot, also used by this thread's store-level reads."""
        with self.db.snapshot() as conn:
            yield PostgresTransaction(conn, writing=False)

    def _rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of one of the shared :mod:`..statements`."""
        return self.db.rows(pyformat(statement), params)

    def _named_rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """`_rows`, each row's columns by name."""
        return self.db.named_rows(pyformat(statement), params)

    # receipts --------------------------------------------------------------------------
    def receipt(self, receipt_digest: str) -> dict[str, Any] | None:
        rows = self._rows(S.RECEIPT, (receipt_digest,))
        return json.loads(rows[0][0]) if rows else None

    # keys ---------------------------------------------------------------------------
    def wrapped_key(self, key_id: str) -> tuple[bytes, str] | None:
        rows = self._rows(S.WRAPPED_KEY, (key_id,))
        return (bytes(rows[0][0]), rows[0][1]) if rows else None

    def all_wrapped_keys(self) -> list[tuple[str, bytes, str]]:
        return [(r[0], bytes(r[1]), r[2]) for r in self._rows(S.ALL_WRAPPED_KEYS)]

    def rewrap_keys(self, rows: list[tuple[str, bytes, str]]) -> None:
        with self.transaction() as tx:
            execute_many(
                tx.conn, pyformat(S.REWRAP_KEY), [(wrapped, kek_id, key_id) for key_id, wrapped, kek_id in rows]
            )

    # journal and scopes ---------------------------------------------------------------
    def scope_cursor(self, scope: Scope) -> int:
        rows = self._rows(S.SCOPE_CURSOR, scope)
        return int(rows[0][0]) if rows else 0

    def scopes(self) -> list[Scope]:
        return [(r[0], r[1]) for r in self._rows(S.SCOPES)]

    def events(self, scope: Scope, after: int = 0) -> Iterator[JournalEvent]:
        return (decoded.event(scope, stored) for stored in self._journal_rows(scope, after))

    def journal_digests(self, scope: Scope, cursors: list[int]) -> dict[int, str]:
        if not cursors:
            return {}
        return {
            int(r[0]): read_digest(r[1])
            for r in self.db.rows(
                "SELECT cursor, event_digest FROM journal"
                " WHERE tenant=%s AND workspace=%s AND cursor = ANY(%s::bigint[])",
                (*scope, list(cursors)),
            )
        }

    def verify_chain(self, scope: Scope) -> bool:
        return chain_intact(scope, self._journal_rows(scope))

    def _journal_rows(self, scope: Scope, after: int = 0) -> Iterator[StoredEvent]:
        page = S.JOURNAL_PAGE.format(JOURNAL_COLUMNS)
        return (decoded.stored_event(row) for row in S.paged(self._named_rows, page, scope, after, "cursor"))

    # records ---------------------------------------------------------------------------
    def records(self, scope: Scope, record_ids: list[str]) -> dict[str, RecordRow]:
        if not record_ids:
            return {}
        return {
            row["record_id"]: decoded.record_with_key(row)
            for row in self.db.named_rows(
                f"SELECT {RECORD_WITH_KEY} WHERE r.tenant=%s AND r.workspace=%s AND r.record_id = ANY(%s)",
                (*scope, list(record_ids)),
            )
        }

    def records_in_state(self, state: str, scope: Scope) -> list[RecordRow]:
        return [decoded.record(r) for r in self.db.named_rows(pyformat(S.RECORDS_IN_STATE), (state, *scope))]

    def live_more_than(self, scope: Scope, n: int) -> bool:
        live = self._rows(S.LIVE_MORE_THAN, (*scope, n + 1))
        return int(live[0][0]) > n

    def state_counts(self, scope: Scope) -> StateCounts:
        return StateCounts(
            candidates={state: int(n) for state, n in self._rows(S.STATE_COUNTS.format("candidates"), scope)},
            records={state: int(n) for state, n in self._rows(S.STATE_COUNTS.format("records"), scope)},
        )

    def pending_purges(self) -> dict[Scope, list[str]]:
        pending_: dict[Scope, list[str]] = {}
        for tenant, workspace, record_id in self._rows(S.PENDING_PURGES):
            pending_.setdefault((tenant, workspace), []).append(record_id)
        return pending_

    def clear_pending_purges(self, scope: Scope, record_ids: list[str]) -> None:
        with self.transaction() as tx:
            tx.conn.execute(
                "DELETE FROM pending_purges WHERE tenant=%s AND workspace=%s AND record_id = ANY(%s)",
                (*scope, list(record_ids)),
            )

    def due_for_expiry(self, at_ms: int) -> list[RecordRow]:
        return [decoded.record(r) for r in self.db.named_rows(pyformat(S.DUE_FOR_EXPIRY), (at_ms,))]

    def due_for_expiry_page(self, at_ms: int, limit: int, scope: Scope | None = None) -> tuple[int, list[RecordRow]]:
        count, soonest, params = S.due_page(at_ms, scope)
        rows = self.db.named_rows(pyformat(soonest), (*params, limit))
        return int(self._rows(count, params)[0][0]), [decoded.record(r) for r in rows]

    def live_records(self, scope: Scope) -> Iterator[RecordRow]:
        rows = S.paged(self._named_rows, S.LIVE_RECORDS_PAGE, scope, "", "record_id")
        return (decoded.record_with_key(r) for r in rows)

    # tenants ----------------------------------------------------------------------------
    def tenant_enabled(self, tenant: str) -> bool:
        rows = self._rows(S.TENANT_ENABLED, (tenant,))
        return bool(rows and rows[0][0])

    def set_tenant_enabled(self, tenant: str, enabled: bool, at: str) -> None:
        with self.transaction() as tx:
            tx.conn.execute(pyformat(S.SET_TENANT_ENABLED), (tenant, enabled, at))

    # paging snapshots ------------------------------------------------------------------
    def put_snapshot(self, snapshot_id: str, body: str, created_ms: int, expire_before_ms: int) -> None:
        """One statement, so one round trip: the expired snapshots go as this one is stored."""
        try:
            with self.db.checkout() as conn:
                conn.execute(
                    "WITH expired AS (DELETE FROM snapshots WHERE created_ms < %s) "
                    "INSERT INTO snapshots VALUES (%s,%s,%s)",
                    (expire_before_ms, snapshot_id, body, created_ms),
                )
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc

    def snapshot(self, snapshot_id: str) -> tuple[str, int] | None:
        rows = self.db.rows("SELECT body, created_ms FROM snapshots WHERE snapshot_id=%s", (snapshot_id,))
        return (rows[0][0], int(rows[0][1])) if rows else None

    def shared_secret(self, name: str) -> bytes:
        """A random secret every replica reads alike (created once, first writer wins)."""
        with self.transaction() as tx:
            tx.conn.execute(
                "INSERT INTO secrets VALUES (%s,%s) ON CONFLICT (name) DO NOTHING", (name, secrets.token_bytes(32))
            )
            row: Any = tx.conn.execute("SELECT material FROM secrets WHERE name=%s", (name,)).fetchone()
        return bytes(row[0])

    # physical hygiene and backup -----------------------------------------------------------
    def purge_freed_pages(self) -> bool:
        """VACUUM the tables that held destroyed bytes; False when the server refused
        (retry later)."""
        try:
            with self.db.checkout() as conn:
                for table in ("keys", "candidates", "records"):
                    conn.execute(sql.SQL("VACUUM {}").format(sql.Identifier(table)))
        except psycopg.Error:
            return False
        return True

    def refresh_statistics(self) -> None:
        """ANALYZE the tables a bulk load fills. Until autovacuum gets to them, a table
        loaded in one go has no statistics, and the planner read a page's candidates
        through the wrong index, filtering the whole scope (docs/results/, Stores and
        replicas)."""
        with self.db.checkout() as conn:
            for table in ("records", "keys", "journal", "candidates"):
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))

    def footprint(self) -> dict[str, int]:
        """Bytes per table (heap, TOAST and indexes: pg_total_relation_size)."""
        return {
            name: int(size)
            for name, size in self.db.rows(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relkind = 'r' AND n.nspname = current_schema()"
            )
        }

    def backup(self, dest_path: str) -> None:
        raise BackupUnsupported(
            "back up a PostgreSQL store with the database's own tools (pg_dump, or base backups"
            " with WAL archiving) plus the key directory"
        )

    def wait_for_journal(self, timeout_s: float) -> set[Scope]:
        """Scopes some replica committed journal events to, waiting up to `timeout_s`
        for the first (see :class:`.notifications.JournalListener`)."""
        return self._listener.wait(timeout_s, self.scopes)

    def close(self) -> None:
        self._listener.close()
        self.db.close()
