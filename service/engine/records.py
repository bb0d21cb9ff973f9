"""What a record is: its digests, its sealed body, how it is disclosed and indexed.

The sealed body holds the payload, the evidence, the resolved retention and the actor
(the host-bound principal, agent and session). Disclosure removes the fields listed in
REDACTED_FIELDS: the actor (who wrote it is the host's business, not other agents'),
the evidence attestation (signatures and verifier material), and reconciliation family
refs (host bookkeeping). Everything else a reader needs to use and cite the record stays.
"""

from __future__ import annotations

import functools
import hashlib
import json
from enum import StrEnum
from typing import Any

from engram.models.digests import DigestKind, digest, record_id_for, seal_receipt
from engram.models.scope import Scope
from engram.ranking import IndexDocument

from .clock import instant
from .lifecycle import RecordState


class Trust(StrEnum):
    """Who vouches for a record's content, stated in its sealed body and its journal event."""

    ASSERTED = "asserted"  # an agent captured it and the host's policy admitted it
    OPERATOR_INGESTED = "operator-ingested"  # an operator loaded it in bulk


REDACTED_FIELDS = ("actor", "evidence.attestation", "payload.reconciliation")
REDACTION_POLICY = "engram.redaction/high/v1"


def scope_key(scope: Scope) -> str:
    """The opaque key the ranking subsystem files a scope under; distinct scopes never
    share one.

    Ids without NUL keep the original form, `tenant NUL workspace` (exactly one NUL),
    so existing indexes stay where they are. Ids that contain NUL, which made that form
    ambiguous ("a\\0b"/"c" against "a"/"b\\0c"), use NUL NUL + JSON [tenant, workspace]
    (ASCII-escaped, so its only NULs are the leading two): two NULs equal no string of
    the first form, and JSON is injective. Such a scope's index moves to its new key
    and is projected afresh from the journal on its first search (PROJECTION_STALE until
    then); `engram admin rebuild-projections` drops any index left under an old key.
    """
    tenant, workspace = scope
    if "\0" in tenant or "\0" in workspace:
        material = "\0\0" + json.dumps([tenant, workspace], ensure_ascii=True)
    else:
        material = f"{tenant}\0{workspace}"
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def candidate_aad(scope: Scope, candidate_id: str) -> str:
    """Associated data binding a sealed candidate body to its scope and id."""
    return f"candidate\0{scope[0]}\0{scope[1]}\0{candidate_id}"


def record_aad(scope: Scope, record_id_: str) -> str:
    return f"record\0{scope[0]}\0{scope[1]}\0{record_id_}"


def payload_digest(payload: dict[str, Any]) -> str:
    return digest(DigestKind.PAYLOAD, payload)


def evidence_digest(evidence: dict[str, Any]) -> str:
    return digest(DigestKind.EVIDENCE, evidence)


def record_digest(scope: Scope, candidate_id: str, payload_digest_: str, evidence_digest_: str) -> str:
    """Bound to the candidate, so a record can never be revived under an old record_id."""
    return digest(
        DigestKind.RECORD,
        {
            "tenant": scope[0],
            "workspace": scope[1],
            "candidate_id": candidate_id,
            "payload_digest": payload_digest_,
            "evidence_digest": evidence_digest_,
        },
    )


def record_id(record_digest_: str) -> str:
    return record_id_for(record_digest_)


def disclose(
    body: dict[str, Any],
    *,
    record_id_: str,
    record_digest_: str,
    payload_digest_: str,
    accepted_cursor: int,
    accepted_at: str,
) -> tuple[dict[str, Any], list[str], str]:
    """The redacted record, the fields removed, and the redaction receipt digest."""
    payload, evidence = body["payload"], body["evidence"]
    record = {
        "record_id": record_id_,
        "record_digest": record_digest_,
        "payload_digest": payload_digest_,
        "state": RecordState.ACCEPTED_CURRENT,
        "purpose_ref": payload["purpose_ref"],
        "valid_time": payload["valid_time"],
        "components": payload["components"],
        "primary_component_id": payload["primary_component_id"],
        "primary_event": payload["primary_event"],
        "citations": payload["citations"],
        "evidence": {k: evidence[k] for k in ("evidence_ref", "evidence_digest", "citation_ids")},
        "retention": body["retention"],
        "accepted_at": accepted_at,
        "accepted_cursor": str(accepted_cursor),
    }
    present = ["actor"]
    if "attestation" in evidence:
        present.append("evidence.attestation")
    if "reconciliation" in payload:
        present.append("payload.reconciliation")
    return record, present, _redaction_receipt_digest(record_id_, record_digest_, tuple(present))


@functools.lru_cache(maxsize=4096)
def _redaction_receipt_digest(record_id_: str, record_digest_: str, redacted: tuple[str, ...]) -> str:
    """The redaction receipt's digest, a function of ids, digests and field names only
    (no record content), so it is computed once per record rather than on every search
    that discloses it."""
    return seal_receipt(
        DigestKind.REDACTION_RECEIPT,
        {
            "record_id": record_id_,
            "record_digest": record_digest_,
            "policy": REDACTION_POLICY,
            "redacted_fields": list(redacted),
        },
    )["receipt_digest"]


def index_document(key: str, record_id_: str, payload: dict[str, Any]) -> IndexDocument:
    """Project a payload into the ranking subsystem's fields."""
    primary_id = payload["primary_component_id"]
    by_kind: dict[str, list[str]] = {"decision": [], "evidence": [], "context": []}
    primary = ""
    for component in payload["components"]:
        if component["component_id"] == primary_id:
            primary = component["text"]
        else:
            by_kind[component["kind"]].append(component["text"])
    return IndexDocument(
        scope_key=key,
        record_id=record_id_,
        primary=primary,
        decision="\n".join(by_kind["decision"]),
        evidence="\n".join(by_kind["evidence"]),
        context="\n".join(by_kind["context"]),
        source_refs=" ".join(c["source_ref"] for c in payload["citations"]),
        valid_time_ms=payload["valid_time"]["t"],
    )


def authorization_receipt(ctx: Any, tool: str, at_ms: int) -> dict[str, Any]:
    """What the host bound to this call, as a digestible receipt (no content)."""
    return seal_receipt(
        DigestKind.AUTHORIZATION_RECEIPT,
        {
            "tool": tool,
            "tenant": ctx.tenant,
            "workspace": ctx.workspace,
            "principal": ctx.principal,
            "agent_id": ctx.agent_id,
            "session": ctx.session,
            "purpose": ctx.purpose,
            "granted": True,
            "issued_at": instant(at_ms),
        },
    )


def transaction_receipt(tool: str, event_digests: list[str], cursor: int, at_ms: int) -> dict[str, Any]:
    return seal_receipt(
        DigestKind.TRANSACTION_RECEIPT,
        {
            "tool": tool,
            "event_digests": event_digests,
            "cursor": str(cursor),
            "committed_at": instant(at_ms),
        },
    )
