"""The memory engine: the contract's six operations over the store and the indexes.

Usable without a server (the CLI, bulk ingestion and evaluation call it directly). It
trusts the CallContext it is given: verifying the host is the front end's job.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from engram.models.codes import ContractError, ErrorCode
from engram.models.scope import Scope
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, TOOLS, WITHDRAW, parse_arguments
from engram.ranking import (
    Device,
    Encoder,
    MiniLMEncoder,
    Ranker,
    SemanticUnavailable,
)
from engram.ranking.encoder import resolve_device
from engram.service.secrets import scan as scan_secrets
from engram.service.store import StoreAddress, open_store
from engram.service.store.base import (
    DEFAULT_GROUP,
    CommitUncertain,
    SharedStore,
    StoreUnavailable,
)
from engram.service.store.connectivity import ConnectivityState

from . import admission, capture, ingestion, reading, search, transitions
from . import routing as routing_ops
from .context import CallContext
from .data_directory import DB_FILE, LOCK_NAME, MODELS_DIR, claim_data_dir
from .dependencies import Dependencies
from .operator import Operator
from .paging import SnapshotCache
from .policy import Policies
from .projector import Projector
from .recent_searches import RecentSearches
from .records import scope_key
from .replica import Replica, replica_id_for
from .sealing import SHARED_RETIRE_GRACE_S, BodyVault, KeyRing, copy_key_dir, shred_entries
from .seed import SeedTally, SeedVectors
from .stats import ScopeStats, scope_stats
from .sweeper import DEFAULT_PURGE, PurgeSchedule, Sweeper

Operation = Callable[[Dependencies, CallContext, Any], dict[str, Any]]

#: The operation that runs each tool of `models.tools.TOOLS`, by its spec's name; what to
#: do around it (scan kept arguments, gate) the spec says.
OPERATIONS: dict[str, Operation] = {
    SEARCH: search.search,
    GET: reading.get,
    CAPTURE: capture.capture,
    REQUEST_ADMISSION: admission.request_admission,
    WITHDRAW: transitions.withdraw,
    FORGET: transitions.forget,
}

logger = logging.getLogger("engram.engine")


class Engine:
    """What the agent path (:meth:`execute`), the server's lifecycle (warm-up, readiness,
    routing, metrics, close) and the bulk load need. The operator role's methods are on
    :attr:`operator` (see :mod:`.operator`)."""

    def __init__(
        self,
        deps: Dependencies,
        encoder: Encoder | None,
        *,
        writer_spec: ingestion.WriterSpec,
        serve_replica: bool = False,
        seed_vectors: Path | None = None,
    ) -> None:
        self.deps = deps
        self._encoder = encoder
        self._writer_spec = writer_spec
        self._ready = threading.Event()
        self._serve_replica = serve_replica and deps.replica is not None
        self._seed_vectors = seed_vectors
        self._warm_up_tally = SeedTally()
        self._recent_searches = RecentSearches()
        #: The operator role's methods (``engram admin``, the operator channel and the
        #: console call them; the agent path never does): see :mod:`.operator`.
        self.operator = Operator(deps, self._recent_searches)

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        load_model: bool = True,
        encoder: Encoder | None = None,
        background: bool = False,
        warm_calls: bool = False,
        store: StoreAddress | None = None,
        key_dir: Path | None = None,
        device: Device | str = Device.AUTO,
        serve_replica: bool = False,
        group: str = DEFAULT_GROUP,
        advertise_url: str | None = None,
        seed_vectors: Path | None = None,
        model_cache: Path | None = None,
        purge: PurgeSchedule = DEFAULT_PURGE,
    ) -> Engine:
        """Open (or create) the data directory, then load the model and let every
        projection catch up with the journal (in a thread when `background`).
        ``warm_calls``: load before ready what an agent's first call would otherwise pay
        for (the secret scan's rules, the query-time parser, each scope's index readers):
        a server's open. A command that makes no agent call (an ingest, an admin
        command) leaves them to load when first used.

        `store` is where the system of record is (default: SQLite in the data
        directory), e.g. the PostgreSQL database several replicas share; the data
        directory then holds only this replica's projections. `key_dir` (default `<data_dir>/keys`) holds the KEK
        files: replicas of one database share it. ``device``: where the model's torch
        backend runs (queries go through ONNX Runtime on the CPU, exported into
        ``data_dir/models`` on first start). ``serve_replica`` (`engram serve` on a
        shared store): register this data directory as a replica that heartbeats,
        follows the journal and acknowledges purges; operator commands do not.
        ``seed_vectors``: a directory `engram admin export-vectors` wrote on a peer; the
        warm-up takes the vectors of records that match it instead of embedding them
        (see :mod:`.seed`). ``model_cache``: where the ONNX export is made once and
        shared (default: ``data_dir/models``).
        ``purge``: which forgets purge before they answer, and how
        long the background purge waits for more (see :mod:`.sweeper`)."""
        if encoder is None and load_model and Device(device) not in (Device.AUTO, Device.CPU):
            resolve_device(device)  # a named device this machine lacks fails here, before anything opens
        data_dir = Path(data_dir)
        claim_data_dir(data_dir)
        address = store or StoreAddress.resolve(data_dir)
        opened = open_store(address)
        shared = opened if isinstance(opened, SharedStore) else None
        ring = KeyRing(
            Path(key_dir) if key_dir is not None else data_dir / "keys",
            retire_grace_s=SHARED_RETIRE_GRACE_S if shared is not None else 0.0,
        )
        vault = BodyVault(ring, opened)
        # Before anything is projected or served: a forget the store predates (a database
        # restored from a backup) is applied again from the ledger beside the KEKs.
        transitions.reapply_shreds(opened, ring.key_dir)
        if encoder is None and load_model:
            encoder = MiniLMEncoder(model_cache or data_dir / MODELS_DIR, device=device)
        ranker = Ranker(data_dir / "index", encoder)
        replica_id = replica_id_for(data_dir)
        routing = (
            routing_ops.Routing(shared.deployment, replica_id, group if serve_replica else None)
            if shared is not None
            else None
        )
        deps = Dependencies(
            data_dir=data_dir,
            store=opened,
            vault=vault,
            ranker=ranker,
            projector=Projector(opened, vault, ranker, projects=routing.projects if routing is not None else None),
            policies=Policies(data_dir),
            snapshots=SnapshotCache(shared),
            purge=purge,
            sweeper=Sweeper(purge.delay_s),
            replica=Replica(shared, replica_id, group, advertise_url) if shared is not None else None,
            routing=routing,
        )
        writer_spec = ingestion.WriterSpec(address, ring.key_dir, ring.retire_grace_s)
        engine = cls(deps, encoder, writer_spec=writer_spec, serve_replica=serve_replica, seed_vectors=seed_vectors)
        warm_up = partial(engine._warm_up, warm_calls=warm_calls)
        if background:
            threading.Thread(target=warm_up, name="engram-warm-up", daemon=True).start()
        else:
            warm_up()
        return engine

    @property
    def encoder(self) -> Encoder | None:
        """The embedding model in use (None when opened lexical-only)."""
        return self._encoder

    @property
    def warm_up_tally(self) -> SeedTally:
        """How many records the warm-up took vectors for from the seed, and embedded."""
        return self._warm_up_tally

    @property
    def ranker(self) -> Ranker:
        """The ranking subsystem over this engine's projections (evaluation and benchmarks
        query it directly, below the contract's re-checks)."""
        return self.deps.ranker

    def _warm_up(self, *, warm_calls: bool) -> None:
        load = getattr(self._encoder, "load", None)
        if load is not None:
            load()
        if warm_calls:
            scan_secrets()  # the rules and detect-secrets' plugins, which the first capture would load
            self.deps.ranker.warm_query_time()
        self._finish_rotation()  # one interrupted, or waiting out the shared grace
        if self.deps.routing is not None:
            self.deps.routing.release_unheld(self.deps)  # scopes moved away while it was down
        projector = self.deps.projector
        seed = (
            None if self._seed_vectors is None else SeedVectors.open(self._seed_vectors, self.deps.ranker.vector_space)
        )
        with projector.running("warm-up"), projector.seeding(seed) as tally:
            for scope in self.deps.store.scopes():
                projector.catch_up(scope)
                # What catching up replayed (the changes a crash cut off before their
                # checkpoint) is saved before ready: killed again before a checkpoint fell
                # due, a server would otherwise replay it at every start, a longer backlog
                # each time, and never become ready under repeated kills.
                self.deps.ranker.checkpoint(scope_key(scope))
                if warm_calls:
                    self.deps.ranker.warm(scope_key(scope))
            self.deps.ranker.settle()  # what catching up made due is saved before ready
        self._warm_up_tally = tally
        if self._seed_vectors is not None:
            logger.info("warm-up: %d records' vectors taken from the seed, %d embedded", tally.seeded, tally.embedded)
        self.operator.sweep_invalidations()  # a replica that was down purges what it missed, first
        if self._serve_replica and self.deps.replica is not None:
            routing = self.deps.routing
            self.deps.replica.follow(
                self.deps.projector.catch_up if routing is None else lambda scope: routing.follow(self.deps, scope),
                self.operator.sweep_invalidations,
                self._finish_rotation,
            )
        self._ready.set()

    def _finish_rotation(self) -> None:
        """Finish a rotation left pending (interrupted, or an older KEK waiting out the
        shared store's grace): rewrap what still uses an older KEK, then retire it."""
        ring = self.deps.vault.ring
        if ring.pending_rotation() and ring.retire_due():
            ring.finish_rotation(self.deps.store)

    # -- the agent path -------------------------------------------------------------------
    def execute(self, tool: str, ctx: CallContext, arguments: Any) -> dict[str, Any]:
        """Validate and run one tool call; every contract failure is a ContractError."""
        operation = OPERATIONS.get(tool)
        if operation is None or tool not in TOOLS:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        try:
            args = parse_arguments(tool, arguments)
        except ContractError as exc:  # the caller's envelope stays fixed; the operator learns where
            logger.info(
                "%s refused %s: %s",
                tool,
                exc.code.value,
                exc.detail,
                extra={"fields": {"tool": tool, "code": exc.code.value, "violations": exc.detail}},
            )
            raise
        if TOOLS[tool].mutation:
            # Every string a mutation keeps (payload, evidence, locators, reason refs) is
            # scanned; the idempotency key is kept only as a digest.
            scan_secrets(args.model_dump(exclude_none=True, exclude={"idempotency_key"})).refuse()
        try:
            with self._serving(ctx.scope):
                value = operation(self.deps, ctx, args)
        except StoreUnavailable:
            raise ContractError(ErrorCode.STORE_UNAVAILABLE) from None
        except CommitUncertain:
            raise ContractError(ErrorCode.MUTATION_OUTCOME_UNKNOWN) from None
        if tool == SEARCH and self._recent_searches.keeping:
            self._recent_searches.remember(ctx.scope, args.model_dump(exclude_none=True), value["rank_receipt"])
        return value

    def _serving(self, scope: Scope) -> contextlib.AbstractContextManager[None]:
        """A serving replica answers only the scopes routed to its group."""
        routing = self.deps.routing
        if routing is None or not self._serve_replica:
            return contextlib.nullcontext()
        return routing.serving(scope)

    def route_destination(self, scope: Scope) -> list[str] | None:
        """Where a call in the scope is answered: None here, else the URLs of the live
        replicas of the group it is routed to (see :meth:`.routing.Routing.destination`)."""
        routing = self.deps.routing
        if routing is None or not self._serve_replica:
            return None
        return routing.destination(scope)

    @property
    def routed(self) -> bool:
        """Whether this engine serves a replica group's scopes (calls of other groups'
        scopes are forwarded; see :mod:`service.http.router`)."""
        return self.deps.routing is not None and self._serve_replica

    @property
    def replica_id(self) -> str | None:
        """This replica's id on a shared store (None on SQLite)."""
        return self.deps.replica.replica_id if self.deps.replica is not None else None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until warm-up is done (True), or until ``timeout`` seconds passed (False)."""
        return self._ready.wait(timeout)

    def tenant_enabled(self, tenant: str) -> bool:
        return self.deps.store.tenant_enabled(tenant)

    def readiness(self) -> dict[str, Any]:
        """Ready once warm-up is done. Without a configured model the service is
        lexical-only by the operator's choice, which is ready; a configured model that
        failed is not."""
        reasons = []
        projector = self.deps.projector
        if not self._ready.is_set() or projector.long_projection is not None:
            behind = projector.behind()
            what = projector.long_projection or "model loading"
            if behind:
                scopes = ", ".join(f"{t}/{w} ({lag} events behind)" for (t, w), lag in behind)
                reasons.append(f"projections catching up ({what}): {scopes}")
            else:
                reasons.append(f"{what} in progress")
        elif self._encoder is not None and self.deps.ranker.semantic_health() is not None:
            reasons.append("semantic channel unavailable")
        return {"ready": not reasons, "reasons": reasons}

    def scope_stats(self, only: Scope | None = None) -> list[ScopeStats]:
        """Per scope (or for ``only``): candidates and records by state, projection lag
        by channel."""
        return scope_stats(self.deps, only)

    def store_connectivity(self) -> ConnectivityState | None:
        """The shared database server as the store's connections see it (None: the
        embedded store)."""
        state = getattr(self.deps.store, "connectivity_state", None)
        return state() if callable(state) else None

    def set_channel_latency_observer(self, observe: Callable[[str, float], None] | None) -> None:
        """`observe(channel, seconds)` after each ranking stage (lexical, semantic, fusion)."""
        self.deps.ranker.observe_latency = observe

    # -- batch admission (engram ingest; never reachable through MCP) ------------------------
    def batch_writer(self) -> ingestion.BatchWriter:
        """Batch admission, steps two and three, on this engine's store: ``prepare`` (which
        examined records the scope has already) and ``commit`` (one transaction). Step
        one, :func:`examine` (secret scan, digests), needs no engine (see
        :mod:`service.engine.ingestion`)."""
        return ingestion.BatchWriter(self.deps.store, self.deps.vault)

    def writer_spec(self) -> ingestion.WriterSpec:
        """Where a worker process opens a :class:`~.ingestion.BatchWriter` of its own on
        this engine's store and KEKs (:meth:`~.ingestion.BatchWriter.open`)."""
        return self._writer_spec

    def embed_batch(self, batch: ingestion.CommittedBatch) -> list[np.ndarray] | None:
        """Passage vectors for a committed batch's records, as their admission would
        compute them; None when the semantic channel cannot embed (the batch is then
        projected lexically and the semantic channel reports itself behind)."""
        try:
            return self.deps.ranker.embed(batch.documents)
        except SemanticUnavailable:
            return None

    @contextlib.contextmanager
    def bulk_load(self, scope: Scope, *, graph_threads: int = 0) -> Iterator[ingestion.BulkLoad]:
        """Batch admission, step four: the scope held for a load (no catch-up of it
        interleaves), whose ``index`` projects committed batches into both indexes, in
        commit order (a batch may be committed, by :meth:`batch_writer` or by a writer in
        another process, while the one before it is indexed). ``graph_threads``: usearch's
        threads for each batch's vectors (0: one per core)."""
        with self.deps.projector.exclusive(scope):
            yield ingestion.BulkLoad(self.deps, scope, graph_threads)

    def catch_up(self, scope: Scope) -> None:
        """Bring the scope's indexes up to its journal (heals an interrupted load)."""
        self.deps.projector.catch_up(scope)

    def refresh_statistics(self) -> None:
        """After a bulk load: the store's query planner statistics brought up to date."""
        self.deps.store.refresh_statistics()

    def scope_cursor(self, scope: Scope) -> int:
        """The scope's journal head."""
        return self.deps.store.scope_cursor(scope)

    def close(self) -> None:
        if self.deps.replica is not None:
            self.deps.replica.stop()
        self.deps.sweeper.stop()
        self.deps.snapshots.close()
        self.deps.ranker.close()
        self.deps.store.close()


def export_keys(key_dir: Path, dest: Path) -> Path:
    """Copy the KEK files and the shred ledger into a new directory (0700)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False, mode=0o700)
    copy_key_dir(Path(key_dir), dest)
    return dest


def restore(backup: Path, data_dir: Path, *, key_source: Path | None = None, **open_kwargs: Any) -> Engine:
    """Restore a backup into a new data dir: keys from the backup and/or `key_source`
    (the live keys, or an export), the shred ledger applied (nothing forgotten after
    the backup comes back), every journal chain verified, projections caught up."""
    backup, data_dir = Path(backup), Path(data_dir)
    if data_dir.exists() and (held := sorted(p.name for p in data_dir.iterdir() if p.name != LOCK_NAME)):
        raise ContractError(
            ErrorCode.RESTORE_REFUSED,
            f"{data_dir} is not empty (it holds {', '.join(held[:5])}{', ...' if len(held) > 5 else ''}); "
            "restore into a new directory, or remove what is in it",
        )
    has_keys = (backup / "keys").is_dir() or (key_source is not None and Path(key_source).is_dir())
    if not (backup / DB_FILE).exists():
        raise ContractError(ErrorCode.BACKUP_INVALID, f"{backup} holds no {DB_FILE}: not a backup")
    if not has_keys:
        given = f"{key_source} is not a directory" if key_source is not None else "no --keys given"
        raise ContractError(ErrorCode.BACKUP_INVALID, f"the backup holds no key-encryption keys and {given}")
    try:
        return _restore_into(backup, data_dir, key_source, open_kwargs)
    except BaseException:
        for path in data_dir.iterdir():  # a failed restore leaves the directory as it found it
            if path.name == LOCK_NAME:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        raise


def _restore_into(backup: Path, data_dir: Path, key_source: Path | None, open_kwargs: Any) -> Engine:
    shutil.copytree(backup, data_dir, dirs_exist_ok=True)
    keys = data_dir / "keys"
    if key_source is not None:
        copy_key_dir(Path(key_source), keys)
    store = open_store(StoreAddress.resolve(data_dir))
    try:
        known = {p.stem for p in keys.glob("kek-*.key")}
        missing = sorted({kek for _, _, kek in store.all_wrapped_keys()} - known)
        if missing:
            raise ContractError(
                ErrorCode.BACKUP_INVALID,
                f"the backup's data keys are wrapped under {', '.join(missing)}, which the keys given lack "
                "(a rotation retired it after the backup?); pass --keys of an `engram admin export-kek` "
                "copy made while it was current, or a backup made with --include-keys",
            )
        transitions.apply_shreds(store, shred_entries(keys), keys)
    finally:
        store.close()
    engine = Engine.open(data_dir, **open_kwargs)
    broken = [s for s in engine.deps.store.scopes() if not engine.deps.store.verify_chain(s)]
    if broken:
        engine.close()
        raise ContractError(ErrorCode.BACKUP_INVALID, f"the journal chain of {len(broken)} scope(s) is broken")
    return engine
