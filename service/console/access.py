"""Who may use the console: one-time login links, sessions and their CSRF tokens.

Why this shape: the console shows an operator's view of every tenant, so a browser
gets in only with a link minted by someone who already owns the data directory (the
operator socket, `engram admin console-link`), in the spirit of Jupyter's token URL.
A link works once and for a few minutes; exchanging it sets a session cookie
(HttpOnly, SameSite=Strict, Secure under TLS) that expires. Each session carries its
own CSRF token, which every state-changing request must echo. Everything lives in this
process's memory: a restarted server asks for a new link, and only digests of the
secrets are kept, so a memory dump of the table does not log anyone in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

#: The session cookie's name.
COOKIE = "engram_console"
#: The header (htmx requests) or form field (plain forms) carrying the CSRF token.
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"


class LinkState(StrEnum):
    """What became of a login link presented to the console."""

    ACCEPTED = "accepted"
    UNKNOWN = "unknown"  # never minted here, already used, or minted before a restart
    EXPIRED = "expired"


@dataclass(frozen=True)
class Session:
    """A logged-in browser: when it ends and the CSRF token its forms carry."""

    csrf_token: str
    expires_at: float


@dataclass(frozen=True)
class Login:
    """The outcome of presenting a link: its state and, when accepted, the new session's
    cookie value and the session itself."""

    state: LinkState
    cookie: str = ""
    session: Session | None = None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ConsoleAccess:
    """The table of links and sessions of one console (thread-safe: the operator
    socket mints links from its own threads)."""

    def __init__(self, link_ttl_s: float, session_s: float, clock: Callable[[], float] = time.time) -> None:
        self.link_ttl_s = link_ttl_s
        self.session_s = session_s
        self._now = clock
        self._links: dict[str, float] = {}  # digest of a link token -> its expiry
        self._sessions: dict[str, Session] = {}  # digest of a cookie value -> the session
        self._lock = threading.Lock()

    def mint_link(self) -> tuple[str, float]:
        """A fresh one-time token and the epoch second it expires at."""
        token = secrets.token_urlsafe(32)
        expires_at = self._now() + self.link_ttl_s
        with self._lock:
            self._forget_stale()
            self._links[_digest(token)] = expires_at
        return token, expires_at

    def exchange(self, token: str) -> Login:
        """Spend a link token: a new session on success; the token never works again."""
        with self._lock:
            expires_at = self._links.pop(_digest(token), None)
            if expires_at is None:
                return Login(LinkState.UNKNOWN)
            if expires_at < self._now():
                return Login(LinkState.EXPIRED)
            cookie = secrets.token_urlsafe(32)
            session = Session(secrets.token_urlsafe(32), self._now() + self.session_s)
            self._sessions[_digest(cookie)] = session
        return Login(LinkState.ACCEPTED, cookie, session)

    def session(self, cookie: str | None) -> Session | None:
        """The live session a cookie value names, or None."""
        if not cookie:
            return None
        with self._lock:
            session = self._sessions.get(_digest(cookie))
            if session is None or session.expires_at < self._now():
                self._sessions.pop(_digest(cookie), None)
                return None
            return session

    def end(self, cookie: str | None) -> None:
        """Log the session out (its cookie and CSRF token stop working)."""
        if cookie:
            with self._lock:
                self._sessions.pop(_digest(cookie), None)

    def _forget_stale(self) -> None:
        now = self._now()
        self._links = {k: v for k, v in self._links.items() if v >= now - self.link_ttl_s}
        self._sessions = {k: v for k, v in self._sessions.items() if v.expires_at >= now}


def csrf_matches(session: Session, presented: str | None) -> bool:
    """Whether a request echoes its session's CSRF token (constant-time)."""
    return presented is not None and hmac.compare_digest(session.csrf_token, presented)
