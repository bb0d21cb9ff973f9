"""What the engine needs from durable storage, independent of the database.

Every method that touches memory takes the (tenant, workspace) scope as its first
key, so isolation lives in the store itself: there is no way to ask for a row without
naming its scope, and a row of another scope is simply absent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from engram.models.errors import EngramError
from engram.models.scope import Scope


class StoreUnavailable(EngramError):
    """The store could not serve (locked, disk full, I/O error): nothing was committed."""


class CommitUncertain(EngramError):
    """The commit itself failed: the mutation may or may not be durable."""


class BackupUnsupported(EngramError):
    """This store is backed up with its database's own tools, not `engram admin backup`."""


#: The replica group of a replica started without one (and of every scope a database
#: held before scopes were routed): one group holding every scope, as before groups.
DEFAULT_GROUP = "default"
#: The longest a shared store waits on its database at once (see `PostgresStore`).
DEFAULT_DATABASE_TIMEOUT_MS = 10_000


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


class NewEvent(NamedTuple):
    """A journal event to append: the store gives it its cursor, id and chained digest."""

    kind: str
    subject: str
    body: dict[str, Any]
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
    #: The data key as stored (wrapped bytes, KEK id) when the read fetched it with the
    #: row (``Store.records``, ``Store.live_records``); None otherwise, or when destroyed.
    wrapped_key: tuple[bytes, str] | None = None


@dataclass(frozen=True)
class StateCounts:
    """How many candidates and records of one scope are in each lifecycle state
    (counts only: what the metrics endpoint reports)."""

    candidates: dict[str, int]
    records: dict[str, int]


@dataclass(frozen=True)
class Route:
    """Which replica group serves a scope (``group``) and, while the scope is being
    moved, which group is projecting it to take over (``moving_to``). ``version`` goes
    up at every change, so a replica's acknowledgement names the change it followed."""

    group: str
    moving_to: str | None
    version: int


@dataclass(frozen=True)
class ReplicaEntry:
    """One registered replica: its group, the URL its peers forward calls to, and its
    last heartbeat (epoch ms)."""

    replica_id: str
    group: str
    advertise_url: str | None
    heartbeat_ms: int


class Transaction(Protocol):
    """One atomic unit: every effect of a call, its journal events and its idempotency
    reservation commit together or not at all."""

    def append_event(
        self, scope: Scope, kind: str, subject: str, body: dict[str, Any], recorded_at: str
    ) -> JournalEvent: ...
    def append_events(self, scope: Scope, events: Sequence[NewEvent]) -> list[JournalEvent]:
        """Append ``events`` in order, chained as that many ``append_event`` calls chain
        them, written together (a batch of records: one statement, not one per event)."""
        ...

    def put_key(self, key_id: str, wrapped: bytes, kek_id: str) -> None: ...
    def put_keys(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        """``put_key`` of each (key_id, wrapped, kek_id), written together."""
        ...

    def put_receipt(self, receipt: dict[str, Any]) -> str:
        """Keep a sealed receipt (authorisation, decision) once, keyed by its
        ``receipt_digest`` (a second put of the same digest is a no-op); returns the digest.
        Record bodies reference receipts by digest instead of repeating them."""
        ...

    def destroy_key(self, key_id: str) -> None: ...
    def insert_candidate(self, row: CandidateRow) -> None: ...
    def set_candidate_state(self, scope: Scope, candidate_id: str, state: str, *, drop_body: bool) -> None: ...
    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        """The records, written together."""
        ...

    def set_record_state(self, scope: Scope, record_id: str, state: str, *, drop_body: bool) -> None: ...
    def add_pending_purge(self, scope: Scope, record_id: str) -> None: ...
    def reserve(self, scope: Scope, principal: str, key: str, tool: str, intent: str, response: str) -> None: ...
    def claim_confirmation(self, ref: str, used_at_ms: int) -> bool: ...
    def candidate(self, scope: Scope, candidate_id: str) -> CandidateRow | None: ...
    def record(self, scope: Scope, record_id: str) -> RecordRow | None: ...
    def reservation(self, scope: Scope, principal: str, key: str) -> tuple[str, str, str] | None: ...
    def tombstoned_payload(self, scope: Scope, payload_digest: str) -> bool: ...
    def present_records(self, scope: Scope, record_ids: Sequence[str]) -> set[str]:
        """Which of ``record_ids`` the scope has a record of, in any state."""
        ...

    def payload_states(self, scope: Scope, payload_digests: Sequence[str]) -> dict[str, set[str]]:
        """For each of ``payload_digests`` the scope has a tombstoned or a current record
        of, which of the two states it has (the checks of ``tombstoned_payload`` and
        ``accepted_with_payload`` for a whole batch at once)."""
        ...

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
    def journal_digests(self, scope: Scope, cursors: list[int]) -> dict[int, str]:
        """The event digest at each of `cursors` the scope's journal holds (absent
        cursors are left out): the shred ledger's check, by primary key, that the events
        it names are this journal's."""
        ...

    def receipt(self, receipt_digest: str) -> dict[str, Any] | None:
        """The receipt kept by ``Transaction.put_receipt`` under this digest, or None."""
        ...

    def all_wrapped_keys(self) -> list[tuple[str, bytes, str]]: ...
    def rewrap_keys(self, rows: list[tuple[str, bytes, str]]) -> None: ...
    def scope_cursor(self, scope: Scope) -> int: ...
    def scopes(self) -> list[Scope]: ...
    def events(self, scope: Scope, after: int = 0) -> Iterator[JournalEvent]: ...
    def verify_chain(self, scope: Scope) -> bool: ...
    def records(self, scope: Scope, record_ids: list[str]) -> dict[str, RecordRow]:
        """The rows of ``record_ids`` that exist, each with its wrapped data key read in
        the same statement (a search page and a projection batch open every body: one
        query, not one per record)."""
        ...

    def records_in_state(self, state: str, scope: Scope) -> list[RecordRow]: ...
    def due_for_expiry(self, at_ms: int) -> list[RecordRow]: ...
    def due_for_expiry_page(self, at_ms: int, limit: int, scope: Scope | None = None) -> tuple[int, list[RecordRow]]:
        """How many current records' retention ends by ``at_ms`` (in ``scope``, or in
        every scope), and the ``limit`` that end first: a count, not a read of them all."""
        ...

    def live_records(self, scope: Scope) -> Iterator[RecordRow]:
        """The scope's accepted_current rows in record_id order, each with its wrapped
        data key (as ``records``)."""
        ...

    def live_more_than(self, scope: Scope, n: int) -> bool:
        """Whether the scope holds more than ``n`` current records (reads at most n + 1)."""
        ...

    def state_counts(self, scope: Scope) -> StateCounts: ...
    def pending_purges(self) -> dict[Scope, list[str]]: ...
    def clear_pending_purges(self, scope: Scope, record_ids: list[str]) -> None: ...
    def tenant_enabled(self, tenant: str) -> bool: ...
    def set_tenant_enabled(self, tenant: str, enabled: bool, at: str) -> None: ...
    def purge_freed_pages(self) -> bool: ...
    def refresh_statistics(self) -> None:
        """Bring the query planner's statistics up to date after a bulk load, so the
        first searches after it read their rows by key rather than by a scan the planner
        chose blind."""
        ...

    def footprint(self) -> dict[str, int]:
        """Bytes each table holds on disk, its indexes included (what capacity reports
        per record)."""
        ...

    def backup(self, dest_path: str) -> None: ...
    def close(self) -> None: ...


class Deployment(Protocol):
    """The tables only a deployment of several `engram serve` replicas has: the replica
    registry with heartbeats, each scope's route to a replica group (and its moves), and
    the replicas' acknowledgements of routes and of physical purges."""

    def heartbeat(
        self, replica_id: str, at_ms: int, group: str = DEFAULT_GROUP, advertise_url: str | None = None
    ) -> None: ...
    def replica_entries(self) -> list[ReplicaEntry]: ...
    def live_holders(self, scope: Scope, since_ms: int) -> list[str]:
        """Live replicas whose group serves or is taking over the scope (every live
        replica when the scope has no route): those a forget waits for."""
        ...

    def group_members(self, group: str, since_ms: int) -> list[ReplicaEntry]: ...
    def route(self, scope: Scope) -> Route | None: ...
    def routes(self) -> list[tuple[Scope, Route]]: ...
    def claim_route(self, scope: Scope, group: str) -> Route:
        """The scope's route, routing it to `group` first when it has none (the first
        claim wins; every later one reads the same route)."""
        ...

    def begin_move(self, scope: Scope, group: str) -> Route: ...
    def finish_move(self, scope: Scope, group: str) -> Route: ...
    def ack_route(self, scope: Scope, replica_id: str, version: int) -> None: ...
    def route_acks(self, scope: Scope, version: int) -> set[str]: ...
    def retire_replica(self, replica_id: str) -> bool: ...
    def ack_purges(self, scope: Scope, record_ids: list[str], replica_id: str) -> None: ...
    def purges_awaiting(self, replica_id: str) -> dict[Scope, list[str]]: ...
    def settle_purges(self, scope: Scope, record_ids: list[str], live: list[str]) -> list[str]: ...


@runtime_checkable
class SharedStore(Store, Protocol):
    """A store several `engram serve` replicas share (PostgreSQL). Beyond `Store`: the
    shared deployment's tables (`deployment`), journal wake-ups, and what paging needs
    to work on any replica (snapshots and the cursor MAC secret). The embedded SQLite
    store, one process, has none of these."""

    @property
    def deployment(self) -> Deployment: ...
    def wait_for_journal(self, timeout_s: float) -> set[Scope]: ...
    def put_snapshot(self, snapshot_id: str, body: str, created_ms: int, expire_before_ms: int) -> None: ...
    def snapshot(self, snapshot_id: str) -> tuple[str, int] | None: ...
    def shared_secret(self, name: str) -> bytes: ...
