"""`engram serve --stdio`: the same six tools over stdin/stdout, one scope per process.

Why a separate entry: over stdio there are no per-request headers, so the host binds
one context at launch through the environment it controls (`ENGRAM_CONTEXT`, a JWT
signed with the host secret, or `ENGRAM_CONTEXT_FILE`, a JSON claims file); see
`service.mcp.host_context`. Everything else (grants, purpose, gates, envelopes, audit)
is identical to HTTP.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp.server.stdio import stdio_server

from .audit import AUDIT_FILE, AuditLog
from .host_context import StaticBinding
from .rate_limit import TokenBucketLimiter
from .server import DEFAULT_DEADLINE_MS, EngineLike, ToolFrontEnd


async def _serve(front: ToolFrontEnd) -> None:
    server = front.build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(
    engine: EngineLike,
    binding: StaticBinding,
    *,
    data_dir: Path | None = None,
    rate_per_s: float = 20.0,
    burst: int = 40,
    default_deadline_ms: int = DEFAULT_DEADLINE_MS,
) -> None:
    """Serve until stdin closes."""
    audit = AuditLog(Path(data_dir) / AUDIT_FILE) if data_dir is not None else None
    front = ToolFrontEnd(
        engine,
        binding,
        audit=audit,
        limiter=TokenBucketLimiter(rate=rate_per_s, burst=burst),
        default_deadline_ms=default_deadline_ms,
    )
    try:
        anyio.run(_serve, front)
    finally:
        if audit is not None:
            audit.close()
