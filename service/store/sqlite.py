"""SQLite store: WAL, synchronous FULL, secure_delete, one writer, many readers.

Durability: a call is acknowledged only after its transaction commits with
synchronous=FULL, so an acknowledged mutation survives kill -9. secure_delete makes
SQLite zero freed cells, and a TRUNCATE checkpoint empties the WAL, which is how a
destroyed key's bytes leave the disk (see `purge_freed_pages`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engram.models.digests import DigestKind, digest
from engram.models.scope import Scope

from . import rows as decoded
from . import statements as S
from .base import CandidateRow, CommitUncertain, JournalEvent, NewEvent, RecordRow, StateCounts, StoreUnavailable
from .journal import (
    StoredEvent,
    chain_intact,
    chained,
    read_body,
    read_digest,
    stored_body,
    stored_digest,
    stored_event_id,
    stored_row,
)
from .migrations import VERSION_TABLE, Migration, pending
from .rows import (
    JOURNAL_COLUMNS,
    KEY_COLUMNS,
    RECORD_COLUMNS,
    RECORD_WITH_KEY,
    column_names,
    stored_candidate,
    stored_record,
)


def _insert(table: str, columns: str) -> str:
    """An INSERT of one row of ``table``'s ``columns``, a placeholder each."""
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(column_names(columns)))})"


# A batch's journal events, keys and records, a row a statement (PostgreSQL copies them:
# ``postgres.connection.copy_rows``).
INSERT_EVENT = _insert("journal", f"tenant, workspace, {JOURNAL_COLUMNS}")
INSERT_KEY = _insert("keys", KEY_COLUMNS)
INSERT_RECORD = _insert("records", RECORD_COLUMNS)

SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial",
        (
            "CREATE TABLE IF NOT EXISTS tenants ("
            "tenant TEXT PRIMARY KEY, enabled INTEGER NOT NULL, changed_at TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS scopes ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, cursor INTEGER NOT NULL, "
            "head_digest TEXT, PRIMARY KEY (tenant, workspace))",
            "CREATE TABLE IF NOT EXISTS journal ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, cursor INTEGER NOT NULL, "
            "event_id TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, "
            "event_digest TEXT NOT NULL, prev_digest TEXT, recorded_at TEXT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, cursor))",
            "CREATE TABLE IF NOT EXISTS keys (key_id TEXT PRIMARY KEY, wrapped BLOB NOT NULL, kek_id TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS candidates ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, candidate_id TEXT NOT NULL, "
            "state TEXT NOT NULL, key_id TEXT, sealed BLOB, record_digest TEXT NOT NULL, "
            "payload_digest TEXT NOT NULL, principal TEXT NOT NULL, created_cursor INTEGER NOT NULL, "
            "PRIMARY KEY (tenant, workspace, candidate_id))",
            "CREATE TABLE IF NOT EXISTS records ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, record_id TEXT NOT NULL, "
            "state TEXT NOT NULL, record_digest TEXT NOT NULL, payload_digest TEXT NOT NULL, "
            "key_id TEXT, sealed BLOB, valid_from_ms INTEGER NOT NULL, valid_to_ms INTEGER, "
            "expires_at_ms INTEGER, accepted_cursor INTEGER NOT NULL, accepted_at TEXT NOT NULL, "
            "candidate_id TEXT, PRIMARY KEY (tenant, workspace, record_id))",
            "CREATE INDEX IF NOT EXISTS records_payload ON records (tenant, workspace, payload_digest)",
            "CREATE TABLE IF NOT EXISTS idempotency ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, principal TEXT NOT NULL, key TEXT NOT NULL, "
            "tool TEXT NOT NULL, intent TEXT NOT NULL, response TEXT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, principal, key))",
            "CREATE TABLE IF NOT EXISTS pending_purges ("
            "tenant TEXT NOT NULL, workspace TEXT NOT NULL, record_id TEXT NOT NULL, "
            "PRIMARY KEY (tenant, workspace, record_id))",
            "CREATE TABLE IF NOT EXISTS confirmations (ref TEXT PRIMARY KEY, used_at_ms INTEGER NOT NULL)",
        ),
    ),
    # Idempotency keys are kept as digests (engine/idempotency.py key_digest); rows an
    # older release wrote hold the key as sent.
    Migration(2, "idempotency keys as digests", ("UPDATE idempotency SET key = engram_idempotency_key_digest(key)",)),
    # Receipts kept once, referenced by digest from record bodies (Transaction.put_receipt).
    Migration(3, "receipts", ("CREATE TABLE IF NOT EXISTS receipts (digest TEXT PRIMARY KEY, body TEXT NOT NULL)",)),
    # Compact journal rows (journal.py): packed bodies, raw event ids and digests, no stored copy
    # of the predecessor's digest. Rows written before are rewritten in place; their
    # events and digests are unchanged, so every chain still verifies. Record rows keep
    # their two digests as raw bytes too. The keys table becomes its own primary-key
    # index (no rowid, no second copy of every key id).
    Migration(
        4,
        "compact journal, record digests and keys",
        (
            "UPDATE journal SET body = engram_journal_body(body), event_digest = engram_digest_bytes(event_digest),"
            " event_id = engram_event_id_bytes(event_id), prev_digest = NULL WHERE typeof(body) = 'text'"
            " OR typeof(event_digest) = 'text' OR typeof(event_id) = 'text' OR prev_digest IS NOT NULL",
            "UPDATE records SET record_digest = engram_digest_bytes(record_digest),"
            " payload_digest = engram_digest_bytes(payload_digest)"
            " WHERE typeof(record_digest) = 'text' OR typeof(payload_digest) = 'text'",
            "CREATE TABLE keys_compact (key_id TEXT PRIMARY KEY, wrapped BLOB NOT NULL, kek_id TEXT NOT NULL)"
            " WITHOUT ROWID",
            "INSERT INTO keys_compact SELECT key_id, wrapped, kek_id FROM keys",
            "DROP TABLE keys",
            "ALTER TABLE keys_compact RENAME TO keys",
        ),
    ),
    # Per-scope state counts (metrics scrapes, stats) read an index, not every row: at
    # millions of records a scan of the record table took minutes. Retention expiry reads
    # only the records that carry an expiry.
    Migration(
        5,
        "state and expiry indexes",
        (
            "CREATE INDEX IF NOT EXISTS records_state ON records (tenant, workspace, state)",
            "CREATE INDEX IF NOT EXISTS candidates_state ON candidates (tenant, workspace, state)",
            "CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_at_ms)"
            " WHERE state = 'accepted_current' AND expires_at_ms IS NOT NULL",
        ),
    ),
    # One scope's records about to expire, counted and listed from an index of their own
    # (the expiry index alone reads each one's row to learn its scope).
    Migration(
        6,
        "scope expiry index",
        (
            "CREATE INDEX IF NOT EXISTS records_scope_expiry ON records (tenant, workspace, expires_at_ms)"
            " WHERE state = 'accepted_current' AND expires_at_ms IS NOT NULL",
        ),
    ),
)


def _idempotency_key_digest(key: str) -> str:
    return digest(DigestKind.IDEMPOTENCY_KEY, key)


def _journal_body(stored: str | bytes) -> bytes:
    return stored_body(read_body(stored))


def _digest_bytes(stored: str | bytes) -> bytes:
    return stored if isinstance(stored, bytes) else stored_digest(stored)


def _event_id_bytes(stored: str | bytes) -> str | bytes:
    if isinstance(stored, bytes):
        return stored
    try:
        return stored_event_id(stored)
    except ValueError:  # not one this code writes: kept as it is (read as text)
        return stored


#: The journal columns, the body read as bytes: packed rows are blobs, and an edited
#: one may not be UTF-8.
_JOURNAL_READ = JOURNAL_COLUMNS.replace("body", "CAST(body AS BLOB) AS body")
_IN_CHUNK = 500  # values bound in one IN (...) list


def _chunks(values: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start : start + _IN_CHUNK]


class _Tx:
    """Statements of one transaction on one connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # journal -------------------------------------------------------------------
    def append_event(
        self, scope: Scope, kind: str, subject: str, body: dict[str, Any], recorded_at: str
    ) -> JournalEvent:
        return self.append_events(scope, [NewEvent(kind, subject, body, recorded_at)])[0]

    def append_events(self, scope: Scope, events: Sequence[NewEvent]) -> list[JournalEvent]:
        if not events:
            return []
        row = self.conn.execute(S.SCOPE_HEAD, scope).fetchone()
        appended = chained(scope, (row[0], row[1]) if row else (0, None), events)
        self.conn.executemany(INSERT_EVENT, [(*scope, *stored_row(e)) for e in appended])
        last = appended[-1]
        self.conn.execute(S.MOVE_HEAD, (*scope, last.cursor, last.event_digest))
        return appended

    # keys ----------------------------------------------------------------------
    def put_key(self, key_id: str, wrapped: bytes, kek_id: str) -> None:
        self.put_keys([(key_id, wrapped, kek_id)])

    def put_keys(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        self.conn.executemany(INSERT_KEY, rows)

    def destroy_key(self, key_id: str) -> None:
        self.conn.execute(S.DESTROY_KEY, (key_id,))

    # receipts ------------------------------------------------------------------------
    def put_receipt(self, receipt: dict[str, Any]) -> str:
        digest_ = receipt["receipt_digest"]
        self.conn.execute(S.INSERT_RECEIPT, (digest_, json.dumps(receipt, sort_keys=True, separators=(",", ":"))))
        return digest_

    # candidates and records --------------------------------------------------------
    def insert_candidate(self, row: CandidateRow) -> None:
        self.conn.execute(S.INSERT_CANDIDATE, stored_candidate(row))

    def set_candidate_state(self, scope: Scope, candidate_id: str, state: str, *, drop_body: bool) -> None:
        statement = S.SET_CANDIDATE_STATE.format(body=S.DROP_BODY if drop_body else "")
        self.conn.execute(statement, (state, *scope, candidate_id))

    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        self.conn.executemany(INSERT_RECORD, [stored_record(row) for row in rows])

    def set_record_state(self, scope: Scope, record_id: str, state: str, *, drop_body: bool) -> None:
        statement = S.SET_RECORD_STATE.format(body=S.DROP_BODY if drop_body else "")
        self.conn.execute(statement, (state, *scope, record_id))

    def add_pending_purge(self, scope: Scope, record_id: str) -> None:
        self.conn.execute(S.ADD_PENDING_PURGE, (*scope, record_id))

    def candidate(self, scope: Scope, candidate_id: str) -> CandidateRow | None:
        row = self.conn.execute(S.CANDIDATE, (*scope, candidate_id)).fetchone()
        return decoded.candidate(row) if row else None

    def record(self, scope: Scope, record_id: str) -> RecordRow | None:
        row = self.conn.execute(S.RECORD, (*scope, record_id)).fetchone()
        return decoded.record(row) if row else None

    def accepted_with_payload(self, scope: Scope, payload_digest: str) -> str | None:
        row = self.conn.execute(S.ACCEPTED_WITH_PAYLOAD, (*scope, stored_digest(payload_digest))).fetchone()
        return row[0] if row else None

    def update_reservation(self, scope: Scope, principal: str, key: str, response: str) -> None:
        self.conn.execute(S.UPDATE_RESERVATION, (response, *scope, principal, key))

    def tombstoned_payload(self, scope: Scope, payload_digest: str) -> bool:
        return self.conn.execute(S.TOMBSTONED_PAYLOAD, (*scope, stored_digest(payload_digest))).fetchone() is not None

    def present_records(self, scope: Scope, record_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(list(record_ids)):
            found.update(
                r[0]
                for r in self.conn.execute(
                    f"SELECT record_id FROM records WHERE tenant=? AND workspace=?"
                    f" AND record_id IN ({','.join('?' * len(chunk))})",
                    (*scope, *chunk),
                )
            )
        return found

    def payload_states(self, scope: Scope, payload_digests: Sequence[str]) -> dict[str, set[str]]:
        states: dict[str, set[str]] = {}
        for chunk in _chunks([stored_digest(d) for d in payload_digests]):
            for stored, state in self.conn.execute(
                f"SELECT DISTINCT payload_digest, state FROM records WHERE tenant=? AND workspace=?"
                f" AND payload_digest IN ({','.join('?' * len(chunk))})"
                " AND state IN ('tombstoned', 'accepted_current')",
                (*scope, *chunk),
            ):
                states.setdefault(read_digest(stored), set()).add(state)
        return states

    # idempotency and confirmations ---------------------------------------------------
    def reservation(self, scope: Scope, principal: str, key: str) -> tuple[str, str, str] | None:
        row = self.conn.execute(S.RESERVATION, (*scope, principal, key)).fetchone()
        return (row[0], row[1], row[2]) if row else None

    def reserve(self, scope: Scope, principal: str, key: str, tool: str, intent: str, response: str) -> None:
        self.conn.execute(S.RESERVE, (*scope, principal, key, tool, intent, response))

    def claim_confirmation(self, ref: str, used_at_ms: int) -> bool:
        return self.conn.execute(S.CLAIM_CONFIRMATION, (ref, used_at_ms)).rowcount == 1


class SqliteStore:
    """The embedded default store (one file, `engram.db`, in the data directory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            # Owner-only from the first byte: SQLite gives -wal and -shm the same mode.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._writer = self._connect()
        self._migrate()

    def _migrate(self) -> None:
        """Apply the steps this database lacks, each in its own transaction."""
        self._writer.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for step in pending(self.schema_version(), SQLITE_MIGRATIONS):
            with self.transaction() as tx:
                for statement in step.statements:
                    tx.conn.execute(statement)
                tx.conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?,?,datetime('now'))", (step.version, step.name))

    def schema_version(self) -> int:
        """The highest migration step applied to this database."""
        row = self._writer.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}").fetchone()
        return int(row[0])

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=5.0)
            conn.row_factory = sqlite3.Row
            conn.create_function("engram_idempotency_key_digest", 1, _idempotency_key_digest, deterministic=True)
            conn.create_function("engram_journal_body", 1, _journal_body, deterministic=True)
            conn.create_function("engram_digest_bytes", 1, _digest_bytes, deterministic=True)
            conn.create_function("engram_event_id_bytes", 1, _event_id_bytes, deterministic=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc
        return conn

    def _reader_conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        """BEGIN IMMEDIATE ... COMMIT on the single writer connection.

        A failure before COMMIT rolls back (StoreUnavailable: nothing happened); a
        failure of COMMIT itself is CommitUncertain (the caller cannot know).
        """
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreUnavailable() from exc
            try:
                yield _Tx(conn)
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise StoreUnavailable() from exc
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                    raise StoreUnavailable() from exc
                raise CommitUncertain() from exc

    @contextmanager
    def reader(self) -> Iterator[_Tx]:
        """A consistent read snapshot on this thread's own connection."""
        conn = self._reader_conn()
        try:
            conn.execute("BEGIN")
            yield _Tx(conn)
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self._reader_conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc

    # keys ---------------------------------------------------------------------------
    def wrapped_key(self, key_id: str) -> tuple[bytes, str] | None:
        rows = self._read(S.WRAPPED_KEY, (key_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def all_wrapped_keys(self) -> list[tuple[str, bytes, str]]:
        return [(r[0], r[1], r[2]) for r in self._read(S.ALL_WRAPPED_KEYS)]

    def rewrap_keys(self, rows: list[tuple[str, bytes, str]]) -> None:
        with self.transaction() as tx:
            tx.conn.executemany(S.REWRAP_KEY, [(wrapped, kek_id, key_id) for key_id, wrapped, kek_id in rows])

    # receipts --------------------------------------------------------------------------
    def receipt(self, receipt_digest: str) -> dict[str, Any] | None:
        rows = self._read(S.RECEIPT, (receipt_digest,))
        return json.loads(rows[0][0]) if rows else None

    # journal and scopes ---------------------------------------------------------------
    def scope_cursor(self, scope: Scope) -> int:
        rows = self._read(S.SCOPE_CURSOR, scope)
        return rows[0][0] if rows else 0

    def scopes(self) -> list[Scope]:
        return [(r[0], r[1]) for r in self._read(S.SCOPES)]

    def events(self, scope: Scope, after: int = 0) -> Iterator[JournalEvent]:
        return (decoded.event(scope, stored) for stored in self._journal_rows(scope, after))

    def journal_digests(self, scope: Scope, cursors: list[int]) -> dict[int, str]:
        found: dict[int, str] = {}
        for start in range(0, len(cursors), 500):
            chunk = list(cursors[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for row in self._read(
                f"SELECT cursor, event_digest FROM journal WHERE tenant=? AND workspace=? AND cursor IN ({marks})",
                (*scope, *chunk),
            ):
                found[int(row["cursor"])] = read_digest(row["event_digest"])
        return found

    def verify_chain(self, scope: Scope) -> bool:
        """Recompute every event digest and link of a scope's journal."""
        return chain_intact(scope, self._journal_rows(scope))

    def _journal_rows(self, scope: Scope, after: int = 0) -> Iterator[StoredEvent]:
        page = S.JOURNAL_PAGE.format(_JOURNAL_READ)
        return (decoded.stored_event(row) for row in S.paged(self._read, page, scope, after, "cursor"))

    # records ---------------------------------------------------------------------------
    def records(self, scope: Scope, record_ids: list[str]) -> dict[str, RecordRow]:
        found: dict[str, RecordRow] = {}
        for chunk in _chunks(record_ids):
            marks = ",".join("?" * len(chunk))
            for row in self._read(
                f"SELECT {RECORD_WITH_KEY} WHERE r.tenant=? AND r.workspace=? AND r.record_id IN ({marks})",
                (*scope, *chunk),
            ):
                found[row["record_id"]] = decoded.record_with_key(row)
        return found

    def records_in_state(self, state: str, scope: Scope) -> list[RecordRow]:
        return [decoded.record(r) for r in self._read(S.RECORDS_IN_STATE, (state, *scope))]

    def live_more_than(self, scope: Scope, n: int) -> bool:
        return bool(self._read(S.LIVE_MORE_THAN, (*scope, n + 1))[0][0] > n)

    def state_counts(self, scope: Scope) -> StateCounts:
        return StateCounts(
            candidates={state: n for state, n in self._read(S.STATE_COUNTS.format("candidates"), scope)},
            records={state: n for state, n in self._read(S.STATE_COUNTS.format("records"), scope)},
        )

    def pending_purges(self) -> dict[Scope, list[str]]:
        """Records whose bytes may still sit in an index file, by scope."""
        pending: dict[Scope, list[str]] = {}
        for tenant, workspace, record_id in self._read(S.PENDING_PURGES):
            pending.setdefault((tenant, workspace), []).append(record_id)
        return pending

    def clear_pending_purges(self, scope: Scope, record_ids: list[str]) -> None:
        with self.transaction() as tx:
            tx.conn.executemany(
                "DELETE FROM pending_purges WHERE tenant=? AND workspace=? AND record_id=?",
                [(*scope, rid) for rid in record_ids],
            )

    def due_for_expiry(self, at_ms: int) -> list[RecordRow]:
        return [decoded.record(r) for r in self._read(S.DUE_FOR_EXPIRY, (at_ms,))]

    def due_for_expiry_page(self, at_ms: int, limit: int, scope: Scope | None = None) -> tuple[int, list[RecordRow]]:
        count, soonest, params = S.due_page(at_ms, scope)
        rows = self._read(soonest, (*params, limit))
        return int(self._read(count, params)[0][0]), [decoded.record(r) for r in rows]

    def live_records(self, scope: Scope) -> Iterator[RecordRow]:
        return (decoded.record_with_key(r) for r in S.paged(self._read, S.LIVE_RECORDS_PAGE, scope, "", "record_id"))

    # tenants ----------------------------------------------------------------------------
    def tenant_enabled(self, tenant: str) -> bool:
        rows = self._read(S.TENANT_ENABLED, (tenant,))
        return bool(rows and rows[0][0])

    def set_tenant_enabled(self, tenant: str, enabled: bool, at: str) -> None:
        with self.transaction() as tx:
            tx.conn.execute(S.SET_TENANT_ENABLED, (tenant, int(enabled), at))

    # physical hygiene and backup -----------------------------------------------------------
    def purge_freed_pages(self) -> bool:
        """Empty the WAL so deleted bytes (already zeroed by secure_delete in the main
        file) leave the disk. False when a reader still pins old frames: retry later."""
        with self._write_lock:
            try:
                busy, _, _ = self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.Error:
                return False
        return busy == 0

    def refresh_statistics(self) -> None:
        """SQLite's own advice after a change to the data: ``PRAGMA optimize``, which
        analyses only the tables whose statistics it finds stale, within a bounded
        effort."""
        with self._write_lock:
            self._writer.execute("PRAGMA analysis_limit=1000")
            self._writer.execute("PRAGMA optimize")

    def footprint(self) -> dict[str, int]:
        """Bytes per table from SQLite's page statistics (dbstat): every page of the
        table's b-tree and of its indexes, free space in them included."""
        owner = {name: table for name, table in self._read("SELECT name, tbl_name FROM sqlite_master")}
        sizes: dict[str, int] = {}
        for name, size in self._read("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            sizes[table] = sizes.get(table, 0) + int(size)
        return sizes

    def backup(self, dest_path: str) -> None:
        """A consistent online copy through SQLite's backup API."""
        dest = sqlite3.connect(dest_path)
        try:
            with self._write_lock:
                self._writer.backup(dest)
            dest.execute("PRAGMA journal_mode=DELETE")
        finally:
            dest.close()

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
