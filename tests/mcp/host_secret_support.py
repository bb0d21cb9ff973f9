"""The host secret the tests sign host contexts with, in a module of its own: the server
processes the reliability tests start (tests/reliability/launcher.py) import it without
the MCP client stack that ``mcp_support`` brings, a second of every restart."""

from __future__ import annotations

SECRET = b"test-host-secret-0123456789abcdef-0123456789"
