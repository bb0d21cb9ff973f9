"""The operator console: a web view of a running engram, on a listener of its own.

Why a room of its own: operators ask every day whether replicas are caught up, which
forgets still wait for a purge, how many candidates wait for adjudication, which error
codes rise and why a record ranked where it did. The console answers in a browser from
the engine's operator surface (ids, states, counts, cursors, digests, timings), never
a record's text or a query, and is reachable only by an operator holding a one-time
link from the operator socket. MCP never reaches it, nor it MCP.

Its surface is its modules, each imported by name.
"""

__all__ = [
    "access",
    "app",
    "audit_trail",
    "charts",
    "listener",
    "reports",
    "surface",
]
