"""The store: the only room that speaks SQL. SQLite now; PostgreSQL would be a sibling file."""

from .base import CandidateRow, JournalEvent, RecordRow, Store, StoreUnavailable
from .sqlite import SqliteStore

__all__ = ["CandidateRow", "JournalEvent", "RecordRow", "SqliteStore", "Store", "StoreUnavailable"]
