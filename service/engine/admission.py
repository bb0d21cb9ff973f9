"""request_admission: the host's policy decides a pending candidate.

On accept the candidate's body is re-sealed as a record under a new data key, and the
candidate's body key is destroyed; on reject it is destroyed too. Content whose payload
digest matches a tombstoned record of the scope is held as pending_adjudication instead
of accepted: forgotten knowledge does not come back without a human.
"""

from __future__ import annotations

from typing import Any

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, seal_receipt
from engram.models.inputs import AdmissionInput
from engram.models.scope import Scope
from engram.models.tools import REQUEST_ADMISSION
from engram.service.secrets import scan as scan_secrets
from engram.service.store.base import CandidateRow, JournalEvent, Transaction

from .acceptance import Acceptance, accept_records
from .clock import instant, now_ms
from .context import CallContext
from .dependencies import Dependencies
from .gates import require_confirmation
from .idempotency import after_commit, find_replay, intent_hash, reserve
from .lifecycle import AdmissionStatus, CandidateState, require_pending
from .policy import Decision, check_fresh
from .records import Trust, candidate_aad, evidence_digest, record_id, transaction_receipt
from .sealing import SealBroken


def settle(
    deps: Dependencies,
    tx: Transaction,
    candidate: CandidateRow,
    body: dict[str, Any],
    decision: Decision,
    receipt: dict[str, Any],
    principal: str,
    at: int,
) -> tuple[AdmissionStatus, str | None, list[JournalEvent]]:
    """Apply a decision to a candidate whose body is open: (status, record_id, events).

    accept makes a record through the one write path of :mod:`.acceptance` (or, when an
    accepted_current record already has this payload, answers duplicate_exact with it);
    reject ends the candidate; adjudication_required holds it with its body. Every
    outcome but the hold destroys the candidate's body key."""
    scope = candidate.scope
    existing = tx.accepted_with_payload(scope, candidate.payload_digest)
    if decision == "adjudication_required":
        status, new_state = AdmissionStatus.PENDING_ADJUDICATION, CandidateState.PENDING_ADJUDICATION
    elif decision == "reject":
        status, new_state = AdmissionStatus.REJECTED, CandidateState.REJECTED
    elif existing is not None:
        status, new_state = AdmissionStatus.DUPLICATE_EXACT, CandidateState.ACCEPTED
    else:
        status, new_state = AdmissionStatus.ACCEPTED, CandidateState.ACCEPTED
    keep_body = new_state == CandidateState.PENDING_ADJUDICATION
    events = [
        tx.append_event(
            scope,
            f"candidate_{new_state}",
            candidate.candidate_id,
            {"decision_receipt": receipt, "principal": principal},
            instant(at),
        )
    ]
    rid = existing
    if status == AdmissionStatus.ACCEPTED:
        auth = body["authorization_receipt"]
        acceptance = Acceptance(
            candidate_id=candidate.candidate_id,
            record_digest=candidate.record_digest,
            record_id=record_id(candidate.record_digest),
            payload_digest=candidate.payload_digest,
            evidence_digest=evidence_digest(body["evidence"]),
            payload=body["payload"],
            evidence=body["evidence"],
            retention=body["retention"],
            trust=Trust(body["trust"]),
            actor=body["actor"],
            recorded_at=body["recorded_at"],
            authorization_receipt_digest=auth["receipt_digest"],
        )
        rid = acceptance.record_id
        events += accept_records(deps.vault, tx, scope, [acceptance], receipt, [auth], at)
    if not keep_body and candidate.key_id is not None:
        tx.destroy_key(candidate.key_id)
    tx.set_candidate_state(scope, candidate.candidate_id, new_state, drop_body=not keep_body)
    return status, rid, events


def open_candidate(deps: Dependencies, candidate: CandidateRow) -> dict[str, Any]:
    try:
        return deps.vault.open_json(
            candidate.key_id, candidate.sealed, candidate_aad(candidate.scope, candidate.candidate_id)
        )
    except SealBroken:
        raise ContractError(ErrorCode.BLOB_MISSING) from None


def request_admission(deps: Dependencies, ctx: CallContext, args: AdmissionInput) -> dict[str, Any]:
    arguments = args.model_dump(exclude_none=True)
    intent = intent_hash(REQUEST_ADMISSION, arguments)
    scope = ctx.scope
    with deps.store.transaction() as tx:
        at = now_ms()
        replay = find_replay(tx, scope, ctx.principal, args.idempotency_key, REQUEST_ADMISSION, intent)
        if replay is not None:
            return replay
        candidate = tx.candidate(scope, args.candidate_id)
        if candidate is None:
            raise ContractError(ErrorCode.NOT_FOUND)
        require_confirmation(ctx, REQUEST_ADMISSION, arguments, at, tx.claim_confirmation)
        require_pending(candidate.state)
        body = open_candidate(deps, candidate)
        policy = deps.policies.admission()
        decision = policy.decide(body["payload"], body["evidence"])
        receipt = policy.decision_receipt(candidate.record_digest, decision, at)

        if decision == "accept" and tx.tombstoned_payload(scope, candidate.payload_digest):
            decision = "adjudication_required"
        status, rid, events = settle(deps, tx, candidate, body, decision, receipt, ctx.principal, at)
        last = events[-1]
        outcome = {
            "status": status,
            "candidate_id": candidate.candidate_id,
            "cursor": str(last.cursor),
            "decision_receipt_digest": receipt["receipt_digest"],
            "transaction_receipt_digest": transaction_receipt(
                REQUEST_ADMISSION, [e.event_digest for e in events], last.cursor, at
            )["receipt_digest"],
        }
        if rid is not None:
            outcome["record_id"] = rid
        result = {"outcome": outcome, "replayed": False}
        reserve(tx, scope, ctx.principal, args.idempotency_key, REQUEST_ADMISSION, intent, result)
        # Last before commit: the policy is read again, so a decision taken under a
        # policy replaced meanwhile (or older than the bound) commits nothing.
        check_fresh(policy, receipt, at, now_ms(), deps.policies.admission)
    with after_commit():
        if status == AdmissionStatus.ACCEPTED:
            deps.projector.catch_up(scope)
        deps.store.purge_freed_pages()
    return result


def adjudicate(
    deps: Dependencies, scope: Scope, candidate_id: str, decision: Decision, reason_ref: str
) -> dict[str, Any]:
    """The operator's decision on a candidate held for adjudication (never on the agent
    path): accept or reject, with a decision receipt naming the operator."""
    if decision == "adjudication_required":
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)
    scan_secrets(reason_ref).refuse()  # kept in the decision receipt
    with deps.store.transaction() as tx:
        at = now_ms()
        candidate = tx.candidate(scope, candidate_id)
        if candidate is None:
            raise ContractError(ErrorCode.NOT_FOUND)
        if candidate.state != CandidateState.PENDING_ADJUDICATION:
            raise ContractError(ErrorCode.ILLEGAL_TRANSITION)
        body = open_candidate(deps, candidate)
        receipt = seal_receipt(
            DigestKind.DECISION_RECEIPT,
            {
                "policy_id": "engram.operator-adjudication",
                "policy_version": "1",
                "record_digest": candidate.record_digest,
                "decision": decision,
                "reason_ref": reason_ref,
                "issued_at": instant(at),
            },
        )
        status, rid, _ = settle(deps, tx, candidate, body, decision, receipt, "operator", at)
    if status == AdmissionStatus.ACCEPTED:
        deps.projector.catch_up(scope)
    deps.store.purge_freed_pages()
    return {"status": status, "candidate_id": candidate_id, "record_id": rid}
