"""What the engine needs from durable storage, independent of the database.

Every method that touches memory takes the (tenant, workspace) scope as its first
key, so isolation lives in the store itself: there is no way to ask for a row without
naming its scope, and a row of another scope is simply absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

Scope = tuple[str, str]


class StoreUnavailable(Exception):
    """The store could not serve (locked, disk full, I/O error): nothing was committed."""


class CommitUncertain(Exception):
    """The commit itself failed: the mutation may or may not be durable."""


class BackupUnsupported(Exception):
    """This store is backed up with its database's own tools, not `engram admin backup`."""


@dataclass(frozen=True)
class JournalEvent:
    scope: Scope
    cursor: int
    event_id: str
    kind: str
    subject: str
    body: dict[str, Any]
    event_digest: str
    recorded_at: str


@dataclass(frozen=True)
class CandidateRow:
    scope: Scope
    candidate_id: str
    state: str
    key_id: str | None
    sealed: bytes | None
    record_digest: str
    payload_digest: str
    principal: str
    created_cursor: int


@dataclass(frozen=True)
class RecordRow:
    scope: Scope
    record_id: str
    state: str
    record_digest: str
    payload_digest: str
    key_id: str | None
    sealed: bytes | None
    valid_from_ms: int
    valid_to_ms: int | None
    expires_at_ms: int | None
    accepted_cursor: int
    accepted_at: str
    candidate_id: str | None


@dataclass(frozen=True)
class StateCounts:
    """How many candidates and records of one scope are in each lifecycle state
    (counts only: what the metrics endpoint reports)."""

    candidates: dict[str, int]
    records: dict[str, int]


class Transaction(Protocol):
    """One atomic unit: every effect of a call, its journal events and its idempotency
    reservation commit together or not at all."""

    def append_event(
        self, scope: Scope, kind: str, subject: str, body: dict[str, Any], recorded_at: str
    ) -> JournalEvent: ...
    def put_key(self, key_id: str, wrapped: bytes, kek_id: str) -> None: ...
    def put_receipt(self, receipt: dict[str, Any]) -> str:
        """Keep a sealed receipt (authorisation, decision) once, keyed by its
        ``receipt_digest`` (a second put of the same digest is a no-op); returns the digest.
        Record bodies reference receipts by digest instead of repeating them."""
        ...
    def destroy_key(self, key_id: str) -> None: ...
    def insert_candidate(self, row: CandidateRow) -> None: ...
    def set_candidate_state(self, scope: Scope, candidate_id: str, state: str, *, drop_body: bool) -> None: ...
    def insert_record(self, row: RecordRow) -> None: ...
    def set_record_state(self, scope: Scope, record_id: str, state: str, *, drop_body: bool) -> None: ...
    def add_pending_purge(self, scope: Scope, record_id: str) -> None: ...
    def reserve(self, scope: Scope, principal: str, key: str, tool: str, intent: str, response: str) -> None: ...
    def claim_confirmation(self, ref: str, used_at_ms: int) -> bool: ...
    def candidate(self, scope: Scope, candidate_id: str) -> CandidateRow | None: ...
    def record(self, scope: Scope, record_id: str) -> RecordRow | None: ...
    def reservation(self, scope: Scope, principal: str, key: str) -> tuple[str, str, str] | None: ...
    def tombstoned_payload(self, scope: Scope, payload_digest: str) -> bool: ...
    def accepted_with_payload(self, scope: Scope, payload_digest: str) -> str | None: ...
    def update_reservation(self, scope: Scope, principal: str, key: str, response: str) -> None: ...


class Store(Protocol):
    """The system of record. `transaction` serialises writers per scope (an append's
    cursor is gap-free in its scope); `reader` is one consistent snapshot, and the
    store-level reads below made on the same thread inside it read that snapshot."""

    def transaction(self) -> AbstractContextManager[Transaction]: ...
    def reader(self) -> AbstractContextManager[Transaction]: ...
    def schema_version(self) -> int: ...
    def wrapped_key(self, key_id: str) -> tuple[bytes, str] | None: ...
    def receipt(self, receipt_digest: str) -> dict[str, Any] | None:
        """The receipt kept by ``Transaction.put_receipt`` under this digest, or None."""
        ...
    def all_wrapped_keys(self) -> list[tuple[str, bytes, str]]: ...
    def rewrap_keys(self, rows: list[tuple[str, bytes, str]]) -> None: ...
    def scope_cursor(self, scope: Scope) -> int: ...
    def scopes(self) -> list[Scope]: ...
    def events(self, scope: Scope, after: int = 0) -> Iterator[JournalEvent]: ...
    def verify_chain(self, scope: Scope) -> bool: ...
    def records(self, scope: Scope, record_ids: list[str]) -> dict[str, RecordRow]: ...
    def records_in_state(self, state: str, scope: Scope) -> list[RecordRow]: ...
    def due_for_expiry(self, at_ms: int) -> list[RecordRow]: ...
    def live_records(self, scope: Scope) -> Iterator[RecordRow]: ...
    def live_count(self, scope: Scope) -> int: ...
    def state_counts(self, scope: Scope) -> StateCounts: ...
    def pending_purges(self) -> dict[Scope, list[str]]: ...
    def clear_pending_purges(self, scope: Scope, record_ids: list[str]) -> None: ...
    def tenant_enabled(self, tenant: str) -> bool: ...
    def set_tenant_enabled(self, tenant: str, enabled: bool, at: str) -> None: ...
    def purge_freed_pages(self) -> bool: ...
    def backup(self, dest_path: str) -> None: ...
    def close(self) -> None: ...
