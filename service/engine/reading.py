"""get, and the eligibility rule that every disclosure (get and search) re-checks.

A record is disclosed only while it is accepted_current in the caller's scope, inside
its valid time, and before its retention expiry. Anything else is NOT_FOUND, the same
answer as an unknown id or another scope's id, by design.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, digest, seal_receipt
from engram.models.envelope import success_size
from engram.models.inputs import GetInput
from engram.models.tools import GET
from engram.service.store.base import RecordRow

from .clock import instant, now_ms
from .context import CallContext
from .dependencies import Dependencies
from .lifecycle import RecordState
from .records import authorization_receipt, disclose, record_aad
from .sealing import SealBroken


def eligible(row: RecordRow | None, as_of_ms: int, now: int | None = None) -> TypeGuard[RecordRow]:
    """Valid time is judged at `as_of_ms` (a later search page reuses the first page's);
    a retention expiry is a deadline for disclosure, judged at `now` when that is later."""
    if row is None or row.state != RecordState.ACCEPTED_CURRENT:
        return False
    if row.valid_from_ms > as_of_ms or (row.valid_to_ms is not None and as_of_ms > row.valid_to_ms):
        return False
    deadline_at = as_of_ms if now is None else max(as_of_ms, now)
    return row.expires_at_ms is None or deadline_at < row.expires_at_ms


def revalidation_receipt(rows: list[RecordRow], as_of_ms: int, cursor: int) -> dict[str, Any]:
    return seal_receipt(
        DigestKind.REVALIDATION_RECEIPT,
        {
            "checked": [[r.record_id, r.record_digest, r.state] for r in rows],
            "valid_as_of": instant(as_of_ms),
            "validated_through_cursor": str(cursor),
            "rule": "state=accepted_current & valid_time & retention & scope",
        },
    )


def disclosed_record(deps: Dependencies, row: RecordRow) -> tuple[dict[str, Any], list[str], str]:
    """Open the record's body and redact it; BLOB_MISSING if the body cannot be opened."""
    try:
        body = deps.vault.open_json(
            row.key_id, row.sealed, record_aad(row.scope, row.record_id), wrapped=row.wrapped_key
        )
    except SealBroken:
        raise ContractError(ErrorCode.BLOB_MISSING) from None
    return disclose(
        body,
        record_id_=row.record_id,
        record_digest_=row.record_digest,
        payload_digest_=row.payload_digest,
        accepted_cursor=row.accepted_cursor,
        accepted_at=row.accepted_at,
    )


def get(deps: Dependencies, ctx: CallContext, args: GetInput) -> dict[str, Any]:
    at = now_ms()
    # The row and its data key are read in one snapshot: a forget committing in between
    # would otherwise leave an eligible-looking row whose key is already gone.
    with deps.store.reader() as tx:
        row = tx.record(ctx.scope, args.record_id)
        cursor = deps.store.scope_cursor(ctx.scope)
        if not eligible(row, at):
            raise ContractError(ErrorCode.NOT_FOUND)
        assert row is not None
        record, redacted, redaction_digest = disclosed_record(deps, row)
    read_receipt = seal_receipt(
        DigestKind.READ_RECEIPT,
        {
            "record_id": row.record_id,
            "record_digest": row.record_digest,
            "valid_as_of": instant(at),
            "system_as_of": str(cursor),
            "validated_through_cursor": str(cursor),
            "authorization_receipt_digest": authorization_receipt(ctx, GET, at)["receipt_digest"],
            "revalidation_receipt_digest": revalidation_receipt([row], at, cursor)["receipt_digest"],
            "checked_at": instant(now_ms()),
        },
    )
    value = {
        "record": record,
        "redacted_fields": redacted,
        "redaction_receipt_digest": redaction_digest,
        "read_receipt": read_receipt,
    }
    value["packet_digest"] = digest(DigestKind.PACKET, value)
    if success_size(value) > args.max_packet_bytes:
        raise ContractError(ErrorCode.PROJECTION_OVERSIZED)
    return value
