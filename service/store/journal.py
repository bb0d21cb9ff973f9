"""The journal's hash chain and its stored form, shared by every backend.

Each event's digest covers its scope, cursor, content and its predecessor's digest, so
a store of either kind can be checked (after a restore, or by an operator) without
trusting the database that holds it: one edited, dropped or reordered event breaks
every digest after it.

Stored form (schema step 4): the body packed (:mod:`.compact`), the event id and the
event digest as their raw bytes (16 and 32), and no copy of the predecessor's digest: the chain check takes it from
the previous row, which the event's own digest covers anyway, so dropping the copy
loses nothing the check relies on. Rows written before keep their JSON text, digest
text, id text and stored link, and read the same.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from engram.models.digests import DigestKind, digest
from engram.models.scope import Scope

from . import compact
from .base import JournalEvent, NewEvent

DIGEST_PREFIX = "sha256:"
EVENT_ID_PREFIX = "evt_"


def event_digest(
    scope: Scope,
    cursor: int,
    event_id: str,
    kind: str,
    subject: str,
    body: dict[str, Any],
    prev_digest: str | None,
    recorded_at: str,
) -> str:
    """Digest of one journal event, chained to its predecessor in the scope."""
    return digest(
        DigestKind.EVENT,
        {
            "tenant": scope[0],
            "workspace": scope[1],
            "cursor": str(cursor),
            "event_id": event_id,
            "kind": kind,
            "subject": subject,
            "body": body,
            "prev_digest": prev_digest,
            "recorded_at": recorded_at,
        },
    )


def chained(scope: Scope, head: tuple[int, str | None], events: Sequence[NewEvent]) -> list[JournalEvent]:
    """``events`` as the journal appends them after ``head`` (the scope's cursor and head
    digest): consecutive cursors, fresh ids, each digest chained to the one before."""
    cursor, prev = head
    out: list[JournalEvent] = []
    for kind, subject, body, recorded_at in events:
        cursor += 1
        event_id = new_event_id()
        prev = event_digest(scope, cursor, event_id, kind, subject, body, prev, recorded_at)
        out.append(JournalEvent(scope, cursor, event_id, kind, subject, body, prev, recorded_at))
    return out


def stored_row(event: JournalEvent) -> tuple[Any, ...]:
    """A journal row's values after its scope: cursor, event id, kind, subject, body,
    event digest, stored link (None: see the module docstring) and recorded_at."""
    return (
        event.cursor,
        stored_event_id(event.event_id),
        event.kind,
        event.subject,
        stored_body(event.body),
        stored_digest(event.event_digest),
        None,
        event.recorded_at,
    )


def stored_body(body: dict[str, Any]) -> bytes:
    """An event body as a journal row keeps it."""
    return compact.pack(body)


def read_body(stored: str | bytes) -> dict[str, Any]:
    """An event body from its stored form: packed, or JSON text (older rows; bytes
    where a database converted the column). ValueError when it is neither."""
    if isinstance(stored, str):
        return json.loads(stored)
    data = bytes(stored)
    return compact.unpack(data) if compact.is_packed(data) else json.loads(data)


def new_event_id() -> str:
    return EVENT_ID_PREFIX + uuid.uuid4().hex


def stored_event_id(event_id: str) -> bytes:
    """An event id (`evt_` + 32 hex digits) as its 16 raw bytes."""
    if not event_id.startswith(EVENT_ID_PREFIX) or len(event_id) != len(EVENT_ID_PREFIX) + 32:
        raise ValueError("not an event id")
    return bytes.fromhex(event_id[len(EVENT_ID_PREFIX) :])


def read_event_id(stored: str | bytes) -> str:
    """An event id from its stored form: 16 raw bytes, or its text (older rows)."""
    if isinstance(stored, str):
        return stored
    data = bytes(stored)
    return EVENT_ID_PREFIX + data.hex() if len(data) == 16 else data.decode("utf-8")


def stored_digest(value: str) -> bytes:
    """A `sha256:` digest as its 32 raw bytes."""
    if not value.startswith(DIGEST_PREFIX):
        raise ValueError("not a sha256 digest")
    return bytes.fromhex(value[len(DIGEST_PREFIX) :])


@overload
def read_digest(stored: str | bytes) -> str: ...


@overload
def read_digest(stored: None) -> None: ...


def read_digest(stored: str | bytes | None) -> str | None:
    """A digest from its stored form: raw bytes, or its `sha256:` text (older rows)."""
    if stored is None or isinstance(stored, str):
        return stored
    return DIGEST_PREFIX + bytes(stored).hex()


@dataclass(frozen=True)
class StoredEvent:
    """One journal row as stored, with the link the chain check needs (None where
    the row keeps no copy of it: then the previous row's digest is the link)."""

    cursor: int
    event_id: str
    kind: str
    subject: str
    body: dict[str, Any]
    event_digest: str
    prev_digest: str | None
    recorded_at: str


def chain_intact(scope: Scope, rows: Iterable[StoredEvent]) -> bool:
    """Recompute every digest and link of a scope's journal, in cursor order: the
    cursors run 1, 2, 3... without a gap and each event names its predecessor. A row
    that no longer decodes (an edited packed body: ``rows`` raises ValueError) breaks it."""
    try:
        return _linked(scope, rows)
    except ValueError:
        return False


def _linked(scope: Scope, rows: Iterable[StoredEvent]) -> bool:
    prev: str | None = None
    expected = 1
    for row in rows:
        recomputed = event_digest(
            scope,
            row.cursor,
            row.event_id,
            row.kind,
            row.subject,
            row.body,
            prev,
            row.recorded_at,
        )
        stored_link = prev if row.prev_digest is None else row.prev_digest
        if row.cursor != expected or stored_link != prev or recomputed != row.event_digest:
            return False
        prev, expected = row.event_digest, expected + 1
    return True
