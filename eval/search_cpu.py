"""CPU per hybrid search, in the engine and over MCP, trees side by side.

Why: on a shared two-core machine wall time drifts with the other work on it, while
CPU time per call (what a search costs the server, whoever else runs) hardly does. This
script measures, at the capacity bench's 10k corpus:

* ``prepare``: generate and ingest the bench's synthetic 10k corpus (precomputed
  vectors, :func:`eval.bench.ingest_size`) once, into ``WORK/n10000``;
* ``engine``: one process per tree given, each on its own copy of that directory, the
  same queries handed to each in turn (the order alternating query by query); each
  runs, per query, the engine's hybrid search (``Engine.execute``), the ranker alone
  and the raw engines the bench divides by (the ONNX encoder, Tantivy at the lexical
  depth, usearch's scan of every code at the semantic depth, rescored as the engine
  rescores). CPU per call is the process's CPU time around each call (every thread:
  ONNX Runtime's pool and the lexical thread count), beside wall time;
* ``mcp``: one ``engram serve`` per tree given (each on its own copy of the directory),
  a bare JSON-RPC client (protocol 2026-07-28, no SDK on the client side) alternating
  call by call between them; the server's CPU per call is read from
  ``/proc/<pid>/stat`` around each call.

It runs as a file (``python eval/search_cpu.py ...``); each tree's processes import
that tree's rooms as ``engram.*`` (a folder of symbolic links put first on their
``PYTHONPATH``), so an older tree without this file is measured by the same code. Before
and after a change, from this tree's root::

    git archive BASE | (mkdir -p /tmp/engram-base && tar -x -C /tmp/engram-base)
    python eval/search_cpu.py prepare
    python eval/search_cpu.py engine --trees /tmp/engram-base $PWD --queries 150 --rounds 2
    python eval/search_cpu.py mcp --trees /tmp/engram-base $PWD --queries 150 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZE = 10_000
SCOPE = ("bench", "synthetic")
PROTOCOL = "2026-07-28"
TICK = os.sysconf("SC_CLK_TCK")


ROOMS = ("models", "ranking", "service", "index_data", "eval")


def _import_path(tree: Path, work: Path, name: str) -> str:
    """A PYTHONPATH under which ``tree``'s rooms import as ``engram.*``."""
    root = work / "import-roots" / name
    (root / "engram").mkdir(parents=True, exist_ok=True)
    for room in ROOMS:
        link, target = root / "engram" / room, Path(tree).resolve() / room
        if link.is_symlink() and link.readlink() != target:  # an earlier run's tree
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    return str(root)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")


def _summary(wall: list[float], cpu: list[float]) -> dict[str, float]:
    return {
        "p50_ms": _median(wall),
        "cpu_ms_mean": round(statistics.fmean(cpu), 3) if cpu else float("nan"),
        "cpu_ms_p50": _median(cpu),
        "calls": len(wall),
    }


def prepare(work: Path) -> None:
    from engram.eval.bench import ingest_size
    from engram.ranking import MiniLMEncoder

    root = work / f"n{SIZE}"
    encoder = MiniLMEncoder(root / "data" / "models")
    encoder.load()
    out, _, engine = ingest_size(SIZE, root, encoder, batch_size=None, progress=False, say=print)
    engine.operator.set_tenant_enabled(SCOPE[0], True)
    engine.close()
    print(json.dumps(out.get("ingest", {}))[:300])


def _copy(work: Path, name: str) -> Path:
    target = work / "copies" / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(work / f"n{SIZE}" / "data", target)
    return target


def _queries(count: int) -> list[str]:
    from engram.eval.bench import corpus_spec
    from engram.eval.corpus_gen import SyntheticCorpus

    class _Dim:
        dim = 384

    texts, _ = SyntheticCorpus(corpus_spec(SIZE, _Dim())).queries(count)
    return list(texts)


def _search_args(query: str) -> dict[str, Any]:
    from engram.eval.bench_calls import search_args

    return search_args(query, "lexical_and_semantic")


def engine_worker(data: Path, queries: int) -> None:
    """A child of :func:`engine_probe`: opens the engine on ``data``, says ``ready``, then
    for each query index read from stdin runs every probe on that query and writes one
    JSON line, each probe's [wall ms, CPU ms] (the process's CPU, every thread)."""
    from engram.eval.bench_calls import bench_context
    from engram.ranking import HYBRID_PROFILE
    from engram.service.engine import Engine, scope_key

    engine = Engine.open(data)
    try:
        ctx = bench_context()
        key = scope_key(SCOPE)
        ranker = engine.ranker
        # Any: the tree measured may be older than this one (no encode_queries there).
        encoder: Any = engine.encoder
        config = HYBRID_PROFILE.config
        semantic = config.semantic
        assert semantic is not None and encoder is not None
        raw = ranker.raw_engines(key, HYBRID_PROFILE)
        texts = _queries(queries)
        # The encoder as the profile runs it on a query; a tree without a query
        # precision encodes queries as passages.
        precision = getattr(semantic, "query_precision", None)
        encode_query = (
            (lambda q: encoder.encode_queries([q], precision)) if precision else (lambda q: encoder.encode([q]))
        )
        vectors = [encode_query(q) for q in texts]
        args = [_search_args(q) for q in texts]
        probes: dict[str, Callable[[int], Any]] = {
            "engine_hybrid": lambda i: engine.execute("engram_memory_search", ctx, args[i]),
            "ranker_hybrid": lambda i: ranker.search(key, texts[i], HYBRID_PROFILE, valid_as_of_ms=2_000_000_000_000),
            "raw_encoder": lambda i: encode_query(texts[i]),
            "raw_tantivy": lambda i: raw.tantivy(texts[i], config.lexical.cap),
            "raw_scan": lambda i: raw.knn(vectors[i], semantic.cap, None),
        }
        print("ready", flush=True)
        for line in sys.stdin:
            i = int(line)
            sample = {}
            for name, probe in probes.items():
                c, t = time.process_time(), time.perf_counter()
                probe(i)
                sample[name] = [(time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000]
            print(json.dumps(sample), flush=True)
    finally:
        engine.close()


def engine_probe(work: Path, trees: list[Path], queries: int, rounds: int) -> dict[str, Any]:
    """One engine process per tree (each on its own copy of the directory), handed the
    same queries in turn, the order alternating query by query."""
    children = []
    try:
        for n, tree in enumerate(trees):
            env = {**os.environ, "PYTHONPATH": _import_path(tree, work, f"engine{n}"), "HF_HUB_OFFLINE": "1"}
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "engine-worker",
                "--work",
                str(work),
                "--name",
                f"engine{n}",
                "--queries",
                str(queries),
            ]
            log = open(work / f"engine{n}.log", "wb")
            children.append(
                subprocess.Popen(
                    command, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
                )
            )
        for child in children:
            if child.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                raise RuntimeError("an engine worker did not start")
        samples: list[dict[str, list[list[float]]]] = [{} for _ in children]
        for r in range(rounds):
            for i in range(queries):
                order = list(range(len(children)))
                if (i + r) % 2:
                    order.reverse()
                for n in order:
                    children[n].stdin.write(f"{i}\n")  # type: ignore[union-attr]
                    children[n].stdin.flush()  # type: ignore[union-attr]
                    sample = json.loads(children[n].stdout.readline())  # type: ignore[union-attr]
                    if r or i >= 5:  # the first few warm caches
                        for name, pair in sample.items():
                            samples[n].setdefault(name, []).append(pair)
        out: dict[str, Any] = {}
        for tree, probes in zip(trees, samples):
            result: dict[str, Any] = {
                name: _summary([w for w, _ in pairs], [c for _, c in pairs]) for name, pairs in probes.items()
            }
            raw = ("raw_encoder", "raw_tantivy", "raw_scan")
            raw_wall = sum(result[n]["p50_ms"] for n in raw)
            result["raw_sum"] = {
                "p50_ms": round(raw_wall, 3),
                "cpu_ms_mean": round(sum(result[n]["cpu_ms_mean"] for n in raw), 3),
            }
            result["engine_over_raw_p50"] = round(result["engine_hybrid"]["p50_ms"] / raw_wall, 3)
            out[str(tree)] = result
        return out
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
        for child in children:
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()


def _cpu_s(pid: int, thread: int | None = None) -> float:
    """CPU seconds of process ``pid`` (all threads), or of one of its threads."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    with open(path) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mcp_probe(work: Path, trees: list[Path], queries: int, rounds: int) -> dict[str, Any]:
    """One server per tree, a bare JSON-RPC client taking turns between them."""
    import httpx2

    from engram.eval.bench_calls import PURPOSE
    from engram.models.host_token import HEADER, mint_token

    servers: list[dict[str, Any]] = []
    try:
        for n, tree in enumerate(trees):
            data = _copy(work, f"mcp{n}")
            secret = secrets.token_hex(32)
            port = _free_port()
            env = {
                **os.environ,
                "ENGRAM_HOST_SECRET": secret,
                "PYTHONPATH": _import_path(tree, work, f"mcp{n}"),
                "HF_HUB_OFFLINE": "1",
            }
            command = [
                sys.executable,
                "-m",
                "engram.service.cli",
                "serve",
                "-d",
                str(data),
                "--port",
                str(port),
                "--rate",
                "0",
                "--log-level",
                "warning",
                "--model",
            ]
            log = open(work / f"serve{n}.log", "wb")
            proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=log)
            servers.append({"tree": str(tree), "proc": proc, "port": port, "secret": secret})
        texts = _queries(queries)
        with httpx2.Client(timeout=httpx2.Timeout(120.0)) as http:
            for server in servers:
                deadline = time.monotonic() + 600
                while True:
                    if server["proc"].poll() is not None:
                        raise RuntimeError(f"server of {server['tree']} exited")
                    try:
                        if http.get(f"http://127.0.0.1:{server['port']}/readyz").status_code == 200:
                            break
                    except httpx2.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError("not ready")
                    time.sleep(0.3)
                token = mint_token(
                    {
                        "tenant": SCOPE[0],
                        "workspace": SCOPE[1],
                        "principal": "bench:cpu",
                        "agent_id": "engram-bench",
                        "session": "s-cpu",
                        "purpose": PURPOSE,
                        "tools": ["engram_memory_search"],
                        "confirm": [],
                    },
                    server["secret"].encode(),
                    ttl_s=24 * 3600,
                )
                server["headers"] = {
                    HEADER: token,
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "MCP-Protocol-Version": PROTOCOL,
                    "Mcp-Method": "tools/call",
                    "Mcp-Name": "engram_memory_search",
                }
                server["wall"], server["cpu"], server["loop"], server["bytes"] = [], [], [], []
            meta = {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "engram-bench", "version": "1"},
            }
            try:
                import mcp_types

                meta = {
                    mcp_types.PROTOCOL_VERSION_META_KEY: PROTOCOL,
                    mcp_types.CLIENT_CAPABILITIES_META_KEY: {},
                    mcp_types.CLIENT_INFO_META_KEY: {"name": "engram-bench", "version": "1"},
                }
            except ImportError:
                pass
            calls = 0
            for r in range(rounds):
                for i, query in enumerate(texts):
                    order = servers if (i + r) % 2 == 0 else servers[::-1]
                    for server in order:
                        body = {
                            "jsonrpc": "2.0",
                            "id": calls,
                            "method": "tools/call",
                            "params": {"name": "engram_memory_search", "_meta": meta, "arguments": _search_args(query)},
                        }
                        calls += 1
                        pid = server["proc"].pid
                        c, loop, t = _cpu_s(pid), _cpu_s(pid, pid), time.perf_counter()
                        response = http.post(
                            f"http://127.0.0.1:{server['port']}/mcp",
                            content=json.dumps(body),
                            headers=server["headers"],
                        )
                        dt = time.perf_counter() - t
                        time.sleep(0.02)  # let the server's after-call work land in this call's CPU
                        dc, dloop = _cpu_s(pid) - c, _cpu_s(pid, pid) - loop
                        if response.status_code != 200 or '"ok":true' not in response.text:
                            raise RuntimeError(f"{server['tree']}: {response.status_code} {response.text[:300]}")
                        if i >= 3 or r > 0:
                            server["wall"].append(dt * 1000)
                            server["cpu"].append(dc * 1000)
                            server["loop"].append(dloop * 1000)
                            server["bytes"].append(len(response.content))
        # The event loop's thread (the main one: HTTP, the MCP SDK, our front end) apart.
        return {
            s["tree"]: {
                **_summary(s["wall"], s["cpu"]),
                "loop_cpu_ms_mean": round(statistics.fmean(s["loop"]), 3),
                "response_bytes_p50": _median(s["bytes"]),
            }
            for s in servers
        }
    finally:
        for server in servers:
            server["proc"].send_signal(signal.SIGTERM)
        for server in servers:
            try:
                server["proc"].wait(timeout=60)
            except subprocess.TimeoutExpired:
                server["proc"].kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["prepare", "engine", "mcp", "engine-worker"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/engram-search-cpu"))
    parser.add_argument("--name", default="engine", help="engine-worker: the copy's name")
    parser.add_argument(
        "--trees",
        type=Path,
        nargs="*",
        default=[],
        help="one engine process or server per tree (default: the tree on PYTHONPATH)",
    )
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    ns = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if ns.mode == "prepare":
        prepare(ns.work)
        return
    if ns.mode == "engine-worker":
        engine_worker(_copy(ns.work, ns.name), ns.queries)
        return
    trees = [t.resolve() for t in ns.trees] or [Path(os.environ.get("PYTHONPATH", ".").split(os.pathsep)[0]).resolve()]
    probe = engine_probe if ns.mode == "engine" else mcp_probe
    print(json.dumps(probe(ns.work, trees, ns.queries, ns.rounds), indent=1))


if __name__ == "__main__":
    main()
