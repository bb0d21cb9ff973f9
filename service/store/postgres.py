"""PostgreSQL store: the system of record that several `engram serve` replicas share.

Same protocol and semantics as the SQLite store, over psycopg 3 and a connection pool:

- Writers are serialised per scope, not globally: the first statement a write
  transaction makes about a scope takes a transaction-scoped advisory lock on it. Every
  later read of that transaction (READ COMMITTED: a fresh snapshot per statement) then
  sees everything the previous holder committed, so "check the idempotency reservation,
  then apply the effect, then reserve" is exactly-once across replicas, and the journal
  cursor of a scope is gap-free (read, increment and write under the lock).
- Confirmation refs are a primary key inserted with ON CONFLICT DO NOTHING: two replicas
  racing on one ref serialise on the unique index and exactly one wins.
- `reader()` is a REPEATABLE READ, READ ONLY transaction bound to the calling thread;
  store-level reads made on that thread inside it use the same snapshot.
- Errors: any failure before COMMIT is StoreUnavailable (rolled back); a COMMIT whose
  connection broke is CommitUncertain.
- Bounded waits (``timeout_ms``, the `database_timeout_ms` setting): no wait on the
  database outlasts it, so a slow, partitioned or half-open network (a peer that
  stopped answering without closing) fails the call with a retriable code instead of
  hanging it, and frees the thread and the connection. Each wait for an answer is
  bounded on the connection itself (then the connection is closed: its protocol state
  is unknown); connecting is bounded by ``connect_timeout``, a pooled connection's
  checkout by the pool's timeout; TCP keepalives and ``tcp_user_timeout`` drop a
  connection whose peer vanished while it was idle. On the server, each session's
  ``idle_in_transaction_session_timeout`` (twice the bound) ends the transaction of a
  replica cut off mid-transaction, so the scope lock it held is not held forever.
  Migrations wait unbounded (a large table takes as long as it takes).
- `purge_freed_pages` vacuums the tables that held destroyed bytes (wrapped keys, sealed
  bodies), so their dead tuples leave the heap. Like any WAL, PostgreSQL's keeps the old
  row image until the segment is recycled; that image is a data key wrapped under the
  KEK, which never lives in the database (README, scale-out).
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from .base import (
    DEFAULT_DATABASE_TIMEOUT_MS,
    DEFAULT_GROUP,
    BackupUnsupported,
    CandidateRow,
    CommitUncertain,
    JournalEvent,
    NewEvent,
    RecordRow,
    ReplicaEntry,
    Route,
    Scope,
    StateCounts,
    StoreUnavailable,
)
from .connectivity import Connectivity, ConnectivityState
from .journal import (
    RECORD_COLUMNS,
    StoredEvent,
    chain_intact,
    chained,
    read_body,
    read_digest,
    read_event_id,
    stored_digest,
    stored_record,
    stored_row,
)
from .migrations import VERSION_TABLE, Migration, pending

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
JOURNAL_CHANNEL = "engram_journal"

# One advisory-lock key space for migrations (scope locks hash the scope into another).
_MIGRATION_LOCK = 0x656E6772616D  # "engram"
POOL_SIZE = 8
#: COMMIT, after making a transaction that wrote nothing write one WAL record (a
#: transactional logical message, which any role may emit), so that its commit too waits
#: for the synchronous standby. What such a transaction read (an idempotency reservation
#: it replays, a duplicate it found) may be an earlier commit whose wait for the standby
#: was cancelled: visible on the primary before it is replicated, and gone if a failover
#: happens now. Its answer is then acknowledged only once that is on the standby (the
#: commit waits past it), or answered MUTATION_OUTCOME_UNKNOWN. Sent with COMMIT in
#: one round trip (the simple query protocol).
_COMMIT = (
    "SELECT CASE WHEN pg_current_xact_id_if_assigned() IS NULL"
    " THEN pg_logical_emit_message(true, 'engram', '') END; COMMIT"
)
#: How long a checkout waits while no server accepts connections: enough to be handed
#: a connection the pool holds, never a second bound (connectivity.py).
UNREACHABLE_CHECKOUT_S = 0.05

_CANDIDATE_COLUMNS = (
    "tenant, workspace, candidate_id, state, key_id, sealed, record_digest, payload_digest, principal, created_cursor"
)
#: The record columns, then its wrapped data key (absent once destroyed).
_RECORD_WITH_KEY = (
    ", ".join("r." + c.strip() for c in RECORD_COLUMNS.split(","))
    + ", k.wrapped, k.kek_id FROM records r LEFT JOIN keys k ON k.key_id = r.key_id"
)
_JOURNAL_COLUMNS = "cursor, event_id, kind, subject, body, event_digest, prev_digest, recorded_at"
_REPLICA_COLUMNS = "replica_id, replica_group, advertise_url, heartbeat_ms"
# Replica `r` holds the scope of pending purge `p`: the scope has no route (every replica
# may), or r's group serves it or is taking it over. Only holders owe a purge.
_HOLDS_SCOPE = (
    "(NOT EXISTS (SELECT 1 FROM scope_routes s WHERE s.tenant=p.tenant AND s.workspace=p.workspace)"
    " OR EXISTS (SELECT 1 FROM scope_routes s WHERE s.tenant=p.tenant AND s.workspace=p.workspace"
    " AND r.replica_group IN (s.replica_group, s.moving_to)))"
)


def _candidate(row: tuple[Any, ...] | None) -> CandidateRow | None:
    if row is None:
        return None
    return CandidateRow((row[0], row[1]), row[2], row[3], row[4], _bytes(row[5]), *row[6:])


def _record(row: Any) -> RecordRow:
    return RecordRow(
        (row[0], row[1]), row[2], row[3], read_digest(row[4]), read_digest(row[5]), row[6], _bytes(row[7]), *row[8:14]
    )


def _record_with_key(row: Any) -> RecordRow:
    wrapped = None if row[14] is None else (bytes(row[14]), row[15])
    return RecordRow(
        (row[0], row[1]),
        row[2],
        row[3],
        read_digest(row[4]),
        read_digest(row[5]),
        row[6],
        _bytes(row[7]),
        row[8],
        row[9],
        row[10],
        row[11],
        row[12],
        row[13],
        wrapped_key=wrapped,
    )


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _route(row: tuple[Any, ...] | None) -> Route | None:
    return None if row is None else Route(row[0], row[1], int(row[2]))


def _replica(row: tuple[Any, ...]) -> ReplicaEntry:
    return ReplicaEntry(row[0], row[1], row[2], int(row[3]))


def _scope_lock_key(scope: Scope) -> str:
    return json.dumps(list(scope))


def _scope_of(payload: str) -> Scope:
    tenant, workspace = json.loads(payload)
    return (tenant, workspace)


class _BoundedConnection(psycopg.Connection[Any]):
    """A connection on which no wait for the server's answer lasts longer than
    ``bound_s`` (None: unbounded). A wait cut short leaves an answer owed on the wire,
    so the connection is closed: the pool discards it, the thread is free."""

    bound_s: float | None = None
    timed_out = False  # a wait of this connection outlasted the bound (it is closed)

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None or self.bound_s is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.bound_s)
        except psycopg.OperationalError:
            if self.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                self.timed_out = True
                self.pgconn.finish()
            raise

    @contextmanager
    def unbounded(self) -> Iterator[None]:
        """Wait as long as the server takes inside the block (schema migrations)."""
        bound, self.bound_s = self.bound_s, None
        try:
            yield
        finally:
            self.bound_s = bound


def connection_options(url: str, timeout_s: float) -> dict[str, Any]:
    """libpq parameters that bound connecting and detect a vanished peer, for those the
    URL does not set itself. ``connect_timeout`` applies to each host of a multi-host
    URL (a formation's nodes) in turn, so the bound is shared among them."""
    given = conninfo_to_dict(url)
    hosts = max(1, len(str(given.get("host") or given.get("hostaddr") or "").split(",")))
    probe_s = max(1, round(timeout_s / 4))
    options: dict[str, Any] = {
        # libpq counts whole seconds, 2 at least
        "connect_timeout": max(2, math.floor(timeout_s / hosts)),
        "keepalives": 1,
        "keepalives_idle": probe_s,
        "keepalives_interval": probe_s,
        "keepalives_count": 3,
        "tcp_user_timeout": int(timeout_s * 1000),
    }
    return {name: value for name, value in options.items() if name not in given}


#: Rows per executemany round trip: each is one bounded wait, however large the batch
#: (a bulk-ingest transaction, a KEK rotation's rewrap of every key).
MANY_ROWS = 1000


def _execute_many(conn: psycopg.Connection[Any], query: str, rows: Sequence[Sequence[Any]]) -> None:
    """`executemany` in slices of :data:`MANY_ROWS`."""
    with conn.cursor() as cur:
        for start in range(0, len(rows), MANY_ROWS):
            cur.executemany(query, rows[start : start + MANY_ROWS])


class _PgTx:
    """Statements of one transaction on one connection."""

    def __init__(self, conn: _BoundedConnection, *, writing: bool) -> None:
        self.conn = conn
        self._writing = writing
        self._locked: set[Scope] = set()

    def _scope(self, scope: Scope) -> None:
        """Serialise writers of this scope (once per transaction; readers never wait)."""
        if self._writing and scope not in self._locked:
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_scope_lock_key(scope),))
            self._locked.add(scope)

    def _one(self, query: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self.conn.execute(query, params).fetchone()

    # journal -------------------------------------------------------------------
    def append_event(
        self, scope: Scope, kind: str, subject: str, body: dict[str, Any], recorded_at: str
    ) -> JournalEvent:
        return self.append_events(scope, [NewEvent(kind, subject, body, recorded_at)])[0]

    def append_events(self, scope: Scope, events: Sequence[NewEvent]) -> list[JournalEvent]:
        if not events:
            return []
        self._scope(scope)
        row = self._one("SELECT cursor, head_digest FROM scopes WHERE tenant=%s AND workspace=%s", scope)
        appended = chained(scope, (row[0], row[1]) if row else (0, None), events)
        _execute_many(
            self.conn,
            f"INSERT INTO journal (tenant, workspace, {_JOURNAL_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            [(*scope, *stored_row(e)) for e in appended],
        )
        last = appended[-1]
        self.conn.execute(
            "INSERT INTO scopes VALUES (%s,%s,%s,%s) ON CONFLICT (tenant, workspace)"
            " DO UPDATE SET cursor=excluded.cursor, head_digest=excluded.head_digest",
            (*scope, last.cursor, last.event_digest),
        )
        self.conn.execute("SELECT pg_notify(%s, %s)", (JOURNAL_CHANNEL, _scope_lock_key(scope)))
        return appended

    # keys ----------------------------------------------------------------------
    def put_key(self, key_id: str, wrapped: bytes, kek_id: str) -> None:
        self.put_keys([(key_id, wrapped, kek_id)])

    def put_keys(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        _execute_many(self.conn, "INSERT INTO keys VALUES (%s,%s,%s)", rows)

    def destroy_key(self, key_id: str) -> None:
        self.conn.execute("DELETE FROM keys WHERE key_id=%s", (key_id,))

    # receipts ------------------------------------------------------------------------
    def put_receipt(self, receipt: dict[str, Any]) -> str:
        digest_ = receipt["receipt_digest"]
        self.conn.execute(
            "INSERT INTO receipts VALUES (%s,%s) ON CONFLICT (digest) DO NOTHING",
            (digest_, json.dumps(receipt, sort_keys=True, separators=(",", ":"))),
        )
        return digest_

    # candidates and records --------------------------------------------------------
    def insert_candidate(self, row: CandidateRow) -> None:
        self._scope(row.scope)
        self.conn.execute(
            f"INSERT INTO candidates ({_CANDIDATE_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                *row.scope,
                row.candidate_id,
                row.state,
                row.key_id,
                row.sealed,
                row.record_digest,
                row.payload_digest,
                row.principal,
                row.created_cursor,
            ),
        )

    def set_candidate_state(self, scope: Scope, candidate_id: str, state: str, *, drop_body: bool) -> None:
        self._scope(scope)
        body_sql = ", sealed=NULL, key_id=NULL" if drop_body else ""
        self.conn.execute(
            f"UPDATE candidates SET state=%s{body_sql} WHERE tenant=%s AND workspace=%s AND candidate_id=%s",
            (state, *scope, candidate_id),
        )

    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        for scope in {row.scope for row in rows}:
            self._scope(scope)
        _execute_many(
            self.conn,
            f"INSERT INTO records ({RECORD_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            [stored_record(row) for row in rows],
        )

    def set_record_state(self, scope: Scope, record_id: str, state: str, *, drop_body: bool) -> None:
        self._scope(scope)
        body_sql = ", sealed=NULL, key_id=NULL" if drop_body else ""
        self.conn.execute(
            f"UPDATE records SET state=%s{body_sql} WHERE tenant=%s AND workspace=%s AND record_id=%s",
            (state, *scope, record_id),
        )

    def add_pending_purge(self, scope: Scope, record_id: str) -> None:
        self._scope(scope)
        self.conn.execute("INSERT INTO pending_purges VALUES (%s,%s,%s) ON CONFLICT DO NOTHING", (*scope, record_id))

    def candidate(self, scope: Scope, candidate_id: str) -> CandidateRow | None:
        self._scope(scope)
        return _candidate(
            self._one(
                f"SELECT {_CANDIDATE_COLUMNS} FROM candidates WHERE tenant=%s AND workspace=%s AND candidate_id=%s",
                (*scope, candidate_id),
            )
        )

    def record(self, scope: Scope, record_id: str) -> RecordRow | None:
        self._scope(scope)
        row = self._one(
            f"SELECT {RECORD_COLUMNS} FROM records WHERE tenant=%s AND workspace=%s AND record_id=%s",
            (*scope, record_id),
        )
        return _record(row) if row else None

    def accepted_with_payload(self, scope: Scope, payload_digest: str) -> str | None:
        self._scope(scope)
        row = self._one(
            "SELECT record_id FROM records WHERE tenant=%s AND workspace=%s AND payload_digest=%s"
            " AND state='accepted_current' ORDER BY record_id LIMIT 1",
            (*scope, stored_digest(payload_digest)),
        )
        return row[0] if row else None

    def tombstoned_payload(self, scope: Scope, payload_digest: str) -> bool:
        self._scope(scope)
        return (
            self._one(
                "SELECT 1 FROM records WHERE tenant=%s AND workspace=%s AND payload_digest=%s"
                " AND state='tombstoned' LIMIT 1",
                (*scope, stored_digest(payload_digest)),
            )
            is not None
        )

    def present_records(self, scope: Scope, record_ids: Sequence[str]) -> set[str]:
        self._scope(scope)
        rows = self.conn.execute(
            "SELECT record_id FROM records WHERE tenant=%s AND workspace=%s AND record_id = ANY(%s)",
            (*scope, list(record_ids)),
        ).fetchall()
        return {r[0] for r in rows}

    def payload_states(self, scope: Scope, payload_digests: Sequence[str]) -> dict[str, set[str]]:
        self._scope(scope)
        rows = self.conn.execute(
            "SELECT DISTINCT payload_digest, state FROM records WHERE tenant=%s AND workspace=%s"
            " AND payload_digest = ANY(%s) AND state IN ('tombstoned', 'accepted_current')",
            (*scope, [stored_digest(d) for d in payload_digests]),
        ).fetchall()
        states: dict[str, set[str]] = {}
        for stored, state in rows:
            states.setdefault(read_digest(stored), set()).add(state)
        return states

    # idempotency and confirmations ---------------------------------------------------
    def reservation(self, scope: Scope, principal: str, key: str) -> tuple[str, str, str] | None:
        self._scope(scope)
        row = self._one(
            "SELECT tool, intent, response FROM idempotency"
            " WHERE tenant=%s AND workspace=%s AND principal=%s AND key=%s",
            (*scope, principal, key),
        )
        return (row[0], row[1], row[2]) if row else None

    def reserve(self, scope: Scope, principal: str, key: str, tool: str, intent: str, response: str) -> None:
        self._scope(scope)
        self.conn.execute(
            "INSERT INTO idempotency VALUES (%s,%s,%s,%s,%s,%s,%s)", (*scope, principal, key, tool, intent, response)
        )

    def update_reservation(self, scope: Scope, principal: str, key: str, response: str) -> None:
        self._scope(scope)
        self.conn.execute(
            "UPDATE idempotency SET response=%s WHERE tenant=%s AND workspace=%s AND principal=%s AND key=%s",
            (response, *scope, principal, key),
        )

    def claim_confirmation(self, ref: str, used_at_ms: int) -> bool:
        cur = self.conn.execute(
            "INSERT INTO confirmations VALUES (%s,%s) ON CONFLICT (ref) DO NOTHING", (ref, used_at_ms)
        )
        return cur.rowcount == 1


class PostgresStore:
    """The shared store at a `postgresql://` URL (schema migrated on open); no wait on
    the database lasts longer than ``timeout_ms`` (see the module's docstring)."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS) -> None:
        self.url = url
        self.timeout_s = timeout_ms / 1000
        self._options = connection_options(url, self.timeout_s)
        self._local = threading.local()
        self._connectivity = Connectivity(hold_s=self.timeout_s)
        self._listener: _BoundedConnection | None = None
        self._listener_checked = 0.0
        try:
            self._pool = ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                connection_class=_BoundedConnection,
                kwargs={"autocommit": True, **self._options},
                configure=self._configure,
                timeout=self.timeout_s,
                # Give up a failing reconnection soon: a later checkout starts a fresh one
                # at once, instead of waiting out a long backoff after the network healed.
                reconnect_timeout=2 * self.timeout_s,
                open=True,
                name="engram",
            )
            self._pool.wait(timeout=self.timeout_s)
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc
        except Exception as exc:  # PoolTimeout on an unreachable server
            raise StoreUnavailable() from exc
        self._migrate()

    # connections and transactions ------------------------------------------------------
    def _configure(self, conn: _BoundedConnection) -> None:
        """Bound every wait of a new connection, and its server session's idle
        transactions (a replica cut off mid-transaction releases its scope locks)."""
        conn.bound_s = self.timeout_s
        conn.execute(
            sql.SQL("SET idle_in_transaction_session_timeout = {}").format(sql.Literal(int(2 * self.timeout_s * 1000)))
        )
        self._connectivity.connected(_server(conn))

    def connectivity_state(self) -> ConnectivityState:
        return self._connectivity.state()

    @contextmanager
    def _checkout(self) -> Iterator[_BoundedConnection]:
        """A pooled connection, waiting at most the bound for one. A wait that ended
        with no server accepting a connection (an attempt failed, or the pool could have
        grown and did not) marks the database unreachable: for the next bound, or until
        the pool connects, checkouts only take what the pool holds, so a call of several
        statements answers within one bound, not one per statement."""
        fast = self._connectivity.failing_fast
        began = time.monotonic()
        before = self._pool.get_stats()
        try:
            with self._pool.connection(timeout=UNREACHABLE_CHECKOUT_S if fast else None) as conn:
                yield conn
        except PoolTimeout:
            after = self._pool.get_stats()
            if after.get("connections_errors", 0) > before.get("connections_errors", 0) or after.get(
                "pool_size", 0
            ) < after.get("pool_max", POOL_SIZE):
                self._connectivity.lost(since=began)
            raise

    @contextmanager
    def _lent(
        self, first: str, params: tuple[Any, ...] = ()
    ) -> Iterator[tuple[_BoundedConnection, psycopg.Cursor[Any]]]:
        """A pooled connection and the cursor of `first`, the statement it runs first.

        A connection found dead at that statement (closed or reset while it sat idle in
        the pool: a dropped network, a restarted server) is discarded and the statement
        runs on the next one, so a drop costs no call; one that stayed silent until
        the bound is not tried again (the network is down, not one connection)."""
        for attempt in range(POOL_SIZE + 1):
            with self._checkout() as conn:
                try:
                    cursor = conn.execute(first, params)
                except psycopg.OperationalError:
                    if conn.closed and not conn.timed_out and attempt < POOL_SIZE:
                        continue
                    raise
                yield conn, cursor
                return

    def _read(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement's rows: in this thread's transaction or snapshot when inside
        one, else on a pooled connection."""
        try:
            bound = getattr(self._local, "conn", None)
            if bound is not None:
                return bound.execute(query, params).fetchall()
            with self._lent(query, params) as (_, cursor):
                return cursor.fetchall()
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc

    def _migrate(self) -> None:
        """Apply missing steps under an advisory lock, so replicas starting together
        migrate once."""
        with self.transaction() as tx, tx.conn.unbounded():
            tx.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            tx.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
            )
            applied: Any = tx.conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}").fetchone()
            for step in pending(int(applied[0]), POSTGRES_MIGRATIONS):
                for statement in step.statements:
                    tx.conn.execute(statement)
                tx.conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (%s,%s,now())", (step.version, step.name))

    def schema_version(self) -> int:
        return int(self._read(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}")[0][0])

    @contextmanager
    def transaction(self) -> Iterator[_PgTx]:
        """BEGIN ... COMMIT on a pooled connection; writers serialise per scope.

        Store-level reads made on this thread inside the block use the same connection:
        a writer holding a scope lock never waits for a second pooled connection."""
        try:
            with self._lent("BEGIN") as (conn, _):
                outer = getattr(self._local, "conn", None)
                self._local.conn = conn  # store-level reads inside see this transaction
                try:
                    yield _PgTx(conn, writing=True)
                except psycopg.Error as exc:
                    _rollback(conn)
                    raise StoreUnavailable() from exc
                except BaseException:
                    _rollback(conn)
                    raise
                finally:
                    self._local.conn = outer
                try:
                    conn.execute(_COMMIT)
                except psycopg.OperationalError as exc:
                    raise CommitUncertain() from exc
                except psycopg.Error as exc:
                    _rollback(conn)
                    raise StoreUnavailable() from exc
        except psycopg.Error as exc:  # no connection to be had (pool timeout, server down)
            raise StoreUnavailable() from exc

    @contextmanager
    def reader(self) -> Iterator[_PgTx]:
        """One REPEATABLE READ snapshot, also used by this thread's store-level reads."""
        if getattr(self._local, "conn", None) is not None:
            yield _PgTx(self._local.conn, writing=False)  # nested: the outer snapshot
            return
        try:
            with self._lent("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") as (conn, _):
                self._local.conn = conn
                try:
                    yield _PgTx(conn, writing=False)
                finally:
                    self._local.conn = None
                    _rollback(conn)
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc

    # receipts --------------------------------------------------------------------------
    def receipt(self, receipt_digest: str) -> dict[str, Any] | None:
        rows = self._read("SELECT body FROM receipts WHERE digest=%s", (receipt_digest,))
        return json.loads(rows[0][0]) if rows else None

    # keys ---------------------------------------------------------------------------
    def wrapped_key(self, key_id: str) -> tuple[bytes, str] | None:
        rows = self._read("SELECT wrapped, kek_id FROM keys WHERE key_id=%s", (key_id,))
        return (bytes(rows[0][0]), rows[0][1]) if rows else None

    def all_wrapped_keys(self) -> list[tuple[str, bytes, str]]:
        return [(r[0], bytes(r[1]), r[2]) for r in self._read("SELECT key_id, wrapped, kek_id FROM keys")]

    def rewrap_keys(self, rows: list[tuple[str, bytes, str]]) -> None:
        with self.transaction() as tx:
            _execute_many(
                tx.conn,
                "UPDATE keys SET wrapped=%s, kek_id=%s WHERE key_id=%s",
                [(wrapped, kek_id, key_id) for key_id, wrapped, kek_id in rows],
            )

    # journal and scopes ---------------------------------------------------------------
    def scope_cursor(self, scope: Scope) -> int:
        rows = self._read("SELECT cursor FROM scopes WHERE tenant=%s AND workspace=%s", scope)
        return int(rows[0][0]) if rows else 0

    def scopes(self) -> list[Scope]:
        return [(r[0], r[1]) for r in self._read("SELECT tenant, workspace FROM scopes ORDER BY tenant, workspace")]

    def events(self, scope: Scope, after: int = 0) -> Iterator[JournalEvent]:
        return (
            JournalEvent(scope, e.cursor, e.event_id, e.kind, e.subject, e.body, e.event_digest, e.recorded_at)
            for e in self._journal_rows(scope, after)
        )

    def journal_digests(self, scope: Scope, cursors: list[int]) -> dict[int, str]:
        if not cursors:
            return {}
        return {
            int(r[0]): read_digest(r[1])
            for r in self._read(
                "SELECT cursor, event_digest FROM journal"
                " WHERE tenant=%s AND workspace=%s AND cursor = ANY(%s::bigint[])",
                (*scope, list(cursors)),
            )
        }

    def verify_chain(self, scope: Scope) -> bool:
        try:
            return chain_intact(scope, self._journal_rows(scope))
        except ValueError:  # a row that no longer decodes (an edited packed body)
            return False

    def _journal_rows(self, scope: Scope, after: int = 0) -> Iterator[StoredEvent]:
        """Paged, so a million-event journal never sits in memory at once."""
        last = after
        while rows := self._read(
            f"SELECT {_JOURNAL_COLUMNS} FROM journal WHERE tenant=%s AND workspace=%s AND cursor>%s"
            " ORDER BY cursor LIMIT 2000",
            (*scope, last),
        ):
            for r in rows:
                yield StoredEvent(
                    int(r[0]),
                    read_event_id(r[1]),
                    r[2],
                    r[3],
                    read_body(r[4]),
                    read_digest(r[5]),
                    read_digest(r[6]),
                    r[7],
                )
            last = rows[-1][0]

    # records ---------------------------------------------------------------------------
    def records(self, scope: Scope, record_ids: list[str]) -> dict[str, RecordRow]:
        if not record_ids:
            return {}
        return {
            row[2]: _record_with_key(row)
            for row in self._read(
                f"SELECT {_RECORD_WITH_KEY} WHERE r.tenant=%s AND r.workspace=%s AND r.record_id = ANY(%s)",
                (*scope, list(record_ids)),
            )
        }

    def records_in_state(self, state: str, scope: Scope) -> list[RecordRow]:
        return [
            _record(r)
            for r in self._read(
                f"SELECT {RECORD_COLUMNS} FROM records WHERE state=%s AND tenant=%s AND workspace=%s"
                " ORDER BY record_id",
                (state, *scope),
            )
        ]

    def live_more_than(self, scope: Scope, n: int) -> bool:
        live = self._read(
            "SELECT COUNT(*) FROM (SELECT 1 FROM records WHERE tenant=%s AND workspace=%s"
            " AND state='accepted_current' LIMIT %s) AS live",
            (*scope, n + 1),
        )
        return int(live[0][0]) > n

    def state_counts(self, scope: Scope) -> StateCounts:
        by_state = "SELECT state, COUNT(*) FROM {} WHERE tenant=%s AND workspace=%s GROUP BY state"
        return StateCounts(
            candidates={state: int(n) for state, n in self._read(by_state.format("candidates"), scope)},
            records={state: int(n) for state, n in self._read(by_state.format("records"), scope)},
        )

    def pending_purges(self) -> dict[Scope, list[str]]:
        pending_: dict[Scope, list[str]] = {}
        for tenant, workspace, record_id in self._read(
            "SELECT tenant, workspace, record_id FROM pending_purges ORDER BY tenant, workspace, record_id"
        ):
            pending_.setdefault((tenant, workspace), []).append(record_id)
        return pending_

    def clear_pending_purges(self, scope: Scope, record_ids: list[str]) -> None:
        with self.transaction() as tx:
            tx.conn.execute(
                "DELETE FROM pending_purges WHERE tenant=%s AND workspace=%s AND record_id = ANY(%s)",
                (*scope, list(record_ids)),
            )

    def due_for_expiry(self, at_ms: int) -> list[RecordRow]:
        return [
            _record(r)
            for r in self._read(
                f"SELECT {RECORD_COLUMNS} FROM records WHERE state='accepted_current'"
                " AND expires_at_ms IS NOT NULL AND expires_at_ms<=%s ORDER BY tenant, workspace, record_id",
                (at_ms,),
            )
        ]

    def due_for_expiry_page(self, at_ms: int, limit: int, scope: Scope | None = None) -> tuple[int, list[RecordRow]]:
        due = "FROM records WHERE state='accepted_current' AND expires_at_ms IS NOT NULL AND expires_at_ms<=%s"
        if scope is not None:
            due += " AND tenant=%s AND workspace=%s"
        params = (at_ms,) if scope is None else (at_ms, *scope)
        count = self._read(f"SELECT COUNT(*) {due}", params)[0][0]
        rows = self._read(f"SELECT {RECORD_COLUMNS} {due} ORDER BY expires_at_ms LIMIT %s", (*params, limit))
        return int(count), [_record(r) for r in rows]

    def live_records(self, scope: Scope) -> Iterator[RecordRow]:
        last = ""
        while rows := self._read(
            f"SELECT {_RECORD_WITH_KEY} WHERE r.tenant=%s AND r.workspace=%s"
            " AND r.state='accepted_current' AND r.record_id>%s ORDER BY r.record_id LIMIT 2000",
            (*scope, last),
        ):
            yield from (_record_with_key(r) for r in rows)
            last = rows[-1][2]

    # tenants ----------------------------------------------------------------------------
    def tenant_enabled(self, tenant: str) -> bool:
        rows = self._read("SELECT enabled FROM tenants WHERE tenant=%s", (tenant,))
        return bool(rows and rows[0][0])

    def set_tenant_enabled(self, tenant: str, enabled: bool, at: str) -> None:
        with self.transaction() as tx:
            tx.conn.execute(
                "INSERT INTO tenants VALUES (%s,%s,%s) ON CONFLICT (tenant)"
                " DO UPDATE SET enabled=excluded.enabled, changed_at=excluded.changed_at",
                (tenant, enabled, at),
            )

    # replicas (SharedStore) ------------------------------------------------------------
    def heartbeat(
        self, replica_id: str, at_ms: int, group: str = DEFAULT_GROUP, advertise_url: str | None = None
    ) -> None:
        with self.transaction() as tx:
            tx.conn.execute(
                "INSERT INTO replicas (replica_id, heartbeat_ms, registered_ms, replica_group, advertise_url)"
                " VALUES (%s,%s,%s,%s,%s) ON CONFLICT (replica_id) DO UPDATE SET heartbeat_ms=excluded.heartbeat_ms,"
                " replica_group=excluded.replica_group, advertise_url=excluded.advertise_url",
                (replica_id, at_ms, at_ms, group, advertise_url),
            )

    def replica_entries(self) -> list[ReplicaEntry]:
        """Every registered replica with its group, advertised URL and heartbeat."""
        return [_replica(r) for r in self._read(f"SELECT {_REPLICA_COLUMNS} FROM replicas ORDER BY replica_id")]

    def group_members(self, group: str, since_ms: int) -> list[ReplicaEntry]:
        """The replicas of `group` that heartbeat since `since_ms`."""
        return [
            _replica(r)
            for r in self._read(
                f"SELECT {_REPLICA_COLUMNS} FROM replicas WHERE replica_group=%s AND heartbeat_ms >= %s"
                " ORDER BY replica_id",
                (group, since_ms),
            )
        ]

    def live_holders(self, scope: Scope, since_ms: int) -> list[str]:
        return [
            r[0]
            for r in self._read(
                "SELECT r.replica_id FROM replicas r, (SELECT %s::text AS tenant, %s::text AS workspace) p"
                f" WHERE r.heartbeat_ms >= %s AND {_HOLDS_SCOPE} ORDER BY r.replica_id",
                (*scope, since_ms),
            )
        ]

    # scope routes ------------------------------------------------------------------------
    def route(self, scope: Scope) -> Route | None:
        rows = self._read(
            "SELECT replica_group, moving_to, version FROM scope_routes WHERE tenant=%s AND workspace=%s", scope
        )
        return _route(rows[0] if rows else None)

    def routes(self) -> list[tuple[Scope, Route]]:
        return [
            ((r[0], r[1]), Route(r[2], r[3], int(r[4])))
            for r in self._read(
                "SELECT tenant, workspace, replica_group, moving_to, version FROM scope_routes"
                " ORDER BY tenant, workspace"
            )
        ]

    def claim_route(self, scope: Scope, group: str) -> Route:
        with self.transaction() as tx:
            if tx.conn.execute(
                "INSERT INTO scope_routes VALUES (%s,%s,%s,NULL,1) ON CONFLICT (tenant, workspace) DO NOTHING",
                (*scope, group),
            ).rowcount:
                self._notify_route(tx.conn, scope)
            row = tx.conn.execute(
                "SELECT replica_group, moving_to, version FROM scope_routes WHERE tenant=%s AND workspace=%s", scope
            ).fetchone()
        route = _route(row)
        assert route is not None
        return route

    def begin_move(self, scope: Scope, group: str) -> Route:
        """Start moving the scope to `group`: `group` projects it while the current one
        still serves. A scope with no route is routed to `group` at once; a move already
        under way to `group`, or a scope already there, is left as it is."""
        with self.transaction() as tx:
            row = tx.conn.execute(
                "SELECT replica_group, moving_to, version FROM scope_routes WHERE tenant=%s AND workspace=%s"
                " FOR UPDATE",
                scope,
            ).fetchone()
            if row is None:
                tx.conn.execute("INSERT INTO scope_routes VALUES (%s,%s,%s,NULL,1)", (*scope, group))
                route = Route(group, None, 1)
            elif row[0] == group or row[1] == group:
                return Route(row[0], row[1], int(row[2]))
            else:
                route = Route(row[0], group, int(row[2]) + 1)
                tx.conn.execute(
                    "UPDATE scope_routes SET moving_to=%s, version=%s WHERE tenant=%s AND workspace=%s",
                    (group, route.version, *scope),
                )
            self._notify_route(tx.conn, scope)
        return route

    def finish_move(self, scope: Scope, group: str) -> Route:
        """Flip the route of a scope being moved to `group`: `group` serves it now."""
        with self.transaction() as tx:
            row = tx.conn.execute(
                "UPDATE scope_routes SET replica_group=moving_to, moving_to=NULL, version=version+1"
                " WHERE tenant=%s AND workspace=%s AND moving_to=%s RETURNING replica_group, moving_to, version",
                (*scope, group),
            ).fetchone()
            if row is None:
                row = tx.conn.execute(
                    "SELECT replica_group, moving_to, version FROM scope_routes WHERE tenant=%s AND workspace=%s", scope
                ).fetchone()
            else:
                self._notify_route(tx.conn, scope)
        route = _route(row)
        assert route is not None
        return route

    def ack_route(self, scope: Scope, replica_id: str, version: int) -> None:
        with self.transaction() as tx:
            tx.conn.execute(
                "INSERT INTO route_acks VALUES (%s,%s,%s,%s) ON CONFLICT (tenant, workspace, replica_id)"
                " DO UPDATE SET version=GREATEST(route_acks.version, excluded.version)",
                (*scope, replica_id, version),
            )

    def route_acks(self, scope: Scope, version: int) -> set[str]:
        """Replicas that followed the scope's route through `version` (or later)."""
        return {
            r[0]
            for r in self._read(
                "SELECT replica_id FROM route_acks WHERE tenant=%s AND workspace=%s AND version >= %s",
                (*scope, version),
            )
        }

    @staticmethod
    def _notify_route(conn: psycopg.Connection[Any], scope: Scope) -> None:
        """Wake every replica's follower for the scope, as a journal append does."""
        conn.execute("SELECT pg_notify(%s, %s)", (JOURNAL_CHANNEL, _scope_lock_key(scope)))

    def retire_replica(self, replica_id: str) -> bool:
        """Forget a replica for good: its registration and acknowledgements go, and the
        purges only it still owed are settled. False when it was not registered."""
        with self.transaction() as tx:
            gone = tx.conn.execute("DELETE FROM replicas WHERE replica_id=%s", (replica_id,)).rowcount
            tx.conn.execute("DELETE FROM purge_acks WHERE replica_id=%s", (replica_id,))
            tx.conn.execute(
                f"DELETE FROM pending_purges p WHERE NOT EXISTS (SELECT 1 FROM replicas r WHERE {_HOLDS_SCOPE}"
                " AND NOT EXISTS (SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant AND a.workspace=p.workspace"
                " AND a.record_id=p.record_id AND a.replica_id=r.replica_id))"
            )
            tx.conn.execute(
                "DELETE FROM purge_acks a WHERE NOT EXISTS (SELECT 1 FROM pending_purges p"
                " WHERE p.tenant=a.tenant AND p.workspace=a.workspace AND p.record_id=a.record_id)"
            )
        return gone == 1

    def ack_purges(self, scope: Scope, record_ids: list[str], replica_id: str) -> None:
        with self.transaction() as tx:
            _execute_many(
                tx.conn,
                "INSERT INTO purge_acks VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                [(*scope, rid, replica_id) for rid in record_ids],
            )

    def purges_awaiting(self, replica_id: str) -> dict[Scope, list[str]]:
        awaiting: dict[Scope, list[str]] = {}
        # A registered replica owes only the purges of scopes its group holds; one not
        # registered yet (before its first heartbeat) owes every pending purge.
        for tenant, workspace, record_id in self._read(
            "SELECT p.tenant, p.workspace, p.record_id FROM pending_purges p WHERE NOT EXISTS ("
            " SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant AND a.workspace=p.workspace"
            " AND a.record_id=p.record_id AND a.replica_id=%s)"
            " AND (NOT EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id=%s)"
            f"  OR EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id=%s AND {_HOLDS_SCOPE}))"
            " ORDER BY p.tenant, p.workspace, p.record_id",
            (replica_id, replica_id, replica_id),
        ):
            awaiting.setdefault((tenant, workspace), []).append(record_id)
        return awaiting

    def settle_purges(self, scope: Scope, record_ids: list[str], live: list[str]) -> list[str]:
        """Clear the pending purges every registered replica holding the scope
        acknowledged; the ids that some replica of `live` has still to purge."""
        with self.transaction() as tx:
            tx.conn.execute(
                "DELETE FROM pending_purges p WHERE p.tenant=%s AND p.workspace=%s AND p.record_id = ANY(%s)"
                f" AND NOT EXISTS (SELECT 1 FROM replicas r WHERE {_HOLDS_SCOPE} AND NOT EXISTS ("
                "  SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant AND a.workspace=p.workspace"
                "  AND a.record_id=p.record_id AND a.replica_id=r.replica_id))",
                (*scope, list(record_ids)),
            )
            tx.conn.execute(  # acknowledgements of purges no longer pending
                "DELETE FROM purge_acks a WHERE a.tenant=%s AND a.workspace=%s AND a.record_id = ANY(%s)"
                " AND NOT EXISTS (SELECT 1 FROM pending_purges p WHERE p.tenant=a.tenant"
                " AND p.workspace=a.workspace AND p.record_id=a.record_id)",
                (*scope, list(record_ids)),
            )
            rows = tx.conn.execute(
                "SELECT p.record_id FROM pending_purges p WHERE p.tenant=%s AND p.workspace=%s"
                " AND p.record_id = ANY(%s) AND EXISTS (SELECT 1 FROM unnest(%s::text[]) AS l(replica_id)"
                "  WHERE NOT EXISTS (SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant"
                "  AND a.workspace=p.workspace AND a.record_id=p.record_id AND a.replica_id=l.replica_id))"
                " ORDER BY p.record_id",
                (*scope, list(record_ids), list(live)),
            ).fetchall()
        return [r[0] for r in rows]

    def wait_for_journal(self, timeout_s: float) -> set[Scope]:
        """Scopes some replica committed journal events to, waiting up to `timeout_s`
        for the first (LISTEN/NOTIFY on a connection of its own). After (re)connecting
        the listener every scope counts as woken: events may have come in between.

        Silence cannot tell "nothing happened" from a half-open connection that will
        never deliver again, so a listener that heard nothing for the store's timeout
        says LISTEN again (a no-op for the server, bounded like every wait): no
        answer, and it is replaced."""
        if self._listener is None:
            listener = None
            try:
                listener = _BoundedConnection.connect(self.url, autocommit=True, **self._options)
                listener.bound_s = self.timeout_s
                listener.execute(f"LISTEN {JOURNAL_CHANNEL}")
                self._connectivity.connected(_server(listener))
            except psycopg.Error:
                if listener is not None:
                    listener.close()
                time.sleep(timeout_s)
                return set()
            self._listener, self._listener_checked = listener, time.monotonic()
            return set(self.scopes())
        woken: set[Scope] = set()
        try:
            for note in self._listener.notifies(timeout=timeout_s, stop_after=1):
                woken.add(_scope_of(note.payload))
            if woken:
                for note in self._listener.notifies(timeout=0.005):
                    woken.add(_scope_of(note.payload))
                self._listener_checked = time.monotonic()
            elif time.monotonic() - self._listener_checked >= self.timeout_s:
                self._listener.execute(f"LISTEN {JOURNAL_CHANNEL}")
                self._listener_checked = time.monotonic()
        except psycopg.Error:
            self._listener.close()
            self._listener = None
        return woken

    # paging snapshots ------------------------------------------------------------------
    def put_snapshot(self, snapshot_id: str, body: str, created_ms: int, expire_before_ms: int) -> None:
        """One statement, so one round trip: the expired snapshots go as this one is stored."""
        try:
            with self._checkout() as conn:
                conn.execute(
                    "WITH expired AS (DELETE FROM snapshots WHERE created_ms < %s) "
                    "INSERT INTO snapshots VALUES (%s,%s,%s)",
                    (expire_before_ms, snapshot_id, body, created_ms),
                )
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc

    def snapshot(self, snapshot_id: str) -> tuple[str, int] | None:
        rows = self._read("SELECT body, created_ms FROM snapshots WHERE snapshot_id=%s", (snapshot_id,))
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
            with self._checkout() as conn:
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
        with self._checkout() as conn:
            for table in ("records", "keys", "journal", "candidates"):
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))

    def footprint(self) -> dict[str, int]:
        """Bytes per table (heap, TOAST and indexes: pg_total_relation_size)."""
        return {
            name: int(size)
            for name, size in self._read(
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

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._pool.close()


def _server(conn: psycopg.Connection[Any]) -> str:
    """``host:port`` of the server a connection reached (of a multi-host URL, the one
    that accepted it)."""
    return f"{conn.info.host}:{conn.info.port}"


def _rollback(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass
