"""One memory, many clients: stdio clients launched from the written `.mcp.json` entry
share the process holding the data directory (the first launch, or a background server
started for them), each with its own binding, session and elicitations."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import factories
import pytest
from mcp import Client, StdioServerParameters
from mcp_support import MODES, Human, written_entry
from typer.testing import CliRunner

from engram.models.tools import CAPTURE, REQUEST_ADMISSION, SEARCH, TOOLS, WITHDRAW
from engram.service.cli import app
from engram.service.mcp.bridge import SOCKET_FILE
from engram.service.operator.ownership import LOCK_FILE, is_held

runner = CliRunner()
pytestmark = pytest.mark.anyio
#: Bounds on waiting for an event (a process gone, a socket there), never on speed.
EVENT_WAIT_S = 120.0


def _entry(tmp_path: Path) -> tuple[Path, StdioServerParameters]:
    """`context init` and `connect claude-code --write`; the entry as a client launches it."""
    data = tmp_path / "data"
    init = runner.invoke(app, ["admin", "context", "init", "-d", str(data), "--purpose", factories.PURPOSE])
    assert init.exit_code == 0, init.output
    return data, written_entry(data, tmp_path, ENGRAM_CLIENT_IDLE_S="1")


async def _captured(client: Client, text: str) -> str:
    result = await client.call_tool(CAPTURE, factories.capture_args(text))
    assert result.structured_content["ok"], result.structured_content
    return result.structured_content["output"]["value"]["candidate_id"]


async def _admitted(client: Client, text: str) -> None:
    candidate = await _captured(client, text)
    args = {"candidate_id": candidate, "idempotency_key": factories.key("adm")}
    admitted = await client.call_tool(REQUEST_ADMISSION, args)
    assert admitted.structured_content["ok"] is True, admitted.structured_content


async def _found(client: Client, query: str) -> int:
    found = await client.call_tool(SEARCH, {"query": query, "purpose_ref": factories.PURPOSE})
    assert found.structured_content["ok"] is True, found.structured_content
    return len(found.structured_content["output"]["value"]["records"])


def _holder_pid(data: Path) -> int:
    return int((data / LOCK_FILE).read_text().strip())


async def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + EVENT_WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {EVENT_WAIT_S:.0f} s for {what}"
        await anyio.sleep(0.1)


async def _holder(server: StdioServerParameters, data: Path, args: list[str]) -> subprocess.Popen[bytes]:
    """A server started apart from any client, once it listens for stdio clients."""
    process = subprocess.Popen(
        [server.command, *args],
        env=server.env,
        cwd=server.cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _until(lambda: (data / SOCKET_FILE).exists() and is_held(data), "a server holding the directory")
    except BaseException:
        process.kill()
        raise
    return process


async def test_two_clients_share_one_memory_with_their_own_elicitations(tmp_path):
    data, server = _entry(tmp_path)
    first, second = Human(), Human()
    async with Client(server, elicitation_callback=first) as a:
        holder = _holder_pid(data)
        async with Client(server, elicitation_callback=second) as b:
            assert _holder_pid(data) == holder  # the second launch bridged, it holds nothing
            for client in (a, b):
                assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(TOOLS)
            await _admitted(a, "Rotate the ingress certificates every month.")
            assert await _found(b, "ingress certificates") == 1
            candidate = await _captured(b, f"Draft note {uuid.uuid4().hex}.")
            args = {"candidate_id": candidate, "idempotency_key": factories.key("wd"), "reason_ref": "reason:user"}
            withdrawn = await b.call_tool(WITHDRAW, args)
            assert withdrawn.structured_content["ok"] is True, withdrawn.structured_content
            assert len(second.questions) == 1 and candidate in second.questions[0]
            assert first.questions == []  # never shown to the client that did not ask
        # The holder's own client still works after the bridged one has left.
        assert await _found(a, "ingress certificates") == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_killed_holder_is_replaced_on_the_next_call_and_idles_out(tmp_path, mode):
    """Legacy clients' handshake is replayed to the replacement; modern calls carry their own."""
    data, server = _entry(tmp_path)
    background = await _holder(server, data, [*server.args, "--background"])
    try:
        async with Client(server, mode=mode) as client:
            await _admitted(client, "The billing ledger is reconciled nightly.")
            background.send_signal(signal.SIGKILL)  # between two calls: the admission was acknowledged
            background.wait()
            assert await _found(client, "billing ledger") == 1  # a new background server, same memory
            replacement = _holder_pid(data)
            assert replacement != background.pid
            await _admitted(client, "Second record after the restart.")
        # No client left: the replacement exits after client_idle_s (1 s here).
        await _until(lambda: not is_held(data), "the idle background server to exit")
        assert not (data / SOCKET_FILE).exists()
    finally:
        if background.poll() is None:
            background.kill()


async def test_an_http_server_on_the_directory_serves_stdio_clients_too(tmp_path):
    data, server = _entry(tmp_path)
    launcher = server.args[: server.args.index("serve")]
    http = await _holder(server, data, [*launcher, "serve", "--no-model", "--port", "0", "-d", str(data)])
    try:
        async with Client(server) as client:
            assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(TOOLS)
            await _admitted(client, "Staging deploys wait for the smoke tests.")
            assert await _found(client, "smoke tests") == 1
            assert _holder_pid(data) == http.pid  # served by the HTTP server, not a process of its own
    finally:
        http.terminate()
        http.wait(timeout=EVENT_WAIT_S)


def test_two_clients_launched_at_once_share_one_holder(tmp_path):
    """Both launches race for the directory: one holds it, the other bridges to it."""
    data, server = _entry(tmp_path)
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    handshake = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    launches = [
        subprocess.Popen(
            [server.command, *server.args],
            env=server.env,
            cwd=server.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        for process in launches:
            assert process.stdin is not None
            process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in handshake))
            process.stdin.flush()
        for process in launches:
            assert process.stdout is not None
            answers = [json.loads(process.stdout.readline()) for _ in range(2)]
            assert sorted(t["name"] for t in answers[1]["result"]["tools"]) == sorted(TOOLS)
        assert _holder_pid(data) in {process.pid for process in launches}
    finally:
        for process in launches:
            assert process.stdin is not None
            process.stdin.close()
        for process in launches:
            process.wait(timeout=EVENT_WAIT_S)
