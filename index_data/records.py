"""What bulk ingestion loads: one source document becomes one accepted record.

An :class:`IngestRecord` is the reader-independent form of a source document (a BEIR
doc, a JSONL line, a generated benchmark record). :func:`build_payload` turns it into a
contract payload and evidence, exactly the shapes an agent's capture would carry, so the
digests, sealed body and index document of an ingested record are the ones the service
would make for the same content. Everything here is deterministic: the same record in the
same scope always gives the same candidate id, digests and record_id, which is what makes
re-ingesting idempotent.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from typing import Any

from engram.models.codes import ContractError
from engram.models.errors import EngramError
from engram.models.scope import Scope
from engram.models.tools import CAPTURE, parse_arguments
from engram.service.engine import Submission, identify


class RefusedRecord(EngramError, ValueError):
    """A source document that cannot become a record (empty, oversized, invalid...):
    ``reason`` one word, ``detail`` what was wrong (field paths and rules, no value)."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


#: A fixed default valid time (2000-01-01T00:00:00.000Z) for sources that carry no date:
#: deterministic digests, and equal recency for every record (ranking by relevance alone).
DEFAULT_VALID_TIME_MS = 946_684_800_000
DEFAULT_PURPOSE = "purpose:ingest"
MAX_TEXT_BYTES = 65_536


@dataclass(frozen=True)
class IngestRecord:
    """One source document: its stable id, its text and where it came from."""

    external_id: str
    text: str
    source_ref: str
    locator_scheme: str = "ingest"
    locator_value: str = ""
    valid_time_ms: int = DEFAULT_VALID_TIME_MS
    kind: str = "context"
    #: Text around the document in its source (neighbouring conversation turns): stored
    #: as a second component of kind ``context``, so both channels see it while the
    #: record's own text stays its primary component.
    context: str = ""
    #: A whole contract payload and evidence (an export of this service): loaded as they
    #: are, after the capture tool's own validation, instead of being built from ``text``.
    payload: dict[str, Any] | None = None
    evidence: dict[str, Any] | None = None
    retention: dict[str, Any] | None = None


@dataclass(frozen=True)
class RefusedDocument:
    """A source document that did not become a record, as the ingest summary names it:
    its id, why (``invalid``, ``empty``, ``oversized``, ``secret``, ``forgotten``), and
    what was wrong (an invalid payload's field paths and rules; a secret's rule)."""

    id: str
    reason: str
    detail: str | None = None

    def as_dict(self) -> dict[str, str]:
        named = {"id": self.id, "reason": self.reason}
        return named | ({"detail": self.detail} if self.detail else {})


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def sha256_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def candidate_id_for(scope: Scope, external_id: str) -> str:
    """The deterministic pseudo candidate id an ingested record is bound to."""
    seed = f"{scope[0]}\0{scope[1]}\0{external_id}".encode()
    return "ingest_" + hashlib.sha256(seed).hexdigest()


def _validated(record: IngestRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record's own payload and evidence, checked as the capture tool checks them."""
    try:
        args = parse_arguments(
            CAPTURE,
            {"idempotency_key": "ingest-validation", "payload": record.payload, "evidence": record.evidence or {}},
        ).model_dump(exclude_none=True)
    except ContractError as exc:
        raise RefusedRecord("invalid", exc.detail) from None
    return args["payload"], args["evidence"]


def build_payload(record: IngestRecord, purpose_ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(payload, evidence) for one record, in the contract's capture shapes."""
    if record.payload is not None:
        return _validated(record)
    text = nfc(record.text).strip()
    context = nfc(record.context).strip()
    if not text:
        raise RefusedRecord("empty")
    if len(text.encode("utf-8")) + len(context.encode("utf-8")) > MAX_TEXT_BYTES:
        raise RefusedRecord("oversized")
    source_ref = nfc(record.source_ref)
    locator_value = nfc(record.locator_value or record.external_id)
    payload = {
        "schema_version": 2,
        "purpose_ref": purpose_ref,
        "valid_time": {"t": int(record.valid_time_ms)},
        "components": [
            {"component_id": "c1", "kind": record.kind, "text": text, "citation_ids": ["cit1"]},
            *(
                [{"component_id": "c2", "kind": "context", "text": context, "citation_ids": ["cit1"]}]
                if context
                else []
            ),
        ],
        "primary_component_id": "c1",
        "primary_event": {"at": int(record.valid_time_ms), "type_ref": "event:ingested", "citation_id": "cit1"},
        "citations": [
            {
                "citation_id": "cit1",
                "source_ref": source_ref,
                "locator": {"scheme": nfc(record.locator_scheme), "value": locator_value},
                "content_digest": sha256_text(text),
            }
        ],
    }
    evidence = {
        "evidence_ref": f"ingest:{source_ref}"[:512],
        "evidence_digest": sha256_text(text),
        "citation_ids": ["cit1"],
    }
    return payload, evidence


def submission(scope: Scope, record: IngestRecord, purpose_ref: str) -> Submission:
    """The batch-admission submission for one source document (raises RefusedRecord)."""
    payload, evidence = build_payload(record, purpose_ref)
    cid = candidate_id_for(scope, record.external_id)
    if record.retention is not None:
        return Submission(cid, payload, evidence, retention=record.retention)
    return Submission(cid, payload, evidence)


def record_id_for(scope: Scope, record: IngestRecord, purpose_ref: str = DEFAULT_PURPOSE) -> str:
    """The record_id ``record`` gets (or got) when ingested into ``scope``."""
    return identify(scope, submission(scope, record, purpose_ref))[3]
