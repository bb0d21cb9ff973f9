"""The store: the only room that speaks SQL. SQLite (embedded, the default) or
PostgreSQL (shared by several replicas), each a backend implementing `base.Store`,
opened by the scheme of a `StoreAddress` (see `address`)."""

from __future__ import annotations

from .address import StoreAddress, UnknownStoreScheme, open_store
from .base import DEFAULT_DATABASE_TIMEOUT_MS, CandidateRow, JournalEvent, RecordRow, Store, StoreUnavailable
from .migrations import SchemaTooNew
from .sqlite import SqliteStore

__all__ = [
    "DEFAULT_DATABASE_TIMEOUT_MS",
    "CandidateRow",
    "JournalEvent",
    "RecordRow",
    "SchemaTooNew",
    "SqliteStore",
    "Store",
    "StoreAddress",
    "StoreUnavailable",
    "UnknownStoreScheme",
    "open_store",
]
