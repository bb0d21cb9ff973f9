"""Store benchmark: the same synthetic corpus and queries on SQLite and on a shared
PostgreSQL store, with one replica and with two.

Why: a deployment choosing `--database-url` wants to know what the shared store costs
against the embedded one on the same machine, and how a second replica behaves: its
catch-up from the journal when it starts on an existing database, and search latency
when calls alternate between the two replicas. Each store gets the corpus through the
same public ingestion path (precomputed vectors, the real query encoder for searches).
Two replicas here are two engines in one process (one interpreter, so this shows
latency per call, not the throughput of two machines). The stores' searches take turns
query by query (SQLite, PostgreSQL, two PostgreSQL replicas alternating), so the ratio
of their latencies holds whatever else loads the machine.

A new replica joins two ways: from the journal alone (it embeds every record again with
the model; measured up to ``REEMBED_UP_TO`` records, hours beyond), and seeded from the
first replica's exported vectors (``Engine.operator.export_vectors``, then ``Engine.open`` with
``seed_vectors``): the seconds to export, the seconds to ready, and how many records it
took from the seed and embedded.

    engram bench --sizes 10000 --database-url postgresql://... --no-load --encoder-sample 0
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.index_data.ingest import ingest_corpus
from engram.index_data.readers import VectorSource

from .bench import corpus_spec
from .bench_calls import PURPOSE, bench_context, search_args
from .corpus_gen import SyntheticCorpus
from .timing import cpu_per_call, interleaved, percentiles, process_cpu_s

#: A replica that joins from the journal alone re-embeds every record (5 to 25 a second on
#: a CPU): measured up to this size, skipped beyond (the seeded join is measured always).
REEMBED_UP_TO = 5_000
#: The probe of two PostgreSQL replicas answering in turn.
TWO_REPLICAS = "postgres-two-replicas"
#: `engram serve --workers N` load runs by default, in this order (ABBA, so drift weighs
#: on both).
WORKER_COUNTS = (1, 2, 2, 1)
WORKERS_READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class WorkersLoad:
    """The load run against `engram serve --workers`: concurrent clients, client steps in
    all, the query encoder's export to give the served directories (or None), the
    servers' worker counts in the order they run, and the processes the clients are
    split over (one client process tops out at a core: on a machine of many cores, many
    workers need several)."""

    clients: int
    calls: int
    model_cache: Path | None = None
    worker_counts: tuple[int, ...] = WORKER_COUNTS
    client_processes: int = 1


def replica_bench(
    size: int,
    work: Path,
    encoder: Any,
    database_url: str,
    *,
    queries: int,
    batch_size: int | None,
    say: Callable[[str], None] = print,
    sqlite: bool = True,
    workers_load: WorkersLoad | None = None,
) -> dict[str, Any]:
    """Ingest rate and hybrid p50/p99: SQLite (unless not ``sqlite``), PostgreSQL with one
    replica, and two; a new replica's join from the journal and from a seed; with
    ``workers_load``, the load run against `engram serve --workers` 1
    and 2 on the database (:func:`serve_workers_load`)."""
    from engram.ranking import MiniLMEncoder
    from engram.service.engine import Engine
    from engram.service.store import StoreAddress

    root = work / f"stores-n{size}"
    root.mkdir(parents=True, exist_ok=True)
    corpus = SyntheticCorpus(corpus_spec(size, encoder))
    vectors = corpus.write_vectors(str(root / "vectors.npy"))
    texts, _ = corpus.queries(queries)
    batch = batch_size or int(min(20_000, max(1_000, size // 20)))
    scope = ("bench", "stores-" + uuid.uuid4().hex[:8])  # never collides with an earlier run
    ctx = bench_context()
    ctx = type(ctx)(**{**ctx.__dict__, "tenant": scope[0], "workspace": scope[1]})
    out: dict[str, Any] = {"size": size, "queries": len(texts)}

    def search_on(engines: list[Any]) -> Callable[[str], Any]:
        turn = iter(range(1 << 30))
        return lambda q: engines[next(turn) % len(engines)].execute(
            "engram_memory_search", ctx, search_args(q, "lexical_and_semantic")
        )

    opened: dict[str, Any] = {}
    for name, url in ((("sqlite", None),) if sqlite else ()) + (("postgres", database_url),):
        say(f"[stores n={size}] {name}: ingest")
        engine = Engine.open(
            root / name / "a",
            encoder=encoder,
            store=StoreAddress.resolve(root / name / "a", url),
            key_dir=root / name / "keys",
        )
        engine.operator.set_tenant_enabled(scope[0], True)
        report = ingest_corpus(
            engine,
            scope,
            corpus.records(),
            vectors=VectorSource(vectors),
            batch_size=batch,
            progress=False,
            total=size,
            purpose_ref=PURPOSE,
        )
        opened[name] = engine
        out[name] = {"ingest_records_per_s": round(report.ingested_per_s, 1)}
    pg = opened["postgres"]
    entry = out["postgres"]
    say(f"[stores n={size}] postgres: a replica joins seeded from the first one's vectors")
    t = time.perf_counter()
    exported = pg.operator.export_vectors(root / "postgres" / "seed")
    entry["seed_export_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    second = Engine.open(
        root / "postgres" / "c",
        encoder=encoder,
        store=StoreAddress(database_url),
        key_dir=root / "postgres" / "keys",
        seed_vectors=root / "postgres" / "seed",
    )
    joined = time.perf_counter() - t
    entry["seeded_replica"] = {
        "join_s": round(joined, 2),
        "records_per_s": round(size / max(joined, 1e-9), 1),
        "seeded": second.warm_up_tally.seeded,
        "embedded": second.warm_up_tally.embedded,
        "seed_passages": exported["passages"],
    }
    if size <= REEMBED_UP_TO:
        say(f"[stores n={size}] postgres: a replica joins from the journal alone (re-embedding)")
        t = time.perf_counter()
        journal_only = Engine.open(
            root / "postgres" / "b",
            encoder=encoder,
            store=StoreAddress(database_url),
            key_dir=root / "postgres" / "keys",
        )
        entry["second_replica_catch_up_s"] = round(time.perf_counter() - t, 2)
        entry["second_replica_catch_up_records_per_s"] = round(size / max(time.perf_counter() - t, 1e-9), 1)
        second.close()
        second = journal_only
    # Every store's searches take turns query by query, so the machine's load weighs on
    # each alike and the ratio between them holds.
    say(f"[stores n={size}] hybrid searches, the stores taking turns")
    probes = {name: (search_on([engine]), texts) for name, engine in opened.items()}
    probes[TWO_REPLICAS] = (search_on([pg, second]), texts)
    latency = {name: percentiles(samples) for name, samples in interleaved(probes).items()}
    for name in opened:
        out[name]["hybrid_one_replica"] = latency[name]
    entry["hybrid_two_replicas_alternating"] = latency[TWO_REPLICAS]
    if sqlite:
        out["postgres_over_sqlite_p50"] = round(
            out["postgres"]["hybrid_one_replica"]["p50_ms"] / out["sqlite"]["hybrid_one_replica"]["p50_ms"], 3
        )
    second.close()
    for engine in opened.values():
        engine.close()
    if workers_load is not None:
        entry["workers"] = serve_workers_load(
            root / "postgres",
            database_url,
            scope,
            texts,
            workers_load,
            seed=root / "postgres" / "seed",
            model=isinstance(encoder, MiniLMEncoder),
            say=say,
        )
    say(f"[stores n={size}] {out}")
    return out


def serve_workers_load(
    root: Path,
    database_url: str,
    scope: tuple[str, str],
    texts: list[str],
    load: WorkersLoad,
    *,
    seed: Path,
    model: bool,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """`engram serve --workers N` on the database (its key files under ``root/keys``),
    for each of ``load.worker_counts`` in turn, each a new server on new directories
    starting from ``seed`` (a new replica would otherwise embed every record again): the
    load run of `engram bench` against it (one host's sequential searches, then
    ``load.clients`` concurrent SDK clients for about ``load.calls`` steps, in
    ``load.client_processes`` child processes: :func:`drive_client_processes`), its CPU
    read from every process of the server, and how many calls each worker took (its
    audit lines)."""
    from engram.service.engine import AUDIT_FILE

    from .bench_calls import load_claims
    from .service_memory import ServedDirectory

    run = uuid.uuid4().hex[:8]
    clients, per_client = load.clients, max(1, load.calls // load.clients)
    rows: list[dict[str, Any]] = []
    for turn, count in enumerate(load.worker_counts):
        data_dir = root / f"served-{turn}"
        served = ServedDirectory(
            data_dir,
            model=model,
            log=root / f"served-{turn}.log",
            model_cache=load.model_cache,
            extra=["--workers", str(count), "--database-url", database_url, "--key-dir", str(root / "keys")]
            + ["--seed-vectors", str(seed)]
            + ["--log-level", "info"],
        )
        say(f"[stores] engram serve --workers {count}: {clients} clients x {per_client} steps")
        why_not = served.start(WORKERS_READY_TIMEOUT_S)
        if why_not is None and count > 1:
            why_not = _wait_logged(served.log, f"with {count} workers", WORKERS_READY_TIMEOUT_S)
        if why_not is not None:
            served.stop()
            rows.append({"workers": count, "skipped": why_not})
            continue
        tokens = [served.token(load_claims(scope, c)) for c in range(clients + 1)]
        try:
            driven = drive_client_processes(
                served.base + "/mcp", tokens, texts, per_client, run, served.pids(), model, load.client_processes
            )
        finally:
            served.stop()
        total = sum(len(v) for v in driven["latencies"].values())
        audits = sorted(data_dir.glob(f"workers/*/{AUDIT_FILE}")) if count > 1 else [data_dir / AUDIT_FILE]
        rows.append(
            {
                "workers": count,
                "calls_completed": total,
                "wall_s": round(driven["wall_s"], 2),
                "throughput_calls_per_s": round(total / driven["wall_s"], 2) if driven["wall_s"] else 0.0,
                **cpu_per_call(driven["server_cpu_s"], driven["client_cpu_s"], total),
                "bare_http_search": percentiles(driven["bare"]),
                "latency": {k: percentiles(v) for k, v in driven["latencies"].items() if v},
                "errors": driven["errors"],
                "calls_per_worker": [len(path.read_bytes().splitlines()) for path in audits],
            }
        )
    out: dict[str, Any] = {"runs": rows, "client_processes": load.client_processes}
    rates = {
        n: [r["throughput_calls_per_s"] for r in rows if r["workers"] == n and "skipped" not in r]
        for n in sorted(set(load.worker_counts))
    }
    means = {n: sum(v) / len(v) for n, v in rates.items() if v}
    if means.get(1):
        # The mean calls/s of each worker count's runs over one worker's.
        out["calls_per_s_over_one_worker"] = {str(n): round(mean / means[1], 3) for n, mean in means.items()}
    return out


def drive_client_processes(
    url: str,
    tokens: list[str],
    texts: list[str],
    per_client: int,
    run: str,
    server_pids: list[int],
    model: bool,
    processes: int,
) -> dict[str, Any]:
    """The client side of one load run: the last token's host searches alone (in a child
    process), then the other tokens' clients, split over ``processes`` child processes
    that start their mixed load together. The server's CPU is read here, from the
    common start to the last process's end, which is also the run's wall time."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from engram.models.host_token import HEADER

    from .load import drive_clients

    spawn = get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        alone = pool.submit(
            drive_clients, url, HEADER, tokens[-1:], texts, per_client, run, server_pids, model
        ).result()
    loaders = tokens[:-1]
    size = -(-len(loaders) // max(1, min(processes, len(loaders))))
    shares = [(first, loaders[first : first + size]) for first in range(0, len(loaders), size)]
    with spawn.Manager() as manager, ProcessPoolExecutor(max_workers=len(shares), mp_context=spawn) as pool:
        barrier = manager.Barrier(len(shares) + 1, timeout=WORKERS_READY_TIMEOUT_S)
        futures = [
            pool.submit(
                drive_clients,
                url,
                HEADER,
                [*share, tokens[-1]],
                texts,
                per_client,
                run,
                server_pids,
                model,
                sequential=False,
                first_client=first,
                start_together=barrier,
            )
            for first, share in shares
        ]
        barrier.wait()
        started, server_cpu = time.time(), sum(process_cpu_s(pid) for pid in server_pids)
        parts = [future.result() for future in futures]
        server_cpu = sum(process_cpu_s(pid) for pid in server_pids) - server_cpu
    latencies: dict[str, list[float]] = {}
    errors: dict[str, int] = dict(alone["errors"])
    for part in parts:
        for kind, samples in part["latencies"].items():
            latencies.setdefault(kind, []).extend(samples)
        for code, n in part["errors"].items():
            errors[code] = errors.get(code, 0) + n
    return {
        "bare": alone["bare"],
        "latencies": latencies,
        "errors": errors,
        "wall_s": max(part["ended"] for part in parts) - started,
        "server_cpu_s": server_cpu,
        "client_cpu_s": sum(part["client_cpu_s"] for part in parts),
    }


def _wait_logged(log: Path, text: str, timeout_s: float) -> str | None:
    """None once ``text`` shows in ``log``, else why not."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            return f"{text!r} not logged after {timeout_s:.0f} s"
        time.sleep(0.2)
    return None
