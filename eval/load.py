"""Concurrent MCP clients over HTTP: the bench's load run and its client side.

:func:`load_run` serves an open engine with uvicorn in a thread and drives it from a
child process (:func:`drive_clients`), as hosts would: one client's searches alone
(through the SDK and as bare JSON-RPC POSTs), then several clients' mixed load of
searches, captures and admissions, with the server's and the clients' CPU per call.
The replica bench drives ``engram serve`` processes with the same client side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .bench_calls import BENCH_SCOPE, PURPOSE, bench_context, load_claims, note_capture_args, search_args
from .timing import cpu_per_call, percentiles, process_cpu_s


def load_run(
    engine: Any, data_dir: Path, texts: list[str], *, clients: int, calls: int, run: str, say: Callable[[str], None]
) -> dict[str, Any]:
    """MCP over HTTP against ``engine`` (its tenant enabled by the caller): one client's
    sequential searches, then ``clients``
    concurrent clients for about ``calls`` steps in all, their captures carrying the bench
    run's token ``run`` (see :func:`eval.bench_calls.note_capture_args`).

    The server runs here (uvicorn in a thread, the engine already open); the clients run
    in a child process, as a host would, so their Python does not hold the server's GIL.
    """
    try:
        import uvicorn

        from engram.models.host_token import HEADER, mint_token
        from engram.service.http.app import create_app
        from engram.service.settings import Settings
    except Exception as exc:  # noqa: BLE001 - report why the HTTP run could not happen
        return {"skipped": f"MCP app unavailable: {type(exc).__name__}: {exc}"}

    import socket
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    secret = os.urandom(32)
    app = create_app(engine, Settings(data_dir=data_dir, rate=0), host_secret=secret)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            return {"skipped": "uvicorn did not start"}
        time.sleep(0.05)
    per_client = max(1, calls // clients)
    tokens = [mint_token(load_claims(BENCH_SCOPE, c), secret, ttl_s=3600) for c in range(clients + 1)]
    say(f"MCP over HTTP: {len(texts)} sequential searches, then {clients} clients x {per_client} steps")
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            driven = pool.submit(
                drive_clients, f"http://127.0.0.1:{port}/mcp", HEADER, tokens, texts, per_client, run
            ).result()
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    ctx = bench_context()
    lost = 0
    for rid in driven["admitted"]:
        try:
            engine.execute("engram_memory_get", ctx, {"record_id": rid, "purpose_ref": PURPOSE})
        except Exception:  # noqa: BLE001
            lost += 1
    latencies = driven["latencies"]
    total = sum(len(v) for v in latencies.values())
    wall = driven["wall_s"]
    return {
        "transport": "MCP streamable HTTP on loopback (SDK client, protocol auto; clients in a child process)",
        "single_client_search_hybrid": percentiles(driven["single"]),
        "bare_http_search_hybrid": percentiles(driven["bare"]),
        "bare_http_server_cpu_ms_per_search": round(1000 * driven["bare_server_cpu_s"] / len(driven["bare"]), 2)
        if driven["bare"]
        else None,
        "clients": clients,
        "steps_planned": per_client * clients,
        "calls_completed": total,
        "wall_s": round(wall, 2),
        "throughput_calls_per_s": round(total / wall, 2) if wall else 0.0,
        **cpu_per_call(driven["server_cpu_s"], driven["client_cpu_s"], total),
        "latency": {k: percentiles(v) for k, v in latencies.items() if v},
        "errors": driven["errors"],
        "admitted": len(driven["admitted"]),
        "admitted_not_readable": lost,
    }


def drive_clients(
    url: str,
    header: str,
    tokens: list[str],
    texts: list[str],
    per_client: int,
    run: str,
    server_pids: Sequence[int] = (),
    hybrid: bool = True,
    sequential: bool = True,
    first_client: int = 0,
    start_together: Any = None,
) -> dict[str, Any]:
    """The client side of :func:`load_run` (runs in a child process): the last token's
    client searches alone first, then one client per other token runs the mixed load.

    ``server_pids``: the serving processes whose CPU is read (default: the parent, which
    serves in :func:`load_run`). ``hybrid`` false (a server without the model): every
    search asks for the lexical profile. When the clients are split over several
    processes: ``sequential`` false skips the searches alone (the last token is then
    unused), ``first_client`` numbers this process's clients after the others' (each
    client's mix of calls and its captures follow from its number), and
    ``start_together`` is a barrier (a multiprocessing manager's) the processes and their
    parent wait at before the mixed load; ``ended`` is when this process's load ended."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    latencies: dict[str, list[float]] = {
        "search_hybrid": [],
        "search_lexical": [],
        "capture": [],
        "request_admission": [],
    }
    errors: Counter[str] = Counter()
    admitted: list[str] = []
    pids = list(server_pids) or [os.getppid()]  # by default the bench process (uvicorn in a thread)
    hybrid_profile = "lexical_and_semantic" if hybrid else "lexical"

    def server_cpu_s() -> float:
        return sum(process_cpu_s(pid) for pid in pids)

    async def call(client_obj: Any, sink: list[float], tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        t = time.perf_counter()
        try:
            result = await client_obj.call_tool(tool, args)
        except Exception as exc:  # noqa: BLE001 - a transport failure is a counted error
            errors[f"exception:{type(exc).__name__}"] += 1
            return None
        sink.append(time.perf_counter() - t)
        env = result.structured_content or {}
        if not env.get("ok"):
            errors[str((env.get("error") or {}).get("code", "no-envelope"))] += 1
            return None
        return env["output"]["value"]

    @contextlib.asynccontextmanager
    async def connected(token: str) -> Any:
        async with httpx2.AsyncClient(headers={header: token}, timeout=httpx2.Timeout(120.0)) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="auto") as mcp_client:
                yield mcp_client

    async def one_client(index: int) -> None:
        client = first_client + index
        async with connected(tokens[index]) as mcp_client:
            for i in range(per_client):
                roll = (client * 7919 + i) % 10
                query = texts[(client * 31 + i) % len(texts)]
                if roll < 6:
                    await call(
                        mcp_client,
                        latencies["search_hybrid"],
                        "engram_memory_search",
                        search_args(query, hybrid_profile),
                    )
                elif roll < 8:
                    await call(
                        mcp_client, latencies["search_lexical"], "engram_memory_search", search_args(query, "lexical")
                    )
                else:
                    cap = await call(
                        mcp_client, latencies["capture"], "engram_memory_capture", note_capture_args(i, client, run)
                    )
                    if cap is None:
                        continue
                    adm = await call(
                        mcp_client,
                        latencies["request_admission"],
                        "engram_memory_request_admission",
                        {"candidate_id": cap["candidate_id"], "idempotency_key": f"bench-adm-{uuid.uuid4().hex}"},
                    )
                    if adm and adm["outcome"]["status"] == "accepted":
                        admitted.append(adm["outcome"]["record_id"])

    async def sequential_searches() -> tuple[list[float], list[float], float]:
        """One host alone, without contention: each query through the SDK client, then
        as a plain JSON-RPC POST (protocol 2026-07-28, one request per exchange, no SDK
        on the client side: what the server itself costs), taking turns so that load
        drift weighs on both alike. Also returns the server's CPU seconds over the plain
        POSTs (read from ``/proc`` around each: whole ticks, so only their mean means
        anything)."""
        import mcp_types

        version = "2026-07-28"
        meta = {
            mcp_types.PROTOCOL_VERSION_META_KEY: version,
            mcp_types.CLIENT_CAPABILITIES_META_KEY: {},
            mcp_types.CLIENT_INFO_META_KEY: {"name": "engram-bench", "version": "1"},
        }
        headers = {
            header: tokens[-1],
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": version,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "engram_memory_search",
        }
        sdk: list[float] = []
        bare: list[float] = []
        bare_server_cpu_s = 0.0
        async with (
            connected(tokens[-1]) as mcp_client,
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http,
        ):
            for n, query in enumerate([*texts[:3], *texts]):
                args = search_args(query, hybrid_profile)
                await call(mcp_client, sdk if n >= 3 else [], "engram_memory_search", args)
                body = {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": "engram_memory_search", "_meta": meta, "arguments": args},
                }
                server_cpu, t = server_cpu_s(), time.perf_counter()
                response = await http.post(url, content=json.dumps(body))
                elapsed = time.perf_counter() - t
                if response.status_code != 200 or '"ok":true' not in response.text:
                    errors[f"bare-http:{response.status_code}"] += 1
                elif n >= 3:
                    bare.append(elapsed)
                    bare_server_cpu_s += server_cpu_s() - server_cpu
        return sdk, bare, bare_server_cpu_s

    async def main() -> dict[str, Any]:
        single, bare, bare_server_cpu_s = await sequential_searches() if sequential else ([], [], 0.0)
        if start_together is not None:
            await asyncio.to_thread(start_together.wait)
        server_cpu, client_cpu, t = server_cpu_s(), time.process_time(), time.perf_counter()
        await asyncio.gather(*(one_client(c) for c in range(len(tokens) - 1)))
        return {
            "single": single,
            "bare": bare,
            "bare_server_cpu_s": bare_server_cpu_s,
            "wall_s": time.perf_counter() - t,
            "server_cpu_s": server_cpu_s() - server_cpu,
            "client_cpu_s": time.process_time() - client_cpu,
            "ended": time.time(),
        }

    return {**asyncio.run(main()), "latencies": latencies, "errors": dict(errors), "admitted": admitted}
