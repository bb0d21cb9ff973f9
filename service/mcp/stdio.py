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

from engram.service.settings import Settings

from .audit import AUDIT_FILE, AuditLog
from .host_context import StaticBinding
from .server import EngineLike, ToolFrontEnd


async def _serve(front: ToolFrontEnd) -> None:
    server = front.build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(
    engine: EngineLike,
    binding: StaticBinding,
    settings: Settings,
) -> None:
    """Serve until stdin closes; audit lines go to `<data_dir>/audit.jsonl`."""
    audit = AuditLog(Path(settings.data_dir) / AUDIT_FILE)
    front = ToolFrontEnd.configured(engine, binding, settings, audit=audit)
    try:
        anyio.run(_serve, front)
    finally:
        audit.close()
