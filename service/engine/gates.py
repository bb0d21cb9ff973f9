"""The confirmation gate: a human approval the host bound to exactly one operation.

Contract section 0: withdraw and forget always need a host confirmation; capture and
request_admission need one where the host marks them "confirmation required" (each
tool's `ToolSpec.confirmation` says which, and which argument is its target). A
confirmation is bound to (capability, target, operation digest), lives at most 300 s,
must be used within 30 s of approval, and is used once. Anything else is `gate_failed`.

Everything here is pure (no clock, no store): the engine passes `now_ms` and a
`claim_ref` callable backed by its store, and calls `require_confirmation` inside its
transaction, after the idempotency replay check (a replay of a committed operation
does not consume a second confirmation).

The operation digest
--------------------
A host computes what it asks a human to approve with :func:`operation_digest`::

    operation_digest(tool, arguments)
        = digest(DigestKind.OPERATION, {"tool": tool, "arguments": arguments})
        = "sha256:" + hex(sha256(b"engram/operation/v1\\0" + JCS(NFC({"tool": tool,
                                                                  "arguments": arguments}))))

over the exact arguments object the agent sends in `tools/call` (RFC 8785 JCS, every
string NFC-normalised first; see `models.digests`). Any change to any argument (another
target, another reason, another idempotency key, another payload) changes the digest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import CanonicalizationRefused, DigestKind, digest
from engram.models.tools import TOOLS

from .context import CallContext

#: A confirmation may live at most this long (expires_at - approved_at).
MAX_TTL_MS = 300_000
#: It must be used within this long after approval.
USE_WITHIN_MS = 30_000
#: Tolerated host/server clock skew for an approval dated slightly in the future.
CLOCK_SKEW_MS = 5_000


def operation_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """The digest a host confirmation approves: tool name plus the exact arguments.

    `digest(DigestKind.OPERATION, {"tool": tool, "arguments": arguments})`. Raises
    `models.digests.CanonicalizationRefused` for arguments JCS cannot encode.
    """
    return digest(DigestKind.OPERATION, {"tool": tool, "arguments": dict(arguments)})


def claim_key(ctx: CallContext, ref: str) -> str:
    """The used-once ledger's key for `ref`: namespaced by tenant, so one tenant's refs
    can neither collide with nor be burned by another's."""
    return digest(DigestKind.CONFIRMATION_REF, {"tenant": ctx.tenant, "ref": ref})


def require_confirmation(
    ctx: CallContext, tool: str, arguments: Mapping[str, Any], now_ms: int, claim: Callable[[str, int], bool]
) -> None:
    """The confirmation gate of one call: nothing when its spec needs no confirmation
    under `ctx`, else :func:`check_confirmation` against the target its spec names,
    claiming the ref with `claim(key, now_ms)` (the transaction's used-once ledger,
    keyed by :func:`claim_key`)."""
    spec = TOOLS[tool]
    if spec.needs_confirmation(ctx.confirm):
        target = spec.confirmation_target(arguments) or ""
        check_confirmation(ctx, tool, target, arguments, now_ms, lambda ref: claim(claim_key(ctx, ref), now_ms))


def _gate_failed() -> ContractError:
    return ContractError(ErrorCode.GATE_FAILED)


def check_confirmation(
    ctx: CallContext,
    tool: str,
    target: str,
    arguments: Mapping[str, Any],
    now_ms: int,
    claim_ref: Callable[[str], bool],
) -> None:
    """Raise `ContractError(gate_failed)` unless `ctx` carries a usable confirmation.

    Usable means: present; `capability == tool`; `target` equal to the call's target;
    `operation_digest` equal to :func:`operation_digest` of `(tool, arguments)`;
    `approved_at <= expires_at` and `expires_at - approved_at <= 300 s`; approval not
    dated more than 5 s in the future; `now <= approved_at + 30 s` and
    `now <= expires_at`; and finally `claim_ref(ref)` is True (its first use). The ref
    is claimed only once every other check has passed, so a rejected attempt does not
    burn a good confirmation.
    """
    conf = ctx.confirmation
    if conf is None:
        raise _gate_failed()
    if conf.capability != tool:
        raise _gate_failed()
    if not target or conf.target != target:
        raise _gate_failed()
    try:
        expected = operation_digest(tool, arguments)
    except CanonicalizationRefused:
        raise _gate_failed() from None
    if conf.operation_digest != expected:
        raise _gate_failed()
    approved, expires = conf.approved_at_ms, conf.expires_at_ms
    if approved > expires or expires - approved > MAX_TTL_MS:
        raise _gate_failed()
    if now_ms < approved - CLOCK_SKEW_MS:
        raise _gate_failed()
    if now_ms > approved + USE_WITHIN_MS or now_ms > expires:
        raise _gate_failed()
    if not conf.ref or not claim_ref(conf.ref):
        raise _gate_failed()
