"""The console's own listener beside the MCP one, in the same `engram serve` process.

Why a separate port rather than a path under the MCP app: a load balancer, a host
context or an agent that reaches `/mcp` must not reach the console by accident, and
the console's bind address is decided apart from the MCP one (loopback by default).
The console is off unless `console_port` is set: an extra listener is extra surface,
and an operator who wants it says so. A non-loopback bind is refused unless it is
served over TLS *and* the operator allowed it explicitly (`console_remote`): the login
link and the session cookie would otherwise cross the network in clear.

It runs uvicorn in a thread with its own event loop, so a slow console page never
holds an MCP call; the login links it accepts are minted through the operator socket
(the `console-link` command this module contributes to it).
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from engram.service.engine import Engine
from engram.service.settings import Settings

from .access import ConsoleAccess
from .app import ConsoleConfig, create_console

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: The Host names a loopback console answers to.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: The operator-socket command minting a login link.
LINK_COMMAND = "console-link"


def refusal(settings: Settings) -> str | None:
    """Why the console cannot be served with these settings, or None when it can."""
    if settings.console_port is None:
        return None
    if settings.workers > 1:
        return "the console runs in a single-process server (without --workers)"
    tls = settings.console_tls_cert is not None and settings.console_tls_key is not None
    if (settings.console_tls_cert is None) != (settings.console_tls_key is None):
        return "the console's TLS needs both --console-tls-cert and --console-tls-key"
    if settings.console_host in LOOPBACK:
        return None
    if not tls or not settings.console_remote:
        return (
            f"the console would listen on {settings.console_host}, beyond this machine: its login links and "
            "session cookies would cross the network in clear. Serve it on 127.0.0.1 (and reach it through an "
            "SSH tunnel), or give --console-tls-cert, --console-tls-key and --console-remote"
        )
    return None


class ConsoleListener:
    """The console served on its port in a background thread, and the operator
    command that mints its login links."""

    def __init__(self, engine: Engine, settings: Settings, config: ConsoleConfig) -> None:
        self.settings = settings
        self.tls = settings.console_tls_cert is not None
        self.access = ConsoleAccess(settings.console_link_ttl_s, settings.console_session_s)
        if settings.console_host in LOOPBACK:  # a page of another site resolving to 127.0.0.1 is refused
            config = dataclasses.replace(config, allowed_hosts=LOOPBACK_NAMES)
        app = create_console(engine, self.access, config)
        ssl: dict[str, Any] = {}
        if self.tls:
            ssl = {"ssl_certfile": str(settings.console_tls_cert), "ssl_keyfile": str(settings.console_tls_key)}
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=settings.console_host,
                port=settings.console_port or 0,
                log_config=None,
                log_level=settings.log_level.value,
                access_log=False,  # a login link's token is in its path
                server_header=False,
                lifespan="off",
                **ssl,
            )
        )
        self._thread = threading.Thread(target=self._server.run, name="engram-console", daemon=True)

    def start(self, timeout_s: float = 30.0) -> ConsoleListener:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError(
                    f"the console could not listen on {self.settings.console_host}:{self.settings.console_port}"
                )
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the kernel's choice for 0)."""
        sockets = self._server.servers[0].sockets if self._server.servers else []
        return int(sockets[0].getsockname()[1]) if sockets else int(self.settings.console_port or 0)

    def base_url(self) -> str:
        host = self.settings.console_host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def mint_link(self, _args: dict[str, Any]) -> dict[str, Any]:
        """`engram admin console-link`: a one-time login URL and when it expires."""
        token, expires_at = self.access.mint_link()
        return {"url": f"{self.base_url()}/login/{token}", "expires_in_s": round(expires_at - time.time())}

    def commands(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """The operator-socket commands this console answers."""
        return {LINK_COMMAND: self.mint_link}

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
