"""Several stdio MCP clients on one memory: the client socket of the data directory's holder.

Why: one process holds a data directory (`service.operator.ownership`), yet a desktop
user runs several MCP clients on one memory (two Claude Code sessions, Claude Desktop
beside them). The holder (the first `engram serve --stdio`, a background server started
for the directory, or `engram serve` over HTTP) listens on `<data_dir>/mcp.sock`
(mode 0600 in a 0700 directory) and checks with SO_PEERCRED that each peer runs as the
same user (or root). Every later `engram serve --stdio` bridges its stdin and stdout to
it (`service.mcp.bridge`).

A connection opens with one JSON line, the `Hello`: the launching client's context
environment (`ENGRAM_CONTEXT` or `ENGRAM_CONTEXT_FILE`, checked here exactly as at a
launch) and its per-client settings. The holder answers `{"ok": true}` (or `{"ok": false,
"reason": ...}` and closes), then speaks MCP as over stdio, one JSON-RPC message per
line, through a front end of the connection's own: its own binding and session, so an
elicitation goes back to the client whose call asked for it and to no other.
"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

import anyio
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from engram.service.operator.ownership import peer_is_owner
from engram.service.settings import Settings

from .audit import AuditLog
from .bridge import MAX_HELLO_BYTES, Hello, socket_path
from .host_context import ContextUnavailable, binding_from_env
from .rate_limit import TokenBucketLimiter
from .server import EngineLike
from .stdio import stdio_front

logger = logging.getLogger("engram.mcp.clients")


class ClientSocket:
    """Serve bridged stdio clients of `engine` on `<data_dir>/mcp.sock`, a thread each.
    The caller must hold the data directory (a socket file left by a killed holder is
    replaced)."""

    def __init__(
        self,
        engine: EngineLike,
        data_dir: Path,
        settings: Settings,
        *,
        audit: AuditLog,
        limiter: TokenBucketLimiter,
        secret: bytes | None,
    ) -> None:
        self.path = socket_path(data_dir)
        self._engine, self._settings, self._audit, self._limiter, self._secret = (
            engine,
            settings,
            audit,
            limiter,
            secret,
        )
        self.path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self._listener.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._listener.listen(16)
        self._changed = threading.Condition()
        self._clients = 0
        self._last_left = time.monotonic()
        self._thread = threading.Thread(target=self._accept, name="engram-clients", daemon=True)

    def start(self) -> ClientSocket:
        self._thread.start()
        return self

    @property
    def clients(self) -> int:
        """How many bridged clients are connected now."""
        with self._changed:
            return self._clients

    def wait_idle(self, idle_s: float) -> None:
        """Return once no client has been connected for `idle_s` seconds."""
        with self._changed:
            while True:
                if self._clients:
                    self._changed.wait()
                    continue
                remaining = self._last_left + idle_s - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(remaining)

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self._listener.close()
        self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._changed:
                self._clients += 1
                self._changed.notify_all()
            threading.Thread(target=self._serve, args=(conn,), name="engram-client", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if not peer_is_owner(conn):
                logger.warning("client socket: refused a peer running as another user")
                return
            anyio.run(self._session, conn)
        except Exception:  # noqa: BLE001 - one client's failure never stops the others
            logger.exception("client socket: a bridged client's session failed")
        finally:
            conn.close()
            with self._changed:
                self._clients -= 1
                self._last_left = time.monotonic()
                self._changed.notify_all()

    async def _session(self, conn: socket.socket) -> None:
        reader, writer = conn.makefile("rb"), conn.makefile("wb")
        line = reader.readline(MAX_HELLO_BYTES + 1)
        try:
            hello = Hello.model_validate_json(line)
            binding = binding_from_env(hello.context, self._secret)
        except (ValidationError, ContextUnavailable) as exc:
            reason = exc.reason if isinstance(exc, ContextUnavailable) else "not a hello"
            writer.write(json.dumps({"ok": False, "reason": reason}).encode() + b"\n")
            writer.flush()
            logger.info("client socket: refused a client (%s)", reason)
            return
        writer.write(b'{"ok": true}\n')
        writer.flush()
        settings = self._settings.model_copy(
            update={"deadline_ms": hello.deadline_ms, "approval_ttl_s": hello.approval_ttl_s}
        )
        server = stdio_front(self._engine, binding, settings, self._audit, self._limiter).build_server()
        stdin = anyio.wrap_file(io.TextIOWrapper(reader, encoding="utf-8", errors="replace"))
        stdout = anyio.wrap_file(io.TextIOWrapper(writer, encoding="utf-8", write_through=True))
        async with stdio_server(stdin, stdout) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
