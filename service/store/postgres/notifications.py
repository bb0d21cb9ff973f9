"""Journal wake-ups: a replica learns that another committed journal events (or moved
a scope's route) by LISTEN/NOTIFY on one channel, the payload naming the scope."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psycopg

from ..base import Scope
from .connection import BoundedConnection, Database, server_of

JOURNAL_CHANNEL = "engram_journal"


def scope_key(scope: Scope) -> str:
    """A scope as one text: a notification's payload, and its writers' advisory lock key."""
    return json.dumps(list(scope))


def _scope_of(payload: str) -> Scope:
    tenant, workspace = json.loads(payload)
    return (tenant, workspace)


def notify(conn: psycopg.Connection[Any], scope: Scope) -> None:
    """Wake every replica's follower for the scope (sent when the transaction commits)."""
    conn.execute("SELECT pg_notify(%s, %s)", (JOURNAL_CHANNEL, scope_key(scope)))


class JournalListener:
    """The connection of its own a replica listens for wake-ups on (None until the
    first wait, and again after it failed)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.connection: BoundedConnection | None = None
        self._checked = 0.0

    def wait(self, timeout_s: float, every_scope: Callable[[], list[Scope]]) -> set[Scope]:
        """Scopes some replica committed journal events to, waiting up to `timeout_s`
        for the first. After (re)connecting every scope counts as woken
        (``every_scope``): events may have come in between.

        Silence cannot tell "nothing happened" from a half-open connection that will
        never deliver again, so a listener that heard nothing for the database's
        timeout says LISTEN again (a no-op for the server, bounded like every wait): no
        answer, and it is replaced."""
        db = self._db
        if self.connection is None:
            listener = None
            try:
                listener = BoundedConnection.connect(db.url, autocommit=True, **db.options)
                listener.bound_s = db.timeout_s
                listener.execute(f"LISTEN {JOURNAL_CHANNEL}")
                db.connectivity.connected(server_of(listener))
            except psycopg.Error:
                if listener is not None:
                    listener.close()
                time.sleep(timeout_s)
                return set()
            self.connection, self._checked = listener, time.monotonic()
            return set(every_scope())
        woken: set[Scope] = set()
        try:
            for note in self.connection.notifies(timeout=timeout_s, stop_after=1):
                woken.add(_scope_of(note.payload))
            if woken:
                for note in self.connection.notifies(timeout=0.005):
                    woken.add(_scope_of(note.payload))
                self._checked = time.monotonic()
            elif time.monotonic() - self._checked >= db.timeout_s:
                self.connection.execute(f"LISTEN {JOURNAL_CHANNEL}")
                self._checked = time.monotonic()
        except psycopg.Error:
            self.connection.close()
            self.connection = None
        return woken

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
