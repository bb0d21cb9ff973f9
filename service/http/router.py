"""Forward MCP calls of scopes routed to another replica group to a live replica of it.

Why here, in front of the MCP app: with scopes routed to replica groups
(:mod:`service.engine.routing`) any replica may receive any scope's call, so a plain
load balancer in front of every replica works. This ASGI layer reads the scope from
the signed host context (`X-Engram-Context`, verified with the shared host secret),
looks its route up, and when another group serves it, sends the HTTP request
unchanged (method, path, headers with the context, body) to a live replica of that
group and relays the answer as it streams (SSE included), so both protocol eras and
elicitation work through it. The forwarded request carries `X-Engram-Forwarded`, and
a request that carries it is never forwarded again: it is answered where it lands.

Everything else is answered here by the local app, which decides as it always does:
no or a bad context (-32603), no route yet (the local engine claims the scope for
this group), a scope this group serves. When no replica of the scope's group is live
or none accepts the connection, the call is answered here too, and the engine, which
serves only its own group's scopes, answers the retriable STORE_UNAVAILABLE (audited
like any call). Only a forwarded mutation whose peer failed after receiving it is
answered by this layer itself: MUTATION_OUTCOME_UNKNOWN (retry with the same key), as
the call may have committed there. A client that sends `X-Engram-Forwarded` itself
gains nothing: the engine re-checks the route of every call it runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
import httpx2

from engram.models.codes import ErrorCode
from engram.models.envelope import envelope_text, failure_envelope
from engram.models.errors import ContextUnavailable
from engram.models.host_token import HEADER
from engram.models.scope import Scope
from engram.models.tools import TOOLS
from engram.service.engine import CallContext
from engram.service.mcp.audit import AuditLog, Durability, audit_digest, audit_text_digest
from engram.service.mcp.host_context import verify_token
from engram.service.mcp.server import ARRIVED_AT, new_audit_id

logger = logging.getLogger("engram.router")

FORWARDED_HEADER = b"x-engram-forwarded"
_CONTEXT_HEADER = HEADER.lower().encode()
MCP_PATHS = ("/mcp", "/mcp/")
#: Not passed on in either direction (RFC 9110 section 7.6.1), plus the length, which
#: the forwarding client sets from the body it sends.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
    }
)
CONNECT_TIMEOUT_S = 2.0
#: Beyond the call's own deadline and a human's approval time: how long a forwarded
#: POST may take before the peer counts as lost.
READ_MARGIN_S = 5.0

Destination = Callable[[Scope], list[str] | None]
Asgi = Callable[
    [dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
    Awaitable[None],
]


class _Lost(Exception):
    """The peer took the request and failed before answering it."""


class ScopeRouter:
    """ASGI middleware around the MCP app (see the module docstring)."""

    def __init__(
        self,
        app: Asgi,
        *,
        secret: bytes,
        destination: Destination,
        replica_id: str,
        deadline_ms: int,
        approval_ttl_s: int,
        audit: AuditLog | None = None,
    ) -> None:
        self.app = app
        self._secret = secret
        self._destination = destination
        self._replica_id = replica_id.encode()
        self._default_deadline_ms = deadline_ms
        self._approval_s = approval_ttl_s
        self._audit = audit
        self._client: httpx2.AsyncClient | None = None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in MCP_PATHS:
            await self.app(scope, receive, send)
            return
        scope[ARRIVED_AT] = time.monotonic()  # the call's deadline runs from here
        ctx = self._context(scope["headers"])
        targets = None
        if ctx is not None:
            # Within the call's deadline: a store that stopped answering must not hold it longer.
            with anyio.move_on_after((ctx.deadline_ms or self._default_deadline_ms) / 1000):
                try:
                    targets = await anyio.to_thread.run_sync(self._destination, ctx.scope, abandon_on_cancel=True)
                except Exception as exc:  # noqa: BLE001 - the local engine answers (and re-checks the route)
                    logger.warning("route lookup failed: %s", type(exc).__name__)
        if not targets:
            await self.app(scope, receive, send)
            return
        assert ctx is not None
        started = time.monotonic()
        body = await _read_body(receive)
        try:
            sent = await self._forward(scope, body, targets, send, ctx)
        except _Lost:
            call = _tool_call(body)
            if call is not None and call[1] in TOOLS and TOOLS[call[1]].mutation:
                await self._answer_unknown(send, ctx, call, started)
                return
            sent = False
        if not sent:
            await self.app(scope, _replaying(body, receive), send)

    def _context(self, headers: list[tuple[bytes, bytes]]) -> CallContext | None:
        """The verified context of a request to route, or None to answer it here."""
        values = []
        for name, value in headers:
            if name == FORWARDED_HEADER:
                return None
            if name == _CONTEXT_HEADER:
                values.append(value)
        if len(values) != 1:
            return None
        try:
            return verify_token(values[0].decode("latin-1"), self._secret).context
        except ContextUnavailable:
            return None

    async def _forward(
        self, scope: dict[str, Any], body: bytes, targets: list[str], send: Any, ctx: CallContext
    ) -> bool:
        """Relay the request to the first target that accepts the connection; False
        when none did (nothing was sent anywhere)."""
        if self._client is None:
            self._client = httpx2.AsyncClient(trust_env=False, follow_redirects=False)
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP_BY_HOP] + [(FORWARDED_HEADER, self._replica_id)]
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        deadline_s = (ctx.deadline_ms or self._default_deadline_ms) / 1000
        read_s = None if scope["method"] == "GET" else deadline_s + self._approval_s + READ_MARGIN_S
        timeout = httpx2.Timeout(connect=CONNECT_TIMEOUT_S, read=read_s, write=deadline_s, pool=CONNECT_TIMEOUT_S)
        for base in targets:
            url = base.rstrip("/") + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
            request = self._client.build_request(scope["method"], url, headers=headers, content=body, timeout=timeout)
            try:
                response = await self._client.send(request, stream=True)
            except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout):
                logger.warning("peer %s refused a forwarded call; trying the next", base)
                continue
            except httpx2.HTTPError as exc:
                logger.warning("peer %s lost a forwarded call: %s", base, type(exc).__name__)
                raise _Lost() from None
            try:
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP],
                    }
                )
                try:
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except httpx2.HTTPError as exc:  # cut mid-answer: the client sees a truncated stream
                    logger.warning("peer %s cut a forwarded answer: %s", base, type(exc).__name__)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()
            return True
        return False

    async def _answer_unknown(self, send: Any, ctx: CallContext, call: tuple[Any, str, Any], started: float) -> None:
        """MUTATION_OUTCOME_UNKNOWN for a forwarded mutation the peer lost, audited."""
        rpc_id, tool, arguments = call
        audit_id = new_audit_id()
        envelope = failure_envelope(ErrorCode.MUTATION_OUTCOME_UNKNOWN, audit_id)
        text = envelope_text(envelope)
        payload = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": rpc_id,
                "result": {"content": [{"type": "text", "text": text}], "structuredContent": envelope, "isError": True},
            }
        ).encode()
        if self._audit is not None:
            await anyio.to_thread.run_sync(lambda: self._audit_line(audit_id, tool, ctx, arguments, text, started))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    def _audit_line(
        self, audit_id: str, tool: str, ctx: CallContext, arguments: Any, text: str, started: float
    ) -> None:
        assert self._audit is not None
        try:
            self._audit.record(
                audit_id=audit_id,
                tool=tool,
                code=ErrorCode.MUTATION_OUTCOME_UNKNOWN.value,
                latency_ms=(time.monotonic() - started) * 1000.0,
                tenant=ctx.tenant,
                workspace=ctx.workspace,
                principal=ctx.principal,
                arguments_digest=audit_digest("arguments", {"tool": tool, "arguments": arguments}),
                response_digest=audit_text_digest("response", text),
                durability=Durability.SYNCED,
            )
        except OSError as exc:
            logger.error("audit write failed: %s", type(exc).__name__)


def _tool_call(body: bytes) -> tuple[Any, str, Any] | None:
    """(JSON-RPC id, tool name, arguments) of a tools/call request body, else None."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    return message.get("id"), params["name"], params.get("arguments", {})


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Any) -> Any:
    """A `receive` that yields the body already read once, then the client's events."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> dict[str, Any]:
        if pending:
            return pending.pop()
        return await receive()

    return replay
