"""The host's policies: what capture may ask for, and how admission decides.

Both are host configuration, never agent input: JSON files in the data directory
(`host_policy.json`, `admission_policy.json`) written by the operator, validated by
pydantic (unknown fields and wrong types are refused), and re-read whenever the file
changes, so an edit takes effect without a restart. A file that does not validate
makes the calls that need it POLICY_UNAVAILABLE (retriable) and logs one line naming
the field; it never stops the service from starting, and the previous good policy is
not silently kept (the operator's intent changed; guessing it is not ours to do).

The admission policy is versioned. A decision names the policy version it was made
under; at commit time the policy is read again, and a decision whose policy is no
longer the current one (another version, or the same version with other content), or
that is older than five minutes, is POLICY_STALE: nothing is committed, and a retry
decides again under the current policy.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, digest, seal_receipt

from .clock import instant

logger = logging.getLogger("engram.policy")

DAY_MS = 86_400_000
DECISION_TTL_MS = 300_000
HOST_POLICY_FILE = "host_policy.json"
ADMISSION_POLICY_FILE = "admission_policy.json"

Decision = Literal["accept", "reject", "adjudication_required"]


class _PolicyModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def content_digest(self) -> str:
        """Identifies the policy's content, whatever version label it carries."""
        return digest(DigestKind.POLICY, self.model_dump(mode="json"))


class HostPolicy(_PolicyModel):
    """What the host lets capture request (contract section 3.6)."""

    allow_retain: bool = False
    max_retention_ms: int = Field(default=365 * DAY_MS, gt=0)
    reconciliation_consent: bool = False


class AdmissionPolicy(_PolicyModel):
    """The default accepts well-formed, cited, secret-free candidates (capture has already
    refused malformed and secret-bearing ones); hosts may narrow it."""

    policy_id: str = Field(default="engram.default-admission", min_length=1, max_length=256)
    policy_version: str = Field(default="1", min_length=1, max_length=64)
    allowed_locator_schemes: tuple[str, ...] | None = None
    require_attestation: bool = False
    adjudicate_kinds: tuple[str, ...] = ()

    def decide(self, payload: dict[str, Any], evidence: dict[str, Any]) -> Decision:
        schemes = self.allowed_locator_schemes
        if schemes is not None and any(c["locator"]["scheme"] not in schemes for c in payload["citations"]):
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


P = TypeVar("P", bound=_PolicyModel)


@dataclass(frozen=True)
class _Loaded(Generic[P]):
    signature: tuple[int, int, int] | None  # (inode, size, mtime_ns); None: no file
    policy: P | None


class PolicySource(Generic[P]):
    """One policy file, re-read when its (inode, size, mtime) changes."""

    def __init__(self, path: Path, kind: type[P]) -> None:
        self.path = path
        self.kind = kind
        self._lock = threading.Lock()
        self._loaded: _Loaded[P] | None = None

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self, signature: tuple[int, int, int] | None) -> _Loaded[P]:
        if signature is None:
            return _Loaded(None, self.kind())
        try:
            text = self.path.read_text(encoding="utf-8")
            json.loads(text)  # a syntax error is reported as such, not as a field
            return _Loaded(signature, self.kind.model_validate_json(text))
        except OSError as exc:
            problem = f"unreadable ({type(exc).__name__})"
        except ValueError as exc:
            if isinstance(exc, ValidationError):
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"]) or "(top level)"
                problem = f"field {field}: {first['msg']}"
            else:
                problem = "not valid JSON"
        logger.error(
            "policy file %s is invalid: %s; calls that need it answer POLICY_UNAVAILABLE", self.path.name, problem
        )
        return _Loaded(signature, None)

    def current(self) -> P:
        """The policy as the file says now; POLICY_UNAVAILABLE when it does not validate."""
        signature = self._signature()
        loaded = self._loaded
        if loaded is None or loaded.signature != signature:
            with self._lock:
                loaded = self._loaded
                if loaded is None or loaded.signature != signature:
                    loaded = self._loaded = self._load(signature)
        if loaded.policy is None:
            raise ContractError(ErrorCode.POLICY_UNAVAILABLE)
        return loaded.policy


class Policies:
    """The data directory's two policy files."""

    def __init__(self, data_dir: Path) -> None:
        self.host_source = PolicySource(Path(data_dir) / HOST_POLICY_FILE, HostPolicy)
        self.admission_source = PolicySource(Path(data_dir) / ADMISSION_POLICY_FILE, AdmissionPolicy)

    def host(self) -> HostPolicy:
        return self.host_source.current()

    def admission(self) -> AdmissionPolicy:
        return self.admission_source.current()


def check_fresh(
    decided_under: AdmissionPolicy,
    receipt: dict[str, Any],
    issued_ms: int,
    now_ms: int,
    current: Callable[[], AdmissionPolicy],
) -> None:
    """At commit: POLICY_STALE unless the policy the decision was made under is still
    the current one (version and content) and the decision is at most five minutes old."""
    if now_ms - issued_ms > DECISION_TTL_MS:
        raise ContractError(ErrorCode.POLICY_STALE)
    now = current()
    if receipt["policy_version"] != now.policy_version or receipt["policy_id"] != now.policy_id:
        raise ContractError(ErrorCode.POLICY_STALE)
    if decided_under.content_digest() != now.content_digest():
        raise ContractError(ErrorCode.POLICY_STALE)
