"""What the PostgreSQL store's connections see of the database server: whether one
accepts them, which server it is, and how often that changed.

Why it exists: under a failover manager the primary can vanish and another node take
its place. While no server accepts a connection, a call that waited the whole
`database_timeout_ms` for one, then another wait of its next statement, would answer
after several bounds; once a checkout has found nothing to connect to, checkouts in
the following bound do not wait again (they take a connection the pool has, or fail at
once), so a call answers within one bound. After that bound a checkout waits again,
which gives the pool the time to connect once a server is back, and a connection made
ends it all at once. The same state counts primary changes, reconnections and
outages for the metrics, and logs each transition once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

logger = logging.getLogger("engram.store.connectivity")


@dataclass(frozen=True)
class ConnectivityState:
    """A snapshot for metrics: the server last connected to (``host:port``, None
    before the first connection) and the counters since the store opened."""

    server: str | None
    reachable: bool
    connections: int  # connections opened (pooled and listener)
    primary_changes: int  # a connection opened to another server than the last one
    outages: int  # times no server accepted a connection within the bound
    reconnects: int  # outages that ended with a connection


class Connectivity:
    """Thread-safe record of the store's connections to the database server."""

    def __init__(self, hold_s: float) -> None:
        self._lock = threading.Lock()
        self._hold_s = hold_s
        self._server: str | None = None
        self._down_since: float | None = None  # the outage began (no connection made since)
        self._lost_at: float | None = None  # the last checkout that waited its bound for a server
        self._connected_at: float | None = None  # the last connection made
        self._connections = 0
        self._primary_changes = 0
        self._outages = 0
        self._reconnects = 0

    @property
    def failing_fast(self) -> bool:
        """A checkout waited its bound for a server less than ``hold_s`` ago, and no
        connection was made since: checkouts do not wait again."""
        lost = self._lost_at
        return lost is not None and time.monotonic() - lost < self._hold_s

    def connected(self, server: str) -> None:
        """A connection to `server` was opened."""
        with self._lock:
            self._connected_at = time.monotonic()
            self._connections += 1
            if self._down_since is not None:
                self._reconnects += 1
                logger.warning(
                    "database reachable again at %s after %.1f s", server, time.monotonic() - self._down_since
                )
                self._down_since = None
            self._lost_at = None
            if self._server is not None and server != self._server:
                self._primary_changes += 1
                logger.warning("database primary changed from %s to %s", self._server, server)
            self._server = server

    def lost(self, since: float) -> None:
        """A checkout that began at `since` (monotonic) waited its bound and no server
        accepted a connection meanwhile. A connection made during that wait (the server
        came back while it waited) means the server is reachable: nothing is lost."""
        with self._lock:
            if self._connected_at is not None and self._connected_at >= since:
                return
            self._lost_at = time.monotonic()
            if self._down_since is None:
                self._down_since = self._lost_at
                self._outages += 1
                logger.warning(
                    "database unreachable (last primary %s): calls answer STORE_UNAVAILABLE until a server"
                    " accepts connections again",
                    self._server,
                )

    def state(self) -> ConnectivityState:
        with self._lock:
            return ConnectivityState(
                self._server,
                self._down_since is None,
                self._connections,
                self._primary_changes,
                self._outages,
                self._reconnects,
            )
