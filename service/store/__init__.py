"""The store: the only room that speaks SQL. SQLite (embedded, the default) or
PostgreSQL (shared by several replicas), each a file implementing `base.Store`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import DEFAULT_DATABASE_TIMEOUT_MS, CandidateRow, JournalEvent, RecordRow, Store, StoreUnavailable
from .migrations import SchemaTooNew
from .sqlite import SqliteStore

if TYPE_CHECKING:
    from pathlib import Path


def open_store(
    sqlite_path: Path, database_url: str | None, *, database_timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS
) -> Store:
    """The PostgreSQL store at `database_url` when one is given (no wait on it longer
    than `database_timeout_ms`), else SQLite at `sqlite_path` (psycopg is imported only
    when PostgreSQL is asked for)."""
    if database_url:
        from .postgres import PostgresStore

        return PostgresStore(database_url, timeout_ms=database_timeout_ms)
    return SqliteStore(sqlite_path)


__all__ = [
    "DEFAULT_DATABASE_TIMEOUT_MS",
    "CandidateRow",
    "JournalEvent",
    "RecordRow",
    "SchemaTooNew",
    "SqliteStore",
    "Store",
    "StoreUnavailable",
    "open_store",
]
