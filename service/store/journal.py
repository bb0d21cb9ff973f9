"""The journal's hash chain, shared by every backend.

Each event's digest covers its scope, cursor, content and its predecessor's digest, so
a store of either kind can be checked (after a restore, or by an operator) without
trusting the database that holds it: one edited, dropped or reordered event breaks
every digest after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from models.digests import DigestKind, digest

from .base import Scope


def event_digest(
    scope: Scope, cursor: int, event_id: str, kind: str, subject: str,
    body: dict[str, Any], prev_digest: str | None, recorded_at: str,
) -> str:
    """Digest of one journal event, chained to its predecessor in the scope."""
    return digest(
        DigestKind.EVENT,
        {
            "tenant": scope[0], "workspace": scope[1], "cursor": str(cursor),
            "event_id": event_id, "kind": kind, "subject": subject, "body": body,
            "prev_digest": prev_digest, "recorded_at": recorded_at,
        },
    )


@dataclass(frozen=True)
class StoredEvent:
    """One journal row as stored, with the link the chain check needs."""

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
    cursors run 1, 2, 3... without a gap and each event names its predecessor."""
    prev: str | None = None
    expected = 1
    for row in rows:
        recomputed = event_digest(
            scope, row.cursor, row.event_id, row.kind, row.subject, row.body,
            row.prev_digest, row.recorded_at,
        )
        if row.cursor != expected or row.prev_digest != prev or recomputed != row.event_digest:
            return False
        prev, expected = row.event_digest, expected + 1
    return True
