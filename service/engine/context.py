"""The host-bound context of one call: who acts, in which scope, with which grants.

It comes from the trusted host (a signed token over HTTP, the launch environment over
stdio), never from tool arguments; the engine trusts it because the front end verified it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engram.models.scope import Scope


@dataclass(frozen=True)
class Confirmation:
    """A human approval the host bound to one call (contract section 0)."""

    ref: str
    capability: str  # the tool name it approves, e.g. "engram_memory_forget"
    target: str  # candidate_id or record_id; for capture, the idempotency_key
    operation_digest: str  # see service.engine.gates.operation_digest
    approved_at_ms: int
    expires_at_ms: int


@dataclass(frozen=True)
class CallContext:
    tenant: str
    workspace: str
    principal: str
    agent_id: str
    session: str
    purpose: str
    tools: frozenset[str] = field(default_factory=frozenset)
    confirm: frozenset[str] = field(default_factory=frozenset)
    confirmation: Confirmation | None = None
    deadline_ms: int | None = None

    @property
    def scope(self) -> Scope:
        return (self.tenant, self.workspace)
