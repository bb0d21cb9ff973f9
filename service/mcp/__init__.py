"""The MCP front end: host-context binding, the six tools over MCP, audit and metrics.

Thin by design (DESIGN.md): verify the host context, check grants and purpose, call the
engine in a worker thread, wrap the envelope. No business rule lives here.

Its surface is its modules, each imported by name.
"""

__all__ = [
    "app",
    "audit",
    "body_limit",
    "bridge",
    "client_config",
    "client_socket",
    "duplicate_keys",
    "elicitation",
    "host_context",
    "local_context",
    "metrics",
    "rate_limit",
    "router",
    "server",
    "stdio",
]
