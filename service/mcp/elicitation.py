"""Ask the human through MCP elicitation when a call needs a confirmation.

Why: a tool whose spec carries a confirmation (withdraw and forget always, capture and
request_admission where the host lists them in `confirm`) passes the confirmation gate
only with an approval bound to the tool, its target and the operation digest. A host
that signs its own contexts puts that approval in the `confirmation` claim; a stock
desktop client cannot, but it can show the human a form. When the client declares form
elicitation and the call carries no confirmation, this asks; an accepted approval
becomes exactly the confirmation a host would have signed
(`service.engine.context.Confirmation`: fresh `ref`, `capability`, `target`,
`operation_digest`, `approved_at` = the moment the answer arrived, `expires_at` = asked
+ at most 300 s), and the engine's gate checks it and claims its `ref` once, like any
other. A decline, a cancel, an answer past the window, or a client without elicitation
leave the call without confirmation: `gate_failed`, as before.

Both protocol eras: up to 2025-11-25 the question is a server-to-client
`elicitation/create` request inside the call; from 2026-07-28 the call answers
`InputRequiredResult` and the client retries it with the answer and the echoed
`requestState`, which the SDK's `RequestStateBoundary` seals (AES-GCM) and binds to
this tool, these exact arguments and the caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram.models.digests import CanonicalizationRefused
from engram.models.errors import ContextUnavailable
from engram.models.tools import ToolSpec
from engram.service.engine import CallContext, Confirmation, operation_digest

logger = logging.getLogger("engram.mcp.elicitation")

#: The key of our one question in `input_requests` / `input_responses`.
QUESTION = "engram_confirmation"
#: The confirmation gate's ceiling on an approval's lifetime.
MAX_APPROVAL_S = 300
#: How long a sealed `requestState` is accepted at all; past `ttl_s` it still arrives
#: and is answered `gate_failed` (too late) rather than a protocol error.
STATE_TTL_S = 3600.0

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Allow this one operation."},
    },
    "required": ["approve"],
}


def caller_of(resolve: Callable[[Any], CallContext]) -> Callable[[Any], str | None]:
    """The caller a sealed `requestState` is bound to: tenant and principal of the
    request's verified context (None when there is none; such a call fails anyway)."""

    def caller(request: Any) -> str | None:
        try:
            ctx = resolve(request)
        except ContextUnavailable:
            return None
        return json.dumps([ctx.tenant, ctx.principal])

    return caller


def _now_ms() -> int:
    return int(time.time() * 1000)


def _field(answer: Any, name: str) -> Any:
    return answer.get(name) if isinstance(answer, Mapping) else getattr(answer, name, None)


def _approved(answer: Any) -> bool:
    content = _field(answer, "content")
    return _field(answer, "action") == "accept" and isinstance(content, Mapping) and content.get("approve") is True


def _message(verb: str, tool: str, target_field: str, target: str, digest: str) -> str:
    return f"engram memory: {verb} {target}? ({tool}, {target_field}={target}, operation {digest})"


class HumanApproval:
    """Turns a human's answer to an elicitation into the call's confirmation."""

    def __init__(
        self,
        ttl_s: int = MAX_APPROVAL_S,
        *,
        state_key: bytes | None = None,
        caller: Callable[[Any], str | None] | None = None,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        """`ttl_s` (at most 300) is how long an approval is valid from the moment it was
        asked. `state_key` seals `requestState` (share it between replicas; None: a key
        of this process). `caller(request)` names the caller the state is bound to."""
        self.ttl_ms = min(int(ttl_s), MAX_APPROVAL_S) * 1000
        key = state_key if state_key is not None else secrets.token_bytes(32)
        self._security = RequestStateSecurity(
            keys=[hashlib.sha256(b"engram/request-state/v1\0" + key).digest()],
            ttl=STATE_TTL_S,
            bind_principal=(lambda rctx: caller(rctx.request)) if caller is not None else None,
        )
        self._clock_ms = clock_ms

    def boundary(self, audience: str) -> RequestStateBoundary:
        """The SDK middleware that seals and verifies our `requestState`."""
        return RequestStateBoundary(self._security, default_audience=audience)

    async def confirm(
        self, rctx: Any, params: types.CallToolRequestParams, spec: ToolSpec, ctx: CallContext, arguments: Any
    ) -> CallContext | types.InputRequiredResult:
        """The context to run the call with (confirmed when the human approved), or the
        `InputRequiredResult` that asks the question (2026-07-28 era, first round)."""
        rule, tool = spec.confirmation, spec.name
        target = spec.confirmation_target(arguments) if isinstance(arguments, Mapping) else None
        if rule is None or not target:
            return ctx  # malformed: the engine answers INVALID_SCHEMA
        try:
            digest = operation_digest(tool, arguments)
        except CanonicalizationRefused:
            return ctx
        if not self._client_can_ask(rctx):
            return ctx
        question = types.ElicitRequestFormParams(
            message=_message(rule.verb, tool, rule.target, target, digest), requested_schema=_SCHEMA
        )
        if rctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self._modern_round(params, ctx, question, tool, target, digest)
        return await self._legacy_ask(rctx, ctx, question, tool, target, digest)

    # ----------------------------------------------------------------- eras

    def _modern_round(
        self,
        params: types.CallToolRequestParams,
        ctx: CallContext,
        question: types.ElicitRequestFormParams,
        tool: str,
        target: str,
        digest: str,
    ) -> CallContext | types.InputRequiredResult:
        if params.request_state is None:
            state = json.dumps({"ref": "eli_" + secrets.token_hex(16), "asked_at": self._clock_ms()})
            logger.info("asking the human to confirm %s", tool)
            return types.InputRequiredResult(
                input_requests={QUESTION: types.ElicitRequest(params=question)}, request_state=state
            )
        try:  # plaintext: the boundary verified and unsealed it before this handler ran
            state = json.loads(params.request_state)
            ref, asked_at = state["ref"], state["asked_at"]
        except (ValueError, KeyError, TypeError):
            return ctx
        answer = (params.input_responses or {}).get(QUESTION)
        return self._with_answer(ctx, answer, ref, asked_at, tool, target, digest)

    async def _legacy_ask(
        self,
        rctx: Any,
        ctx: CallContext,
        question: types.ElicitRequestFormParams,
        tool: str,
        target: str,
        digest: str,
    ) -> CallContext:
        asked_at = self._clock_ms()
        answer = None
        logger.info("asking the human to confirm %s", tool)
        try:
            with anyio.move_on_after(self.ttl_ms / 1000.0):
                answer = await rctx.session.elicit_form(
                    question.message, question.requested_schema, related_request_id=rctx.request_id
                )
        except (MCPError, ValueError, RuntimeError) as exc:  # no back channel, client error, bad answer
            logger.info("elicitation for %s failed: %s", tool, type(exc).__name__)
            return ctx
        return self._with_answer(ctx, answer, "eli_" + secrets.token_hex(16), asked_at, tool, target, digest)

    def _with_answer(
        self, ctx: CallContext, answer: Any, ref: str, asked_at: Any, tool: str, target: str, digest: str
    ) -> CallContext:
        if answer is None or not _approved(answer) or not isinstance(asked_at, int):
            logger.info("confirmation for %s not given (%s)", tool, _field(answer, "action") or "no answer")
            return ctx
        approved_at = self._clock_ms()
        confirmation = Confirmation(
            ref=ref,
            capability=tool,
            target=target,
            operation_digest=digest,
            approved_at_ms=approved_at,
            expires_at_ms=asked_at + self.ttl_ms,
        )
        return dataclasses.replace(ctx, confirmation=confirmation)

    @staticmethod
    def _client_can_ask(rctx: Any) -> bool:
        session = getattr(rctx, "session", None)
        caps = getattr(session, "client_capabilities", None)
        elicitation = getattr(caps, "elicitation", None)
        if elicitation is None:
            return False
        # `elicitation: {}` means form mode; a client that lists only `url` cannot show a form.
        return elicitation.form is not None or elicitation.url is None
