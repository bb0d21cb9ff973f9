"""`engram serve --stdio`: the same six tools over stdin/stdout, one scope per client.

Why a separate entry: over stdio there are no per-request headers, so the host binds
one context at launch through the environment it controls (`ENGRAM_CONTEXT`, a JWT
signed with the host secret, or `ENGRAM_CONTEXT_FILE`, a JSON claims file); see
`service.mcp.host_context`. Everything else (grants, purpose, gates, envelopes, audit)
is identical to HTTP. The process holding the data directory also serves the stdio
clients launched after it, each bridged over its client socket
(`service.mcp.client_socket`) with its own binding and session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

from engram.models.codes import ContractError, ErrorCode
from engram.service.engine import AUDIT_FILE, CallContext
from engram.service.settings import Settings

from .audit import AuditLog
from .host_context import StaticBinding
from .rate_limit import TokenBucketLimiter
from .server import EngineLike, ToolFrontEnd


class _CallsAfterWarmUp:
    """The engine as a stdio client sees it: the handshake and `tools/list` are answered
    while the engine warms up in the background (loading the model takes seconds, longer
    than some clients wait for a server to start), and a tool call waits for the
    warm-up, for most of its deadline; past that it is DEADLINE_EXCEEDED, nothing applied."""

    #: The share of a call's deadline it may spend waiting for the warm-up, so that this
    #: answer, not the deadline's (which reports a mutation as begun), comes first.
    WAIT_SHARE = 0.8

    def __init__(self, engine: EngineLike, default_deadline_ms: int) -> None:
        self._engine = engine
        self._default_deadline_ms = default_deadline_ms

    def execute(self, tool: str, ctx: CallContext, arguments: dict[str, Any]) -> dict[str, Any]:
        wait_ready = getattr(self._engine, "wait_ready", None)
        deadline_s = (ctx.deadline_ms or self._default_deadline_ms) / 1000
        if wait_ready is not None and not wait_ready(deadline_s * self.WAIT_SHARE):
            raise ContractError(ErrorCode.DEADLINE_EXCEEDED)
        return self._engine.execute(tool, ctx, arguments)

    def tenant_enabled(self, tenant: str) -> bool:
        return self._engine.tenant_enabled(tenant)

    def readiness(self) -> dict[str, Any]:
        return self._engine.readiness()


def stdio_front(
    engine: EngineLike,
    binding: StaticBinding,
    settings: Settings,
    audit: AuditLog,
    limiter: TokenBucketLimiter | None = None,
) -> ToolFrontEnd:
    """The tool front end of one stdio client: its binding, deadline and approval window."""
    return ToolFrontEnd.configured(
        _CallsAfterWarmUp(engine, settings.deadline_ms), binding, settings, audit=audit, limiter=limiter
    )


async def _serve(front: ToolFrontEnd) -> None:
    server = front.build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(
    engine: EngineLike,
    binding: StaticBinding,
    settings: Settings,
    audit: AuditLog | None = None,
    limiter: TokenBucketLimiter | None = None,
) -> None:
    """Serve this process's own client until stdin closes; audit lines go to `audit`
    (default: its own log on `<data_dir>/audit.jsonl`, closed on return)."""
    own_audit = AuditLog(Path(settings.data_dir) / AUDIT_FILE) if audit is None else audit
    try:
        anyio.run(_serve, stdio_front(engine, binding, settings, own_audit, limiter))
    finally:
        if audit is None:
            own_audit.close()
