"""The HTTP room: the ASGI app that serves everything that is not a tool call, and
mounts the MCP front end at `/mcp`.

Why a room of its own: liveness, readiness and metrics, the request body limit, the
duplicate-key marker and the forwarding of calls to another replica group are HTTP
concerns that know nothing of what a tool does; `service/mcp` keeps the MCP server,
the host binding, the envelopes, elicitation and stdio. Another listener's routes (an
operator console) mount here beside MCP, never inside it.

Its surface is its modules, each imported by name.
"""

__all__ = [
    "app",
    "body_limit",
    "duplicate_keys",
    "metrics",
    "router",
]
