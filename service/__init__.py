"""The service: the engine, its store, the MCP front end, the HTTP app that mounts it,
the operator channel, the operator console and the CLI, as rooms whose imports run one way (docs/index.md).
Its surface is its rooms.
"""

__all__ = [
    "cli",
    "cli_reference",
    "console",
    "engine",
    "http",
    "logs",
    "mcp",
    "operator",
    "secrets",
    "settings",
    "store",
]
