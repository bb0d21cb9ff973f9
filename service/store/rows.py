"""Rows as the backends read them, decoded by column name in one place.

Each backend hands its rows over as something indexed by column name (SQLite's
``sqlite3.Row``, psycopg's ``dict_row``), and the SELECTs name their columns from the
lists here, so a row type is decoded once for both stores, whatever order a query
lists its columns in. The digests and event ids come back in stored form (raw bytes,
or the text older rows hold: see :mod:`.journal`); bytes a driver hands as a buffer are
made ``bytes``.
"""

from __future__ import annotations

from typing import Any, Protocol

from engram.models.scope import Scope

from .base import CandidateRow, JournalEvent, RecordRow, ReplicaEntry, Route
from .journal import StoredEvent, read_body, read_digest, read_event_id, stored_digest


class NamedRow(Protocol):
    """A row whose columns are read by name."""

    def __getitem__(self, name: str, /) -> Any: ...


def column_names(listed: str) -> tuple[str, ...]:
    """Each name of a comma-separated column list, in order."""
    return tuple(name.strip() for name in listed.split(","))


#: A candidate row's columns.
CANDIDATE_COLUMNS = (
    "tenant, workspace, candidate_id, state, key_id, sealed, record_digest, payload_digest, principal, created_cursor"
)
#: A record row's columns, in the order :func:`stored_record` gives their values.
RECORD_COLUMNS = (
    "tenant, workspace, record_id, state, record_digest, payload_digest, key_id, sealed,"
    " valid_from_ms, valid_to_ms, expires_at_ms, accepted_cursor, accepted_at, candidate_id"
)
#: The record columns, then its wrapped data key (absent once destroyed): what
#: :func:`record_with_key` decodes.
RECORD_WITH_KEY = (
    ", ".join("r." + name for name in column_names(RECORD_COLUMNS))
    + ", k.wrapped, k.kek_id FROM records r LEFT JOIN keys k ON k.key_id = r.key_id"
)
#: A journal row's columns after its scope, in the order :func:`.journal.stored_row`
#: gives their values.
JOURNAL_COLUMNS = "cursor, event_id, kind, subject, body, event_digest, prev_digest, recorded_at"
#: A wrapped data key's columns, in the order a batch's key rows hold them.
KEY_COLUMNS = "key_id, wrapped, kek_id"
#: A registered replica's columns.
REPLICA_COLUMNS = "replica_id, replica_group, advertise_url, heartbeat_ms"
#: A scope route's columns.
ROUTE_COLUMNS = "replica_group, moving_to, version"


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def candidate(row: NamedRow) -> CandidateRow:
    return CandidateRow(
        scope=(row["tenant"], row["workspace"]),
        candidate_id=row["candidate_id"],
        state=row["state"],
        key_id=row["key_id"],
        sealed=_bytes(row["sealed"]),
        record_digest=row["record_digest"],
        payload_digest=row["payload_digest"],
        principal=row["principal"],
        created_cursor=row["created_cursor"],
    )


def record(row: NamedRow, wrapped_key: tuple[bytes, str] | None = None) -> RecordRow:
    return RecordRow(
        scope=(row["tenant"], row["workspace"]),
        record_id=row["record_id"],
        state=row["state"],
        record_digest=read_digest(row["record_digest"]),
        payload_digest=read_digest(row["payload_digest"]),
        key_id=row["key_id"],
        sealed=_bytes(row["sealed"]),
        valid_from_ms=row["valid_from_ms"],
        valid_to_ms=row["valid_to_ms"],
        expires_at_ms=row["expires_at_ms"],
        accepted_cursor=row["accepted_cursor"],
        accepted_at=row["accepted_at"],
        candidate_id=row["candidate_id"],
        wrapped_key=wrapped_key,
    )


def record_with_key(row: NamedRow) -> RecordRow:
    """A row of :data:`RECORD_WITH_KEY`."""
    wrapped = row["wrapped"]
    return record(row, None if wrapped is None else (bytes(wrapped), row["kek_id"]))


def stored_candidate(row: CandidateRow) -> tuple[Any, ...]:
    """A candidate row's values, in :data:`CANDIDATE_COLUMNS` order."""
    return (
        *row.scope,
        row.candidate_id,
        row.state,
        row.key_id,
        row.sealed,
        row.record_digest,
        row.payload_digest,
        row.principal,
        row.created_cursor,
    )


def stored_record(row: RecordRow) -> tuple[Any, ...]:
    """A record row's values, in :data:`RECORD_COLUMNS` order (digests in stored form)."""
    return (
        *row.scope,
        row.record_id,
        row.state,
        stored_digest(row.record_digest),
        stored_digest(row.payload_digest),
        row.key_id,
        row.sealed,
        row.valid_from_ms,
        row.valid_to_ms,
        row.expires_at_ms,
        row.accepted_cursor,
        row.accepted_at,
        row.candidate_id,
    )


def stored_event(row: NamedRow) -> StoredEvent:
    """A row of :data:`JOURNAL_COLUMNS`; ValueError when its body no longer decodes."""
    return StoredEvent(
        cursor=int(row["cursor"]),
        event_id=read_event_id(row["event_id"]),
        kind=row["kind"],
        subject=row["subject"],
        body=read_body(row["body"]),
        event_digest=read_digest(row["event_digest"]),
        prev_digest=read_digest(row["prev_digest"]),
        recorded_at=row["recorded_at"],
    )


def event(scope: Scope, stored: StoredEvent) -> JournalEvent:
    """A journal event of ``scope`` from its stored row."""
    return JournalEvent(
        scope,
        stored.cursor,
        stored.event_id,
        stored.kind,
        stored.subject,
        stored.body,
        stored.event_digest,
        stored.recorded_at,
    )


def replica(row: NamedRow) -> ReplicaEntry:
    return ReplicaEntry(row["replica_id"], row["replica_group"], row["advertise_url"], int(row["heartbeat_ms"]))


def route(row: NamedRow) -> Route:
    return Route(row["replica_group"], row["moving_to"], int(row["version"]))
