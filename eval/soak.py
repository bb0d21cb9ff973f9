"""`engram bench --soak SECONDS`: a long mixed load against a real `engram serve`.

Why: a short run says nothing of what grows. A server that leaks a file handle per
forget, or memory per search, or slows as its journal lengthens, passes every test and
every capacity run, and fails after a day in service. Here the bench ingests a corpus
of ``size`` records (as its capacity run does), starts ``engram serve`` on it alone
(:class:`~eval.service_memory.ServedDirectory`), and ``clients`` concurrent hosts
drive it over MCP for ``seconds``, each repeating one cycle of steps: searches
(hybrid with the model, lexical), gets of records it knows, captures each followed by
its request_admission, and forgets of records it admitted (each with a host
confirmation). Throughout it reports:

* the server's resident memory (anonymous and file-backed) and open files at the start,
  at each window's end and at the end;
* p50/p99 per tool in each window of ``window_s`` seconds (5 minutes by default);
* every answer that is not a success: the retriable codes (a client backs off and
  retries them), and the errors, which are everything else (a non-retriable code, a
  JSON-RPC error, an HTTP error, a transport failure); the goal is 0 errors;
* at the end, every admission the server acknowledged and no client forgot is read back
  (it must be there), and every forgotten record too (it must be NOT_FOUND).

The clients run in the bench process (asyncio, plain JSON-RPC POSTs), the server in its
own: the figures are the server's. Latency under a soak measures a busy 2-core machine
as much as the service; what the soak judges is growth and errors, and its test in the
suite (tiny size and duration) checks behaviour, never time.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, TOOLS

from .bench import corpus_spec, ingest_size
from .bench_calls import BENCH_SCOPE, PURPOSE, bench_context, note_capture_args, search_args
from .corpus_gen import SyntheticCorpus
from .service_memory import ServedDirectory, answer_of
from .timing import percentiles

DEFAULT_WINDOW_S = 300.0
#: One client's cycle of steps: mostly reads, a capture and admission in five steps, a
#: forget in ten (of a record the same client admitted, so no other client reads it).
CYCLE = ("search", "get", "search", "admit", "search_lexical", "get", "search", "admit", "get", "forget")
#: Timed operations, as reported.
OPERATIONS = ("search_hybrid", "search_lexical", "get", "capture", "request_admission", "forget")


@dataclass
class Call:
    """One answered call: when (seconds since the load began), what, how long, how."""

    at_s: float
    operation: str
    seconds: float
    outcome: str


@dataclass
class Tally:
    """What the clients did and what they must find again at the end."""

    calls: list[Call] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)  # acknowledged, not forgotten
    forgotten: list[str] = field(default_factory=list)


class SoakClients:
    """The hosts: one context each, the server's host secret to sign confirmations."""

    def __init__(
        self,
        server: ServedDirectory,
        *,
        clients: int,
        texts: list[str],
        known: list[str],
        model: bool,
        forgets: bool = True,
    ):
        self.server, self.clients, self.texts, self.known = server, clients, texts, known
        self.forgets = forgets  # False: the cycle's forget step does nothing (the mix without forgets)
        self.minimum = "lexical_and_semantic" if model else "lexical"
        self.run = uuid.uuid4().hex[:10]
        self.tally = Tally()
        self._ids = iter(range(1, 1 << 62))

    def claims(self, client: int) -> dict[str, Any]:
        return {
            "tenant": BENCH_SCOPE[0],
            "workspace": BENCH_SCOPE[1],
            "principal": f"soak-{client}",
            "agent_id": f"agent-{client}",
            "session": f"s-{client}",
            "purpose": PURPOSE,
            "tools": sorted(TOOLS),
            "confirm": [],
        }

    async def call(
        self, http: Any, token: str, tool: str, args: dict[str, Any], operation: str, t0: float
    ) -> tuple[str, dict[str, Any] | None]:
        started = time.monotonic()
        try:
            response = await http.post(**self.server.request(token, tool, args, next(self._ids)))
            outcome, value = answer_of(response)
        except Exception as exc:  # noqa: BLE001 - a transport failure is an error of the run
            outcome, value = f"exception:{type(exc).__name__}", None
        self.tally.calls.append(Call(round(started - t0, 3), operation, time.monotonic() - started, outcome))
        return outcome, value

    async def client(self, http: Any, client: int, until: float, t0: float) -> None:
        from engram.service.engine import operation_digest

        rng = random.Random(client)
        token = self.server.token(self.claims(client))
        mine: list[str] = []
        captures = 0
        step = client  # the clients start at different points of the cycle
        while time.monotonic() < until:
            kind = CYCLE[step % len(CYCLE)]
            step += 1
            if kind in ("search", "search_lexical"):
                minimum = self.minimum if kind == "search" else "lexical"
                query = self.texts[rng.randrange(len(self.texts))]
                operation = "search_hybrid" if minimum == "lexical_and_semantic" else "search_lexical"
                await self.call(http, token, SEARCH, search_args(query, minimum), operation, t0)
            elif kind == "get":
                pool = mine if mine and rng.random() < 0.5 else self.known
                args = {"record_id": pool[rng.randrange(len(pool))], "purpose_ref": PURPOSE}
                await self.call(http, token, GET, args, "get", t0)
            elif kind == "admit":
                captures += 1
                outcome, captured = await self.call(
                    http, token, CAPTURE, note_capture_args(captures, client, self.run), "capture", t0
                )
                if captured is None:
                    continue
                args = {"candidate_id": captured["candidate_id"], "idempotency_key": f"soak-adm-{uuid.uuid4().hex}"}
                outcome, decided = await self.call(http, token, REQUEST_ADMISSION, args, "request_admission", t0)
                if decided is not None and decided["outcome"]["status"] == "accepted":
                    mine.append(decided["outcome"]["record_id"])
            elif mine and self.forgets:  # forget the oldest record this client admitted, with a human's approval
                record_id = mine.pop(0)
                args = {"record_id": record_id, "idempotency_key": f"soak-fgt-{uuid.uuid4().hex}", "reason_ref": "r"}
                approved = int(time.time() * 1000)
                confirmation = {
                    "ref": "soak-" + uuid.uuid4().hex,
                    "capability": FORGET,
                    "target": record_id,
                    "operation_digest": operation_digest(FORGET, args),
                    "approved_at": approved,
                    "expires_at": approved + 60_000,
                }
                signed = self.server.token(self.claims(client), confirmation=confirmation)
                outcome, _ = await self.call(http, signed, FORGET, args, "forget", t0)
                if outcome in ("ok", "ALREADY_TERMINAL"):  # the latter: an earlier try, unanswered, took effect
                    self.tally.forgotten.append(record_id)
                else:
                    mine.insert(0, record_id)  # not known forgotten: it must still be readable
        self.tally.admitted.extend(mine)

    async def drive(self, seconds: float, sample: Callable[[float], None], sample_every_s: float) -> float:
        """Run every client for ``seconds``, calling ``sample(elapsed)`` on the way; the
        load's wall seconds."""
        import httpx2

        limits = httpx2.Limits(max_connections=self.clients + 2)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(120.0), limits=limits) as http:
            t0 = time.monotonic()
            until = t0 + seconds
            load = asyncio.gather(*(self.client(http, c, until, t0) for c in range(self.clients)))
            while not load.done():
                await asyncio.wait({load}, timeout=sample_every_s)
                sample(time.monotonic() - t0)
            await load
            return time.monotonic() - t0

    def verify(self) -> dict[str, int]:
        """Read back every acknowledged admission still current, and every forgotten one."""
        import httpx2

        token = self.server.token(self.claims(self.clients))
        missing = resurrected = 0
        with httpx2.Client(timeout=httpx2.Timeout(120.0)) as http:
            for record_id in self.tally.admitted:
                response = http.post(
                    **self.server.request(token, GET, {"record_id": record_id, "purpose_ref": PURPOSE}, 0)
                )
                missing += answer_of(response)[0] != "ok"
            for record_id in self.tally.forgotten:
                response = http.post(
                    **self.server.request(token, GET, {"record_id": record_id, "purpose_ref": PURPOSE}, 0)
                )
                resurrected += answer_of(response)[0] != "NOT_FOUND"
        return {
            "admitted_current": len(self.tally.admitted),
            "admitted_not_readable": missing,
            "forgotten": len(self.tally.forgotten),
            "forgotten_still_readable": resurrected,
        }


def windows(calls: list[Call], window_s: float) -> list[dict[str, Any]]:
    """Per window of ``window_s`` seconds: calls, errors, and p50/p99 per operation."""
    if not calls:
        return []
    last = int(max(c.at_s for c in calls) // window_s)
    rows = []
    for index in range(last + 1):
        inside = [c for c in calls if int(c.at_s // window_s) == index]
        rows.append(
            {
                "window": index,
                "from_s": round(index * window_s, 1),
                "calls": len(inside),
                "errors": sum(_is_error(c.outcome) for c in inside),
                "retriable": sum(c.outcome.startswith("retriable:") for c in inside),
                "latency": {
                    name: percentiles([c.seconds for c in inside if c.operation == name and c.outcome == "ok"])
                    for name in OPERATIONS
                    if any(c.operation == name and c.outcome == "ok" for c in inside)
                },
            }
        )
    return rows


def _readable(engine: Any, ctx: Any, record_id: str) -> bool:
    from engram.models.codes import ContractError

    try:
        engine.execute(GET, ctx, {"record_id": record_id, "purpose_ref": PURPOSE})
    except ContractError:
        return False
    return True


def _is_error(outcome: str) -> bool:
    return outcome != "ok" and not outcome.startswith("retriable:")


def run_soak(
    size: int,
    out: Path,
    work: Path,
    *,
    seconds: float,
    window_s: float = DEFAULT_WINDOW_S,
    clients: int = 4,
    encoder: Any = None,
    batch_size: int | None = None,
    progress: bool = False,
    say: Callable[[str], None] = print,
    forgets: bool = True,
) -> dict[str, Any]:
    """Ingest ``size`` records, serve them, drive the mixed load for ``seconds``; write
    OUT/soak.json and OUT/soak.md and return the figures. ``forgets`` False: the same
    mix with its forget step left out (what forgets cost the other calls)."""
    from engram.index_data.records import record_id_for
    from engram.ranking import MiniLMEncoder

    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    model = encoder is None or isinstance(encoder, MiniLMEncoder)
    if encoder is None:
        encoder = MiniLMEncoder(work / "models")
    root = work / f"soak-n{size}"
    # The raw engines' pass (the capacity run's ratio) would only lengthen the soak.
    ingested, _, engine = ingest_size(
        size, root, encoder, batch_size=batch_size, progress=progress, say=say, raw_bulk=False
    )
    corpus = SyntheticCorpus(corpus_spec(size, encoder))
    texts, _ = corpus.queries(200)
    try:
        engine.operator.set_tenant_enabled(BENCH_SCOPE[0], True)
        ctx = bench_context()
        # The ingested records the clients read: the first thousand the ingest kept.
        known = [
            rid
            for rid in (record_id_for(BENCH_SCOPE, r, PURPOSE) for _, r in zip(range(1000), corpus.records()))
            if _readable(engine, ctx, rid)
        ]
    finally:
        engine.close()
    server = ServedDirectory(root / "data", model=model, log=root / "soak-server.log", model_cache=work / "models")
    result: dict[str, Any] = {
        "size": size,
        "seconds": seconds,
        "window_s": window_s,
        "clients": clients,
        "cycle": list(CYCLE),
        "forgets": forgets,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "ingest_records_per_s": ingested.get("ingest_records_per_s"),
        "server": "engram " + " ".join(server.command[3:]),
    }
    try:
        why_not = server.start(3600.0)
        if why_not is not None:
            return {**result, "skipped": why_not}
        result["ready_s"] = server.ready_s
        samples: list[dict[str, Any]] = []

        def sample(elapsed: float) -> None:
            samples.append({"at_s": round(elapsed, 1), **server.memory(), "open_files": server.open_files()})

        sample(0.0)
        soak = SoakClients(server, clients=clients, texts=texts, known=known, model=model, forgets=forgets)
        say(f"[soak] {clients} clients for {seconds:.0f} s on {size} records ({result['server']})")
        wall = asyncio.run(soak.drive(seconds, sample, min(window_s, 30.0)))
        sample(wall)
        result["verified"] = soak.verify()
        calls = soak.tally.calls
        outcomes = Counter(c.outcome for c in calls)
        result.update(
            {
                "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
                "wall_s": round(wall, 1),
                "calls": len(calls),
                "calls_per_s": round(len(calls) / wall, 2) if wall else 0.0,
                "by_operation": dict(Counter(c.operation for c in calls)),
                "outcomes": dict(outcomes),
                "errors": sum(n for outcome, n in outcomes.items() if _is_error(outcome)),
                "retriable": sum(n for outcome, n in outcomes.items() if outcome.startswith("retriable:")),
                "start": samples[0],
                "end": samples[-1],
                "samples": samples,
                "windows": windows(calls, window_s),
                "latency": {
                    name: percentiles([c.seconds for c in calls if c.operation == name and c.outcome == "ok"])
                    for name in OPERATIONS
                },
            }
        )
    finally:
        result["server_exit"] = server.stop()
    (out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "soak.md").write_text(soak_markdown(result))
    return result


def soak_markdown(result: dict[str, Any]) -> str:
    """The soak's report: growth, errors, read-back, and p99 per window."""
    if "skipped" in result:
        return f"# Soak\n\nSkipped: {result['skipped']}\n"
    start, end, verified = result["start"], result["end"], result["verified"]
    lines = [
        "# Soak",
        "",
        f"{result['clients']} clients for {result['wall_s']} s against `{result['server']}` on "
        f"{result['size']:,} records; load average {result['loadavg_at_start']} at the start, "
        f"{result['loadavg_at_end']} at the end.",
        "",
        "| | start | end |",
        "|---|---|---|",
        f"| resident MiB (anonymous / file-backed) | {start['rss_mb']} ({start['anon_mb']} / {start['file_mb']}) "
        f"| {end['rss_mb']} ({end['anon_mb']} / {end['file_mb']}) |",
        f"| open files | {start['open_files']} | {end['open_files']} |",
        "",
        f"Calls: {result['calls']:,} ({result['calls_per_s']} a second); errors that are not retriable codes: "
        f"**{result['errors']}**; retriable answers: {result['retriable']}. Admissions acknowledged and current: "
        f"{verified['admitted_current']:,}, not readable at the end: **{verified['admitted_not_readable']}**; "
        f"forgotten: {verified['forgotten']:,}, still readable: **{verified['forgotten_still_readable']}**.",
        "",
        "p99 per window (ms), with the window's calls and errors:",
        "",
        "| window from (s) | calls | errors | " + " | ".join(OPERATIONS) + " |",
        "|---|---|---|" + "---|" * len(OPERATIONS),
    ]
    for row in result["windows"]:
        cells = [str(row["latency"].get(name, {}).get("p99_ms", "-")) for name in OPERATIONS]
        lines.append(f"| {row['from_s']} | {row['calls']} | {row['errors']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
