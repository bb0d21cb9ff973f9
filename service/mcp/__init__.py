"""The MCP front end: host-context binding, the six tools over MCP (HTTP and stdio),
elicitation, envelopes and audit.

Thin by design (DESIGN.md): verify the host context, check grants and purpose, call the
engine in a worker thread, wrap the envelope. No business rule lives here, and no tool
is named here: what a tool is comes from its spec. The HTTP around it (the app, limits,
forwarding, metrics) is `service/http`, which mounts it.

Its surface is its modules, each imported by name.
"""

__all__ = [
    "audit",
    "bridge",
    "client_config",
    "client_socket",
    "elicitation",
    "host_context",
    "local_context",
    "rate_limit",
    "server",
    "stdio",
]
