"""The MCP front end: host-context binding, the six tools over MCP, audit and metrics.

Thin by design (DESIGN.md): verify the host context, check grants and purpose, call the
engine in a worker thread, wrap the envelope. No business rule lives here.
"""
