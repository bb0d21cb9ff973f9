"""The service's own resident memory: `engram serve` started alone on an ingested directory.

Why a separate process: the bench process's RSS also holds the model twice (torch and
ONNX), what earlier sizes left behind, the pages of the precomputed-vector file it
ingested from and the exact-search matrices; none of that is what a deployment pays.
Here the real server (``python -m service.cli serve``, the command line a deployment
runs, so the engine opens exactly as it does there) is started on the size's data
directory, asked ``/readyz`` until it answers 200, then asked a fixed number of searches
as plain JSON-RPC POSTs to ``/mcp``, and its ``/proc/<pid>/status`` is read: resident
memory after ready and after the searches, split into anonymous and file-backed pages
(memory-mapped index files count as file-backed), and the peak (``VmHWM``) over its life.

The same run times the first calls after ready against later ones (no call
after ``/readyz`` may pay a warm-up): each search is timed, then a few rounds of capture,
request_admission and search in the size's own scope (so its directory gains that many
records), and the first of each tool is reported beside the median of the others.
:func:`new_data_directory` makes the directory a new user starts from (the bench's
fresh-directory case).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engram.models.scope import Scope

#: Fields of /proc/<pid>/status reported, in MiB.
STATUS_FIELDS = {"VmRSS": "rss_mb", "RssAnon": "anon_mb", "RssFile": "file_mb", "VmHWM": "peak_mb"}
PROTOCOL = "2026-07-28"


def process_memory(pid: int) -> dict[str, float]:
    """Resident, anonymous, file-backed and peak resident MiB of process ``pid``."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if name in STATUS_FIELDS:
                out[STATUS_FIELDS[name]] = round(int(value.split()[0]) / 1024, 1)
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _seed_model_cache(model_cache: Path | None, data_dir: Path) -> None:
    """Give the server the query encoder's export the bench already made (the service
    keeps it in ``<data_dir>/models``), so its first start does not export the model
    (a torch job whose peak a served directory never pays again)."""
    if model_cache is None or not model_cache.is_dir():
        return
    target = data_dir / "models"
    target.mkdir(parents=True, exist_ok=True)
    for source in model_cache.glob("*.onnx"):
        if not (target / source.name).exists():
            shutil.copyfile(source, target / source.name)


def _cli_env(**extra: str) -> dict[str, str]:
    """The environment a service command of this checkout runs in."""
    root = Path(__file__).resolve().parents[1]
    return {
        **os.environ,
        **extra,
        "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


def new_data_directory(data_dir: Path, tenant: str) -> None:
    """Make ``data_dir`` as a new user does before a first ``engram serve``: a new, empty
    directory and ``engram admin tenant enable TENANT`` on it (nothing else: no model
    export, no scope)."""
    root = Path(__file__).resolve().parents[1]
    data_dir.mkdir(parents=True, mode=0o700)
    subprocess.run(
        [sys.executable, "-m", "engram.service.cli", "admin", "tenant", "enable", tenant, "-d", str(data_dir)],
        cwd=root,
        env=_cli_env(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


class ServedDirectory:
    """`engram serve` started on a data directory as a deployment runs it (``python -m
    engram.service.cli serve``, a fresh host secret, a free loopback port, its stderr in
    ``log``), asked over plain JSON-RPC POSTs to ``/mcp`` (protocol 2026-07-28, one
    request per exchange). The bench's lone-server run and its soak both drive it."""

    def __init__(
        self, data_dir: Path, *, model: bool, log: Path, model_cache: Path | None = None, extra: Sequence[str] = ()
    ) -> None:
        self.data_dir, self.model, self.log = data_dir, model, log
        if model:
            _seed_model_cache(model_cache, data_dir)
        self.secret = secrets.token_hex(32)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable,
            "-m",
            "engram.service.cli",
            "serve",
            "-d",
            str(data_dir),
            "--port",
            str(self.port),
            "--rate",
            "0",
            "--log-level",
            "warning",
            "--model" if model else "--no-model",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s = 0.0
        self._meta = _request_meta()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pids(self) -> list[int]:
        """The server's process and its children (the workers of `--workers N`)."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        return [self.pid, *map(int, children)]

    def start(self, ready_timeout_s: float) -> str | None:
        """Start the server and wait for ``/readyz``; None once ready, else why not."""
        import httpx2

        root = Path(__file__).resolve().parents[1]
        started = time.perf_counter()
        with open(self.log, "wb") as stderr:
            self.proc = subprocess.Popen(
                self.command,
                cwd=root,
                env=_cli_env(ENGRAM_HOST_SECRET=self.secret),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        deadline = time.monotonic() + ready_timeout_s
        with httpx2.Client(timeout=httpx2.Timeout(120.0)) as http:
            while True:
                if self.proc.poll() is not None:
                    return f"server exited with {self.proc.returncode}: " + self.log.read_text(errors="replace")[-500:]
                try:
                    if http.get(self.base + "/readyz").status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                if time.monotonic() > deadline:
                    return f"not ready after {ready_timeout_s:.0f} s"
                time.sleep(0.2)
        self.ready_s = round(time.perf_counter() - started, 1)
        return None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after a minute; the exit status."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def token(self, claims: dict[str, Any], *, confirmation: dict[str, Any] | None = None) -> str:
        """A context signed with this server's host secret (a day long)."""
        from engram.models.host_token import mint_token

        body = dict(claims) if confirmation is None else {**claims, "confirmation": confirmation}
        return mint_token(body, self.secret.encode(), ttl_s=24 * 3600)

    def request(self, token: str, tool: str, args: dict[str, Any], rpc_id: int) -> dict[str, Any]:
        """The keyword arguments of an httpx2 POST that calls ``tool``."""
        from engram.models.host_token import HEADER

        body = {
            "jsonrpc": "2.0",
            "id": rpc_id,
            "method": "tools/call",
            "params": {"name": tool, "_meta": self._meta, "arguments": args},
        }
        headers = {
            HEADER: token,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": PROTOCOL,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        }
        return {"url": self.base + "/mcp", "content": json.dumps(body), "headers": headers}

    def memory(self) -> dict[str, float]:
        return process_memory(self.pid)

    def open_files(self) -> int:
        """File descriptors the server holds (files, sockets, pipes)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))


def rpc_body(response: Any) -> dict[str, Any]:
    """The JSON-RPC response a POST answered: the body itself, or, when the server
    committed the answer to an event stream (a call still running after the SDK's
    keepalive interval answers as ``text/event-stream``), its one response message."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return json.loads(response.text)
    for frame in response.text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in frame.split("\n") if line.startswith("data:"))
        if data:
            message = json.loads(data)
            if "result" in message or "error" in message:
                return message
    raise ValueError("an event stream without a response message")


def answer_of(response: Any) -> tuple[str, dict[str, Any] | None]:
    """A tools/call answer (an HTTP response) as (outcome, value): ("ok", value); an
    error envelope's code (with ``retriable:`` before it when the envelope says so);
    ``rpc:<code>`` for a JSON-RPC error; ``http:<status>`` for anything else."""
    if response.status_code != 200:
        return f"http:{response.status_code}", None
    body = rpc_body(response)
    if "error" in body:
        return f"rpc:{body['error'].get('code')}", None
    envelope = body["result"]["structuredContent"]
    if envelope.get("ok"):
        return "ok", envelope["output"]["value"]
    error = envelope["error"]
    return ("retriable:" if error.get("retriable") else "") + str(error.get("code")), None


def measure_service(
    data_dir: Path,
    scope: Scope,
    purpose: str,
    texts: list[str],
    *,
    model: bool,
    model_cache: Path | None = None,
    searches: int = 100,
    capture_args: Callable[[int], dict[str, Any]] | None = None,
    mutations: int = 5,
    ready_timeout_s: float = 3600.0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Start `engram serve` on ``data_dir`` (its tenant enabled, no other process
    holding it), wait for ready, run ``searches`` searches of ``scope`` (hybrid with the
    model, lexical without it), then, given ``capture_args`` (the arguments of the n-th
    capture), ``mutations`` rounds of capture, admission and search; report the server
    process's memory and each tool's first call after ready against its later ones."""
    import httpx2

    from engram.models.tools import CAPTURE, REQUEST_ADMISSION, SEARCH

    server = ServedDirectory(data_dir, model=model, log=data_dir.parent / "service-memory.log", model_cache=model_cache)
    minimum = "lexical_and_semantic" if model else "lexical"
    out: dict[str, Any] = {"command": "engram " + " ".join(server.command[3:]), "searches_profile": minimum}
    try:
        why_not = server.start(ready_timeout_s)
        if why_not is not None:
            return {**out, "skipped": why_not}
        out["ready_s"] = server.ready_s
        out["after_ready"] = server.memory()
        say(f"service ready in {out['ready_s']} s: {out['after_ready']}")
        token = server.token(
            {
                "tenant": scope[0],
                "workspace": scope[1],
                "principal": "bench:memory",
                "agent_id": "engram-bench",
                "session": "s-memory",
                "purpose": purpose,
                "tools": [SEARCH, CAPTURE, REQUEST_ADMISSION],
                "confirm": [],
            }
        )
        timings: dict[str, list[float]] = {}
        with httpx2.Client(timeout=httpx2.Timeout(120.0)) as http:

            def call(tool: str, args: dict[str, Any], timed_as: str) -> dict[str, Any] | None:
                """The tool's value, or None when it failed; the call's ms go to ``timed_as``."""
                started_at = time.perf_counter()
                response = http.post(**server.request(token, tool, args, sum(map(len, timings.values()))))
                timings.setdefault(timed_as, []).append((time.perf_counter() - started_at) * 1000)
                outcome, value = answer_of(response)
                return value if outcome == "ok" else None

            def search(n: int, timed_as: str) -> bool:
                args = {
                    "query": texts[n % len(texts)],
                    "purpose_ref": purpose,
                    "limit": 10,
                    "capability_policy": {"minimum_channels": minimum, "network": "forbid"},
                }
                return call(SEARCH, args, timed_as) is not None

            answered = sum(search(n, "search") for n in range(searches))
            out["searches"] = {"asked": searches, "answered": answered, "failed": searches - answered}
            out["after_searches"] = server.memory()
            admitted = 0
            make_capture = capture_args
            for n in range(mutations if make_capture is not None else 0):
                assert make_capture is not None
                captured = call(CAPTURE, make_capture(n), "capture")
                if captured is None:
                    continue
                decided = call(
                    REQUEST_ADMISSION,
                    {"candidate_id": captured["candidate_id"], "idempotency_key": f"bench-first-{uuid.uuid4().hex}"},
                    "request_admission",
                )
                admitted += bool(decided and decided["outcome"]["status"] == "accepted")
                search(searches + n, "search_after_admission")
        if capture_args is not None:
            out["mutations"] = {"rounds": mutations, "admitted": admitted}
        out["first_calls"] = {
            name: {
                "first_ms": round(ms[0], 1),
                "later_p50_ms": round(statistics.median(ms[1:]), 1),
                "later_max_ms": round(max(ms[1:]), 1),
                "calls": len(ms),
            }
            for name, ms in timings.items()
            if len(ms) > 1
        }
        out["peak_mb"] = server.memory()["peak_mb"]
    finally:
        server.stop()
    return out


def _request_meta() -> dict[str, Any]:
    import mcp_types

    return {
        mcp_types.PROTOCOL_VERSION_META_KEY: PROTOCOL,
        mcp_types.CLIENT_CAPABILITIES_META_KEY: {},
        mcp_types.CLIENT_INFO_META_KEY: {"name": "engram-bench", "version": "1"},
    }
