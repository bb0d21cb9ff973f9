"""The lifecycle: which states exist, which transitions are legal, and what is terminal.

Candidates: pending -> accepted | rejected | pending_adjudication | withdrawn.
Records: accepted_current <-> accepted_disputed, -> historical | expired | trust_invalid,
and from any of those -> tombstoned, which is terminal (no accept or rewind revives it).
Only accepted_current is ever disclosed by search or get.
"""

from __future__ import annotations

from enum import StrEnum

from engram.models.codes import ContractError, ErrorCode


class CandidateState(StrEnum):
    """A candidate's state, as stored and as the journal's events name it."""

    PENDING = "pending"
    PENDING_ADJUDICATION = "pending_adjudication"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    WITHDRAWN = "withdrawn"


class RecordState(StrEnum):
    """A record's state, as stored; only ``ACCEPTED_CURRENT`` is ever disclosed."""

    ACCEPTED_CURRENT = "accepted_current"
    ACCEPTED_DISPUTED = "accepted_disputed"
    HISTORICAL = "historical"
    EXPIRED = "expired"
    TRUST_INVALID = "trust_invalid"
    TOMBSTONED = "tombstoned"


class AdmissionStatus(StrEnum):
    """What request_admission answers: the outcome's ``status``."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    PENDING_ADJUDICATION = "pending_adjudication"
    DUPLICATE_EXACT = "duplicate_exact"


CANDIDATE_TERMINAL = frozenset({CandidateState.ACCEPTED, CandidateState.REJECTED, CandidateState.WITHDRAWN})
FORGETTABLE = frozenset(set(RecordState) - {RecordState.TOMBSTONED})

# Operator transitions (never reachable through MCP): operation -> (from states, to state).
OPERATOR_TRANSITIONS: dict[str, tuple[frozenset[RecordState], RecordState]] = {
    "dispute": (frozenset({RecordState.ACCEPTED_CURRENT}), RecordState.ACCEPTED_DISPUTED),
    "resolve": (frozenset({RecordState.ACCEPTED_DISPUTED}), RecordState.ACCEPTED_CURRENT),
    "supersede": (frozenset({RecordState.ACCEPTED_CURRENT, RecordState.ACCEPTED_DISPUTED}), RecordState.HISTORICAL),
    "expire": (
        frozenset({RecordState.ACCEPTED_CURRENT, RecordState.ACCEPTED_DISPUTED, RecordState.HISTORICAL}),
        RecordState.EXPIRED,
    ),
    "invalidate-trust": (
        frozenset({RecordState.ACCEPTED_CURRENT, RecordState.ACCEPTED_DISPUTED}),
        RecordState.TRUST_INVALID,
    ),
}


def require_pending(state: str) -> None:
    """A candidate decision or withdrawal needs a pending candidate."""
    if state in CANDIDATE_TERMINAL:
        raise ContractError(ErrorCode.ALREADY_TERMINAL)
    if state != CandidateState.PENDING:
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)


def require_forgettable(state: str) -> None:
    if state == RecordState.TOMBSTONED:
        raise ContractError(ErrorCode.ALREADY_TERMINAL)
    if state not in FORGETTABLE:
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)


def operator_target(operation: str, state: str) -> RecordState:
    sources, target = OPERATOR_TRANSITIONS[operation]
    if state == RecordState.TOMBSTONED:
        raise ContractError(ErrorCode.ALREADY_TERMINAL)
    if state not in sources:
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)
    return target
