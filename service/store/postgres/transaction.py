"""One PostgreSQL transaction's statements (`Transaction`): the journal append, keys,
receipts, candidates, records, idempotency reservations and confirmation refs.

Writers are serialised per scope, not globally: the first statement a write
transaction makes about a scope takes a transaction-scoped advisory lock on it. Every
later read of that transaction (READ COMMITTED: a fresh snapshot per statement) then
sees everything the previous holder committed, so "check the idempotency reservation,
then apply the effect, then reserve" is exactly-once across replicas, and the journal
cursor of a scope is gap-free (read, increment and write under the lock). Confirmation
refs are a primary key inserted with ON CONFLICT DO NOTHING: two replicas racing on one
ref serialise on the unique index and exactly one wins.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from .. import rows as decoded
from .. import statements as S
from ..base import CandidateRow, JournalEvent, NewEvent, RecordRow, Scope
from ..journal import chained, read_digest, stored_digest, stored_row
from ..rows import JOURNAL_COLUMNS, KEY_COLUMNS, RECORD_COLUMNS, column_names, stored_candidate, stored_record
from ..statements import pyformat
from .connection import BoundedConnection, copy_rows, named_row
from .notifications import notify, scope_key

#: The columns a batch's rows are copied into, in the order their rows hold them.
JOURNAL_TABLE_COLUMNS = ("tenant", "workspace", *column_names(JOURNAL_COLUMNS))
KEY_TABLE_COLUMNS = column_names(KEY_COLUMNS)
RECORD_TABLE_COLUMNS = column_names(RECORD_COLUMNS)


class PostgresTransaction:
    """Statements of one transaction on one connection."""

    def __init__(self, conn: BoundedConnection, *, writing: bool) -> None:
        self.conn = conn
        self._writing = writing
        self._locked: set[Scope] = set()

    def _scope(self, scope: Scope) -> None:
        """Serialise writers of this scope (once per transaction; readers never wait)."""
        if self._writing and scope not in self._locked:
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (scope_key(scope),))
            self._locked.add(scope)

    def _execute(self, statement: str, params: tuple[Any, ...]) -> psycopg.Cursor[Any]:
        """Run one of the shared :mod:`..statements`."""
        return self.conn.execute(pyformat(statement), params)

    def _one(self, statement: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._execute(statement, params).fetchone()

    # journal -------------------------------------------------------------------
    def append_event(
        self, scope: Scope, kind: str, subject: str, body: dict[str, Any], recorded_at: str
    ) -> JournalEvent:
        return self.append_events(scope, [NewEvent(kind, subject, body, recorded_at)])[0]

    def append_events(self, scope: Scope, events: Sequence[NewEvent]) -> list[JournalEvent]:
        if not events:
            return []
        self._scope(scope)
        row = self._one(S.SCOPE_HEAD, scope)
        appended = chained(scope, (row[0], row[1]) if row else (0, None), events)
        copy_rows(self.conn, "journal", JOURNAL_TABLE_COLUMNS, [(*scope, *stored_row(e)) for e in appended])
        last = appended[-1]
        self._execute(S.MOVE_HEAD, (*scope, last.cursor, last.event_digest))
        notify(self.conn, scope)
        return appended

    # keys ----------------------------------------------------------------------
    def put_key(self, key_id: str, wrapped: bytes, kek_id: str) -> None:
        self.put_keys([(key_id, wrapped, kek_id)])

    def put_keys(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        copy_rows(self.conn, "keys", KEY_TABLE_COLUMNS, rows)

    def destroy_key(self, key_id: str) -> None:
        self._execute(S.DESTROY_KEY, (key_id,))

    # receipts ------------------------------------------------------------------------
    def put_receipt(self, receipt: dict[str, Any]) -> str:
        digest_ = receipt["receipt_digest"]
        self._execute(S.INSERT_RECEIPT, (digest_, json.dumps(receipt, sort_keys=True, separators=(",", ":"))))
        return digest_

    # candidates and records --------------------------------------------------------
    def insert_candidate(self, row: CandidateRow) -> None:
        self._scope(row.scope)
        self._execute(S.INSERT_CANDIDATE, stored_candidate(row))

    def set_candidate_state(self, scope: Scope, candidate_id: str, state: str, *, drop_body: bool) -> None:
        self._scope(scope)
        self._execute(
            S.SET_CANDIDATE_STATE.format(body=S.DROP_BODY if drop_body else ""), (state, *scope, candidate_id)
        )

    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        for scope in {row.scope for row in rows}:
            self._scope(scope)
        copy_rows(self.conn, "records", RECORD_TABLE_COLUMNS, [stored_record(row) for row in rows])

    def set_record_state(self, scope: Scope, record_id: str, state: str, *, drop_body: bool) -> None:
        self._scope(scope)
        self._execute(S.SET_RECORD_STATE.format(body=S.DROP_BODY if drop_body else ""), (state, *scope, record_id))

    def add_pending_purge(self, scope: Scope, record_id: str) -> None:
        self._scope(scope)
        self._execute(S.ADD_PENDING_PURGE, (*scope, record_id))

    def candidate(self, scope: Scope, candidate_id: str) -> CandidateRow | None:
        self._scope(scope)
        row = named_row(self.conn, pyformat(S.CANDIDATE), (*scope, candidate_id))
        return decoded.candidate(row) if row else None

    def record(self, scope: Scope, record_id: str) -> RecordRow | None:
        self._scope(scope)
        row = named_row(self.conn, pyformat(S.RECORD), (*scope, record_id))
        return decoded.record(row) if row else None

    def accepted_with_payload(self, scope: Scope, payload_digest: str) -> str | None:
        self._scope(scope)
        row = self._one(S.ACCEPTED_WITH_PAYLOAD, (*scope, stored_digest(payload_digest)))
        return row[0] if row else None

    def tombstoned_payload(self, scope: Scope, payload_digest: str) -> bool:
        self._scope(scope)
        return self._one(S.TOMBSTONED_PAYLOAD, (*scope, stored_digest(payload_digest))) is not None

    def present_records(self, scope: Scope, record_ids: Sequence[str]) -> set[str]:
        self._scope(scope)
        rows = self.conn.execute(
            "SELECT record_id FROM records WHERE tenant=%s AND workspace=%s AND record_id = ANY(%s)",
            (*scope, list(record_ids)),
        ).fetchall()
        return {r[0] for r in rows}

    def payload_states(self, scope: Scope, payload_digests: Sequence[str]) -> dict[str, set[str]]:
        self._scope(scope)
        rows = self.conn.execute(
            "SELECT DISTINCT payload_digest, state FROM records WHERE tenant=%s AND workspace=%s"
            " AND payload_digest = ANY(%s) AND state IN ('tombstoned', 'accepted_current')",
            (*scope, [stored_digest(d) for d in payload_digests]),
        ).fetchall()
        states: dict[str, set[str]] = {}
        for stored, state in rows:
            states.setdefault(read_digest(stored), set()).add(state)
        return states

    # idempotency and confirmations ---------------------------------------------------
    def reservation(self, scope: Scope, principal: str, key: str) -> tuple[str, str, str] | None:
        self._scope(scope)
        row = self._one(S.RESERVATION, (*scope, principal, key))
        return (row[0], row[1], row[2]) if row else None

    def reserve(self, scope: Scope, principal: str, key: str, tool: str, intent: str, response: str) -> None:
        self._scope(scope)
        self._execute(S.RESERVE, (*scope, principal, key, tool, intent, response))

    def update_reservation(self, scope: Scope, principal: str, key: str, response: str) -> None:
        self._scope(scope)
        self._execute(S.UPDATE_RESERVATION, (response, *scope, principal, key))

    def claim_confirmation(self, ref: str, used_at_ms: int) -> bool:
        return self._execute(S.CLAIM_CONFIRMATION, (ref, used_at_ms)).rowcount == 1
