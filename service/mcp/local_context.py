"""The local user's long-lived stdio binding, and signed contexts for trying HTTP.

Why: a desktop MCP client launches `engram serve --stdio` itself and cannot mint an
HS256 token per day. `engram admin context init` writes the claims once into a 0600
file under the data directory (`ENGRAM_CONTEXT_FILE`, trusted because only the local
user can write it), after opting the tenant in. `engram admin context mint` signs the
same claims (and, for one tool call, a confirmation) for an operator trying the HTTP
endpoint by hand.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engram.models.host_token import mint_token
from engram.models.tools import TOOLS
from engram.service.engine import operation_digest

from .host_context import MAX_LIFETIME_S, context_from_claims

CONTEXTS_DIR = "contexts"
LOCAL_NAME = "local"
DEFAULT_WORKSPACE = "default"
DEFAULT_PURPOSE = "purpose:local"
DEFAULT_AGENT = "mcp-client"
#: The confirmation gate's own bounds: approval valid for at most 300 s.
CONFIRMATION_TTL_MS = 300_000


def default_principal() -> str:
    """The local user's login name (the actor rate limits and audit lines name)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local-user"


def context_path(data_dir: Path, name: str = LOCAL_NAME) -> Path:
    return Path(data_dir) / CONTEXTS_DIR / f"{name}.json"


def local_claims(
    *,
    tenant: str,
    workspace: str = DEFAULT_WORKSPACE,
    principal: str | None = None,
    agent_id: str = DEFAULT_AGENT,
    session: str = LOCAL_NAME,
    purpose: str = DEFAULT_PURPOSE,
    tools: Sequence[str] = tuple(sorted(TOOLS)),
    confirm: Sequence[str] = (),
) -> dict[str, Any]:
    """A claim set checked exactly as a host's would be (raises `ContextUnavailable`)."""
    claims = {
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal or default_principal(),
        "agent_id": agent_id,
        "session": session,
        "purpose": purpose,
        "tools": list(tools),
        "confirm": list(confirm),
    }
    context_from_claims(claims)
    return claims


def write_context_file(path: Path, claims: Mapping[str, Any]) -> None:
    """Write the claims to `path`, mode 0600 from the start, inside a 0700 directory."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(dict(claims), handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_context_file(path: Path) -> dict[str, Any]:
    claims = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(claims, dict):
        raise ValueError(f"{path} is not a JSON object")
    return claims


def confirmation_claim(
    tool: str, arguments: Mapping[str, Any], *, now_ms: int | None = None, ttl_ms: int = CONFIRMATION_TTL_MS
) -> dict[str, Any]:
    """A `confirmation` claim approving exactly this call (tool, target, operation digest).

    Raises `KeyError` for a tool that takes no confirmation and `ValueError` when the
    arguments lack the target.
    """
    rule = TOOLS[tool].confirmation
    if rule is None:
        raise KeyError(tool)
    target = arguments.get(rule.target)
    if not isinstance(target, str):
        raise ValueError(f"the arguments of {tool} need a string {rule.target}")
    approved = int(time.time() * 1000) if now_ms is None else now_ms
    return {
        "ref": "cnf_" + secrets.token_hex(16),
        "capability": tool,
        "target": target,
        "operation_digest": operation_digest(tool, dict(arguments)),
        "approved_at": approved,
        "expires_at": approved + min(ttl_ms, CONFIRMATION_TTL_MS),
    }


def mint_context(
    claims: Mapping[str, Any],
    secret: bytes,
    *,
    ttl_s: int,
    confirmation: Mapping[str, Any] | None = None,
    deadline_ms: int | None = None,
) -> str:
    """Sign `claims` (plus an optional confirmation and deadline) for `ttl_s` seconds."""
    body = {k: v for k, v in claims.items() if k not in ("iat", "exp", "confirmation", "deadline_ms")}
    if confirmation is not None:
        body["confirmation"] = dict(confirmation)
    if deadline_ms is not None:
        body["deadline_ms"] = deadline_ms
    context_from_claims(body)
    return mint_token(body, secret, ttl_s=min(ttl_s, MAX_LIFETIME_S))
