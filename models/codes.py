"""The contract's error codes, their retriable flags and constant messages.

Callers act on `code` and `retriable` only, so every message is a fixed string per
code: nothing from the input, a path or internal state can ever reach it.
"""

from __future__ import annotations

from enum import StrEnum

from .errors import EngramError


class ErrorCode(StrEnum):
    INVALID_SCHEMA = "INVALID_SCHEMA"
    INVALID_DIGEST = "INVALID_DIGEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    AUTHORIZATION_EXPIRED = "AUTHORIZATION_EXPIRED"
    AUTHORIZATION_REVOKED = "AUTHORIZATION_REVOKED"
    NOT_FOUND = "NOT_FOUND"
    DIGEST_CONFLICT = "DIGEST_CONFLICT"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    ALREADY_TERMINAL = "ALREADY_TERMINAL"
    MUTATION_OUTCOME_UNKNOWN = "MUTATION_OUTCOME_UNKNOWN"
    GATE_FAILED = "gate_failed"
    STALE_PAGE = "STALE_PAGE"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    PROJECTION_OVERSIZED = "PROJECTION_OVERSIZED"
    RATE_LIMITED = "RATE_LIMITED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    FENCE_LOST = "FENCE_LOST"
    CURSOR_GAP = "CURSOR_GAP"
    POLICY_UNAVAILABLE = "POLICY_UNAVAILABLE"
    POLICY_STALE = "POLICY_STALE"
    PROJECTION_STALE = "PROJECTION_STALE"
    RANKING_UNAVAILABLE = "RANKING_UNAVAILABLE"
    CAPABILITY_UNAVAILABLE = "CAPABILITY_UNAVAILABLE"
    JOURNAL_CORRUPT = "JOURNAL_CORRUPT"
    BLOB_MISSING = "BLOB_MISSING"
    REGISTRY_VERSION_UNAVAILABLE = "REGISTRY_VERSION_UNAVAILABLE"
    BACKUP_INVALID = "BACKUP_INVALID"
    RESTORE_REFUSED = "RESTORE_REFUSED"
    MIGRATION_LEDGER_INVALID = "MIGRATION_LEDGER_INVALID"
    # This service's own code for section 4 of the contract: the material looks like a
    # secret or credential and was refused before reaching any disk.
    SECRET_DETECTED = "SECRET_DETECTED"


RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.MUTATION_OUTCOME_UNKNOWN,
        ErrorCode.RATE_LIMITED,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.CANCELLED,
        ErrorCode.STORE_UNAVAILABLE,
        ErrorCode.FENCE_LOST,
        ErrorCode.CURSOR_GAP,
        ErrorCode.POLICY_UNAVAILABLE,
        ErrorCode.POLICY_STALE,
        ErrorCode.PROJECTION_STALE,
        ErrorCode.RANKING_UNAVAILABLE,
    }
)

MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.INVALID_SCHEMA: "The arguments do not match the tool's closed schema.",
    ErrorCode.INVALID_DIGEST: "A digest is not of the form sha256:<64 lowercase hex>.",
    ErrorCode.UNAUTHORIZED: "The bound authority does not permit this operation.",
    ErrorCode.AUTHORIZATION_EXPIRED: "The authorization has expired.",
    ErrorCode.AUTHORIZATION_REVOKED: "The authorization has been revoked.",
    ErrorCode.NOT_FOUND: "The target is not available.",
    ErrorCode.DIGEST_CONFLICT: "The idempotency key was already used for other content or another target.",
    ErrorCode.ILLEGAL_TRANSITION: "The lifecycle does not permit this transition.",
    ErrorCode.ALREADY_TERMINAL: "The target is already in a terminal state.",
    ErrorCode.MUTATION_OUTCOME_UNKNOWN: "The mutation may have committed; retry with the same key and arguments.",
    ErrorCode.GATE_FAILED: "A confirmation or policy gate was not met.",
    ErrorCode.STALE_PAGE: "The page cursor cannot be served; start a new search.",
    ErrorCode.RESULT_TOO_LARGE: "The response cannot fit the packet budget; raise max_packet_bytes or lower the limit.",
    ErrorCode.PROJECTION_OVERSIZED: "A record alone exceeds the packet budget; raise max_packet_bytes.",
    ErrorCode.RATE_LIMITED: "Too many calls; back off and retry.",
    ErrorCode.DEADLINE_EXCEEDED: "The deadline passed before the call completed.",
    ErrorCode.CANCELLED: "The call was cancelled.",
    ErrorCode.STORE_UNAVAILABLE: "The store is unavailable; back off and retry.",
    ErrorCode.FENCE_LOST: "The writer fence was lost; back off and retry.",
    ErrorCode.CURSOR_GAP: "The journal cursor has a gap; back off and retry.",
    ErrorCode.POLICY_UNAVAILABLE: "The admission policy is unavailable; back off and retry.",
    ErrorCode.POLICY_STALE: "The policy decision is stale; retry.",
    ErrorCode.PROJECTION_STALE: "The projection lags the journal; retry.",
    ErrorCode.RANKING_UNAVAILABLE: "A required ranking channel is unavailable; retry, or ask for lexical.",
    ErrorCode.CAPABILITY_UNAVAILABLE: "The capability is unavailable; report to the host operator.",
    ErrorCode.JOURNAL_CORRUPT: "The journal failed verification; report to the host operator.",
    ErrorCode.BLOB_MISSING: "Stored material is missing; report to the host operator.",
    ErrorCode.REGISTRY_VERSION_UNAVAILABLE: "The registry version is unavailable; report to the host operator.",
    ErrorCode.BACKUP_INVALID: "The backup failed verification; report to the host operator.",
    ErrorCode.RESTORE_REFUSED: "The restore was refused; report to the host operator.",
    ErrorCode.MIGRATION_LEDGER_INVALID: "The migration ledger is invalid; report to the host operator.",
    ErrorCode.SECRET_DETECTED: "The material looks like a secret or credential and was not stored.",
}


def reference_table() -> str:
    """The error-code table (markdown) of docs/reference/error-codes.md, generated from
    the definitions above."""
    rows = ["| code | retriable | message (fixed per code) |", "|---|---|---|"]
    rows += [
        f"| `{code.value}` | {'yes' if code in RETRIABLE else 'no'} | "
        f"{MESSAGES[code].replace('<', '&lt;').replace('>', '&gt;')} |"
        for code in ErrorCode
    ]
    return "\n".join(rows)


class ContractError(EngramError):
    """A failure that the contract names: it becomes an error envelope, never a crash.

    ``detail`` says what was wrong for the operator (a server log line, a CLI summary):
    the field paths and the rules broken, never a value. The envelope's message stays the
    code's fixed one."""

    def __init__(self, code: ErrorCode, detail: str | None = None) -> None:
        super().__init__(code.value)
        self.code = code
        self.detail = detail

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE

    @property
    def message(self) -> str:
        return MESSAGES[self.code]
