"""The client socket's handshake: owner-only, a stale socket file replaced, a client
bound as its own launch would be or refused with the reason, and idle counted from the
last client to leave."""

from __future__ import annotations

import json
import socket
import stat
import threading
from pathlib import Path

import pytest
from mcp_support import FakeEngine, claims

from engram.models.tools import TOOLS
from engram.service.mcp.audit import AuditLog
from engram.service.mcp.bridge import AttachRefused, Hello, attach, socket_path
from engram.service.mcp.client_socket import ClientSocket
from engram.service.mcp.host_context import CONTEXT_FILE_ENV
from engram.service.mcp.rate_limit import TokenBucketLimiter
from engram.service.settings import Settings


@pytest.fixture
def listening(tmp_path):
    data = tmp_path / "d"
    data.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # as a killed holder leaves it
    stale.bind(str(socket_path(data)))
    stale.close()
    audit = AuditLog(data / "audit.jsonl")
    clients = ClientSocket(
        FakeEngine(),
        data,
        Settings(data_dir=data),
        audit=audit,
        limiter=TokenBucketLimiter(rate=0, burst=1),
        secret=None,
    ).start()
    yield data, clients
    clients.close()
    audit.close()


def _hello(context: dict[str, str]) -> Hello:
    return Hello(context=context, deadline_ms=30_000, approval_ttl_s=300)


def test_a_client_with_a_context_is_attached_and_one_without_is_refused(listening, tmp_path):
    data, clients = listening
    path = socket_path(data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(AttachRefused, match="set ENGRAM_CONTEXT"):
        attach(path, _hello({}))
    bogus = tmp_path / "bogus.json"
    bogus.write_text("[]")
    with pytest.raises(AttachRefused):
        attach(path, _hello({CONTEXT_FILE_ENV: str(bogus)}))
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps(claims()))
    conn = attach(path, _hello({CONTEXT_FILE_ENV: str(context)}))
    try:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ):
            conn.sendall(json.dumps(message).encode() + b"\n")
        with conn.makefile("rb") as reader:
            answers = [json.loads(reader.readline()) for _ in range(2)]
        assert sorted(tool["name"] for tool in answers[1]["result"]["tools"]) == sorted(TOOLS)
        assert clients.clients == 1
    finally:
        conn.close()


def test_idle_is_counted_from_the_last_client_to_leave(listening, tmp_path):
    data, clients = listening
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps(claims()))
    conn = attach(socket_path(data), _hello({CONTEXT_FILE_ENV: str(context)}))
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (clients.wait_idle(0.2), done.set()))
    waiter.start()
    assert not done.wait(1.0)  # a client is connected: never idle, however long
    conn.close()
    waiter.join(60)
    assert done.is_set() and clients.clients == 0


def test_a_path_too_long_for_a_socket_is_refused(tmp_path):
    deep = tmp_path / ("d" * 120)
    with pytest.raises(ValueError, match="too long"):
        socket_path(Path(deep))
