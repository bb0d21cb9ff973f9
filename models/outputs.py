"""The six tools' output values, receipts and the disclosed (redacted) record.

These models document and publish the output schemas; the engine builds plain dicts
and the tests validate them against these models, so drift shows up as a failure.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from .encoding import Cursor, Digest, Instant, RecordId
from .inputs import Citation as Citation
from .inputs import Closed, Component, PrimaryEvent, Retention, ValidTime


class DisclosedEvidence(Closed):
    """Evidence as disclosed: the attestation is redacted (see REDACTED_FIELDS)."""

    evidence_ref: str
    evidence_digest: Digest
    citation_ids: list[str]


class DisclosedRecord(Closed):
    record_id: RecordId
    record_digest: Digest
    payload_digest: Digest
    state: Literal["accepted_current"]
    purpose_ref: str
    valid_time: ValidTime
    components: list[Component]
    primary_component_id: str
    primary_event: PrimaryEvent
    citations: list[Citation]
    evidence: DisclosedEvidence
    retention: Retention
    accepted_at: Instant
    accepted_cursor: Cursor


class Packet(Closed):
    record: DisclosedRecord
    redacted_fields: list[str]
    redaction_receipt_digest: Digest
    score: float
    rank: Annotated[int, Field(ge=1)]


class ChannelContribution(Closed):
    """How one returned record was scored: each channel's rank and score, the fused
    score, its recency factor and the final score (and the query's lexical weight in
    adaptive fusion). The ranking subsystem keeps the same fields, by name, on its own
    fast form of a candidate; :func:`contribution_wire` reads them from it."""

    record_id: RecordId
    lexical_rank: int | None
    lexical_score: float | None
    semantic_rank: int | None
    semantic_similarity: float | None
    fused_score: float
    recency: float
    final_score: float
    lexical_weight: float | None


_ROUNDED = tuple(
    (name, float in (field.annotation, *get_args(field.annotation)))
    for name, field in ChannelContribution.model_fields.items()
)


def contribution_wire(scores: Any, decimals: int) -> dict[str, Any]:
    """A candidate's :class:`ChannelContribution` as it goes on the wire, read by name
    from ``scores`` (the ranking subsystem's form of a candidate): scores rounded to
    ``decimals`` places, so a replayed receipt is byte-identical."""
    out: dict[str, Any] = {}
    for name, rounded in _ROUNDED:
        value = getattr(scores, name)
        out[name] = round(float(value), decimals) + 0.0 if rounded and value is not None else value
    return out


class ValidTimeWindow(Closed):
    """The window of valid time a query named ("on 9 November, 2022"): ``[valid_from,
    valid_until)``; candidates valid inside it were boosted by the profile."""

    valid_from: Instant
    valid_until: Instant
    text: str
    period: Literal["day", "week", "month", "year"]


class QueryTime(Closed):
    """What the ranking profile read of time in the query (nothing, for a profile that
    reads none): whether it asks when, and the valid-time window it names."""

    asks_when: bool
    valid_time_window: ValidTimeWindow | None


class RankReceipt(Closed):
    request_digest: Digest
    authorization_receipt_digest: Digest
    profile: str
    profile_version: str
    profile_config_digest: Digest
    channels: list[Literal["lexical", "semantic"]]
    valid_as_of: Instant
    system_as_of: Cursor
    snapshot_id: str
    snapshot_digest: Digest
    candidate_count: Annotated[int, Field(ge=0)]
    candidate_ids_digest: Digest
    scoring_formula_ref: str
    ordered_ids_digest: Digest
    revalidation_receipt_digest: Digest
    projection_receipt_digests: list[Digest]
    contributions: list[ChannelContribution]
    query_time: QueryTime
    page_offset: Annotated[int, Field(ge=0)]
    issued_at: Instant
    receipt_digest: Digest


class SearchOutput(Closed):
    records: list[Packet]
    rank_receipt: RankReceipt
    next_page_cursor: str = None  # type: ignore[assignment]
    response_digest: Digest


class ReadReceipt(Closed):
    record_id: RecordId
    record_digest: Digest
    valid_as_of: Instant
    system_as_of: Cursor
    validated_through_cursor: Cursor
    authorization_receipt_digest: Digest
    revalidation_receipt_digest: Digest
    checked_at: Instant
    receipt_digest: Digest


class GetOutput(Closed):
    record: DisclosedRecord
    redacted_fields: list[str]
    redaction_receipt_digest: Digest
    read_receipt: ReadReceipt
    packet_digest: Digest


class CaptureOutput(Closed):
    status: Literal["committed_pending", "duplicate_exact"]
    candidate_id: str
    record_digest: Digest = None  # type: ignore[assignment]
    cursor: Cursor
    transaction_receipt_digest: Digest


class AdmissionOutcome(Closed):
    status: Literal["accepted", "rejected", "pending_adjudication", "duplicate_exact"]
    candidate_id: str
    record_id: RecordId = None  # type: ignore[assignment]
    cursor: Cursor
    decision_receipt_digest: Digest
    transaction_receipt_digest: Digest


class AdmissionOutput(Closed):
    outcome: AdmissionOutcome
    replayed: bool


class TransitionReceipt(Closed):
    event_id: str
    operation: Literal["withdraw", "tombstone"]
    from_state: str
    to_state: str
    cursor: Cursor
    event_digest: Digest
    authorization_receipt_digest: Digest
    transaction_receipt_digest: Digest


class WithdrawReceipt(TransitionReceipt):
    operation: Literal["withdraw"]
    from_state: Literal["pending"]
    to_state: Literal["withdrawn"]


class ForgetReceipt(TransitionReceipt):
    operation: Literal["tombstone"]
    from_state: Literal["accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid"]
    to_state: Literal["tombstoned"]


class WithdrawOutput(Closed):
    receipt: WithdrawReceipt
    replayed: bool
    key_destruction: Literal["pending", "complete"]


class ForgetOutput(Closed):
    receipt: ForgetReceipt
    replayed: bool
    projection_invalidation: Literal["pending", "complete"]
    coverage_receipt_digest: Digest = None  # type: ignore[assignment]
