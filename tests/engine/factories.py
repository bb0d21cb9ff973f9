"""Builders of well-formed tool arguments and host contexts for engine tests."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from engram.service.engine import CallContext, Confirmation
from engram.service.engine.clock import now_ms
from engram.service.engine.gates import operation_digest

PURPOSE = "purpose:test"
_counter = itertools.count()


def context(
    tenant: str = "acme",
    workspace: str = "main",
    principal: str = "alice",
    confirmation: Confirmation | None = None,
    confirm: frozenset[str] = frozenset(),
) -> CallContext:
    return CallContext(
        tenant=tenant,
        workspace=workspace,
        principal=principal,
        agent_id="agent-1",
        session="session-1",
        purpose=PURPOSE,
        confirm=confirm,
        confirmation=confirmation,
    )


def key(label: str = "") -> str:
    return f"idem-key-{label}-{next(_counter):08d}"


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def capture_args(
    text: str,
    *,
    idempotency_key: str | None = None,
    extra_components: list[dict[str, Any]] | None = None,
    t: int = 1_700_000_000_000,
    **payload_extra: Any,
) -> dict[str, Any]:
    components = [{"component_id": "c1", "kind": "decision", "text": text, "citation_ids": ["cit1"]}]
    components += extra_components or []
    return {
        "idempotency_key": idempotency_key or key("cap"),
        "payload": {
            "schema_version": 2,
            "purpose_ref": PURPOSE,
            "valid_time": {"t": t},
            "components": components,
            "primary_component_id": "c1",
            "primary_event": {"at": t, "type_ref": "event:decided", "citation_id": "cit1"},
            "citations": [
                {
                    "citation_id": "cit1",
                    "source_ref": "doc:adr-7",
                    "locator": {"scheme": "uri", "value": "https://example.org/adr/7"},
                    "content_digest": sha(text),
                }
            ],
            **payload_extra,
        },
        "evidence": {"evidence_ref": "ev:1", "evidence_digest": sha("ev" + text), "citation_ids": ["cit1"]},
    }


def confirmed(
    ctx: CallContext,
    tool: str,
    target: str,
    arguments: dict[str, Any],
    *,
    ref: str | None = None,
    approved_at: int | None = None,
    ttl_ms: int = 120_000,
) -> CallContext:
    """The same context with a fresh human confirmation bound to exactly this call."""
    approved = now_ms() if approved_at is None else approved_at
    confirmation = Confirmation(
        ref=ref or f"conf-{next(_counter)}",
        capability=tool,
        target=target,
        operation_digest=operation_digest(tool, arguments),
        approved_at_ms=approved,
        expires_at_ms=approved + ttl_ms,
    )
    return CallContext(**{**ctx.__dict__, "confirmation": confirmation})
