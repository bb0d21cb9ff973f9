"""The service: the engine, its store, the MCP front end, the operator channel and the
CLI, as rooms whose imports run one way (docs/index.md). Its surface is its rooms.
"""

__all__ = [
    "cli",
    "cli_reference",
    "engine",
    "logs",
    "mcp",
    "operator",
    "secrets",
    "settings",
    "store",
]
