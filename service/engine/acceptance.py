"""Accepted records: the one write path that makes them.

An accepted record is made the same way whoever accepted it: the host's admission policy
deciding one candidate (``request_admission``), an operator adjudicating a held one, or
an operator loading a corpus in batches (:mod:`service.engine.ingestion`). Per record it
writes a body sealed under its own data key, bound to the record's scope and id; one
``record_accepted`` journal event carrying digests only; and the record row. The body
names its trust class (who vouches for it) and references its authorisation and decision
receipts by digest: each receipt is kept once in the store (``Transaction.put_receipt``),
however many records one decision accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram.models.scope import Scope
from engram.service.store.base import JournalEvent, NewEvent, RecordRow, Transaction

from .clock import instant, parse_instant
from .lifecycle import RecordState
from .records import Trust, record_aad
from .sealing import BodyVault

RECORD_ACCEPTED = "record_accepted"
#: What an omitted retention means (contract: make-ineligible, no expiry).
DEFAULT_RETENTION: dict[str, Any] = {"derivative_rule": "make-ineligible"}


@dataclass(frozen=True)
class Acceptance:
    """One record about to be accepted: its identity, content and provenance."""

    candidate_id: str
    record_digest: str
    record_id: str  # derived from record_digest (records.record_id); the caller has it already
    payload_digest: str
    evidence_digest: str
    payload: dict[str, Any]
    evidence: dict[str, Any]
    retention: dict[str, Any]
    trust: Trust
    actor: dict[str, str]
    recorded_at: str
    authorization_receipt_digest: str


def record_row(
    scope: Scope,
    rid: str,
    body: dict[str, Any],
    *,
    r_digest: str,
    p_digest: str,
    key_id: str,
    sealed: bytes,
    cursor: int,
    accepted_at: str,
    candidate_id: str | None,
) -> RecordRow:
    valid = body["payload"]["valid_time"]
    expires = body["retention"].get("expires_at")
    return RecordRow(
        scope,
        rid,
        RecordState.ACCEPTED_CURRENT,
        r_digest,
        p_digest,
        key_id,
        sealed,
        valid["t"],
        valid.get("t_end"),
        parse_instant(expires) if expires else None,
        cursor,
        accepted_at,
        candidate_id,
    )


def accept_records(
    vault: BodyVault,
    tx: Transaction,
    scope: Scope,
    accepted: list[Acceptance],
    decision_receipt: dict[str, Any],
    authorization_receipts: list[dict[str, Any]],
    at_ms: int,
) -> list[JournalEvent]:
    """Write ``accepted`` as records in ``tx``, one journal event each, in order (each
    kind of row written for the whole list at once).

    The caller has decided (``decision_receipt``) and checked what its path requires
    (no record with that id yet, no tombstone with that payload); ``authorization_receipts``
    are the receipts the bodies reference, kept once each."""
    for receipt in (decision_receipt, *authorization_receipts):
        tx.put_receipt(receipt)
    decision_digest = decision_receipt["receipt_digest"]
    accepted_at = instant(at_ms)
    bodies = [
        {
            "payload": item.payload,
            "evidence": item.evidence,
            "retention": item.retention,
            "trust": item.trust.value,
            "actor": item.actor,
            "recorded_at": item.recorded_at,
            "accepted_at": accepted_at,
            "authorization_receipt_digest": item.authorization_receipt_digest,
            "decision_receipt_digest": decision_digest,
        }
        for item in accepted
    ]
    sealed = vault.seal_many(tx, [(body, record_aad(scope, item.record_id)) for item, body in zip(accepted, bodies)])
    events = tx.append_events(
        scope,
        [
            NewEvent(
                RECORD_ACCEPTED,
                item.record_id,
                {
                    "candidate_id": item.candidate_id,
                    "record_digest": item.record_digest,
                    "payload_digest": item.payload_digest,
                    "evidence_digest": item.evidence_digest,
                    "authorization_receipt_digest": item.authorization_receipt_digest,
                    "decision_receipt_digest": decision_digest,
                    "trust": item.trust.value,
                },
                accepted_at,
            )
            for item in accepted
        ],
    )
    tx.insert_records(
        [
            record_row(
                scope,
                item.record_id,
                body,
                r_digest=item.record_digest,
                p_digest=item.payload_digest,
                key_id=key_id,
                sealed=sealed_bytes,
                cursor=event.cursor,
                accepted_at=accepted_at,
                candidate_id=item.candidate_id,
            )
            for item, body, (key_id, sealed_bytes), event in zip(accepted, bodies, sealed, events)
        ]
    )
    return events
