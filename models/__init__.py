"""The contract's data: error codes, envelopes, tool inputs and outputs, digests, scopes.

Plain data and pure functions that every other room may import; it imports none of
them. Its surface is its modules, each imported by name (``engram.models.codes``).
"""

__all__ = [
    "codes",
    "compact_json",
    "device",
    "digests",
    "encoding",
    "envelope",
    "errors",
    "host_token",
    "inputs",
    "outputs",
    "scope",
    "tools",
]
