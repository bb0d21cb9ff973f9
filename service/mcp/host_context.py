"""Verify the trusted host's per-call context; the agent's arguments never carry it.

Why this exists: the contract (section 0, "Host binding") puts tenant, workspace,
principal, agent, session, purpose, grants, deadline and confirmation outside the tool
arguments. The host signs them; this module checks the signature and the claims and
turns them into a `CallContext`. Anything wrong is one protocol error, -32603
"Trusted invocation context unavailable", whatever the fault (no detail leaks).

Over HTTP
---------
Header ``X-Engram-Context: <compact JWS>``, HS256 only, signed with the host secret.
The secret is ``ENGRAM_HOST_SECRET`` (its UTF-8 bytes, at least 32) when set, else the
file ``<data-dir>/host_secret`` (mode 0600, created by ``engram admin host-secret``).

Claims (all required unless marked optional; no other claim names are accepted except
the registered JWT ones ``iss sub aud jti nbf``, which are ignored apart from ``nbf``):

=============  ==============================================================
tenant         string, 1-256 chars
workspace      string, 1-256 chars
principal      string, 1-256 chars (the actor; rate limits apply per principal)
agent_id       string, 1-256 chars
session        string, 1-256 chars
purpose        string, 1-512 UTF-8 bytes; must equal every ``purpose_ref`` argument
tools          array of granted tool names (``engram_memory_search`` ...); unknown
               names are ignored, an ungranted tool is absent from tools/list
confirm        array of tools whose confirmation is asked for where listed
               (``engram_memory_capture``, ``engram_memory_request_admission``):
               those need a confirmation
iat            NumericDate (epoch seconds)
exp            NumericDate (epoch seconds); ``exp - iat`` at most 24 h
deadline_ms    optional integer, 1..600000: the call's time budget in milliseconds,
               counted from the moment the server receives the call
confirmation   optional object ``{ref, capability, target, operation_digest,
               approved_at, expires_at}``; ``approved_at`` and ``expires_at`` are
               integers, epoch milliseconds; ``operation_digest`` is
               ``service.engine.gates.operation_digest(tool, arguments)``
=============  ==============================================================

Over stdio (``engram serve --stdio``)
-------------------------------------
One scope is bound at launch, from the process environment the host controls:
``ENGRAM_CONTEXT`` (the same JWT, verified with the same secret; its ``exp`` still
ends the binding) or, failing that, ``ENGRAM_CONTEXT_FILE`` (path of a JSON file
holding the same claims, without ``iat``/``exp``; trusted because only the host can
write the launching process's environment and files).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from engram.models.errors import ContextUnavailable
from engram.models.host_token import ALGORITHM, HEADER
from engram.models.tools import TOOLS, ConfirmWhen, ToolSpec
from engram.service.engine import CallContext, Confirmation

SECRET_ENV = "ENGRAM_HOST_SECRET"
SECRET_FILE = "host_secret"
CONTEXT_ENV = "ENGRAM_CONTEXT"
CONTEXT_FILE_ENV = "ENGRAM_CONTEXT_FILE"

MIN_SECRET_BYTES = 32
MAX_TOKEN_BYTES = 16_384
MAX_LIFETIME_S = 86_400
MAX_DEADLINE_MS = 600_000
LEEWAY_S = 5

_STRING_CLAIMS = ("tenant", "workspace", "principal", "agent_id", "session")
_REGISTERED = frozenset({"iss", "sub", "aud", "jti", "nbf"})
_KNOWN = frozenset({*_STRING_CLAIMS, "purpose", "tools", "confirm", "iat", "exp", "deadline_ms", "confirmation"})
_CONFIRMATION_FIELDS = frozenset({"ref", "capability", "target", "operation_digest", "approved_at", "expires_at"})
_MAX_SAFE = 2**53 - 1


# --------------------------------------------------------------------------- secret


def secret_path(data_dir: Path) -> Path:
    return Path(data_dir) / SECRET_FILE


def create_host_secret(data_dir: Path) -> tuple[Path, bool]:
    """Create `<data_dir>/host_secret` (64 hex chars, mode 0600) unless it exists.

    Returns the path and whether it was created now.
    """
    path = secret_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path, False
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(32) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return path, True


def load_host_secret(data_dir: Path | None, environ: Mapping[str, str] | None = None) -> bytes:
    """The host secret: `ENGRAM_HOST_SECRET` if set, else the data dir's `host_secret`.

    Refuses a secret shorter than 32 bytes and a file readable by group or others.
    """
    env = os.environ if environ is None else environ
    value = env.get(SECRET_ENV)
    if value:
        raw = value.encode("utf-8")
    else:
        if data_dir is None:
            raise RuntimeError(f"no host secret: set {SECRET_ENV} or give a data dir")
        path = secret_path(data_dir)
        if not path.is_file():
            raise RuntimeError(f"no host secret: run `engram admin host-secret` or set {SECRET_ENV}")
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise RuntimeError(f"{path} must be mode 0600 (it is {mode:o})")
        raw = path.read_text(encoding="utf-8").strip().encode("utf-8")
    if len(raw) < MIN_SECRET_BYTES:
        raise RuntimeError(f"the host secret must be at least {MIN_SECRET_BYTES} bytes")
    return raw


# --------------------------------------------------------------------------- claims


def _string(claims: Mapping[str, Any], name: str, max_len: int = 256) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise ContextUnavailable(f"claim {name}")
    return value


def _safe_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SAFE:
        raise ContextUnavailable(f"claim {name}")
    return value


def _confirmation(value: Any) -> Confirmation:
    if not isinstance(value, dict) or set(value) != _CONFIRMATION_FIELDS:
        raise ContextUnavailable("claim confirmation")
    for name in ("ref", "capability", "target", "operation_digest"):
        if not isinstance(value[name], str) or not value[name] or len(value[name]) > 1024:
            raise ContextUnavailable(f"claim confirmation.{name}")
    return Confirmation(
        ref=value["ref"],
        capability=value["capability"],
        target=value["target"],
        operation_digest=value["operation_digest"],
        approved_at_ms=_safe_int(value["approved_at"], "confirmation.approved_at"),
        expires_at_ms=_safe_int(value["expires_at"], "confirmation.expires_at"),
    )


def context_from_claims(claims: Mapping[str, Any]) -> CallContext:
    """Check the claim set (names, types, bounds) and build the `CallContext`.

    Signature, `iat` and `exp` are checked by the caller; this is the shape check
    shared by the header and the stdio claims file.
    """
    unknown = set(claims) - _KNOWN - _REGISTERED
    if unknown:
        raise ContextUnavailable("unknown claim")
    values = {name: _string(claims, name) for name in _STRING_CLAIMS}
    purpose = _string(claims, "purpose", 512)
    if len(purpose.encode("utf-8")) > 512:
        raise ContextUnavailable("claim purpose")
    tools = claims.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ContextUnavailable("claim tools")
    confirm = claims.get("confirm", [])
    if not isinstance(confirm, list) or not all(isinstance(t, str) for t in confirm):
        raise ContextUnavailable("claim confirm")
    if not all(_confirmable(name) for name in confirm):
        raise ContextUnavailable("claim confirm")
    deadline = claims.get("deadline_ms")
    if deadline is not None:
        deadline = _safe_int(deadline, "deadline_ms")
        if not 1 <= deadline <= MAX_DEADLINE_MS:
            raise ContextUnavailable("claim deadline_ms")
    confirmation = claims.get("confirmation")
    return CallContext(
        purpose=purpose,
        tools=frozenset(t for t in tools if t in TOOLS),
        confirm=frozenset(confirm),
        confirmation=None if confirmation is None else _confirmation(confirmation),
        deadline_ms=deadline,
        **values,
    )


def _confirmable(name: str) -> bool:
    """A tool the `confirm` claim may list: one confirmed where the host lists it."""
    spec = TOOLS.get(name)
    return spec is not None and spec.confirmation is not None and spec.confirmation.when is ConfirmWhen.LISTED


@dataclass(frozen=True)
class VerifiedContext:
    """A verified context and the instant (epoch seconds) at which it stops being valid."""

    context: CallContext
    expires_at_s: float | None


def verify_token(token: str | None, secret: bytes, *, now_s: float | None = None) -> VerifiedContext:
    """Verify a compact HS256 JWS and its claims; raise `ContextUnavailable` otherwise."""
    if not token or not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES:
        raise ContextUnavailable("missing")
    signed = _signed_context(token, secret)
    now = time.time() if now_s is None else now_s
    if signed.iat > now + LEEWAY_S or signed.exp <= now:
        raise ContextUnavailable("expired")
    if signed.nbf is not None and (not isinstance(signed.nbf, (int, float)) or signed.nbf > now + LEEWAY_S):
        raise ContextUnavailable("not yet valid")
    return VerifiedContext(signed.context, float(signed.exp))


@dataclass(frozen=True)
class _SignedContext:
    context: CallContext
    iat: float
    exp: float
    nbf: Any


@functools.lru_cache(maxsize=4096)
def _signed_context(token: str, secret: bytes) -> _SignedContext:
    """Everything about a token that does not depend on the clock, cached per token.

    A host sends the same token on every call of a session, and pyjwt's checks cost
    about half a millisecond a call; the same bytes under the same secret always verify
    the same way, and the clock checks are redone by :func:`verify_token` every time.
    Failures raise, so they are never cached.
    """
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise ContextUnavailable("malformed") from None
    if header.get("alg") != ALGORITHM or "crit" in header:
        raise ContextUnavailable("algorithm")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            options={
                "require": ["iat", "exp"],
                "verify_exp": False,  # checked by verify_token against our clock
                "verify_iat": False,
                "verify_nbf": False,
                "verify_aud": False,
                "verify_iss": False,
            },
        )
    except jwt.PyJWTError:
        raise ContextUnavailable("signature") from None
    iat: Any = claims.get("iat")  # checked below to be numbers
    exp: Any = claims.get("exp")
    for value in (iat, exp):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ContextUnavailable("times")
    if not (iat <= exp and exp - iat <= MAX_LIFETIME_S):
        raise ContextUnavailable("lifetime")
    return _SignedContext(context_from_claims(claims), iat, exp, claims.get("nbf"))


# --------------------------------------------------------------------------- binding


class HeaderBinding:
    """Context per HTTP request, from the `X-Engram-Context` header."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def resolve(self, request: Any) -> CallContext:
        headers = getattr(request, "headers", None)
        if headers is None:
            raise ContextUnavailable("no transport headers")
        values = headers.getlist(HEADER) if hasattr(headers, "getlist") else [headers.get(HEADER)]
        if len(values) != 1:
            raise ContextUnavailable("missing or repeated header")
        return verify_token(values[0], self._secret).context


class StaticBinding:
    """One scope bound at launch (stdio); `expires_at_s` ends it where the JWT did."""

    def __init__(self, verified: VerifiedContext) -> None:
        self._verified = verified

    def resolve(self, request: Any) -> CallContext:
        if self._verified.expires_at_s is not None and time.time() >= self._verified.expires_at_s:
            raise ContextUnavailable("expired")
        return self._verified.context


def binding_from_env(environ: Mapping[str, str], secret: bytes | None) -> StaticBinding:
    """The stdio binding: `ENGRAM_CONTEXT` (JWT) or else `ENGRAM_CONTEXT_FILE` (JSON)."""
    token = environ.get(CONTEXT_ENV)
    if token:
        if secret is None:
            raise ContextUnavailable("no secret to verify ENGRAM_CONTEXT")
        return StaticBinding(verify_token(token.strip(), secret))
    path = environ.get(CONTEXT_FILE_ENV)
    if path:
        try:
            claims = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ContextUnavailable("unreadable context file") from None
        if not isinstance(claims, dict):
            raise ContextUnavailable("context file")
        claims = {k: v for k, v in claims.items() if k not in ("iat", "exp")}
        return StaticBinding(VerifiedContext(context_from_claims(claims), None))
    raise ContextUnavailable(f"set {CONTEXT_ENV} or {CONTEXT_FILE_ENV}")


# --------------------------------------------------------------------------- purpose


def check_purpose(ctx: CallContext, spec: ToolSpec, arguments: Mapping[str, Any]) -> None:
    """The `purpose_ref` where the tool's spec places it (top-level for search and get,
    `payload.purpose_ref` for capture) must equal the bound purpose, else -32603. An
    absent `purpose_ref` is left to schema validation (INVALID_SCHEMA)."""
    if not spec.purpose_ref:
        return
    *path, name = spec.purpose_ref
    holder: Any = arguments
    for key in path:
        holder = holder.get(key) if isinstance(holder, Mapping) else None
    if isinstance(holder, Mapping) and name in holder and holder[name] != ctx.purpose:
        raise ContextUnavailable("purpose mismatch")
