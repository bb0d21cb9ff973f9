"""The host's half of the host context: the header it travels in and how a host signs it.

Why in ``models``: a host (an agent's launcher, a load generator, a test) mints the
context the server verifies, and needs no part of the server for that; the server's
binding (``service/mcp/host_context.py``) verifies tokens of exactly this form. Pure:
an HS256 JSON Web Token over the claims, no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import jwt

#: The HTTP header a host context travels in.
HEADER = "X-Engram-Context"
#: The one signing algorithm the server accepts.
ALGORITHM = "HS256"


def mint_token(claims: Mapping[str, Any], secret: bytes, *, ttl_s: int = 300, now_s: float | None = None) -> str:
    """Sign a context for a host (and for tests). Adds `iat`/`exp` when absent."""
    now = int(time.time() if now_s is None else now_s)
    body = dict(claims)
    body.setdefault("iat", now)
    body.setdefault("exp", now + ttl_s)
    return jwt.encode(body, secret, algorithm=ALGORITHM)
