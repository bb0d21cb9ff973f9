"""The operator channel: a Unix socket in the data directory, owner-only, never MCP.

The live server listens on `<data_dir>/operator.sock` (mode 0600, in a 0700
directory) and, for each connection, checks with SO_PEERCRED that the peer runs as
the same user (or root) before reading anything. A request is one JSON line
`{"command": name, "args": {...}}`; the answer one JSON line, `{"ok": true, "result":
...}` or `{"ok": false, "code": ..., "message": ...}`. There is no agent context:
whoever can open the socket already owns the data directory's files.

A request may also name the database it means (`"store": URL`, when the operator gave
one): a server serving another store refuses it (`STORE_MISMATCH`, its own store in the
message, password left out) rather than run the command on a store nobody named.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engram.models.codes import ContractError
from engram.models.errors import EngramError
from engram.service.engine import Engine

from .commands import known, run
from .ownership import peer_is_owner


class ChannelAbsent(EngramError):
    """No server answers on the data directory's operator socket."""


class OperatorFailure(EngramError):
    """The server ran the command and it failed (a contract code, or an internal fault)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


logger = logging.getLogger("engram.operator")

SOCKET_FILE = "operator.sock"
MAX_REQUEST_BYTES = 1 << 20
#: A command of the serving process itself: its JSON arguments in, a JSON value out.
ServedCommand = Callable[[dict[str, Any]], Any]
#: sun_path holds 108 bytes with its terminating NUL.
MAX_SOCKET_PATH = 107


#: The code of a request refused because the server serves another store than it names.
STORE_MISMATCH = "STORE_MISMATCH"


def socket_path(data_dir: Path) -> Path:
    return Path(data_dir).resolve() / SOCKET_FILE


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        if not peer_is_owner(self.connection):
            logger.warning("operator channel: refused a peer running as another user")
            return
        line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
        reply = self.server.answer(line)
        self.wfile.write(json.dumps(reply, default=str).encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, engine: Engine, served: Mapping[str, ServedCommand]) -> None:
        self.engine = engine
        self.served = served
        self._serial = threading.Lock()  # one operator command at a time
        super().__init__(path, _Handler)

    def answer(self, line: bytes) -> dict[str, Any]:
        if len(line) > MAX_REQUEST_BYTES:
            return {"ok": False, "code": "REQUEST_TOO_LARGE", "message": "request over 1 MiB"}
        try:
            request = json.loads(line)
            name, args = request["command"], request.get("args", {})
            if not (known(name) or name in self.served) or not isinstance(args, dict):
                raise KeyError(name)
        except (ValueError, KeyError, TypeError):
            return {"ok": False, "code": "UNKNOWN_COMMAND", "message": "not an operator request"}
        served = self.engine.writer_spec().store
        if "store" in request and request["store"] != served.shared_url:
            return {"ok": False, "code": STORE_MISMATCH, "message": served.label()}
        with self._serial:
            try:
                result = self.served[name](args) if name in self.served else run(self.engine, name, args)
            except ContractError as exc:  # the operator's reader: what to fix, where the engine said
                return {"ok": False, "code": exc.code.value, "message": exc.detail or exc.message}
            except Exception as exc:  # noqa: BLE001 - reported to the operator, logged by type
                logger.exception("operator command %s failed", name)
                return {"ok": False, "code": "INTERNAL", "message": type(exc).__name__}
        logger.info("operator command %s done", name)
        return {"ok": True, "result": result}


class OperatorChannel:
    """Serve operator commands for `engine` on `<data_dir>/operator.sock` in a thread.
    The caller must own the data directory (service.operator.ownership). ``served``
    adds commands only the serving process can answer (the console's login links)."""

    def __init__(self, engine: Engine, data_dir: Path, served: Mapping[str, ServedCommand] | None = None) -> None:
        self.path = socket_path(data_dir)
        if len(str(self.path).encode()) > MAX_SOCKET_PATH:
            raise ValueError(f"data directory path too long for a Unix socket: {self.path}")
        self.path.unlink(missing_ok=True)  # a socket left by a killed server
        old = os.umask(0o177)
        try:
            self._server = _Server(str(self.path), engine, served or {})
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._thread = threading.Thread(target=self._server.serve_forever, name="engram-operator", daemon=True)

    def start(self) -> OperatorChannel:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)


def call(
    data_dir: Path, command: str, args: dict[str, Any], timeout_s: float | None = None, *, store: str | None = None
) -> Any:
    """Run `command` on the server that owns `data_dir` (refused there unless it serves
    the database `store`, when one is named). ChannelAbsent when none answers;
    OperatorFailure when the command failed there."""
    path = socket_path(data_dir)
    if not path.exists():
        raise ChannelAbsent()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        try:
            sock.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            raise ChannelAbsent() from None
        sock.settimeout(timeout_s)
        request: dict[str, Any] = {"command": command, "args": args}
        if store is not None:
            request["store"] = store
        sock.sendall(json.dumps(request).encode() + b"\n")
        with sock.makefile("rb") as stream:
            line = stream.readline()
    finally:
        sock.close()
    if not line:
        raise OperatorFailure("INTERNAL", "the server closed the channel without an answer")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise OperatorFailure(str(reply.get("code")), str(reply.get("message")))
    return reply.get("result")
