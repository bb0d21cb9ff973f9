"""capture: validated, secret-free, cited material becomes a sealed pending candidate.

Only control fields (ids, digests, state, principal) stay outside the sealed envelope;
the journal event carries digests, never content.
"""

from __future__ import annotations

import secrets
from base64 import b32encode
from typing import Any

from engram.models.codes import ContractError, ErrorCode
from engram.models.inputs import CaptureInput
from engram.models.tools import CAPTURE
from engram.service.store.base import CandidateRow

from .acceptance import DEFAULT_RETENTION
from .clock import instant, now_ms, parse_instant
from .context import CallContext
from .dependencies import Dependencies
from .gates import require_confirmation
from .idempotency import find_replay, intent_hash, reserve
from .lifecycle import CandidateState
from .policy import HostPolicy
from .records import (
    Trust,
    authorization_receipt,
    candidate_aad,
    evidence_digest,
    payload_digest,
    record_digest,
    transaction_receipt,
)


def resolve_retention(payload: dict[str, Any], policy: HostPolicy, at_ms: int) -> dict[str, Any]:
    """The retention the record will carry: omitted means make-ineligible, no expiry."""
    retention = payload.get("retention") or dict(DEFAULT_RETENTION)
    if retention["derivative_rule"] == "retain" and not policy.allow_retain:
        raise ContractError(ErrorCode.UNAUTHORIZED)
    if "expires_at" in retention:
        expires_ms = parse_instant(retention["expires_at"])
        if expires_ms <= at_ms:
            raise ContractError(ErrorCode.INVALID_SCHEMA)
        if expires_ms - at_ms > policy.max_retention_ms:
            raise ContractError(ErrorCode.UNAUTHORIZED)
    if payload.get("reconciliation") and not policy.reconciliation_consent:
        raise ContractError(ErrorCode.UNAUTHORIZED)
    return retention


def capture(deps: Dependencies, ctx: CallContext, args: CaptureInput) -> dict[str, Any]:
    arguments = args.model_dump(exclude_none=True)
    at = now_ms()
    intent = intent_hash(CAPTURE, arguments)
    scope = ctx.scope
    with deps.store.transaction() as tx:
        replay = find_replay(tx, scope, ctx.principal, args.idempotency_key, CAPTURE, intent)
        if replay is not None:
            return replay
        retention = resolve_retention(arguments["payload"], deps.policies.host(), at)
        require_confirmation(ctx, CAPTURE, arguments, at, tx.claim_confirmation)
        candidate_id = "cand_" + b32encode(secrets.token_bytes(20)).decode().lower()
        p_digest = payload_digest(arguments["payload"])
        e_digest = evidence_digest(arguments["evidence"])
        r_digest = record_digest(scope, candidate_id, p_digest, e_digest)
        auth = authorization_receipt(ctx, CAPTURE, at)
        body = {
            "payload": arguments["payload"],
            "evidence": arguments["evidence"],
            "retention": retention,
            "authorization_receipt": auth,
            "trust": Trust.ASSERTED.value,
            "actor": {"principal": ctx.principal, "agent_id": ctx.agent_id, "session": ctx.session},
            "recorded_at": instant(at),
        }
        key_id, sealed = deps.vault.seal_json(tx, body, candidate_aad(scope, candidate_id))
        event = tx.append_event(
            scope,
            "candidate_captured",
            candidate_id,
            {
                "payload_digest": p_digest,
                "evidence_digest": e_digest,
                "record_digest": r_digest,
                "authorization_receipt_digest": auth["receipt_digest"],
                "principal": ctx.principal,
            },
            instant(at),
        )
        tx.insert_candidate(
            CandidateRow(
                scope,
                candidate_id,
                CandidateState.PENDING,
                key_id,
                sealed,
                r_digest,
                p_digest,
                ctx.principal,
                event.cursor,
            )
        )
        result = {
            "status": "committed_pending",
            "candidate_id": candidate_id,
            "record_digest": r_digest,
            "cursor": str(event.cursor),
            "transaction_receipt_digest": transaction_receipt(CAPTURE, [event.event_digest], event.cursor, at)[
                "receipt_digest"
            ],
        }
        reserve(tx, scope, ctx.principal, args.idempotency_key, CAPTURE, intent, result)
    return result
