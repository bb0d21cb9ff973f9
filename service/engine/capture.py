"""capture: validated, secret-free, cited material becomes a sealed pending candidate.

Only control fields (ids, digests, state, principal) stay outside the sealed envelope;
the journal event carries digests, never content.
"""

from __future__ import annotations

import secrets
from base64 import b32encode
from typing import Any

from models.codes import ContractError, ErrorCode
from models.inputs import CaptureInput
from models.tools import CAPTURE

from service.store.base import CandidateRow

from .acceptance import DEFAULT_RETENTION
from .clock import instant, now_ms, parse_instant
from .context import CallContext
from .gates import check_confirmation, needs_confirmation
from .idempotency import encode_result, find_replay, intent_hash
from .parts import Parts
from .policy import HostPolicy
from .records import Trust, authorization_receipt, candidate_aad, evidence_digest, payload_digest, record_digest, transaction_receipt
from .secrets import find_secret_in


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def holds_secret(payload: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """Section 4: every string a candidate or record would keep is scanned before any
    write (the agent path and bulk ingestion apply this one rule)."""
    return find_secret_in(_strings({"payload": payload, "evidence": evidence})) is not None


def refuse_secrets(arguments: dict[str, Any]) -> None:
    if holds_secret(arguments["payload"], arguments["evidence"]):
        raise ContractError(ErrorCode.SECRET_DETECTED)


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


def capture(parts: Parts, ctx: CallContext, args: CaptureInput) -> dict[str, Any]:
    arguments = args.model_dump(exclude_none=True)
    at = now_ms()
    refuse_secrets(arguments)
    intent = intent_hash(CAPTURE, arguments)
    scope = ctx.scope
    with parts.store.transaction() as tx:
        replay = find_replay(tx, scope, ctx.principal, args.idempotency_key, CAPTURE, intent)
        if replay is not None:
            return replay
        retention = resolve_retention(arguments["payload"], parts.host_policy, at)
        if needs_confirmation(CAPTURE, ctx):
            check_confirmation(
                ctx, CAPTURE, args.idempotency_key, arguments, at,
                lambda ref: tx.claim_confirmation(ref, at),
            )
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
        key_id, sealed = parts.vault.seal_json(tx, body, candidate_aad(scope, candidate_id))
        event = tx.append_event(
            scope, "candidate_captured", candidate_id,
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
            CandidateRow(scope, candidate_id, "pending", key_id, sealed, r_digest, p_digest,
                         ctx.principal, event.cursor)
        )
        result = {
            "status": "committed_pending",
            "candidate_id": candidate_id,
            "record_digest": r_digest,
            "cursor": str(event.cursor),
            "transaction_receipt_digest": transaction_receipt(
                CAPTURE, [event.event_digest], event.cursor, at)["receipt_digest"],
        }
        tx.reserve(scope, ctx.principal, args.idempotency_key, CAPTURE, intent, encode_result(result))
    return result
