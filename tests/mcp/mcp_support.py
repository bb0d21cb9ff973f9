"""Shared helpers for the MCP tests: a fake engine, a uvicorn thread, SDK clients over HTTP
and the servers they launch over stdio, and a human answering elicitations."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import uvicorn
from host_secret_support import SECRET  # noqa: F401 - the suite imports it from here too
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from engram.models.codes import ContractError, ErrorCode
from engram.models.host_token import HEADER, mint_token
from engram.models.tools import CAPTURE, TOOLS
from engram.service.cli import app as cli_app
from engram.service.engine.context import CallContext

ROOT = Path(__file__).resolve().parents[2]
ALL_TOOLS = sorted(TOOLS)
MODES = ("auto", "legacy")
DIGEST = "sha256:" + "ab" * 32


class FakeEngine:
    """Same interface as `service.engine.engine.Engine`, scripted per test."""

    def __init__(self) -> None:
        self.enabled: set[str] = {"acme"}
        self.behaviour: dict[str, Callable[[CallContext, dict[str, Any]], dict[str, Any]]] = {}
        self.calls: list[tuple[str, CallContext, dict[str, Any]]] = []
        self.ready = {"ready": True, "reasons": []}

    def reset(self) -> None:
        self.enabled = {"acme"}
        self.behaviour = {}
        self.calls = []
        self.ready = {"ready": True, "reasons": []}

    def execute(self, tool: str, ctx: CallContext, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((tool, ctx, arguments))
        if tool in self.behaviour:
            return self.behaviour[tool](ctx, arguments)
        if tool == CAPTURE:
            return capture_value()
        raise ContractError(ErrorCode.NOT_FOUND)

    def tenant_enabled(self, tenant: str) -> bool:
        return tenant in self.enabled

    def set_tenant_enabled(self, tenant: str, enabled: bool) -> None:
        (self.enabled.add if enabled else self.enabled.discard)(tenant)

    def readiness(self) -> dict[str, Any]:
        return self.ready

    def close(self) -> None:
        pass


def capture_value() -> dict[str, Any]:
    return {
        "status": "committed_pending",
        "candidate_id": "cand_fake",
        "cursor": "1",
        "transaction_receipt_digest": DIGEST,
    }


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tenant": "acme",
        "workspace": "ws1",
        "principal": f"user-{uuid.uuid4().hex[:8]}",  # a fresh rate-limit bucket per token
        "agent_id": "agent-1",
        "session": "sess-1",
        "purpose": "purpose:test",
        "tools": ALL_TOOLS,
        "confirm": [],
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def token(secret: bytes = SECRET, ttl_s: int = 300, **overrides: Any) -> str:
    return mint_token(claims(**overrides), secret, ttl_s=ttl_s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """uvicorn serving `app` on a free loopback port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextlib.asynccontextmanager
async def connect(url: str, context_token: str | None, mode: str, **headers: str) -> AsyncIterator[Client]:
    """An SDK client over real HTTP; `mode` is "auto" (2026-07-28) or "legacy" (2025-11-25)."""
    all_headers = dict(headers)
    if context_token is not None:
        all_headers[HEADER] = context_token
    async with httpx2.AsyncClient(headers=all_headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


# --------------------------------------------------------------------------- stdio


class Human:
    """An elicitation callback: answers `action` (after `delay` seconds) and records each question."""

    def __init__(self, action: str = "accept", approve: bool = True, delay: float = 0.0) -> None:
        self.action, self.approve, self.delay = action, approve, delay
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        if self.delay:
            await anyio.sleep(self.delay)
        if self.action == "accept":
            return types.ElicitResult(action="accept", content={"approve": self.approve})
        return types.ElicitResult(action=self.action)


def launch_env(**extra: str) -> dict[str, str]:
    """What a desktop client passes the server it launches: PATH, HOME and LANG; `extra` on top.
    This checkout comes first on PYTHONPATH, so the launched `engram` is the code under test."""
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return {**base, "PYTHONPATH": str(ROOT), **extra}


def stdio_server(data: Path, **env: str) -> StdioServerParameters:
    """`engram serve --stdio --no-model -d DATA` (lexical only: no model load), `env` on top."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "engram.service.cli", "serve", "--stdio", "--no-model", "-d", str(data)],
        env=launch_env(**env),
        cwd=str(ROOT),
    )


def written_entry(data: Path, project: Path, **env: str) -> StdioServerParameters:
    """`engram connect claude-code --write` in `project`, then its `.mcp.json` entry as the
    client launches it, lexical only (`--no-model`: no model load), `env` on top. Run
    `engram admin context init` on `data` first."""
    config = project / ".mcp.json"
    argv = ["connect", "claude-code", "--write", "--config-path", str(config), "-d", str(data)]
    written = CliRunner().invoke(cli_app, argv)
    assert written.exit_code == 0, written.output
    entry = json.loads(config.read_text())["mcpServers"]["engram"]
    args = [*entry["args"][:-3], "--no-model", *entry["args"][-3:]]
    command = entry["command"] if Path(entry["command"]).is_absolute() else sys.executable
    return StdioServerParameters(command=command, args=args, cwd=str(project), env=launch_env(**entry["env"], **env))
