"""What the PostgreSQL store's connections see of the database server: whether one
accepts them, which server it is, and how often that changed.

Why it exists: under a failover manager the primary can vanish and another node take
its place. While no server accepts a connection, a call that waited the whole
`database_timeout_ms` for one, then another wait of its next statement, would answer
after several bounds; once a checkout has found nothing to connect to, later
checkouts do not wait again (they take a connection the pool has, or fail at once)
until the pool connects anew, so every call answers within one bound. The same state
counts primary changes, reconnections and outages for the metrics, and logs each
transition once.
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

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: str | None = None
        self._down_since: float | None = None
        self._connections = 0
        self._primary_changes = 0
        self._outages = 0
        self._reconnects = 0

    @property
    def unreachable(self) -> bool:
        """No server accepted a connection since the last checkout that timed out for lack of one."""
        return self._down_since is not None

    def connected(self, server: str) -> None:
        """A connection to `server` was opened."""
        with self._lock:
            self._connections += 1
            if self._down_since is not None:
                self._reconnects += 1
                logger.warning(
                    "database reachable again at %s after %.1f s", server, time.monotonic() - self._down_since
                )
                self._down_since = None
            if self._server is not None and server != self._server:
                self._primary_changes += 1
                logger.warning("database primary changed from %s to %s", self._server, server)
            self._server = server

    def lost(self) -> None:
        """A checkout waited its bound and no server accepted a connection meanwhile."""
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
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
