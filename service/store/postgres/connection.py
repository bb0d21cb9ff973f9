"""The PostgreSQL connection: a pool of connections whose every wait is bounded, and
the transactions and snapshots the rest of the package runs its statements in.

- Bounded waits (``timeout_ms``, the `database_timeout_ms` setting): no wait on the
  database outlasts it (see :class:`BoundedConnection`), and a database found
  unreachable is not waited on again by every statement of a call (`.connectivity`).
- :meth:`Database.transaction` is BEGIN ... COMMIT; :meth:`Database.snapshot` a
  REPEATABLE READ, READ ONLY transaction. Both are bound to the calling thread, and
  :meth:`Database.rows` made on that thread inside one reads in it.
- Errors: any failure before COMMIT is StoreUnavailable (rolled back); a COMMIT whose
  connection broke is CommitUncertain.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import RowFactory, dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..base import DEFAULT_DATABASE_TIMEOUT_MS, CommitUncertain, StoreUnavailable
from ..connectivity import Connectivity, ConnectivityState

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


class BoundedConnection(psycopg.Connection[Any]):
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


def execute_many(conn: psycopg.Connection[Any], query: str, rows: Sequence[Sequence[Any]]) -> None:
    """`executemany` in slices of :data:`MANY_ROWS`."""
    with conn.cursor() as cur:
        for start in range(0, len(rows), MANY_ROWS):
            cur.executemany(query, rows[start : start + MANY_ROWS])


def copy_rows(conn: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """New ``rows`` of ``table`` (in ``columns`` order) by ``COPY``, in slices of
    :data:`MANY_ROWS`: one statement a slice instead of one a row (a batch's records,
    keys and journal events). A row that breaks a constraint fails the transaction, as
    an ``INSERT`` would."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with conn.cursor() as cur:
        for start in range(0, len(rows), MANY_ROWS):
            with cur.copy(statement) as copy:
                for row in rows[start : start + MANY_ROWS]:
                    copy.write_row(row)


def named_row(conn: psycopg.Connection[Any], query: str, params: Sequence[Any]) -> dict[str, Any] | None:
    """The first row of ``query`` on ``conn``, its columns by name."""
    return conn.cursor(row_factory=dict_row).execute(query, params).fetchone()


class Database:
    """The pool of connections to one database, no wait on which lasts longer than
    ``timeout_ms``, and the transaction or snapshot the calling thread is in."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS) -> None:
        self.url = url
        self.timeout_s = timeout_ms / 1000
        self.options = connection_options(url, self.timeout_s)
        self.connectivity = Connectivity(hold_s=self.timeout_s)
        self._local = threading.local()
        try:
            self._pool = ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                connection_class=BoundedConnection,
                kwargs={"autocommit": True, **self.options},
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

    def _configure(self, conn: BoundedConnection) -> None:
        """Bound every wait of a new connection, and its server session's idle
        transactions (a replica cut off mid-transaction releases its scope locks).

        Every statement is planned for its own parameters (``plan_cache_mode``): psycopg
        prepares a statement run five times, and the server's generic plan for one, made
        while a table was small, kept scanning the whole table for each ``= ANY(ids)``
        as the table grew (a bulk load's check of 4,096 ids took 1-2.7 s at 20-40,000
        records, against 30 ms when planned for the batch)."""
        conn.bound_s = self.timeout_s
        conn.execute(
            sql.SQL("SET idle_in_transaction_session_timeout = {}").format(sql.Literal(int(2 * self.timeout_s * 1000)))
        )
        conn.execute("SET plan_cache_mode = force_custom_plan")
        self.connectivity.connected(server_of(conn))

    def connectivity_state(self) -> ConnectivityState:
        return self.connectivity.state()

    @contextmanager
    def checkout(self) -> Iterator[BoundedConnection]:
        """A pooled connection, waiting at most the bound for one. A wait that ended
        with no server accepting a connection (an attempt failed, or the pool could have
        grown and did not) marks the database unreachable: for the next bound, or until
        the pool connects, checkouts only take what the pool holds, so a call of several
        statements answers within one bound, not one per statement."""
        fast = self.connectivity.failing_fast
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
                self.connectivity.lost(since=began)
            raise

    @contextmanager
    def _lent(
        self, first: str, params: Sequence[Any] = (), row_factory: RowFactory[Any] = tuple_row
    ) -> Iterator[tuple[BoundedConnection, psycopg.Cursor[Any]]]:
        """A pooled connection and the cursor of `first`, the statement it runs first.

        A connection found dead at that statement (closed or reset while it sat idle in
        the pool: a dropped network, a restarted server) is discarded and the statement
        runs on the next one, so a drop costs no call; one that stayed silent until
        the bound is not tried again (the network is down, not one connection)."""
        for attempt in range(POOL_SIZE + 1):
            with self.checkout() as conn:
                try:
                    cursor = conn.cursor(row_factory=row_factory).execute(first, params)
                except psycopg.OperationalError:
                    if conn.closed and not conn.timed_out and attempt < POOL_SIZE:
                        continue
                    raise
                yield conn, cursor
                return

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement's rows: in this thread's transaction or snapshot when inside
        one, else on a pooled connection."""
        return self._fetch(query, params, tuple_row)

    def named_rows(self, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """`rows`, each row's columns by name."""
        return self._fetch(query, params, dict_row)

    def _fetch(self, query: str, params: Sequence[Any], row_factory: RowFactory[Any]) -> list[Any]:
        try:
            bound: BoundedConnection | None = getattr(self._local, "conn", None)
            if bound is not None:
                return bound.cursor(row_factory=row_factory).execute(query, params).fetchall()
            with self._lent(query, params, row_factory) as (_, cursor):
                return cursor.fetchall()
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc

    @contextmanager
    def transaction(self) -> Iterator[BoundedConnection]:
        """BEGIN ... COMMIT on a pooled connection.

        Reads made on this thread inside the block use the same connection: a writer
        holding a scope lock never waits for a second pooled connection."""
        try:
            with self._lent("BEGIN") as (conn, _):
                outer = getattr(self._local, "conn", None)
                self._local.conn = conn  # reads inside see this transaction
                try:
                    yield conn
                except psycopg.Error as exc:
                    rollback(conn)
                    raise StoreUnavailable() from exc
                except BaseException:
                    rollback(conn)
                    raise
                finally:
                    self._local.conn = outer
                try:
                    conn.execute(_COMMIT)
                except psycopg.OperationalError as exc:
                    raise CommitUncertain() from exc
                except psycopg.Error as exc:
                    rollback(conn)
                    raise StoreUnavailable() from exc
        except psycopg.Error as exc:  # no connection to be had (pool timeout, server down)
            raise StoreUnavailable() from exc

    @contextmanager
    def snapshot(self) -> Iterator[BoundedConnection]:
        """One REPEATABLE READ snapshot, also used by this thread's reads (nested: the
        outer one)."""
        bound: BoundedConnection | None = getattr(self._local, "conn", None)
        if bound is not None:
            yield bound
            return
        try:
            with self._lent("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") as (conn, _):
                self._local.conn = conn
                try:
                    yield conn
                finally:
                    self._local.conn = None
                    rollback(conn)
        except psycopg.Error as exc:
            raise StoreUnavailable() from exc

    def close(self) -> None:
        self._pool.close()


def server_of(conn: psycopg.Connection[Any]) -> str:
    """``host:port`` of the server a connection reached (of a multi-host URL, the one
    that accepted it)."""
    return f"{conn.info.host}:{conn.info.port}"


def rollback(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass
