"""Shared helpers of the reliability and security suite.

Everything here drives the service the way an agent does (the MCP SDK client or raw
JSON-RPC over HTTP against a real uvicorn), plus the checks every answer must pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent

import factories  # noqa: E402
import httpx  # noqa: E402
import httpx2  # noqa: E402
import jsonschema  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_support import SECRET, ServerThread, free_port  # noqa: E402,F401

from engram.eval.service_memory import rpc_body  # noqa: E402
from engram.models.codes import MESSAGES, RETRIABLE, ErrorCode  # noqa: E402
from engram.models.host_token import HEADER, mint_token  # noqa: E402
from engram.models.tools import CAPTURE, REQUEST_ADMISSION, SEARCH, TOOLS  # noqa: E402
from engram.service.engine.gates import operation_digest  # noqa: E402


class ServerProcess:
    """One `engram serve` child process on a free loopback port, for tests that need a
    server they can SIGKILL: ``command(port)`` is its argv. Started and waited for
    until /readyz answers 200; stopped with SIGTERM, or killed with SIGKILL as a crash."""

    def __init__(
        self,
        command: Callable[[int], list[str]],
        log: Path,
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        name: str = "server",
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.command, self.log, self.cwd, self.env = command, log, cwd, env
        self.name, self.ready_timeout_s = name, ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def launch(self) -> ServerProcess:
        self.port = free_port()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(self.port), stdout=log, stderr=log, cwd=str(self.cwd), env=self.env
            )
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        # One client for every poll: a new one per request builds an SSL context each
        # time, which took a good part of a core from the server starting beside it.
        with httpx.Client(timeout=1) as http:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
                try:
                    if http.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not become ready")

    def start(self) -> ServerProcess:
        self.launch().wait_ready()
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


PURPOSE = "purpose:test"
ALL_TOOLS = sorted(TOOLS)
MODES = ("auto", "legacy")
CONTEXT_UNAVAILABLE = (-32603, "Trusted invocation context unavailable")
UNKNOWN_TOOL = (-32602, "Unknown tool")
KNOWN_CODES = {c.value for c in ErrorCode}

#: Figures printed at the end of the run (see conftest.pytest_terminal_summary).
FIGURES: Counter[str] = Counter()


class ReplicaProcess(ServerProcess):
    """One `engram serve --database-url` replica (test encoder, no rate limit), its data
    directory its own; ``extra`` options follow (e.g. ``--group NAME``)."""

    def __init__(self, name: str, root: Path, database_url: str, key_dir: Path, *extra: str) -> None:
        self.data_dir, self.database_url = root / name, database_url
        super().__init__(
            lambda port: [
                sys.executable,
                "-m",
                "engram.service.cli",
                "serve",
                "--no-model",
                "--rate",
                "0",
                "--port",
                str(port),
                "--data-dir",
                str(self.data_dir),
                "--database-url",
                database_url,
                "--key-dir",
                str(key_dir),
                "--log-level",
                "warning",
                *extra,
            ],
            root / f"{name}.log",
            cwd=ROOT,
            name=name,
            ready_timeout_s=120.0,
            env={**os.environ, "ENGRAM_HOST_SECRET": SECRET.decode(), "PYTHONPATH": str(ROOT)},
        )


def enable_tenant(database_url: str, key_dir: Path, operator_dir: Path, tenant: str = "acme") -> None:
    """One operator command on a new database before its servers start: migrates the
    schema, creates the KEK in ``key_dir`` and opts ``tenant`` in."""
    operator_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "engram.service.cli",
            "admin",
            "--database-url",
            database_url,
            "--key-dir",
            str(key_dir),
            "tenant",
            "enable",
            tenant,
            "--data-dir",
            str(operator_dir),
        ],
        check=True,
        capture_output=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


def env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


# --------------------------------------------------------------------------- encoder


def _load_hashing_encoder() -> type:
    spec = importlib.util.spec_from_file_location(
        "_ranking_conftest_for_reliability", TESTS / "ranking" / "conftest.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.HashingTestEncoder


HashingTestEncoder = _load_hashing_encoder()


# --------------------------------------------------------------------------- live server


class Live:
    """A running server over a real Engine (hashing test encoder, no model)."""

    def __init__(self, data_dir: Path, encoder: object | None = "hashing") -> None:
        from engram.service.engine.engine import Engine
        from engram.service.http.app import create_app
        from engram.service.settings import Settings

        self.data_dir = data_dir
        enc = HashingTestEncoder() if encoder == "hashing" else encoder
        self.engine = Engine.open(data_dir, encoder=enc, load_model=False)
        for tenant in ("acme", "umbrella"):
            self.engine.operator.set_tenant_enabled(tenant, True)
        self.app = create_app(self.engine, Settings(data_dir=data_dir, rate=0), host_secret=SECRET)
        self.thread = ServerThread(self.app)

    @property
    def url(self) -> str:
        return self.thread.url

    def __enter__(self) -> Live:
        self.thread.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.__exit__(*exc)
        self.engine.close()


# --------------------------------------------------------------------------- contexts


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tenant": "acme",
        "workspace": "ws1",
        "principal": "rel-principal",
        "agent_id": "agent-1",
        "session": "sess-1",
        "purpose": PURPOSE,
        "tools": ALL_TOOLS,
        "confirm": [],
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def ctx_token(**overrides: Any) -> str:
    return mint_token(claims(**overrides), SECRET, ttl_s=3600)


def confirmation(tool: str, args: dict[str, Any], target: str) -> dict[str, Any]:
    approved = int(time.time() * 1000) - 200
    return {
        "ref": "conf-" + uuid.uuid4().hex,
        "capability": tool,
        "target": target,
        "operation_digest": operation_digest(tool, args),
        "approved_at": approved,
        "expires_at": approved + 60_000,
    }


def confirmed_token(tool: str, args: dict[str, Any], target: str, **overrides: Any) -> str:
    return ctx_token(confirmation=confirmation(tool, args, target), **overrides)


def key(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def capture_args(text: str, *, idem: str | None = None, extra_text: str | None = None) -> dict[str, Any]:
    """A well-formed capture of `text`, valid from now (the engine tests' builder)."""
    extra = None
    if extra_text is not None:
        extra = [{"component_id": "c2", "kind": "context", "text": extra_text, "citation_ids": ["cit1"]}]
    return factories.capture_args(
        text, idempotency_key=idem or key("capture"), extra_components=extra, t=int(time.time() * 1000)
    )


def unique_token() -> str:
    """A word no tokenizer splits and no other record contains (letters only), long
    enough that :func:`scan_dir` finds it by its middle alone."""
    return "zq" + "".join(chr(ord("a") + (b % 26)) for b in os.urandom(20))


# --------------------------------------------------------------------------- checks

_AUDIT_RE = re.compile(r"^aud_[0-9a-f]{32}$")
LEAK_MARKERS = (
    "Traceback",
    'File "',
    "Error:",
    "Exception",
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "/tmp/",
    "site-packages",
    "sqlite",
    ", line ",
)


def check_envelope(tool: str, result: Any) -> dict[str, Any]:
    """Every tool answer: the contract envelope, identical text copy, isError == !ok."""
    env = result.structured_content
    assert isinstance(env, dict), f"no structuredContent: {result!r}"[:500]
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == env
    assert result.is_error is (not env["ok"])
    assert env["redactionClass"] == "high" and _AUDIT_RE.fullmatch(env["auditId"])
    if env["ok"] is True:
        assert set(env) == {"ok", "output", "auditId", "redactionClass"}
        assert env["output"]["schema_version"] == 1
    else:
        assert env["ok"] is False
        assert set(env) == {"ok", "auditId", "redactionClass", "error"}
        err = env["error"]
        assert err["code"] in KNOWN_CODES, err
        code = ErrorCode(err["code"])
        assert err == {"code": code.value, "message": MESSAGES[code], "retriable": code in RETRIABLE}, err
    _output_validator(tool).validate(env)
    return env


@functools.cache
def _output_validator(tool: str) -> Any:
    """The tool's output schema's validator, the schema itself checked once
    (``jsonschema.validate`` checks it on every call: most of a storm's checking time)."""
    schema = TOOLS[tool].output_schema
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    return validator(schema)


def check_protocol_error(exc: MCPError, *canaries: str) -> tuple[int, str]:
    """A JSON-RPC error instead of an envelope: only the contract's two, constant."""
    pair = (exc.code, exc.message)
    assert pair in (CONTEXT_UNAVAILABLE, UNKNOWN_TOOL), f"unexpected protocol error {pair!r} data={exc.data!r}"
    assert exc.data is None
    return pair


def assert_no_leak(text: str, *canaries: str) -> None:
    for marker in (*LEAK_MARKERS, *canaries):
        assert marker not in text, f"leak of {marker!r} in {text[:300]!r}"


def value(env: dict[str, Any]) -> dict[str, Any]:
    assert env["ok"], env
    return env["output"]["value"]


def code(env: dict[str, Any]) -> str:
    assert not env["ok"], env
    return env["error"]["code"]


# --------------------------------------------------------------------------- clients


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None, mode: str) -> AsyncIterator[Client]:
    headers = {HEADER: token} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


async def call(url: str, token: str, mode: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    async with connect(url, token, mode) as client:
        result = await client.call_tool(tool, args)
    return check_envelope(tool, result)


class SyncDriver:
    """Keeps one SDK client per era open in a background event loop; `call` is sync, so
    hypothesis can drive it. Every call has a hard timeout: a hang is a failure."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.url, self.token, self.timeout_s = url, token, timeout_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.clients: dict[str, Client] = {}
        self._stack = contextlib.AsyncExitStack()

    def __enter__(self) -> SyncDriver:
        self.thread.start()
        for mode in MODES:
            self.clients[mode] = self._run(self._stack.enter_async_context(connect(self.url, self.token, mode)))
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self._run(self._stack.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, self.timeout_s), self.loop).result(
            self.timeout_s + 5
        )

    def call(self, mode: str, tool: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        """('envelope', env) or ('protocol', (code, message)); anything else raises."""
        try:
            result = self._run(self.clients[mode].call_tool(tool, arguments))
        except MCPError as exc:
            return "protocol", check_protocol_error(exc)
        return "envelope", check_envelope(tool, result)


# --------------------------------------------------------------------------- raw JSON-RPC

_MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def run_on(server: ServerProcess, tool: str, args: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    """One call to ``server`` through the MCP SDK client, on a connection of its own."""
    return asyncio.run(call(server.url, token or ctx_token(), "auto", tool, args))


def accept_on(server: ServerProcess, text: str) -> str:
    """Capture ``text`` and admit it through ``server``; the record id."""
    cap = value(run_on(server, CAPTURE, capture_args(text)))
    out = value(run_on(server, REQUEST_ADMISSION, {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}))
    assert out["outcome"]["status"] == "accepted", out
    return out["outcome"]["record_id"]


def search_ids(server: ServerProcess, query: str, **extra: Any) -> tuple[list[str], str | None]:
    """The record ids of one page of ``query`` through ``server``, and its next cursor."""
    out = value(run_on(server, SEARCH, {"query": query, "purpose_ref": PURPOSE, **extra}))
    return [r["record"]["record_id"] for r in out["records"]], out.get("next_page_cursor")


def parse_rpc_body(response: httpx.Response) -> Any:
    """The JSON-RPC message a POST answered (JSON, or the response in an event stream),
    None for an empty body."""
    return rpc_body(response) if response.text.strip() else None


class RawRpc:
    """Hand-built JSON-RPC over httpx, for what the SDK client refuses to send."""

    def __init__(self, url: str, token: str, mode: str) -> None:
        self.url, self.mode = url, mode
        self.http = httpx.Client(
            timeout=60.0,
            headers={
                HEADER: token,
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
            },
        )
        self.session: str | None = None
        if mode == "legacy":
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
            r = self.http.post(url, content=json.dumps(init))
            assert r.status_code == 200, r.text
            self.session = r.headers.get("mcp-session-id")
            self.http.headers["mcp-protocol-version"] = "2025-11-25"
            if self.session:
                self.http.headers["mcp-session-id"] = self.session
            self.http.post(url, content=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        else:
            self.http.headers["mcp-protocol-version"] = "2026-07-28"

    def close(self) -> None:
        self.http.close()

    def tools_call_body(self, tool: str, arguments_json: str, rpc_id: int = 7) -> bytes:
        """The request with `arguments_json` spliced in verbatim (it may be invalid JSON)."""
        meta = "" if self.mode == "legacy" else ',"_meta":' + json.dumps(_MODERN_META)
        return (
            f'{{"jsonrpc":"2.0","id":{rpc_id},"method":"tools/call","params":{{"name":{json.dumps(tool)},'
            f'"arguments":{arguments_json}{meta}}}}}'
        ).encode("utf-8", "surrogatepass")

    def post(self, body: bytes, tool: str = "") -> httpx.Response:
        headers = {}
        if self.mode != "legacy":
            headers = {"mcp-method": "tools/call", "mcp-name": tool} if tool else {"mcp-method": "tools/call"}
        return self.http.post(self.url, content=body, headers=headers)


def check_raw_answer(tool: str, response: httpx.Response, *canaries: str) -> tuple[str, Any]:
    """A raw answer: never a 5xx; either a tool envelope or a JSON-RPC error whose message
    leaks nothing. Returns ('envelope', env) / ('rpc-error', code) / ('http', status)."""
    assert response.status_code < 500, f"HTTP {response.status_code}: {response.text[:300]}"
    assert_no_leak(response.text, *canaries)
    if response.status_code != 200:
        if response.status_code == 400:  # a JSON-RPC error at the transport (parse, params)
            err = parse_rpc_body(response)["error"]
            assert err["code"] in (-32700, -32600, -32601, -32602), err
            return "http", (400, err["code"])
        return "http", response.status_code
    body = parse_rpc_body(response)
    assert isinstance(body, dict) and body.get("jsonrpc") == "2.0", body
    if "error" in body:
        err = body["error"]
        assert err["code"] in (-32700, -32600, -32601, -32602, -32603), err
        return "rpc-error", (err["code"], err["message"])
    result = body["result"]
    env = result["structuredContent"]

    class _R:  # adapt to check_envelope's attribute access
        structured_content = env
        is_error = result.get("isError")
        content = [type("T", (), {"type": c["type"], "text": c.get("text")})() for c in result["content"]]

    return "envelope", check_envelope(tool, _R)


# --------------------------------------------------------------------------- disk scan


# Tantivy's doc store compresses blocks with LZ4, which stores a run that repeats earlier
# text as a back-reference and extends it both ways: a word that follows (or precedes)
# text seen before in its block loses its first (or last) few letters to the match. A
# long needle is therefore looked for by its middle, which a random word never shares.
MIDDLE_FROM = 20
MIDDLE_TRIM = 5
#: How many times :func:`scan_dir` lists a directory whose files vanish while it reads.
SCAN_PASSES = 5


def scan_dir(root: Path, needles: Iterable[str]) -> dict[str, list[str]]:
    """Which files under `root` hold which needle (raw UTF-8 bytes and UTF-16 forms); a
    needle of ``MIDDLE_FROM`` characters or more is looked for by its middle. A live
    server may delete a file between the listing and its reading (Tantivy collecting a
    merged segment, whose successor that listing may have missed): the directory is then
    listed and read again, up to ``SCAN_PASSES`` times, and a file counts if any pass
    found a needle in it."""
    found: dict[str, list[str]] = {}
    cores = {n: n[MIDDLE_TRIM:-MIDDLE_TRIM] if len(n) >= MIDDLE_FROM else n for n in needles}
    forms = {n: [core.encode("utf-8"), core.encode("utf-16-le")] for n, core in cores.items()}
    for _ in range(SCAN_PASSES):
        vanished = False
        for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                vanished = True
                continue
            name = str(path.relative_to(root))
            for needle, encodings in forms.items():
                if any(e in data for e in encodings) and name not in found.get(needle, []):
                    found.setdefault(needle, []).append(name)
        if not vanished:
            break
    return found
