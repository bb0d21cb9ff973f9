"""What the console tests share: a real `engram serve` with its console, a scripted
history of tool calls over MCP, a login through `engram admin console-link`, and a
browser tab that records what went wrong and every answer it got.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from host_secret_support import SECRET
from mcp_support import free_port
from test_e2e_engine import (
    PURPOSE,
    call,
    capture_args,
    code,
    confirmed_token,
    ctx_token,
    key,
    value,
)

from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, WITHDRAW

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
#: The console pages, as the screenshots name them.
PAGES = {
    "overview": "/",
    "scopes": "/scopes",
    "scope": "/scopes/acme/ws1",
    "replicas": "/replicas",
    "audit": "/audit",
    "receipts": "/receipts",
    "reports": "/reports",
}
#: JSON answers of the console (each scanned for memory content too).
API = ("/api/overview", "/api/scopes", "/api/scopes/acme/ws1", "/api/replicas", "/api/audit", "/api/reports")


def engram(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real `engram` command, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "engram.service.cli", *args],
        cwd=ROOT,
        env=env or server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def server_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "ENGRAM_HOST_SECRET": SECRET.decode(), "HF_HUB_OFFLINE": "1"}


class Served:
    """`engram serve` in a subprocess (MCP port, and the console's when asked), until closed."""

    def __init__(self, data_dir: Path, *extra: str, console: bool = True) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.console_port = free_port() if console else None
        args = ["serve", "--no-model", "--port", str(self.port), "-d", str(data_dir), "--log-level", "warning"]
        if self.console_port is not None:
            args += ["--console-port", str(self.console_port)]
        self.log = data_dir.parent / f"serve-{self.port}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engram.service.cli", *args, *extra],
                cwd=ROOT,
                env=server_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait(f"{self.base}/readyz")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def console(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    def _wait(self, url: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"engram serve did not get ready: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def link(self) -> str:
        """A fresh one-time login link, minted through the operator socket."""
        minted = engram("admin", "console-link", "-d", str(self.data_dir))
        assert minted.returncode == 0, minted.stderr
        return minted.stdout.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class History:
    """What the scripted calls did: the texts written (none may ever reach the console),
    the ids, and one search's arguments and rank receipt."""

    texts: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    forgotten: str = ""
    search_arguments: dict[str, Any] = field(default_factory=dict)
    search_output: dict[str, Any] = field(default_factory=dict)


def _instant(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def _in_a_thread(run: Callable[[], Awaitable[None]]) -> None:
    """Run the calls in a thread of their own: Playwright's sync API keeps an event loop
    in this one."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, run).result()


def forget(mcp_url: str, record_id: str, workspace: str = "ws1") -> None:
    """Forget one record over MCP, with the host's confirmation."""

    async def run() -> None:
        args = {"record_id": record_id, "idempotency_key": key("forget"), "reason_ref": "r:obsolete"}
        value(await call(mcp_url, confirmed_token(FORGET, args, record_id, workspace=workspace), "auto", FORGET, args))

    _in_a_thread(run)


def scripted_history(mcp_url: str, admitted: int = 4, workspace: str = "ws1", *, forgets: bool = True) -> History:
    """Over MCP in scope acme/<workspace>: `admitted` captures admitted (the first one
    expiring tomorrow), one left pending, one withdrawn; then a search, a get of an
    unknown record (NOT_FOUND), and (with `forgets`) a forget of the last admitted one."""
    history = History()

    def marked(args: dict[str, Any]) -> dict[str, Any]:
        history.texts.append(args["payload"]["components"][0]["text"])
        return args

    async def run() -> None:
        tok = ctx_token(workspace=workspace)
        for i in range(admitted):
            args = marked(capture_args(f"quokka{uuid.uuid4().hex[:12]}"))
            if i == 0:
                tomorrow = int(time.time() * 1000) + 24 * 3600 * 1000
                args["payload"]["retention"] = {"derivative_rule": "make-ineligible", "expires_at": _instant(tomorrow)}
            captured = value(await call(mcp_url, tok, "auto", CAPTURE, args))
            admission = {"candidate_id": captured["candidate_id"], "idempotency_key": key("admit")}
            outcome = value(await call(mcp_url, tok, "auto", REQUEST_ADMISSION, admission))["outcome"]
            history.records.append(outcome["record_id"])
        value(await call(mcp_url, tok, "auto", CAPTURE, marked(capture_args(f"pending{uuid.uuid4().hex[:12]}"))))
        gone = value(await call(mcp_url, tok, "auto", CAPTURE, marked(capture_args(f"wd{uuid.uuid4().hex[:12]}"))))
        withdraw = {"candidate_id": gone["candidate_id"], "idempotency_key": key("withdraw"), "reason_ref": "r:x"}
        token = confirmed_token(WITHDRAW, withdraw, gone["candidate_id"], workspace=workspace)
        value(await call(mcp_url, token, "auto", WITHDRAW, withdraw))
        history.search_arguments = {"query": "ledger service balances PostgreSQL", "purpose_ref": PURPOSE}
        history.search_output = value(await call(mcp_url, tok, "auto", SEARCH, history.search_arguments))
        unknown = {"record_id": "mem_" + "a" * 52, "purpose_ref": PURPOSE}
        assert code(await call(mcp_url, tok, "auto", GET, unknown)) == "NOT_FOUND"

    _in_a_thread(run)
    if forgets:
        history.forgotten = history.records[-1]
        forget(mcp_url, history.forgotten, workspace)
    return history


class Tab:
    """A browser page that records console errors, failed requests and every
    response body it received (for the content scan)."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.bodies: dict[str, bytes] = {}
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", self._failed)
        self.page.on("response", self._keep)

    def _failed(self, request: Any) -> None:
        if request.failure != "net::ERR_ABORTED":  # left behind by the next navigation
            self.errors.append(f"failed: {request.url} ({request.failure})")

    def _keep(self, response: Any) -> None:
        if response.status >= 400:
            self.errors.append(f"{response.status}: {response.url}")
        try:
            self.bodies[response.url] = response.body()
        except Exception:  # noqa: BLE001 - a redirect has no body
            pass

    def close(self) -> None:
        self.context.close()


def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $ENGRAM_TEST_ARTEFACTS/console, else a temporary folder."""
    root = os.environ.get("ENGRAM_TEST_ARTEFACTS")
    folder = Path(root) / "console" if root else tmp_path_factory.mktemp("console-shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
