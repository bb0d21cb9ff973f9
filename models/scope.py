"""A scope: one tenant's workspace, the unit of isolation.

Every record, candidate, journal, index and paging snapshot belongs to exactly one
scope, and nothing of another scope is ever visible or touchable (the contract's
"tenant and workspace isolation"). Below the MCP edge a scope is the pair
``(tenant, workspace)`` taken from the verified host context; the ranking subsystem
files it under an opaque string key instead (``engram.service.engine.records.scope_key``).
"""

from __future__ import annotations

from typing import TypeAlias

Scope: TypeAlias = tuple[str, str]
