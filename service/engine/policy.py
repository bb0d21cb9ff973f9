"""The host's policies: what capture may ask for, and how admission decides.

Both are host configuration (JSON files in the data directory, written by the
operator), never agent input. The admission policy is versioned: a decision names the
policy version it was made under, and a decision that no longer matches the active
version, or is older than five minutes when it is committed, is POLICY_STALE.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from models.codes import ContractError, ErrorCode
from models.digests import DigestKind, seal_receipt

from .clock import instant

DAY_MS = 86_400_000
DECISION_TTL_MS = 300_000

Decision = Literal["accept", "reject", "adjudication_required"]


@dataclass(frozen=True)
class HostPolicy:
    """What the host lets capture request (contract section 3.6)."""

    allow_retain: bool = False
    max_retention_ms: int = 365 * DAY_MS
    reconciliation_consent: bool = False


@dataclass(frozen=True)
class AdmissionPolicy:
    """The default accepts well-formed, cited, secret-free candidates (capture has already
    refused malformed and secret-bearing ones); hosts may narrow it."""

    policy_id: str = "engram.default-admission"
    policy_version: str = "1"
    allowed_locator_schemes: list[str] | None = None
    require_attestation: bool = False
    adjudicate_kinds: list[str] = field(default_factory=list)

    def decide(self, payload: dict[str, Any], evidence: dict[str, Any]) -> Decision:
        schemes = self.allowed_locator_schemes
        if schemes is not None and any(
            c["locator"]["scheme"] not in schemes for c in payload["citations"]
        ):
            return "reject"
        if self.require_attestation and not evidence.get("attestation"):
            return "reject"
        if any(c["kind"] in self.adjudicate_kinds for c in payload["components"]):
            return "adjudication_required"
        return "accept"

    def decision_receipt(self, record_digest: str, decision: Decision, at_ms: int) -> dict[str, Any]:
        return seal_receipt(
            DigestKind.DECISION_RECEIPT,
            {
                "policy_id": self.policy_id,
                "policy_version": self.policy_version,
                "record_digest": record_digest,
                "decision": decision,
                "issued_at": instant(at_ms),
            },
        )

    def check_fresh(self, receipt: dict[str, Any], issued_ms: int, now_ms: int) -> None:
        if receipt["policy_version"] != self.policy_version or now_ms - issued_ms > DECISION_TTL_MS:
            raise ContractError(ErrorCode.POLICY_STALE)


def _load(path: Path, kind: type[Any]) -> Any:
    if not path.exists():
        return kind()
    try:
        return kind(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise ContractError(ErrorCode.POLICY_UNAVAILABLE) from exc


def load_host_policy(data_dir: Path) -> HostPolicy:
    return _load(data_dir / "host_policy.json", HostPolicy)


def load_admission_policy(data_dir: Path) -> AdmissionPolicy:
    return _load(data_dir / "admission_policy.json", AdmissionPolicy)


def write_policy(path: Path, policy: HostPolicy | AdmissionPolicy) -> None:
    path.write_text(json.dumps(asdict(policy), indent=2) + "\n")
