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

from .. import rows as decoded
from ..base import CandidateRow, JournalEvent, NewEvent, RecordRow, Scope
from ..journal import chained, read_digest, stored_digest, stored_row
from ..rows import CANDIDATE_COLUMNS, JOURNAL_COLUMNS, RECORD_COLUMNS, stored_record
from .connection import BoundedConnection, execute_many, named_row
from .notifications import notify, scope_key


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

    def _one(self, query: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self.conn.execute(query, params).fetchone()

    # journal -------------------------------------------------------------------
    def append_event(
        self, scope: Scope, kind: str, subject: str, body: dict[str, Any], recorded_at: str
    ) -> JournalEvent:
        return self.append_events(scope, [NewEvent(kind, subject, body, recorded_at)])[0]

    def append_events(self, scope: Scope, events: Sequence[NewEvent]) -> list[JournalEvent]:
        if not events:
            return []
        self._scope(scope)
        row = self._one("SELECT cursor, head_digest FROM scopes WHERE tenant=%s AND workspace=%s", scope)
        appended = chained(scope, (row[0], row[1]) if row else (0, None), events)
        execute_many(
            self.conn,
            f"INSERT INTO journal (tenant, workspace, {JOURNAL_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            [(*scope, *stored_row(e)) for e in appended],
        )
        last = appended[-1]
        self.conn.execute(
            "INSERT INTO scopes VALUES (%s,%s,%s,%s) ON CONFLICT (tenant, workspace)"
            " DO UPDATE SET cursor=excluded.cursor, head_digest=excluded.head_digest",
            (*scope, last.cursor, last.event_digest),
        )
        notify(self.conn, scope)
        return appended

    # keys ----------------------------------------------------------------------
    def put_key(self, key_id: str, wrapped: bytes, kek_id: str) -> None:
        self.put_keys([(key_id, wrapped, kek_id)])

    def put_keys(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        execute_many(self.conn, "INSERT INTO keys VALUES (%s,%s,%s)", rows)

    def destroy_key(self, key_id: str) -> None:
        self.conn.execute("DELETE FROM keys WHERE key_id=%s", (key_id,))

    # receipts ------------------------------------------------------------------------
    def put_receipt(self, receipt: dict[str, Any]) -> str:
        digest_ = receipt["receipt_digest"]
        self.conn.execute(
            "INSERT INTO receipts VALUES (%s,%s) ON CONFLICT (digest) DO NOTHING",
            (digest_, json.dumps(receipt, sort_keys=True, separators=(",", ":"))),
        )
        return digest_

    # candidates and records --------------------------------------------------------
    def insert_candidate(self, row: CandidateRow) -> None:
        self._scope(row.scope)
        self.conn.execute(
            f"INSERT INTO candidates ({CANDIDATE_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                *row.scope,
                row.candidate_id,
                row.state,
                row.key_id,
                row.sealed,
                row.record_digest,
                row.payload_digest,
                row.principal,
                row.created_cursor,
            ),
        )

    def set_candidate_state(self, scope: Scope, candidate_id: str, state: str, *, drop_body: bool) -> None:
        self._scope(scope)
        body_sql = ", sealed=NULL, key_id=NULL" if drop_body else ""
        self.conn.execute(
            f"UPDATE candidates SET state=%s{body_sql} WHERE tenant=%s AND workspace=%s AND candidate_id=%s",
            (state, *scope, candidate_id),
        )

    def insert_records(self, rows: Sequence[RecordRow]) -> None:
        for scope in {row.scope for row in rows}:
            self._scope(scope)
        execute_many(
            self.conn,
            f"INSERT INTO records ({RECORD_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            [stored_record(row) for row in rows],
        )

    def set_record_state(self, scope: Scope, record_id: str, state: str, *, drop_body: bool) -> None:
        self._scope(scope)
        body_sql = ", sealed=NULL, key_id=NULL" if drop_body else ""
        self.conn.execute(
            f"UPDATE records SET state=%s{body_sql} WHERE tenant=%s AND workspace=%s AND record_id=%s",
            (state, *scope, record_id),
        )

    def add_pending_purge(self, scope: Scope, record_id: str) -> None:
        self._scope(scope)
        self.conn.execute("INSERT INTO pending_purges VALUES (%s,%s,%s) ON CONFLICT DO NOTHING", (*scope, record_id))

    def candidate(self, scope: Scope, candidate_id: str) -> CandidateRow | None:
        self._scope(scope)
        row = named_row(
            self.conn,
            f"SELECT {CANDIDATE_COLUMNS} FROM candidates WHERE tenant=%s AND workspace=%s AND candidate_id=%s",
            (*scope, candidate_id),
        )
        return decoded.candidate(row) if row else None

    def record(self, scope: Scope, record_id: str) -> RecordRow | None:
        self._scope(scope)
        row = named_row(
            self.conn,
            f"SELECT {RECORD_COLUMNS} FROM records WHERE tenant=%s AND workspace=%s AND record_id=%s",
            (*scope, record_id),
        )
        return decoded.record(row) if row else None

    def accepted_with_payload(self, scope: Scope, payload_digest: str) -> str | None:
        self._scope(scope)
        row = self._one(
            "SELECT record_id FROM records WHERE tenant=%s AND workspace=%s AND payload_digest=%s"
            " AND state='accepted_current' ORDER BY record_id LIMIT 1",
            (*scope, stored_digest(payload_digest)),
        )
        return row[0] if row else None

    def tombstoned_payload(self, scope: Scope, payload_digest: str) -> bool:
        self._scope(scope)
        return (
            self._one(
                "SELECT 1 FROM records WHERE tenant=%s AND workspace=%s AND payload_digest=%s"
                " AND state='tombstoned' LIMIT 1",
                (*scope, stored_digest(payload_digest)),
            )
            is not None
        )

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
        row = self._one(
            "SELECT tool, intent, response FROM idempotency"
            " WHERE tenant=%s AND workspace=%s AND principal=%s AND key=%s",
            (*scope, principal, key),
        )
        return (row[0], row[1], row[2]) if row else None

    def reserve(self, scope: Scope, principal: str, key: str, tool: str, intent: str, response: str) -> None:
        self._scope(scope)
        self.conn.execute(
            "INSERT INTO idempotency VALUES (%s,%s,%s,%s,%s,%s,%s)", (*scope, principal, key, tool, intent, response)
        )

    def update_reservation(self, scope: Scope, principal: str, key: str, response: str) -> None:
        self._scope(scope)
        self.conn.execute(
            "UPDATE idempotency SET response=%s WHERE tenant=%s AND workspace=%s AND principal=%s AND key=%s",
            (response, *scope, principal, key),
        )

    def claim_confirmation(self, ref: str, used_at_ms: int) -> bool:
        cur = self.conn.execute(
            "INSERT INTO confirmations VALUES (%s,%s) ON CONFLICT (ref) DO NOTHING", (ref, used_at_ms)
        )
        return cur.rowcount == 1
