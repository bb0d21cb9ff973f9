"""The lifecycle: which states exist, which transitions are legal, and what is terminal.

Candidates: pending -> accepted | rejected | pending_adjudication | withdrawn.
Records: accepted_current <-> accepted_disputed, -> historical | expired | trust_invalid,
and from any of those -> tombstoned, which is terminal (no accept or rewind revives it).
Only accepted_current is ever disclosed by search or get.
"""

from __future__ import annotations

from engram.models.codes import ContractError, ErrorCode

CANDIDATE_TERMINAL = frozenset({"accepted", "rejected", "withdrawn"})
RECORD_STATES = frozenset(
    {"accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid", "tombstoned"}
)
FORGETTABLE = frozenset({"accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid"})

# Operator transitions (never reachable through MCP): operation -> (from states, to state).
OPERATOR_TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "dispute": (frozenset({"accepted_current"}), "accepted_disputed"),
    "resolve": (frozenset({"accepted_disputed"}), "accepted_current"),
    "supersede": (frozenset({"accepted_current", "accepted_disputed"}), "historical"),
    "expire": (frozenset({"accepted_current", "accepted_disputed", "historical"}), "expired"),
    "invalidate-trust": (frozenset({"accepted_current", "accepted_disputed"}), "trust_invalid"),
}


def require_pending(state: str) -> None:
    """A candidate decision or withdrawal needs a pending candidate."""
    if state in CANDIDATE_TERMINAL:
        raise ContractError(ErrorCode.ALREADY_TERMINAL)
    if state != "pending":
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)


def require_forgettable(state: str) -> None:
    if state == "tombstoned":
        raise ContractError(ErrorCode.ALREADY_TERMINAL)
    if state not in FORGETTABLE:
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)


def operator_target(operation: str, state: str) -> str:
    sources, target = OPERATOR_TRANSITIONS[operation]
    if state == "tombstoned":
        raise ContractError(ErrorCode.ALREADY_TERMINAL)
    if state not in sources:
        raise ContractError(ErrorCode.ILLEGAL_TRANSITION)
    return target
