"""SQL that both backends run as one text, where SQLite's and PostgreSQL's dialects
agree: written once in SQLite's placeholder style (``?``) and adapted to psycopg's
(``%s``) by :func:`pyformat`, the one place the two styles meet.

What the dialects say differently stays with its backend: lists of values (``IN
(?,?...)`` in chunks, ``= ANY(%s)``), scope locks, the journal body's cast, vacuum and
size queries, the shared deployment's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .rows import CANDIDATE_COLUMNS, RECORD_COLUMNS, RECORD_WITH_KEY

# the journal and scopes
SCOPE_HEAD = "SELECT cursor, head_digest FROM scopes WHERE tenant=? AND workspace=?"
MOVE_HEAD = (
    "INSERT INTO scopes VALUES (?,?,?,?) ON CONFLICT (tenant, workspace)"
    " DO UPDATE SET cursor=excluded.cursor, head_digest=excluded.head_digest"
)
SCOPE_CURSOR = "SELECT cursor FROM scopes WHERE tenant=? AND workspace=?"
SCOPES = "SELECT tenant, workspace FROM scopes ORDER BY tenant, workspace"

# keys and receipts
DESTROY_KEY = "DELETE FROM keys WHERE key_id=?"
WRAPPED_KEY = "SELECT wrapped, kek_id FROM keys WHERE key_id=?"
ALL_WRAPPED_KEYS = "SELECT key_id, wrapped, kek_id FROM keys"
REWRAP_KEY = "UPDATE keys SET wrapped=?, kek_id=? WHERE key_id=?"
INSERT_RECEIPT = "INSERT INTO receipts VALUES (?,?) ON CONFLICT (digest) DO NOTHING"
RECEIPT = "SELECT body FROM receipts WHERE digest=?"

# candidates and records
INSERT_CANDIDATE = f"INSERT INTO candidates ({CANDIDATE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"
CANDIDATE = f"SELECT {CANDIDATE_COLUMNS} FROM candidates WHERE tenant=? AND workspace=? AND candidate_id=?"
#: ``{body}``: what else a state change clears (:data:`DROP_BODY`, or nothing).
SET_CANDIDATE_STATE = "UPDATE candidates SET state=?{body} WHERE tenant=? AND workspace=? AND candidate_id=?"
RECORD = f"SELECT {RECORD_COLUMNS} FROM records WHERE tenant=? AND workspace=? AND record_id=?"
SET_RECORD_STATE = "UPDATE records SET state=?{body} WHERE tenant=? AND workspace=? AND record_id=?"
#: The body columns a state change that drops the body clears.
DROP_BODY = ", sealed=NULL, key_id=NULL"
ACCEPTED_WITH_PAYLOAD = (
    "SELECT record_id FROM records WHERE tenant=? AND workspace=? AND payload_digest=?"
    " AND state='accepted_current' ORDER BY record_id LIMIT 1"
)
TOMBSTONED_PAYLOAD = (
    "SELECT 1 FROM records WHERE tenant=? AND workspace=? AND payload_digest=? AND state='tombstoned' LIMIT 1"
)
RECORDS_IN_STATE = f"SELECT {RECORD_COLUMNS} FROM records WHERE state=? AND tenant=? AND workspace=? ORDER BY record_id"
#: Current records of a scope, counted up to a bound (the state index's range, no further).
LIVE_MORE_THAN = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM records WHERE tenant=? AND workspace=?"
    " AND state='accepted_current' LIMIT ?) AS live"
)
#: Per-scope counts by state of a table (``candidates`` or ``records``): read from the
#: table's state index alone.
STATE_COUNTS = "SELECT state, COUNT(*) FROM {} WHERE tenant=? AND workspace=? GROUP BY state"
#: Current records whose retention ends by a time, read through an expiry index.
DUE = "FROM records WHERE state='accepted_current' AND expires_at_ms IS NOT NULL AND expires_at_ms<=?"
DUE_FOR_EXPIRY = f"SELECT {RECORD_COLUMNS} {DUE} ORDER BY tenant, workspace, record_id"
#: A page of a scope's journal after a cursor; ``{}``: the journal's columns as the
#: backend reads them (SQLite casts the body).
JOURNAL_PAGE = "SELECT {} FROM journal WHERE tenant=? AND workspace=? AND cursor>? ORDER BY cursor LIMIT 2000"
#: A page of a scope's current records after a record id, each with its wrapped key.
LIVE_RECORDS_PAGE = (
    f"SELECT {RECORD_WITH_KEY} WHERE r.tenant=? AND r.workspace=?"
    " AND r.state='accepted_current' AND r.record_id>? ORDER BY r.record_id LIMIT 2000"
)
ADD_PENDING_PURGE = "INSERT INTO pending_purges VALUES (?,?,?) ON CONFLICT DO NOTHING"
PENDING_PURGES = "SELECT tenant, workspace, record_id FROM pending_purges ORDER BY tenant, workspace, record_id"

# idempotency, confirmations and tenants
RESERVATION = "SELECT tool, intent, response FROM idempotency WHERE tenant=? AND workspace=? AND principal=? AND key=?"
RESERVE = "INSERT INTO idempotency VALUES (?,?,?,?,?,?,?)"
UPDATE_RESERVATION = "UPDATE idempotency SET response=? WHERE tenant=? AND workspace=? AND principal=? AND key=?"
CLAIM_CONFIRMATION = "INSERT INTO confirmations VALUES (?,?) ON CONFLICT (ref) DO NOTHING"
TENANT_ENABLED = "SELECT enabled FROM tenants WHERE tenant=?"
SET_TENANT_ENABLED = (
    "INSERT INTO tenants VALUES (?,?,?) ON CONFLICT (tenant)"
    " DO UPDATE SET enabled=excluded.enabled, changed_at=excluded.changed_at"
)


def due_page(at_ms: int, scope: tuple[str, str] | None) -> tuple[str, str, tuple[Any, ...]]:
    """The count of current records due by ``at_ms`` (in ``scope``, or everywhere), the
    soonest of them (one more parameter: how many), and the parameters both take."""
    within, params = ("", (at_ms,)) if scope is None else (" AND tenant=? AND workspace=?", (at_ms, *scope))
    return (
        f"SELECT COUNT(*) {DUE}{within}",
        f"SELECT {RECORD_COLUMNS} {DUE}{within} ORDER BY expires_at_ms LIMIT ?",
        params,
    )


def paged(
    read: Callable[[str, tuple[Any, ...]], Sequence[Any]], statement: str, scope: tuple[str, str], after: Any, key: str
) -> Iterator[Any]:
    """Every row of a scope's paged ``statement`` (its last parameter: the ``key`` to read
    after), one page read at a time, so a million rows never sit in memory at once."""
    while page := read(statement, (*scope, after)):
        yield from page
        after = page[-1][key]


def pyformat(statement: str) -> str:
    """``statement`` in psycopg's placeholder style: ``%s`` for each ``?`` (the texts
    here hold no other ``?`` and no ``%``)."""
    return statement.replace("?", "%s")
