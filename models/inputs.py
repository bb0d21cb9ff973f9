"""The six tools' arguments: closed at every level, nulls refused, NFC, byte bounds.

Optional fields default to `None` but are typed without `None`, so an explicit `null`
fails validation while omission is fine: the contract says optional fields are omitted,
never sent as null. Cross-reference rules of capture live here too, as model validators,
because they are part of what makes an argument object well-formed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from .encoding import (
    Digest,
    IdempotencyKey,
    Instant,
    OpaqueRef,
    RecordId,
    SafeInt,
    Utf8Text,
)

MAX_ARGUMENT_BYTES = 1_048_576
PACKET_MIN, PACKET_MAX, PACKET_DEFAULT = 4_096, 1_048_576, 65_536

Query = Annotated[str, Utf8Text(1, 8_192)]
ComponentText = Annotated[str, Utf8Text(1, 65_536)]
LocatorValue = Annotated[str, Utf8Text(1, 4_096)]
Attestation = Annotated[str, Utf8Text(0, 4_096)]
# candidate_id and page_cursor are opaque to the caller and copied back as returned:
# any string is well-formed; one we never issued is NOT_FOUND or STALE_PAGE.
OpaqueId = Annotated[str, Utf8Text(1, 1_024)]
CitationIds = Annotated[list[OpaqueRef], Field(min_length=1, max_length=256)]


def _fail(kind: str) -> PydanticCustomError:
    return PydanticCustomError("cross_reference", kind)


def _unique(values: list[str], what: str) -> None:
    if len(set(values)) != len(values):
        raise _fail(f"{what} must be unique")


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


PacketBytes = Annotated[int, Field(ge=PACKET_MIN, le=PACKET_MAX)]


def _json_integer(value: object) -> object:
    # Literal[2] compares by equality, so even in strict mode it would take 2.0 (a float)
    # where every other integer field refuses it; an integer constant takes integers only.
    if type(value) is not int:
        raise PydanticCustomError("int_type", "value must be an integer")
    return value


SchemaVersion = Annotated[Literal[2], BeforeValidator(_json_integer)]


class CapabilityPolicy(Closed):
    minimum_channels: Literal["lexical", "lexical_and_semantic"] = "lexical"
    network: Literal["forbid", "allow"] = "forbid"


class SearchInput(Closed):
    query: Query
    purpose_ref: OpaqueRef
    limit: Annotated[int, Field(ge=1, le=50)] = 10
    max_packet_bytes: PacketBytes = PACKET_DEFAULT
    capability_policy: CapabilityPolicy = CapabilityPolicy()
    page_cursor: OpaqueId = None  # type: ignore[assignment]


class GetInput(Closed):
    record_id: RecordId
    purpose_ref: OpaqueRef
    max_packet_bytes: PacketBytes = PACKET_DEFAULT


class ValidTime(Closed):
    t: SafeInt
    t_end: SafeInt = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _ordered(self) -> ValidTime:
        if self.t_end is not None and self.t_end < self.t:
            raise _fail("t_end must not precede t")
        return self


class Component(Closed):
    component_id: OpaqueRef
    kind: Literal["context", "decision", "evidence"]
    text: ComponentText
    citation_ids: CitationIds

    @model_validator(mode="after")
    def _unique_citations(self) -> Component:
        _unique(self.citation_ids, "component citation_ids")
        return self


class PrimaryEvent(Closed):
    at: SafeInt
    type_ref: OpaqueRef
    citation_id: OpaqueRef


class Locator(Closed):
    scheme: OpaqueRef
    value: LocatorValue


class Citation(Closed):
    citation_id: OpaqueRef
    source_ref: OpaqueRef
    locator: Locator
    content_digest: Digest
    observed_at: Instant = None  # type: ignore[assignment]


class Retention(Closed):
    derivative_rule: Literal["retain", "make-ineligible"]
    expires_at: Instant = None  # type: ignore[assignment]


class Reconciliation(Closed):
    family_refs: Annotated[list[OpaqueRef], Field(max_length=64)]

    @model_validator(mode="after")
    def _sorted_unique(self) -> Reconciliation:
        if any(a >= b for a, b in zip(self.family_refs, self.family_refs[1:])):
            raise _fail("family_refs must be sorted and unique")
        return self


class Payload(Closed):
    schema_version: SchemaVersion
    purpose_ref: OpaqueRef
    valid_time: ValidTime
    components: Annotated[list[Component], Field(min_length=1, max_length=64)]
    primary_component_id: OpaqueRef
    primary_event: PrimaryEvent
    citations: Annotated[list[Citation], Field(min_length=1, max_length=256)]
    retention: Retention = None  # type: ignore[assignment]
    reconciliation: Reconciliation = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _cross_references(self) -> Payload:
        citation_ids = [c.citation_id for c in self.citations]
        _unique(citation_ids, "citation_id values")
        _unique([c.component_id for c in self.components], "component_id values")
        known = set(citation_ids)
        if any(cid not in known for comp in self.components for cid in comp.citation_ids):
            raise _fail("component citations must resolve")
        primary = next((c for c in self.components if c.component_id == self.primary_component_id), None)
        if primary is None:
            raise _fail("primary_component_id must resolve")
        event_citation = self.primary_event.citation_id
        if event_citation not in known or event_citation not in primary.citation_ids:
            raise _fail("primary_event citation must resolve in the primary component")
        return self


class Evidence(Closed):
    evidence_ref: OpaqueRef
    evidence_digest: Digest
    citation_ids: CitationIds
    attestation: Attestation = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _unique_citations(self) -> Evidence:
        _unique(self.citation_ids, "evidence citation_ids")
        return self


class CaptureInput(Closed):
    idempotency_key: IdempotencyKey
    payload: Payload
    evidence: Evidence

    @model_validator(mode="after")
    def _evidence_resolves(self) -> CaptureInput:
        known = {c.citation_id for c in self.payload.citations}
        if any(cid not in known for cid in self.evidence.citation_ids):
            raise _fail("evidence citations must resolve")
        return self


class AdmissionInput(Closed):
    candidate_id: OpaqueId
    idempotency_key: IdempotencyKey


class WithdrawInput(Closed):
    candidate_id: OpaqueId
    idempotency_key: IdempotencyKey
    reason_ref: OpaqueRef


class ForgetInput(Closed):
    record_id: RecordId
    idempotency_key: IdempotencyKey
    reason_ref: OpaqueRef
