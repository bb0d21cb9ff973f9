"""The store: the only room that speaks SQL. SQLite (embedded, the default) or
PostgreSQL (shared by several replicas), each a file implementing `base.Store`."""

from pathlib import Path

from .base import CandidateRow, JournalEvent, RecordRow, Store, StoreUnavailable
from .migrations import SchemaTooNew
from .sqlite import SqliteStore


def open_store(sqlite_path: Path, database_url: str | None) -> Store:
    """The PostgreSQL store at `database_url` when one is given, else SQLite at
    `sqlite_path` (psycopg is imported only when PostgreSQL is asked for)."""
    if database_url:
        from .postgres import PostgresStore

        return PostgresStore(database_url)
    return SqliteStore(sqlite_path)


__all__ = [
    "CandidateRow",
    "JournalEvent",
    "RecordRow",
    "SchemaTooNew",
    "SqliteStore",
    "Store",
    "StoreUnavailable",
    "open_store",
]
