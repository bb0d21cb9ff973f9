"""The stdio bridge: a later `engram serve --stdio` relays its client to the holder.

Why: several MCP clients share one memory while one process holds the data directory
(`service.mcp.client_socket`). A launch that finds a holder copies JSON-RPC lines from
its stdin to the holder's client socket and back, as gopls' `-remote=auto` forwarder
does; it reads no tool and holds no engine, so it starts in a fraction of a second.

When the holder goes away (killed, or gone with its own client), the bridge reconnects on
the client's next message, through `open_connection` (which starts a background server
for the directory when nobody holds it), and replays the client's `initialize` handshake
there. A call that was in flight when the connection broke is answered with a JSON-RPC
error saying its outcome is unknown: a fault is never an empty success, and every
mutation the holder acknowledged is in its store (the journal survives kill -9).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from engram.models.errors import EngramError

logger = logging.getLogger("engram.mcp.bridge")


class AttachRefused(EngramError):
    """The process holding the data directory refused a bridged stdio client (the reason
    is the message)."""


SOCKET_FILE = "mcp.sock"
#: sun_path holds 108 bytes with its terminating NUL.
MAX_SOCKET_PATH = 107
MAX_HELLO_BYTES = 64 * 1024


class Hello(BaseModel):
    """What a bridged client tells the holder first: how it is bound, and its own
    deadline and approval window (the engine, model and store are the holder's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context: dict[str, str]
    deadline_ms: int = Field(ge=1, le=600_000)
    approval_ttl_s: int = Field(ge=1, le=300)


def socket_path(data_dir: Path) -> Path:
    """`<data_dir>/mcp.sock`; ValueError when the path is too long for a Unix socket."""
    path = Path(data_dir).resolve() / SOCKET_FILE
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"data directory path too long for a Unix socket: {path}")
    return path


def attach(path: Path, hello: Hello) -> socket.socket:
    """A connection to the holder's client socket, its hello accepted. Raises OSError
    (FileNotFoundError, ConnectionRefusedError: no holder listens) or AttachRefused."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        conn.sendall(hello.model_dump_json().encode() + b"\n")
        with conn.makefile("rb") as reader:
            answer = reader.readline(MAX_HELLO_BYTES)
        if not answer:
            raise ConnectionResetError("the holder closed the client socket")
        reply = json.loads(answer)
        if not reply.get("ok"):
            raise AttachRefused(str(reply.get("reason")))
    except BaseException:
        conn.close()
        raise
    return conn


#: The id of a replayed `initialize`, whose answer the bridge keeps to itself.
REPLAY_ID = "engram-bridge-replay"
#: How long a replayed handshake may take (the holder answers it at once once it listens).
REPLAY_WAIT_S = 60.0
LOST_CALL = {
    "code": -32603,
    "message": "engram: the memory server stopped during this call; its outcome is unknown "
    "(a mutation may have been applied: look before repeating it)",
}


def _parse(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


class Bridge:
    """Relay `stdin` to the holder and the holder to `stdout` until stdin closes."""

    def __init__(self, open_connection: Callable[[], socket.socket], stdin: BinaryIO, stdout: BinaryIO) -> None:
        self._open = open_connection
        self._stdin, self._stdout = stdin, stdout
        self._send_lock = threading.Lock()  # one sender; connecting happens under it
        self._state = threading.Lock()  # the live connection and the calls in flight
        self._out = threading.Lock()  # whole lines on stdout
        self._conn: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[str, Any] = {}
        self._handshake: list[bytes] = []  # the client's initialize and initialized, to replay
        self._replayed = threading.Event()
        self._closing = False

    def run(self) -> None:
        for line in self._stdin:
            if not line.strip():
                continue
            message = _parse(line)
            method, has_id = message.get("method"), "id" in message
            if method == "initialize" or method == "notifications/initialized":
                self._handshake = [*(m for m in self._handshake if _parse(m).get("method") != method), line]
            if method is not None and has_id:
                with self._state:
                    self._pending[json.dumps(message["id"])] = message["id"]
            self._send(line, first_handshake=method == "initialize")
        with self._state:
            conn, self._closing = self._conn, True
        if conn is not None:
            try:
                conn.shutdown(socket.SHUT_WR)  # the holder ends this client's session
            except OSError:
                pass
            if self._reader is not None:
                self._reader.join(REPLAY_WAIT_S)
            conn.close()

    def _send(self, line: bytes, *, first_handshake: bool) -> None:
        with self._send_lock:
            for _ in range(2):
                with self._state:
                    conn = self._conn
                if conn is None:
                    conn = self._connect(replay=not first_handshake)
                try:
                    conn.sendall(line)
                    return
                except OSError:
                    self._lost(conn)
            self._fail_pending()

    def _connect(self, *, replay: bool) -> socket.socket:
        conn = self._open()
        self._replayed.clear()
        reader = threading.Thread(target=self._relay, args=(conn,), name="engram-bridge", daemon=True)
        with self._state:
            self._conn, self._reader = conn, reader
        reader.start()
        if replay and self._handshake:
            initialize = _parse(self._handshake[0])
            conn.sendall(json.dumps({**initialize, "id": REPLAY_ID}).encode() + b"\n")
            self._replayed.wait(REPLAY_WAIT_S)
            for line in self._handshake[1:]:
                conn.sendall(line)
        return conn

    def _relay(self, conn: socket.socket) -> None:
        try:
            with conn.makefile("rb") as reader:
                for line in reader:
                    message = _parse(line)
                    if "method" not in message and "id" in message:
                        if message["id"] == REPLAY_ID:
                            self._replayed.set()
                            continue
                        with self._state:
                            self._pending.pop(json.dumps(message["id"]), None)
                    self._write(line)
        except OSError:
            pass
        self._lost(conn)

    def _lost(self, conn: socket.socket) -> None:
        with self._state:
            if self._conn is not conn:
                return
            self._conn, closing = None, self._closing
        conn.close()
        self._replayed.set()
        if not closing:
            logger.warning("the memory server's connection closed; reconnecting on the next message")
        self._fail_pending()

    def _fail_pending(self) -> None:
        with self._state:
            lost, self._pending = list(self._pending.values()), {}
        for request_id in lost:
            self._write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": LOST_CALL}).encode() + b"\n")

    def _write(self, line: bytes) -> None:
        with self._out:
            self._stdout.write(line)
            self._stdout.flush()
